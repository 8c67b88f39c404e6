//! A private `nats-server -js` on a loopback port of its own, with its own JetStream store
//! directory, which a test may kill and restart without disturbing any other server.
//!
//! A restart comes back on the same port with the same store directory, so streams and the
//! messages they acknowledged survive it, as they do for a server an operator restarts. Every
//! wait is bounded and fails with a message; the process is killed (by its PID) when the value
//! is dropped, and its store directory removed.
//!
//! The server is `nats-server` from `PATH` (Debian's package in CI). Without it a test prints
//! `SKIPPED` and returns early, unless `REQUIRE_NATS=1`, which turns that into a failure.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::signal;

/// How long a fresh server may take to greet a client.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one greeting may take.
const GREETING_TIMEOUT: Duration = Duration::from_millis(250);
/// Attempts at finding a free port, should another process take the one we picked.
const PORT_ATTEMPTS: usize = 5;
/// The program.
const PROGRAM: &str = "nats-server";

/// A private `nats-server` with JetStream on a free port, killed when dropped.
pub struct NatsServer {
    port: u16,
    store: PathBuf,
    child: Option<Child>,
}

impl NatsServer {
    /// Starts a server on a free port with a fresh store directory, or `None` (after saying
    /// so) when there is no `nats-server` and `REQUIRE_NATS=1` is not set.
    pub async fn start() -> Option<NatsServer> {
        program_runs()?;
        let mut last_error = String::new();
        for attempt in 0..PORT_ATTEMPTS {
            let port = free_port();
            let name = format!("idempotency-nats-{}-{port}-{attempt}", std::process::id());
            let store = std::env::temp_dir().join(name);
            let _ = std::fs::remove_dir_all(&store);
            let mut started = NatsServer {
                port,
                store,
                child: None,
            };
            match started.spawn().await {
                Ok(()) => return Some(started),
                Err(why) => last_error = why,
            }
        }
        panic!("could not start {PROGRAM} after {PORT_ATTEMPTS} attempts: {last_error}");
    }

    /// Its `nats://` URL.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its process id, while it runs.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("nats-server is running").id()
    }

    /// Kills the server with SIGKILL, as a crash would, and reaps it. What JetStream had
    /// acknowledged is on disk in the store directory.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server as an operator does (SIGTERM), and waits for it to exit.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal::send(child.id(), "TERM");
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port and store directory (killing it first if it
    /// still runs), and waits until it greets clients.
    pub async fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            match self.spawn().await {
                Ok(()) => return,
                Err(why) if Instant::now() >= deadline => {
                    panic!("{PROGRAM} did not restart on port {}: {why}", self.port)
                }
                // The port may linger for a moment after the kill.
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// Spawns the process and waits for its greeting; on failure nothing is left running.
    async fn spawn(&mut self) -> Result<(), String> {
        std::fs::create_dir_all(&self.store).map_err(|e| format!("store directory: {e}"))?;
        let child = Command::new(PROGRAM)
            .args(["-a", "127.0.0.1", "-p", &self.port.to_string(), "-js"])
            .arg("-sd")
            .arg(&self.store)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot spawn {PROGRAM}: {e}"))?;
        self.child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if greets(self.port).await {
                return Ok(());
            }
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                self.child = None;
                return Err(format!("{PROGRAM} exited early ({status})"));
            }
            if Instant::now() >= deadline {
                self.kill();
                return Err(format!("no INFO greeting within {START_TIMEOUT:?}"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.store);
    }
}

/// Whether `nats-server` runs here; `None` (after saying so) when it does not and is not
/// required.
fn program_runs() -> Option<()> {
    let ran = Command::new(PROGRAM)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    match ran {
        Ok(status) if status.success() => Some(()),
        Ok(status) => skip(&format!("{PROGRAM} --version failed ({status})")),
        Err(why) => skip(&format!("{PROGRAM} cannot be run ({why})")),
    }
}

/// A test that cannot run here: a failure under `REQUIRE_NATS=1`, else a loud `SKIPPED`
/// straight to the process's stderr, which the harness does not capture.
pub fn skip<T>(why: &str) -> Option<T> {
    if std::env::var("REQUIRE_NATS").as_deref() == Ok("1") {
        panic!("REQUIRE_NATS=1 but {why}");
    }
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: {why}; set REQUIRE_NATS=1 to fail"
    );
    None
}

/// A port nothing listens on right now: bound, then released.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    listener.local_addr().expect("a bound address").port()
}

/// Whether the server on `port` greets a new connection with its `INFO` line.
async fn greets(port: u16) -> bool {
    let attempt = async {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        let mut greeting = [0u8; 5];
        stream.read_exact(&mut greeting).await.ok()?;
        Some(&greeting == b"INFO ")
    };
    matches!(
        tokio::time::timeout(GREETING_TIMEOUT, attempt).await,
        Ok(Some(true))
    )
}
