//! The processes a campaign starts (proxies, `redis-server`s), and the signals the nemesis
//! sends them. Each is addressed by its PID only.
//!
//! Every PID is also written to the run directory's `pids` file, so `run.sh` can stop what is
//! left (by PID, after checking the process still names the run directory) should the campaign
//! itself be killed. A process is killed when its handle is dropped.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};
use tokio::sync::Mutex;
use tokio::time::Instant;

pub struct Process {
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    log: PathBuf,
    pids: PathBuf,
    child: Option<Child>,
}

impl Process {
    /// A process not started yet; its stdout and stderr go to `log`, appended over restarts.
    pub fn new(program: impl Into<PathBuf>, args: Vec<String>, log: PathBuf, run: &Path) -> Self {
        Self {
            program: program.into(),
            args,
            env: Vec::new(),
            log,
            pids: run.join("pids"),
            child: None,
        }
    }

    pub fn with_env(mut self, name: &str, value: &str) -> Self {
        self.env.push((name.to_owned(), value.to_owned()));
        self
    }

    pub fn spawn(&mut self) -> std::io::Result<()> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let child = Command::new(&self.program)
            .args(&self.args)
            .envs(self.env.iter().map(|(name, value)| (name, value)))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()?;
        if let Some(pid) = child.id() {
            let mut pids = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.pids)?;
            writeln!(pids, "{pid}")?;
        }
        self.child = Some(child);
        Ok(())
    }

    /// SIGKILL, as a crash or the OOM killer would, and reap it.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }

    /// SIGQUIT, and wait for the process to end (SIGKILL after 15 s): PostgreSQL's immediate
    /// shutdown, every one of its processes gone at once.
    pub async fn quit(&mut self) {
        self.signal("-QUIT");
        if let Some(mut child) = self.child.take() {
            let waited = tokio::time::timeout(Duration::from_secs(15), child.wait()).await;
            if waited.is_err() {
                let _ = child.kill().await;
            }
        }
    }

    pub fn pause(&self) {
        self.signal("-STOP");
    }

    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let Some(pid) = self.child.as_ref().and_then(Child::id) else {
            return;
        };
        let sent = std::process::Command::new("kill")
            .args([signal, &pid.to_string()])
            .status();
        if !sent.is_ok_and(|s| s.success()) {
            eprintln!("chaos: kill {signal} {pid} failed");
        }
    }

    /// Whether the process has ended (a proxy that could not reach its store at start does).
    pub fn exited(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => !matches!(child.try_wait(), Ok(None)),
            None => true,
        }
    }
}

/// Waits until something accepts connections on `port` and, with `ping`, answers a Redis
/// `PING`; gives up after `limit`, or as soon as `exited` says the process is gone.
pub async fn wait_ready(
    port: u16,
    ping: bool,
    limit: Duration,
    mut exited: impl FnMut() -> bool,
) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if answers(port, ping).await {
            return true;
        }
        if exited() {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

async fn answers(port: u16, ping: bool) -> bool {
    let attempt = async {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        if !ping {
            return Some(true);
        }
        stream.write_all(b"PING\r\n").await.ok()?;
        let mut reply = [0u8; 7];
        stream.read_exact(&mut reply).await.ok()?;
        Some(&reply == b"+PONG\r\n")
    };
    let answered = tokio::time::timeout(Duration::from_millis(500), attempt).await;
    matches!(answered, Ok(Some(true)))
}

/// A cluster node's bus listens on its client port plus this.
pub const BUS_OFFSET: u16 = 10_000;

/// `count` free loopback ports below the kernel's ephemeral range (32768 and up), each with the
/// port a cluster bus would take free too. A process that is killed and restarted gets its
/// port back: one from the ephemeral range could be taken meanwhile by an outgoing connection.
pub fn low_ports(count: usize) -> Vec<u16> {
    let free = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
    let any = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr());
    let start = any.map_or(0, |a| a.port() as u32) ^ std::process::id();
    let mut ports = Vec::new();
    for i in 0..4000u32 {
        let port = 12_000 + (start.wrapping_add(i.wrapping_mul(7_919)) % 10_000) as u16;
        if ports.len() < count && !ports.contains(&port) && free(port) && free(port + BUS_OFFSET) {
            ports.push(port);
        }
    }
    assert_eq!(ports.len(), count, "no {count} free loopback ports");
    ports
}

/// A process the campaign keeps running, and the port that says it is up. A restart tries
/// again while the process exits at start (a store or database that is down keeps it from
/// starting), as a process supervisor would, for at most `restart_limit`.
pub struct Supervised {
    pub port: u16,
    process: Mutex<Process>,
    restart_limit: Duration,
}

impl Supervised {
    pub fn new(process: Process, port: u16, restart_limit: Duration) -> Self {
        Self {
            port,
            process: Mutex::new(process),
            restart_limit,
        }
    }

    /// Starts the process and waits until it listens; tries again while it exits at start.
    pub async fn start(&self) -> bool {
        let deadline = Instant::now() + self.restart_limit;
        let mut process = self.process.lock().await;
        while Instant::now() < deadline {
            if process.spawn().is_err() {
                return false;
            }
            let up = wait_ready(self.port, false, Duration::from_secs(10), || {
                process.exited()
            })
            .await;
            if up {
                return true;
            }
            process.kill().await;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        false
    }

    pub async fn kill(&self) {
        self.process.lock().await.kill().await;
    }

    pub async fn pause(&self) {
        self.process.lock().await.pause();
    }

    pub async fn resume(&self) {
        self.process.lock().await.resume();
    }
}
