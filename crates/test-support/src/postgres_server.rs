//! A private PostgreSQL server on a loopback port of its own, which a test may stop, kill and
//! restart without disturbing any other.
//!
//! `initdb` makes a cluster in a temporary directory (as the `postgres` user when the tests run
//! as root, since PostgreSQL refuses to run as root), and the `postgres` process is our child, so
//! it is stopped by its PID. The binaries come from `POSTGRES_BIN` (a directory), else the
//! newest of Debian's `/usr/lib/postgresql/*/bin`, else `PATH`. Without them a test prints
//! `SKIPPED` and returns early, unless `REQUIRE_POSTGRES=1`, which turns that into a failure.
//!
//! [`PostgresServer::start`] runs with `fsync = off`: a test kills the process, never the
//! machine, and PostgreSQL's recovery after a process kill reads its WAL whatever `fsync` says.
//! [`PostgresServer::start_durable`] keeps PostgreSQL's own defaults (`fsync`,
//! `synchronous_commit`), for benchmarks that must pay what production pays.
//! [`shared_postgres`] is one server for a whole test binary; [`PostgresServer::fresh_database`]
//! gives each test a database of its own on it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use tokio::time::Instant;

use crate::signal;

/// How long a fresh cluster may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a stopping server may take to exit before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);
/// Attempts at finding a free port, should another process take the one we picked.
const PORT_ATTEMPTS: usize = 5;

/// How a test stops the server, as an operator or a crash would.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shutdown {
    /// `pg_ctl stop -m fast` (SIGINT): sessions are ended, everything committed is checkpointed.
    Fast,
    /// `pg_ctl stop -m immediate` (SIGQUIT): every process quits at once, as after a crash; the
    /// next start replays the WAL.
    Immediate,
}

/// A private PostgreSQL cluster on a free port, stopped by its PID when dropped.
pub struct PostgresServer {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    durable: bool,
    /// Whether the server offers TLS (`ssl = on`, with `server.crt` and `server.key` in `dir`).
    tls: bool,
    child: Option<Child>,
}

impl PostgresServer {
    /// Starts a fresh cluster for tests (`fsync = off`), or `None` (after saying so) when there
    /// is no PostgreSQL and `REQUIRE_POSTGRES=1` is not set.
    pub async fn start() -> Option<PostgresServer> {
        Self::start_with(false).await
    }

    /// Like [`start`](Self::start), with PostgreSQL's durable defaults.
    pub async fn start_durable() -> Option<PostgresServer> {
        Self::start_with(true).await
    }

    /// Like [`start`](Self::start), offering TLS with this PEM certificate chain and key;
    /// plain connections are still accepted.
    pub async fn start_tls(certificate_pem: &str, key_pem: &str) -> Option<PostgresServer> {
        let bin = binaries()?;
        let dir = init_cluster(&bin);
        write_owned(&dir.join("server.crt"), certificate_pem);
        write_owned(&dir.join("server.key"), key_pem);
        Self::start_in(bin, dir, false, true).await
    }

    async fn start_with(durable: bool) -> Option<PostgresServer> {
        let bin = binaries()?;
        let dir = init_cluster(&bin);
        Self::start_in(bin, dir, durable, false).await
    }

