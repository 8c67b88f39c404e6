//! A private virtual host on the shared RabbitMQ (127.0.0.1:5672, `guest`/`guest`): each test
//! declares its exchanges and queues in a vhost of its own, so tests running at once never see
//! each other's messages, and the vhost (with everything in it) is deleted when the value is
//! dropped.
//!
//! Vhosts are made with `rabbitmqctl`, as an operator makes them. Without a reachable broker or
//! `rabbitmqctl` a test prints `SKIPPED` and returns early, unless `REQUIRE_RABBITMQ=1`, which
//! turns that into a failure. `RABBITMQ_ADDRESS` names another broker (`host:port`).

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// The shared broker, unless `RABBITMQ_ADDRESS` names another.
const DEFAULT_ADDRESS: &str = "127.0.0.1:5672";

/// A vhost of one test's own on the shared broker, deleted when dropped.
pub struct RabbitVhost {
    name: String,
    address: String,
}

impl RabbitVhost {
    /// Creates a fresh vhost that `guest` may use fully, or `None` (after saying so) when
    /// there is no broker and `REQUIRE_RABBITMQ=1` is not set.
    pub fn create(test: &str) -> Option<RabbitVhost> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let address =
            std::env::var("RABBITMQ_ADDRESS").unwrap_or_else(|_| DEFAULT_ADDRESS.to_owned());
        if let Err(why) = reachable(&address) {
            return skip(&format!("no RabbitMQ at {address} ({why})"));
        }
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("idempotency-{test}-{}-{n}", std::process::id());
        if let Err(why) = rabbitmqctl(&["add_vhost", &name]) {
            return skip(&idempotency_core::proxy::ErrorChain(&why).to_string());
        }
        let vhost = RabbitVhost { name, address };
        rabbitmqctl(&[
            "set_permissions",
            "-p",
            &vhost.name,
            "guest",
            ".*",
            ".*",
            ".*",
        ])
        .unwrap_or_else(|why| panic!("{why}"));
        Some(vhost)
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The broker's address, `host:port`.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Its `amqp://` URL, with the `guest` credentials.
    pub fn url(&self) -> String {
        format!("amqp://guest:guest@{}/{}", self.address, self.name)
    }

    /// Closes every client connection to this vhost, as a broker restart or a network cut does
    /// for its clients; the broker and the vhost's durable queues stay.
    pub fn close_connections(&self) {
        let args = [
            "close_all_connections",
            "--vhost",
            &self.name,
            "a test cuts the connections",
        ];
        rabbitmqctl(&args).unwrap_or_else(|why| panic!("{why}"));
    }
}

impl Drop for RabbitVhost {
    fn drop(&mut self) {
        let _ = rabbitmqctl(&["delete_vhost", &self.name]);
    }
}

/// Why `rabbitmqctl` gave no output.
#[derive(Debug, thiserror::Error)]
pub enum RabbitCtlError {
    /// The tool could not be started (not installed, not on `PATH`).
    #[error("rabbitmqctl cannot be run")]
    NotRun(#[source] std::io::Error),
    /// It ran and said no.
    #[error("rabbitmqctl {command} failed ({status}): {stderr}")]
    Refused {
        /// The arguments it was given.
        command: String,
        /// How it exited.
        status: std::process::ExitStatus,
        /// What it wrote to stderr.
        stderr: String,
    },
}

/// Runs `rabbitmqctl` with `args`: its output, or why it failed.
pub fn rabbitmqctl(args: &[&str]) -> Result<String, RabbitCtlError> {
    let output = Command::new("rabbitmqctl")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(RabbitCtlError::NotRun)?;
    if !output.status.success() {
        return Err(RabbitCtlError::Refused {
            command: args.join(" "),
            status: output.status,
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Whether something listens at `address`.
fn reachable(address: &str) -> Result<(), String> {
    let socket: std::net::SocketAddr = address
        .parse()
        .map_err(|e| format!("{address:?} is not host:port: {e}"))?;
    std::net::TcpStream::connect_timeout(&socket, Duration::from_secs(2))
        .map(drop)
        .map_err(|e| e.to_string())
}

/// A test that cannot run here: a failure under `REQUIRE_RABBITMQ=1`, else a loud `SKIPPED`
/// straight to the process's stderr, which the harness does not capture.
pub fn skip<T>(why: &str) -> Option<T> {
    if std::env::var("REQUIRE_RABBITMQ").as_deref() == Ok("1") {
        panic!("REQUIRE_RABBITMQ=1 but {why}");
    }
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: {why}; set REQUIRE_RABBITMQ=1 to fail"
    );
    None
}
