//! The binary as an outbox relay: a relay-only process (or a proxy with outboxes) started from
//! a config text, with an admin listener on a free port and its log kept in a file a test can
//! read.

use std::process::Stdio;
use std::time::Duration;

use super::binary::BIN;
use super::client::TestClient;
use super::poll;
use super::temp::TempPath;

/// How long a test waits for what should happen.
pub(crate) const WAIT: Duration = Duration::from_secs(30);

/// A running `idempotency-proxy` with outboxes.
pub(crate) struct RelayProcess {
    pub(crate) child: tokio::process::Child,
    pub(crate) admin: TestClient,
    log: TempPath,
    _config: TempPath,
}

/// An `[[outboxes]]` table named `payments` on the database at `database`, relaying to
/// `deliver_to`, with short leases and quick retries, and `extra` keys.
pub(crate) fn outbox_table(database: &str, deliver_to: &str, extra: &str) -> String {
    format!(
        r#"
[[outboxes]]
name = "payments"
database = "{database}"
deliver_to = "{deliver_to}"
poll_interval = "100ms"
notify_channel = "outbox"
lease = "1s"
deliver_timeout = "1s"
retry_initial = "50ms"
retry_max = "200ms"
{extra}
"#
    )
}

impl RelayProcess {
    /// Starts the binary with `config` (and an admin listener), named `name` for its files; waits
    /// until its admin listener answers.
    pub(crate) async fn start(name: &str, config: &str) -> Self {
        let process = Self::spawn(name, config);
        let admin = process.admin.addr();
        poll::until(WAIT, format!("{name}'s admin listener"), async || {
            tokio::net::TcpStream::connect(admin).await.is_ok()
        })
        .await;
        process
    }

    /// Starts the binary with `config`, and waits for nothing.
    pub(crate) fn spawn(name: &str, config: &str) -> Self {
        let config_file = TempPath::new(&format!("{name}.toml"));
        let log = TempPath::new(&format!("{name}.log"));
        std::fs::write(config_file.path(), config).unwrap();
        let admin = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let child = tokio::process::Command::new(BIN)
            .args(["--config", &config_file.path().display().to_string()])
            .args(["--admin-listen", &admin.to_string(), "--store", "memory"])
            .stderr(Stdio::from(std::fs::File::create(log.path()).unwrap()))
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        Self {
            child,
            admin: TestClient::new(admin),
            log,
            _config: config_file,
        }
    }

    /// Waits (at most 30 s) for it to exit: its exit code and its log.
    pub(crate) async fn exit(mut self) -> (Option<i32>, String) {
        let waited = tokio::time::timeout(WAIT, self.child.wait()).await;
        let status = waited.expect("the process exits").unwrap();
        (status.code(), self.log())
    }

    /// What it has logged so far.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    /// Waits until its log holds `text`.
    pub(crate) async fn until_logged(&self, text: &str) {
        poll::until(WAIT, format!("{text:?} in the log"), async || {
            self.log().contains(text)
        })
        .await;
    }

    /// `GET /readyz`: its status and body.
    pub(crate) async fn readyz(&self) -> (u16, String) {
        let answer = self.admin.send("GET", "/readyz", &[], "").await;
        (
            answer.status.as_u16(),
            String::from_utf8_lossy(&answer.body).into_owned(),
        )
    }

    /// Waits until it is ready.
    pub(crate) async fn until_ready(&self) {
        poll::until(WAIT, "the relay ready", async || {
            self.readyz().await.0 == 200
        })
        .await;
    }
}