    async fn start_in(bin: PathBuf, dir: PathBuf, durable: bool, tls: bool) -> Option<Self> {
        let mut last_error = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let mut server = PostgresServer {
                bin: bin.clone(),
                dir: dir.clone(),
                port: free_port(),
                durable,
                tls,
                child: None,
            };
            match server.spawn().await {
                Ok(()) => return Some(server),
                Err(why) => last_error = why,
            }
        }
        panic!("could not start postgres after {PORT_ATTEMPTS} attempts: {last_error}");
    }

    /// Its URL, for the `postgres` superuser and database (trust authentication on loopback).
    pub fn url(&self) -> String {
        self.url_of("postgres")
    }

    /// The URL of `database` on this server.
    pub fn url_of(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The postmaster's PID.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("postgres is running").id()
    }

    /// Creates an empty database of its own for one test and returns its URL.
    pub fn fresh_database(&self) -> String {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "test_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        self.psql(&format!("CREATE DATABASE {name}"));
        self.url_of(&name)
    }

    /// A login role of its own holding only row rights (SELECT, INSERT, UPDATE, DELETE) on
    /// `tables` of `database`, and USAGE on `sequences`: what a least-privileged application or
    /// relay holds once an owner created everything. Returns the URL that connects as it.
    pub fn row_only_role(&self, database: &str, tables: &[&str], sequences: &[&str]) -> String {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let role = format!(
            "rows_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let mut sql = format!("CREATE ROLE {role} LOGIN;");
        for table in tables {
            sql.push_str(&format!(
                "GRANT SELECT, INSERT, UPDATE, DELETE ON {table} TO {role};"
            ));
        }
        for sequence in sequences {
            sql.push_str(&format!("GRANT USAGE ON SEQUENCE {sequence} TO {role};"));
        }
        self.psql_on(database, &sql);
        format!("postgres://{role}@127.0.0.1:{}/{database}", self.port)
    }

    /// Runs `sql` through `psql` as the superuser on the `postgres` database, and returns what it
    /// printed (unaligned, tuples only); panics when it fails.
    pub fn psql(&self, sql: &str) -> String {
        self.psql_on("postgres", sql)
    }

    /// Like [`psql`](Self::psql), on `database`.
    pub fn psql_on(&self, database: &str, sql: &str) -> String {
        let output = Command::new(self.bin.join("psql"))
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-U", "postgres", "-d", database, "-c", sql])
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run psql: {e}"));
        assert!(
            output.status.success(),
            "psql failed on {sql:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }

    /// Stops the server the way `mode` says and waits for it to exit.
    pub fn stop(&mut self, mode: Shutdown) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let name = match mode {
            Shutdown::Fast => "INT",
            Shutdown::Immediate => "QUIT",
        };
        signal::send(child.id(), name);
        let deadline = std::time::Instant::now() + STOP_TIMEOUT;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Stops the process with SIGSTOP: connections stay open and nothing is answered, as with a
    /// database stalled by its disk or a paused VM. Backends already serving a session go on;
    /// new connections wait.
    pub fn pause(&self) {
        signal::send(self.pid(), "STOP");
    }

    /// Stops the whole server with SIGSTOP, the backends serving sessions too: open
    /// connections stay open and nothing at all is answered, as with a database whose path
    /// drops packets. The server runs again (SIGCONT) when the guard is dropped, even when the
    /// test fails.
    pub fn freeze(&self) -> Frozen {
        let mut pids = vec![self.pid()];
        let children = Command::new("pgrep")
            .args(["-P", &self.pid().to_string()])
            .output()
            .expect("pgrep runs");
        pids.extend(
            String::from_utf8_lossy(&children.stdout)
                .lines()
                .filter_map(|line| line.trim().parse::<u32>().ok()),
        );
        // Children first, so the postmaster cannot notice a stopped child.
        for pid in pids.iter().rev() {
            signal::send(*pid, "STOP");
        }
        Frozen { pids }
    }

    /// Lets a paused postmaster run again (SIGCONT).
    pub fn resume(&self) {
        signal::send(self.pid(), "CONT");
    }

    /// Starts the server again on the same port and data, after [`stop`](Self::stop) (or
    /// stops it fast first). It comes back with everything it committed.
    pub async fn restart(&mut self) {
        self.stop(Shutdown::Fast);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            match self.spawn().await {
                Ok(()) => return,
                Err(why) if Instant::now() >= deadline => {
                    panic!("postgres did not restart on port {}: {why}", self.port)
                }
                // The port or the old shared memory may linger for a moment.
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// Starts the postmaster and waits until it accepts connections.
    async fn spawn(&mut self) -> Result<(), String> {
        let child = as_postgres_user(&self.bin.join("postgres"))
            .arg("-D")
            .arg(&self.dir)
            .args(["-p", &self.port.to_string()])
            .args(self.settings())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file(&self.dir))
            .spawn()
            .map_err(|e| format!("cannot spawn postgres: {e}"))?;
        self.child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if self.is_ready() {
                return Ok(());
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                return Err(format!(
                    "postgres exited early ({status}): {}",
                    self.log_tail()
                ));
            }
            if Instant::now() >= deadline {
                self.stop(Shutdown::Immediate);
                return Err(format!("not ready within {START_TIMEOUT:?}"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn settings(&self) -> Vec<String> {
        let mut settings = vec![
            "listen_addresses=127.0.0.1".to_owned(),
            format!("unix_socket_directories={}", self.dir.display()),
            "max_connections=200".to_owned(),
        ];
        if self.tls {
            settings.push("ssl=on".to_owned());
        }
        if !self.durable {
            settings.extend(["fsync=off".to_owned(), "full_page_writes=off".to_owned()]);
        }
        settings
            .into_iter()
            .flat_map(|s| ["-c".to_owned(), s])
            .collect()
    }

    fn is_ready(&self) -> bool {
        Command::new(self.bin.join("pg_isready"))
            .args(["-q", "-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-t", "1"])
            .status()
            .is_ok_and(|s| s.success())
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().rev().take(5).collect();
        lines.into_iter().rev().collect::<Vec<_>>().join(" / ")
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        self.stop(Shutdown::Immediate);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A server frozen by [`PostgresServer::freeze`]: thawed when dropped.
#[must_use = "the server is thawed when this is dropped"]
pub struct Frozen {
    pids: Vec<u32>,
}

impl Drop for Frozen {
    fn drop(&mut self) {
        for pid in &self.pids {
            let _ = Command::new("kill")
                .args(["-CONT", &pid.to_string()])
                .status();
        }
    }
}

/// One server for the whole test binary, started on first use; `None` when skipping. It is never
/// dropped, so a shell watchdog stops it (by its PID) and removes its files once the test process
/// is gone.
pub fn shared_postgres() -> Option<&'static PostgresServer> {
    static SHARED: OnceLock<Option<(PostgresServer, Child)>> = OnceLock::new();
    let shared = SHARED.get_or_init(|| {
        // A runtime of its own, on a thread of its own: the caller may be inside another runtime.
        let started = std::thread::spawn(|| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(PostgresServer::start())
        });
        let server = started
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e))?;
        let watchdog = watchdog(server.pid(), &server.dir);
        Some((server, watchdog))
    });
    shared.as_ref().map(|(server, _)| server)
}

/// The directory of PostgreSQL's programs, or `None` (after saying so) when there is none and
/// `REQUIRE_POSTGRES=1` is not set.
pub fn binaries() -> Option<PathBuf> {
    let found = std::env::var_os("POSTGRES_BIN")
        .map(PathBuf::from)
        .or_else(debian_binaries)
        .or_else(|| on_path("initdb"));
    match found {
        Some(bin) if bin.join("initdb").exists() && bin.join("postgres").exists() => Some(bin),
        _ => skip(
            "no PostgreSQL (initdb, postgres): install Debian's postgresql, or set POSTGRES_BIN",
        ),
    }
}

/// A test that cannot run here: a failure under `REQUIRE_POSTGRES=1`, else a loud `SKIPPED`
/// straight to the process's stderr, which the harness does not capture.
pub fn skip<T>(why: &str) -> Option<T> {
    if std::env::var("REQUIRE_POSTGRES").as_deref() == Ok("1") {
        panic!("REQUIRE_POSTGRES=1 but {why}");
    }
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: {why}; set REQUIRE_POSTGRES=1 to fail"
    );
    None
}

/// The newest `/usr/lib/postgresql/<version>/bin`.
fn debian_binaries() -> Option<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

fn on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .find(|dir| dir.join(program).exists())
        .map(|dir| std::fs::canonicalize(dir.join(program)).unwrap_or(dir.join(program)))
        .and_then(|program| program.parent().map(Path::to_path_buf))
}

/// Makes a cluster in a fresh temporary directory, owned by the user the server runs as.
fn init_cluster(bin: &Path) -> PathBuf {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "idempotency-proxy-pg-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the cluster's directory");
    if running_as_root() {
        let owned = Command::new("chown")
            .args(["postgres:postgres"])
            .arg(&dir)
            .status()
            .expect("run chown");
        assert!(owned.success(), "chown postgres {} failed", dir.display());
    }
    let output = as_postgres_user(&bin.join("initdb"))
        .arg("-D")
        .arg(&dir)
        .args(["-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"])
        .args(["--locale=C"])
        .stdin(Stdio::null())
        .output()
        .expect("run initdb");
    assert!(
        output.status.success(),
        "initdb {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    dir
}

/// Writes `text` to `path`, readable only by the user the server runs as (PostgreSQL refuses a
/// key file others can read).
fn write_owned(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).expect("write a file of the cluster");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod 600");
    if running_as_root() {
        let owned = Command::new("chown")
            .arg("postgres:postgres")
            .arg(path)
            .status()
            .expect("run chown");
        assert!(owned.success(), "chown postgres {} failed", path.display());
    }
}

/// `program`, run as the `postgres` user when this process is root (through `setpriv`, which
/// execs it: the child's PID is the program's own).
fn as_postgres_user(program: &Path) -> Command {
    if !running_as_root() {
        return Command::new(program);
    }
    let mut command = Command::new("setpriv");
    command
        .args(["--reuid=postgres", "--regid=postgres", "--init-groups"])
        .arg(program);
    command
}

fn running_as_root() -> bool {
    static ROOT: OnceLock<bool> = OnceLock::new();
    *ROOT.get_or_init(|| {
        Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|out| out.stdout.trim_ascii() == b"0")
    })
}

fn log_file(dir: &Path) -> Stdio {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("server.log"))
        .map_or_else(|_| Stdio::null(), Stdio::from)
}

/// A shell that waits for this test process to end, then stops `pid` at once and removes `dir`.
fn watchdog(pid: u32, dir: &Path) -> Child {
    let script = r#"while kill -0 "$1" 2>/dev/null; do sleep 0.5; done
kill -QUIT "$2"; while kill -0 "$2" 2>/dev/null; do sleep 0.1; done; rm -rf "$3""#;
    Command::new("sh")
        .args(["-c", script, "watchdog"])
        .arg(std::process::id().to_string())
        .arg(pid.to_string())
        .arg(dir)
        .stdin(Stdio::null())
        .spawn()
        .expect("sh starts")
}

/// A port nothing listens on right now: bound, then released.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    listener.local_addr().expect("a bound address").port()
}
