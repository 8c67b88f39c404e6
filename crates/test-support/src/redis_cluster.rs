//! A private three-master Redis Cluster for tests, from `redis-server` processes on free
//! loopback ports, each node in its own temporary directory.
//!
//! Everything is synchronous and bounded: starting, waiting for `cluster_state:ok`, killing and
//! restarting a node. The processes belong to no async runtime, so one cluster can serve tests
//! that each run their own. A cluster stops its nodes when dropped; a shell watchdog also stops
//! them (by the PIDs in their pid files) once the test process is gone, because a cluster kept
//! in a `static` is never dropped. The nodes are `redis-server`, or Valkey (`Server::Valkey`,
//! the binary `VALKEY_SERVER` names); `redis-cli` joins either. Without them a test prints
//! `SKIPPED` and returns, unless `REQUIRE_REDIS=1` (or `REQUIRE_VALKEY=1` for Valkey), which
//! makes that a failure.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::poll;
use super::redis_server::Server;

const MASTERS: usize = 3;
/// The cluster bus listens on the client port plus this.
const BUS_OFFSET: u16 = 10_000;

/// A private Redis Cluster of local `redis-server` processes, stopped when dropped.
pub struct RedisCluster {
    /// The masters' client ports.
    pub ports: Vec<u16>,
    /// The nodes' server program.
    program: String,
    nodes: Vec<Option<Child>>,
    dir: PathBuf,
    /// `--appendonly yes --appendfsync always`: a killed node comes back with every write it
    /// acknowledged.
    durable: bool,
    watchdog: Child,
}

/// One Redis cluster for the whole test binary, started on first use; `None` when skipping.
pub fn shared() -> Option<&'static RedisCluster> {
    shared_on(Server::Redis)
}

/// One cluster of `server` nodes for the whole test binary, started on first use.
pub fn shared_on(server: Server) -> Option<&'static RedisCluster> {
    static REDIS: OnceLock<Option<RedisCluster>> = OnceLock::new();
    static VALKEY: OnceLock<Option<RedisCluster>> = OnceLock::new();
    let shared = match server {
        Server::Redis => &REDIS,
        Server::Valkey => &VALKEY,
    };
    shared
        .get_or_init(|| RedisCluster::start_on(server, false))
        .as_ref()
}

impl RedisCluster {
    /// Starts three masters and joins them into a cluster, or returns `None` (after saying so)
    /// when the Redis binaries are missing and not required.
    pub fn start(durable: bool) -> Option<RedisCluster> {
        Self::start_on(Server::Redis, durable)
    }

    /// Like [`start`](Self::start), with `server`'s program for the nodes.
    pub fn start_on(server: Server, durable: bool) -> Option<RedisCluster> {
        let program = server.program()?;
        let cli = Command::new("redis-cli").arg("--version").output();
        if !cli.is_ok_and(|o| o.status.success()) {
            return server.skip("no Redis Cluster: redis-cli not found on PATH");
        }
        let dir = temp_dir();
        let watchdog = watchdog(&dir);
        let ports = free_ports(MASTERS);
        let mut cluster = RedisCluster {
            nodes: (0..MASTERS).map(|_| None).collect(),
            ports,
            program,
            dir,
            durable,
            watchdog,
        };
        for node in 0..MASTERS {
            cluster.spawn(node);
        }
        cluster.create();
        Some(cluster)
    }

