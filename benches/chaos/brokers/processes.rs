//! The processes of the brokers campaign: a private `nats-server -js` (its port below the
//! ephemeral range and its store directory in the run directory, so a restart finds both
//! again), the relays (the release binary publishing one `[[outboxes]]` table to JetStream) and
//! the consumer (the binary again, one `[[consumers]]` table delivering the stream to the
//! receiver through its file store).

use std::path::Path;
use std::time::Duration;

use async_nats::jetstream::{self, stream};

use crate::outbox::processes::{service, Service, LEASE};
use crate::process::{self, Process, Supervised};

/// The stream the relays publish to and the consumer reads.
pub const STREAM: &str = "EVENTS";
/// How long a restart of the broker keeps trying.
const RESTART_LIMIT: Duration = Duration::from_secs(60);
/// The relays' longest wait between two attempts; with [`LEASE`], the longest a row waits
/// before it is sent again, which the stream's duplicate window must outlast.
const RETRY_MAX: Duration = Duration::from_secs(1);
/// Far past `LEASE + RETRY_MAX`: a row sent again after a relay's death is dropped by the stream.
const DUPLICATE_WINDOW: Duration = Duration::from_secs(600);

/// What the demonstration of a failing checker turns off (`CHAOS_BROKEN=no-dedup`): the
/// stream's duplicate window and the consumer's memory of keys both shrink to almost nothing,
/// so a row the relay sends again reaches the receiver again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dedup {
    On,
    Off,
}

impl Dedup {
    pub fn from_env() -> Self {
        match std::env::var("CHAOS_BROKEN").as_deref() {
            Ok("no-dedup") => Dedup::Off,
            _ => Dedup::On,
        }
    }
}

/// `nats-server -js` on a free low port with its store in `run/nats`, started and listening.
pub async fn broker(run: &Path) -> Result<Service, String> {
    let port = process::low_ports(1)[0];
    let store = run.join("nats");
    std::fs::create_dir_all(&store).map_err(|e| format!("{}: {e}", store.display()))?;
    let args = ["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd"]
        .map(String::from)
        .into_iter()
        .chain([store.display().to_string()])
        .collect();
    let process = Process::new("nats-server", args, run.join("nats.log"), run);
    let broker = Supervised::new(process, port, RESTART_LIMIT);
    if !broker.start().await {
        return Err("nats-server did not start; see nats.log".into());
    }
    Ok(broker)
}

/// The stream every row goes to: on disk, dropping a second copy of an id for the window.
pub async fn create_stream(port: u16, dedup: Dedup) -> Result<(), String> {
    let client = async_nats::connect(format!("nats://127.0.0.1:{port}"))
        .await
        .map_err(|e| format!("nats: {e}"))?;
    let window = match dedup {
        Dedup::On => DUPLICATE_WINDOW,
        Dedup::Off => Duration::from_millis(100),
    };
    jetstream::new(client)
        .create_stream(stream::Config {
            name: STREAM.to_owned(),
            subjects: vec!["events.>".to_owned()],
            storage: stream::StorageType::File,
            duplicate_window: window,
            ..stream::Config::default()
        })
        .await
        .map_err(|e| format!("creating the stream: {e}"))?;
    Ok(())
}

/// Relay `index` on `database`, publishing every row to `events.<topic>` on the broker.
pub async fn relay(
    binary: &Path,
    run: &Path,
    index: usize,
    database: &str,
    nats: u16,
) -> Result<Service, String> {
    let admin = process::low_ports(1)[0];
    let config = format!(
        r#"admin_listen = "127.0.0.1:{admin}"
store = "memory"
drain_timeout = "1s"

[[outboxes]]
name = "chaos"
database = "{database}"
deliver_to = "nats://127.0.0.1:{nats}"
nats_subject_prefix = "events."
poll_interval = "200ms"
notify_channel = "outbox"
deliver_concurrency = 16
deliver_timeout = "1s"
retry_initial = "50ms"
retry_max = "{retry_max}ms"
max_attempts = 100000
lease = "{lease}ms"
on_dead = "skip"
"#,
        retry_max = RETRY_MAX.as_millis(),
        lease = LEASE.as_millis(),
    );
    service(binary, run, &format!("relay-{index}"), config, admin).await
}

/// The consumer: one message at a time (so one aggregate's events keep their order), keyed by
/// the row's id, its records in a file store that outlives its kills.
pub async fn consumer(
    binary: &Path,
    run: &Path,
    nats: u16,
    receiver: u16,
    dedup: Dedup,
) -> Result<Service, String> {
    let admin = process::low_ports(1)[0];
    let store = run.join("consumer.db");
    let ttl = match dedup {
        Dedup::On => "24h",
        Dedup::Off => "100ms",
    };
    let config = format!(
        r#"admin_listen = "127.0.0.1:{admin}"
store = "file:{store}"
drain_timeout = "1s"

[[consumers]]
name = "chaos"
source = "nats://127.0.0.1:{nats}"
stream = "{STREAM}"
durable = "chaos"
filter_subject = "events.>"
upstream = "http://127.0.0.1:{receiver}"
path = "/events"
key_from = "message-id"
deliver_concurrency = 1
deliver_timeout = "5s"
retry_initial = "50ms"
retry_max = "1s"
max_attempts = 100000
lease = "{lease}ms"
ttl = "{ttl}"
"#,
        store = store.display(),
        lease = LEASE.as_millis(),
    );
    service(binary, run, "consumer", config, admin).await
}
