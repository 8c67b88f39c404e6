//! The relay under test: the release binary, relay only (or consumer only), with an admin
//! listener; ready when `/readyz` answers `200` (its table checked, the database reached).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio::time::Instant;

pub struct Relay {
    pub child: Child,
    _config: TempFile,
}

/// A file removed when dropped.
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The `[[outboxes]]` table of one case.
pub struct Settings<'a> {
    pub database: &'a str,
    pub deliver_to: String,
    pub notify: bool,
    pub concurrency: Option<usize>,
    /// `on_dead = "block"`.
    pub block: bool,
    /// More keys of the table (`nats_subject_prefix`).
    pub extra: &'a str,
}

impl Relay {
    pub async fn start(binary: &Path, settings: &Settings<'_>) -> Result<Relay, String> {
        let admin = free_port();
        let mut config = format!(
            "admin_listen = \"127.0.0.1:{admin}\"\nstore = \"memory\"\n\n[[outboxes]]\n\
             name = \"bench\"\ndatabase = \"{}\"\ndeliver_to = \"{}\"\n",
            settings.database, settings.deliver_to
        );
        if settings.notify {
            config.push_str("notify_channel = \"outbox\"\n");
        }
        if settings.block {
            config.push_str("on_dead = \"block\"\n");
        }
        if let Some(concurrency) = settings.concurrency {
            config.push_str(&format!("deliver_concurrency = {concurrency}\n"));
        }
        config.push_str(settings.extra);
        Relay::run(binary, admin, config).await
    }

    /// The binary with `config` (which names `admin` as its `admin_listen`), once ready.
    pub async fn run(binary: &Path, admin: u16, config: String) -> Result<Relay, String> {
        let path =
            std::env::temp_dir().join(format!("outbox-load-{}-{admin}.toml", std::process::id()));
        std::fs::write(&path, config).map_err(|e| format!("{}: {e}", path.display()))?;
        let config = TempFile(path);
        let child = Command::new(binary)
            .arg("--config")
            .arg(&config.0)
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("{}: {e}", binary.display()))?;
        let relay = Relay {
            child,
            _config: config,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if status(admin, "/readyz").await == Some(200) {
                return Ok(relay);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Err("the relay was not ready within 30 s".into())
    }

    pub fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }
}

pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address").port()
}

/// The status of `GET path` on the admin listener, or `None` when nothing answers.
async fn status(port: u16, path: &str) -> Option<u16> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).await.ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}
