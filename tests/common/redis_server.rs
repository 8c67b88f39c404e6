//! A private `redis-server` on a loopback port of its own, which a test may kill and restart
//! without disturbing the shared test Redis.
//!
//! It runs with no persistence (`--save "" --appendonly no`), so a restart comes back empty: the
//! worst case for the proxy, a Redis that lost every record. A durable one
//! (`start_durable`) keeps an append-only file fsynced on every write (`--appendfsync always`)
//! in a directory of its own, and comes back from a kill with every write it acknowledged. Every wait is bounded and fails
//! with a message; the process is killed when the value is dropped.
//!
//! Without `redis-server` on `PATH` a test prints `SKIPPED` and returns early, unless
//! `REQUIRE_REDIS=1`, which turns that into a failure.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::signal;

/// How long a fresh `redis-server` may take to answer `PING`.
const START_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one `PING` may take.
const PING_TIMEOUT: Duration = Duration::from_millis(250);
/// Attempts at finding a free port, should another process take the one we picked.
const PORT_ATTEMPTS: usize = 5;

pub struct RedisServer {
    port: u16,
    child: Option<Child>,
    /// Where a durable server keeps its append-only file; `None` for no persistence.
    dir: Option<PathBuf>,
}

impl RedisServer {
    /// Starts a server on a free port, or `None` (after saying so) when there is no
    /// `redis-server` and `REQUIRE_REDIS=1` is not set.
    pub async fn start() -> Option<RedisServer> {
        Self::start_in(None).await
    }

    /// Like [`start`](Self::start), with every acknowledged write fsynced to an append-only
    /// file in `dir`, which a restart reads back.
    pub async fn start_durable(dir: PathBuf) -> Option<RedisServer> {
        std::fs::create_dir_all(&dir).unwrap();
        Self::start_in(Some(dir)).await
    }

    async fn start_in(dir: Option<PathBuf>) -> Option<RedisServer> {
        if let Err(why) = Command::new("redis-server")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
        {
            if std::env::var("REQUIRE_REDIS").as_deref() == Ok("1") {
                panic!("REQUIRE_REDIS=1 but redis-server cannot be run: {why}");
            }
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: redis-server cannot be run ({why}); set REQUIRE_REDIS=1 to fail"
            );
            return None;
        }
        let mut last_error = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port();
            let dir = dir.clone();
            let mut server = RedisServer {
                port,
                child: None,
                dir,
            };
            match server.spawn().await {
                Ok(()) => return Some(server),
                Err(why) => last_error = why,
            }
        }
        panic!("could not start redis-server after {PORT_ATTEMPTS} attempts: {last_error}");
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

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
                    panic!("redis-server did not restart on port {}: {why}", self.port)
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// Spawns the process and waits until it answers `PING`; on failure nothing is left running.
    async fn spawn(&mut self) -> Result<(), String> {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(self.persistence())
            .args(["--daemonize", "no"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot spawn redis-server: {e}"))?;
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
                return Err(format!("redis-server exited early ({status})"));
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
