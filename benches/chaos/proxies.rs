//! The proxies under test: the real release binary, one process per replica, each with a
//! config file of its own in the run directory and its own upstream port.
//!
//! A proxy that cannot reach its store at start-up exits; a restart therefore tries again
//! until the proxy listens, as a process supervisor would.

use std::path::Path;
use std::time::Duration;

use crate::process::{self, Process, Supervised};
use crate::stores::Store;

/// How long a reservation lives without renewal: short, so a paused or killed holder frees
/// its keys within the campaign.
pub const LEASE: Duration = Duration::from_secs(2);
/// Longer than the lease, so a slow upstream has its lease renewed at least once.
pub const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a restart keeps trying (a store that is down keeps a proxy from starting).
const RESTART_LIMIT: Duration = Duration::from_secs(90);

/// A process of the campaign's, kept running by the nemesis's kills and restarts.
pub type Proxy = Supervised;

/// Writes each replica's config and starts them all.
pub async fn start(
    binary: &Path,
    store: &Store,
    upstream_ports: &[u16],
    run: &Path,
) -> Result<Vec<Proxy>, String> {
    let mut proxies = Vec::new();
    let ports = process::low_ports(upstream_ports.len());
    for (index, (upstream, port)) in upstream_ports.iter().zip(ports).enumerate() {
        let config = run.join(format!("proxy-{index}.toml"));
        let text = config_text(port, &store.spec(index, run), *upstream);
        std::fs::write(&config, text).map_err(|e| format!("{}: {e}", config.display()))?;
        let args = vec!["--config".to_owned(), config.display().to_string()];
        let log = run.join(format!("proxy-{index}.log"));
        // Warnings only (store and lease trouble): a line per request would fill the disk.
        let process = Process::new(binary, args, log, run).with_env("RUST_LOG", "warn");
        let proxy = Supervised::new(process, port, RESTART_LIMIT);
        if !proxy.start().await {
            return Err(format!(
                "proxy {index} did not start; see proxy-{index}.log"
            ));
        }
        proxies.push(proxy);
    }
    Ok(proxies)
}

/// The contract under test: `conflict` for a duplicate in flight, `keep` for an ambiguous
/// outcome, and every covered request must carry a key.
fn config_text(port: u16, store: &str, upstream: u16) -> String {
    format!(
        r#"listen = "127.0.0.1:{port}"
store = "{store}"
upstream = "http://127.0.0.1:{upstream}"
drain_timeout = "1s"

[defaults]
require_key = true
lease = "{lease}ms"
upstream_timeout = "{timeout}ms"
concurrent = "conflict"
on_ambiguous = "keep"
"#,
        lease = LEASE.as_millis(),
        timeout = UPSTREAM_TIMEOUT.as_millis(),
    )
}
