//! The processes of the outbox campaign, all the release binary: the relays (relay-only
//! processes with one `[[outboxes]]` table each, on one database table) and the proxy in front
//! of the receiver, which turns a relay's second send of a row into a replay.
//!
//! A relay is known to be up when its admin listener accepts connections; a restart tries
//! again while the process exits at start, as a supervisor would.

use std::path::Path;
use std::time::Duration;

use crate::process::{self, Process, Supervised};

/// The relays' lease: short, so a killed relay's rows are sent again within the campaign.
pub const LEASE: Duration = Duration::from_secs(2);
/// Shorter than the receiver's slowest answers, so some attempts time out after it acted.
pub const DELIVER_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a restart keeps trying.
const RESTART_LIMIT: Duration = Duration::from_secs(60);

/// A process and the port that says it is up.
/// A process of the campaign's, kept running by the nemesis's kills and restarts.
pub type Service = Supervised;

/// Writes `config` as `<name>.toml` in the run directory and starts the binary on it.
pub async fn service(
    binary: &Path,
    run: &Path,
    name: &str,
    config: String,
    port: u16,
) -> Result<Service, String> {
    let path = run.join(format!("{name}.toml"));
    std::fs::write(&path, config).map_err(|e| format!("{}: {e}", path.display()))?;
    let args = vec!["--config".to_owned(), path.display().to_string()];
    let log = run.join(format!("{name}.log"));
    let process = Process::new(binary, args, log, run).with_env("RUST_LOG", "warn");
    let service = Supervised::new(process, port, RESTART_LIMIT);
    if !service.start().await {
        return Err(format!("{name} did not start; see {name}.log"));
    }
    Ok(service)
}

/// The proxy in front of the receiver: a file store in the run directory, every request keyed.
/// The receiver's `500` means it did nothing, so it frees the key as `503` does (by default a
/// `500` is kept and replayed, and the relay would get it again until `max_attempts`).
pub async fn front_proxy(binary: &Path, run: &Path, receiver: u16) -> Result<Service, String> {
    let port = process::low_ports(1)[0];
    let store = run.join("front.db");
    let config = format!(
        r#"listen = "127.0.0.1:{port}"
store = "file:{store}"
upstream = "http://127.0.0.1:{receiver}"
drain_timeout = "1s"

[defaults]
require_key = true
upstream_timeout = "10s"
release_on = [408, 425, 429, 500, 503]
"#,
        store = store.display()
    );
    service(binary, run, "front", config, port).await
}

/// Relay `index` on `database`, delivering through the proxy on `front`.
pub async fn relay(
    binary: &Path,
    run: &Path,
    index: usize,
    database: &str,
    front: u16,
) -> Result<Service, String> {
    let admin = process::low_ports(1)[0];
    let config = format!(
        r#"admin_listen = "127.0.0.1:{admin}"
store = "memory"
drain_timeout = "1s"

[[outboxes]]
name = "chaos"
database = "{database}"
deliver_to = "http://127.0.0.1:{front}/events"
poll_interval = "200ms"
notify_channel = "outbox"
deliver_concurrency = 16
deliver_timeout = "{timeout}ms"
retry_initial = "50ms"
retry_max = "1s"
max_attempts = 8
lease = "{lease}ms"
on_dead = "skip"
"#,
        timeout = DELIVER_TIMEOUT.as_millis(),
        lease = LEASE.as_millis(),
    );
    service(binary, run, &format!("relay-{index}"), config, admin).await
}
