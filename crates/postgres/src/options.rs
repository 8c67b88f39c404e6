//! The pool, and a connection of its own for `LISTEN`, made the same way: the same TLS, timeouts
//! and application name, so the database's `pg_stat_activity` tells them apart from the
//! application's own sessions.

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use rustls::ClientConfig;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::{tls, ConnectError, DatabaseUrl};

/// How connections are made and how many the pool keeps.
#[derive(Clone, Debug)]
pub struct ConnectOptions {
    /// The most connections the pool holds open.
    pub pool_size: usize,
    /// How long one statement may run before the server cancels it (`statement_timeout`);
    /// zero for no limit.
    pub statement_timeout: Duration,
    /// How long making a connection may take, and waiting for a free one in the pool.
    pub connect_timeout: Duration,
    /// `application_name`, as the database's activity views show it.
    pub application_name: String,
    /// TLS when the URL asks for it (`sslmode=require`, or `prefer` against a server that
    /// offers it); the platform's roots when `None`.
    pub tls: Option<Arc<ClientConfig>>,
    /// Server settings every connection starts with (`-c name=value`), for what its user's
    /// statements need of the planner or the session.
    pub settings: Vec<(String, String)>,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        Self {
            pool_size: 16,
            statement_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            application_name: "idempotency-proxy".to_owned(),
            tls: None,
            settings: Vec::new(),
        }
    }
}

impl ConnectOptions {
    fn client_config(&self, url: &DatabaseUrl) -> tokio_postgres::Config {
        let mut config = url.config().clone();
        config.connect_timeout(self.connect_timeout);
        if config.get_application_name().is_none() {
            config.application_name(&self.application_name);
        }
        let timeout = self.statement_timeout.as_millis();
        let mut options = config.get_options().unwrap_or_default().to_owned();
        if timeout > 0 {
            options.push_str(&format!(" -c statement_timeout={timeout}"));
        }
        // Every statement is written for read committed (each sees what committed before it,
        // a lock waited for is followed by a fresh look): pinned, whatever the database's or
        // the role's default.
        options.push_str(" -c default_transaction_isolation=read\\ committed");
        for (name, value) in &self.settings {
            options.push_str(&format!(" -c {name}={value}"));
        }
        if !options.trim().is_empty() {
            config.options(options.trim());
        }
        config
    }

    fn tls(&self) -> MakeRustlsConnect {
        let config = self.tls.clone().unwrap_or_else(tls::platform);
        MakeRustlsConnect::new(ClientConfig::clone(&config))
    }
}

/// A pool of connections to `url`. It connects lazily: a database that is down now makes the
/// first use fail, not this call, so a process can start while its database restarts.
pub fn pool(url: &DatabaseUrl, options: &ConnectOptions) -> Result<Pool, ConnectError> {
    let manager = Manager::from_config(
        options.client_config(url),
        options.tls(),
        ManagerConfig {
            // A connection that broke is found out by its next statement and dropped then; a
            // test query before every use would add a round trip to every request.
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(options.pool_size)
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(options.connect_timeout))
        .create_timeout(Some(options.connect_timeout))
        .build()
        .map_err(|e| ConnectError::Pool(e.to_string()))
}

/// One connection to `url`, outside any pool, with its connection task spawned; what the
/// server sends outside any query (notifications, notices) goes to `messages`, and that
/// channel closes when the connection ends.
pub(crate) async fn connect_with_messages(
    url: &DatabaseUrl,
    options: &ConnectOptions,
    messages: tokio::sync::mpsc::UnboundedSender<tokio_postgres::AsyncMessage>,
) -> Result<tokio_postgres::Client, ConnectError> {
    let config = options.client_config(url);
    let (client, mut connection) = config.connect(options.tls()).await?;
    tokio::spawn(async move {
        while let Some(Ok(message)) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            if messages.send(message).is_err() {
                return;
            }
        }
    });
    Ok(client)
}