    /// Seed URLs, as `StoreSpec::RedisCluster` holds them.
    pub fn seeds(&self) -> Vec<String> {
        self.ports
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}"))
            .collect()
    }

    /// The `store =` value naming this cluster.
    pub fn spec(&self) -> String {
        let hosts: Vec<String> = self
            .ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!("redis+cluster://{}", hosts.join(","))
    }

    /// Kills a node outright (SIGKILL, by its PID), as a crash would.
    pub fn kill(&mut self, node: usize) {
        let mut child = self.nodes[node].take().expect("the node is running");
        let _ = child.kill();
        let _ = child.wait();
        // A stale pid file could point the watchdog at an unrelated process later.
        let _ = std::fs::remove_file(self.node_dir(node).join("redis.pid"));
    }

    /// Starts a killed node again on its port with its `nodes.conf`, so it rejoins with its
    /// slots, and waits until the whole cluster is `ok` again.
    pub fn restart(&mut self, node: usize) {
        self.revive(node);
        self.wait_until_ok(Duration::from_secs(20));
    }

    /// Starts a killed node again on its port with its `nodes.conf` and returns as soon as it
    /// answers PING, before the cluster may be whole again.
    pub fn revive(&mut self, node: usize) {
        assert!(self.nodes[node].is_none(), "node {node} is still running");
        self.spawn(node);
    }

    /// Runs `redis-cli` against one node and returns what it printed.
    pub fn cli(&self, node: usize, args: &[&str]) -> String {
        let port = self.ports[node].to_string();
        let mut cmd = Command::new("redis-cli");
        cmd.args(["-h", "127.0.0.1", "-p", &port]).args(args);
        let output = run_bounded(cmd, Duration::from_secs(5));
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// The last lines of every node's log, for a failure message (the directory goes on drop).
    fn log_tails(&self) -> String {
        let tail = |node: usize| {
            let log = std::fs::read_to_string(self.node_dir(node).join("redis.log"));
            let log = log.unwrap_or_default();
            let lines: Vec<&str> = log.lines().rev().take(8).collect();
            let lines: Vec<&str> = lines.into_iter().rev().collect();
            format!(
                "node {node} (port {}):\n{}",
                self.ports[node],
                lines.join("\n")
            )
        };
        (0..MASTERS).map(tail).collect::<Vec<_>>().join("\n")
    }

    fn node_dir(&self, node: usize) -> PathBuf {
        self.dir.join(format!("node-{node}"))
    }

    fn spawn(&mut self, node: usize) {
        let (dir, port) = (self.node_dir(node), self.ports[node]);
        std::fs::create_dir_all(&dir).unwrap();
        let path = |name: &str| dir.join(name).to_string_lossy().into_owned();
        let appendonly = if self.durable { "yes" } else { "no" };
        #[rustfmt::skip]
        let args = [
            "--port", &port.to_string(), "--bind", "127.0.0.1", "--dir", &path(""),
            "--cluster-enabled", "yes", "--cluster-config-file", &path(&format!("nodes-{node}.conf")),
            "--cluster-node-timeout", "5000", "--cluster-require-full-coverage", "no",
            "--save", "", "--appendonly", appendonly, "--appendfsync", "always",
            "--pidfile", &path("redis.pid"), "--logfile", &path("redis.log"),
        ];
        let child = Command::new(&self.program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{} does not start: {e}", self.program));
        self.nodes[node] = Some(child);
        self.wait_for(
            Duration::from_secs(30),
            &format!("node {node} to answer PING"),
            || self.cli(node, &["PING"]).trim() == "PONG",
        );
    }

    fn create(&self) {
        let mut cmd = Command::new("redis-cli");
        cmd.arg("--cluster").arg("create");
        cmd.args(self.ports.iter().map(|p| format!("127.0.0.1:{p}")));
        cmd.args(["--cluster-replicas", "0", "--cluster-yes"]);
        let output = run_bounded(cmd, Duration::from_secs(30));
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        self.wait_until_ok(Duration::from_secs(20));
    }

    /// Waits until every node reports `cluster_state:ok`.
    pub fn wait_until_ok(&self, limit: Duration) {
        self.wait_for(limit, "cluster_state:ok on every node", || {
            (0..MASTERS).all(|n| {
                self.cli(n, &["CLUSTER", "INFO"])
                    .contains("cluster_state:ok")
            })
        });
    }

    /// Polls `done` as every test polls, on a runtime of its own: the cluster belongs to none.
    fn wait_for(&self, limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime to wait on");
        let what = WithLogs {
            what,
            cluster: self,
        };
        runtime.block_on(poll::until(limit, what, async || done()));
    }
}

/// What a wait was for, and (read only if it fails) the end of each node's log.
struct WithLogs<'a> {
    what: &'a str,
    cluster: &'a RedisCluster,
}

impl std::fmt::Display for WithLogs<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let logs = self.cluster.log_tails();
        write!(f, "{}; node logs:\n{logs}", self.what)
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for child in self.nodes.iter_mut().flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = self.watchdog.kill();
        let _ = self.watchdog.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn temp_dir() -> PathBuf {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let unique = format!("{}-{nanos}", std::process::id());
    let dir = std::env::temp_dir().join(format!("idempotency-proxy-cluster-{unique}"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A shell that waits for this test process to end, then kills the nodes whose pid files are
/// still there and removes the directory.
fn watchdog(dir: &Path) -> Child {
    let script = r#"while kill -0 "$1" 2>/dev/null; do sleep 0.5; done
for f in "$2"/node-*/redis.pid; do [ -f "$f" ] && kill -9 "$(cat "$f")"; done
rm -rf "$2""#;
    Command::new("sh")
        .args(["-c", script, "watchdog"])
        .arg(std::process::id().to_string())
        .arg(dir)
        .stdin(Stdio::null())
        .spawn()
        .expect("sh starts")
}

/// `count` distinct loopback ports that are free, each with its cluster bus port free too.
///
/// They come from below the kernel's ephemeral range (which starts at 32768 by default): a port
/// the OS hands out for outgoing connections could be taken while a killed node is down, and the
/// node could not come back on it.
fn free_ports(count: usize) -> Vec<u16> {
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
        ^ std::process::id();
    let mut ports = Vec::new();
    for i in 0..2000u32 {
        // Spread over 12000..22000, so the bus ports (plus 10000) stay below 32768 as well.
        let port = 12_000 + (seed.wrapping_add(i.wrapping_mul(7_919)) % 10_000) as u16;
        let free = |p: u16| TcpListener::bind(("127.0.0.1", p)).is_ok();
        if !ports.contains(&port) && free(port) && free(port + BUS_OFFSET) {
            ports.push(port);
        }
        if ports.len() == count {
            return ports;
        }
    }
    panic!("found no {count} free loopback port pairs");
}

/// Runs a command to completion, killing it (by PID) if it takes longer than `limit`.
fn run_bounded(mut cmd: Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the command starts");
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{cmd:?} did not finish within {limit:?}");
        }
        sleep(Duration::from_millis(10));
    }
    child.wait_with_output().unwrap()
}
