//! The store the proxies share, started for one campaign: nothing to start for the file store;
//! a private `redis-server`, or a private three-master Redis Cluster, each node with
//! `--appendonly yes --appendfsync always` (a killed node comes back with every write it
//! acknowledged) in a directory of the run, or a private PostgreSQL with its durable defaults
//! (`postgres.rs`), and a relay in front of every node.
//!
//! Cluster nodes announce their relay's port (`cluster-announce-port`), so the proxies' cluster
//! client, which connects to the addresses the cluster hands out, goes through the relays too;
//! the nodes' own bus traffic goes straight to each other.

use std::path::Path;
use std::time::Duration;

use tokio::sync::Mutex;

use crate::postgres;
use crate::process::{self, Process};
use crate::relay::Relay;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StoreKind {
    File,
    Redis,
    Cluster,
    Postgres,
}

/// One `redis-server` and the relay the proxies reach it through.
pub struct Node {
    pub port: u16,
    pub relay: Relay,
    pub process: Mutex<Process>,
}

pub struct Store {
    pub kind: StoreKind,
    pub nodes: Vec<Node>,
}

const CLUSTER_MASTERS: usize = 3;

/// Where proxy `index` keeps its file store.
pub fn file_path(run: &Path, index: usize) -> std::path::PathBuf {
    run.join(format!("proxy-{index}.db"))
}
const START_LIMIT: Duration = Duration::from_secs(20);

impl Store {
    pub async fn start(kind: StoreKind, run: &Path) -> Result<Store, String> {
        let count = match kind {
            StoreKind::File => 0,
            StoreKind::Redis | StoreKind::Postgres => 1,
            StoreKind::Cluster => CLUSTER_MASTERS,
        };
        let mut nodes = Vec::new();
        for (index, port) in process::low_ports(count).into_iter().enumerate() {
            nodes.push(start_node(kind, index, port, run).await?);
        }
        let store = Store { kind, nodes };
        if kind == StoreKind::Cluster {
            store.create_cluster().await?;
        }
        Ok(store)
    }

    /// The `--store` value for proxy `index`.
    pub fn spec(&self, index: usize, run: &Path) -> String {
        let relays = || {
            self.nodes
                .iter()
                .map(|n| format!("127.0.0.1:{}", n.relay.port))
        };
        match self.kind {
            StoreKind::File => format!("file:{}", file_path(run, index).display()),
            StoreKind::Redis => format!("redis://127.0.0.1:{}", self.nodes[0].relay.port),
            StoreKind::Postgres => format!(
                "postgres://postgres@127.0.0.1:{}/postgres",
                self.nodes[0].relay.port
            ),
            StoreKind::Cluster => {
                format!("redis+cluster://{}", relays().collect::<Vec<_>>().join(","))
            }
        }
    }

    /// Starts a killed node again on its port and data, and waits until it answers.
    pub async fn restart(&self, node: usize) -> bool {
        let node = &self.nodes[node];
        let mut process = node.process.lock().await;
        if process.spawn().is_err() {
            return false;
        }
        let ping = self.kind != StoreKind::Postgres;
        process::wait_ready(node.port, ping, START_LIMIT, || false).await
    }

    /// Stops node `node` as a crash would: SIGKILL for Redis, SIGQUIT for PostgreSQL
    /// (`postgres.rs` says why).
    pub async fn kill(&self, node: usize) {
        let mut process = self.nodes[node].process.lock().await;
        match self.kind {
            StoreKind::Postgres => process.quit().await,
            _ => process.kill().await,
        }
    }

    async fn create_cluster(&self) -> Result<(), String> {
        let mut args = vec!["--cluster".to_owned(), "create".to_owned()];
        args.extend(
            self.nodes
                .iter()
                .map(|n| format!("127.0.0.1:{}", n.relay.port)),
        );
        args.extend(["--cluster-replicas", "0", "--cluster-yes"].map(String::from));
        let created = redis_cli(&args).await?;
        if !created.contains("All 16384 slots covered") {
            return Err(format!("redis-cli --cluster create said:\n{created}"));
        }
        for _ in 0..200 {
            let mut ok = true;
            for node in &self.nodes {
                let port = node.port.to_string();
                let info = redis_cli(&["-p", &port, "CLUSTER", "INFO"].map(String::from)).await?;
                ok &= info.contains("cluster_state:ok");
            }
            if ok {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err("the cluster never reported cluster_state:ok".into())
    }
}

async fn start_node(kind: StoreKind, index: usize, port: u16, run: &Path) -> Result<Node, String> {
    if kind == StoreKind::Postgres {
        return start_postgres(port, run).await;
    }
    let name = format!("redis-{index}");
    let dir = run.join(&name);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let relay = Relay::start(0, port)
        .await
        .map_err(|e| format!("relay: {e}"))?;
    #[rustfmt::skip]
    let mut args: Vec<String> = [
        "--port", &port.to_string(), "--bind", "127.0.0.1", "--dir", &dir.display().to_string(),
        "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--daemonize", "no",
    ].map(String::from).to_vec();
    if kind == StoreKind::Cluster {
        #[rustfmt::skip]
        args.extend([
            "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", "5000", "--cluster-require-full-coverage", "no",
            "--cluster-announce-ip", "127.0.0.1",
            "--cluster-announce-port", &relay.port.to_string(),
            "--cluster-announce-bus-port", &(port + process::BUS_OFFSET).to_string(),
        ].map(String::from));
    }
    let log = run.join(format!("{name}.log"));
    let mut process = Process::new("redis-server", args, log, run);
    process
        .spawn()
        .map_err(|e| format!("cannot start redis-server: {e}"))?;
    if !process::wait_ready(port, true, START_LIMIT, || process.exited()).await {
        return Err(format!("{name} did not answer PING; see {name}.log"));
    }
    Ok(Node {
        port,
        relay,
        process: Mutex::new(process),
    })
}

async fn start_postgres(port: u16, run: &Path) -> Result<Node, String> {
    let bin = postgres::binaries()?;
    let dir = run.join("postgres-0");
    postgres::init(&bin, &dir)?;
    let relay = Relay::start(0, port)
        .await
        .map_err(|e| format!("relay: {e}"))?;
    let (program, args) = postgres::server_command(&bin, &dir, port);
    let mut process = Process::new(program, args, run.join("postgres-0.log"), run);
    process
        .spawn()
        .map_err(|e| format!("cannot start postgres: {e}"))?;
    if !process::wait_ready(port, false, START_LIMIT, || process.exited()).await {
        return Err("postgres did not listen; see postgres-0.log".to_owned());
    }
    Ok(Node {
        port,
        relay,
        process: Mutex::new(process),
    })
}

async fn redis_cli(args: &[String]) -> Result<String, String> {
    let run = tokio::process::Command::new("redis-cli")
        .args(args)
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(Duration::from_secs(30), run).await {
        Ok(Ok(output)) => Ok(String::from_utf8_lossy(&output.stdout).into_owned()),
        Ok(Err(e)) => Err(format!("cannot run redis-cli: {e}")),
        Err(_) => Err(format!("redis-cli {args:?} did not finish in 30s")),
    }
}
