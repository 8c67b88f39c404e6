//! Outbox relays (docs/reference.md#outbox-relays): one per `[[outboxes]]` table, run by the
//! `idempotency-outbox` crate, sending through the proxy's upstream client (`transport.rs`),
//! each table counted for the gauges and the status page when they ask (`stats.rs`).
//!
//! Before anything is served each table is checked, and a table that lacks what the relay
//! needs stops the start, naming each column; a database that does not answer yet only delays
//! its relay, which checks the table itself once it does. The relays outlive reloads (a reload
//! may not change them) and are drained with the proxy, within the same `drain_timeout`.

mod stats;
mod transport;

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use idempotency_outbox::{
    duplicate_window_warnings, DestinationKind, Health, Outbox, OutboxError, Relay,
};
use idempotency_postgres::ConnectOptions;

use crate::operator::scraped::{GaugeSource, Named, ScrapedGauges};
use crate::operator::status::{OutboxStats, Status};
use crate::tls::UpstreamTls;
use idempotency_outbox::OutboxConfig;
use idempotency_postgres::DatabaseUrl;
use stats::TableStats;
use transport::UpstreamTransport;

/// One `[[outboxes]]` table: a relay, its database and its TLS towards receivers.
#[derive(Debug, Clone)]
pub struct OutboxSettings {
    /// What the relay does.
    pub relay: OutboxConfig,
    /// The database holding the table.
    pub database: DatabaseUrl,
    /// `database` as `--check` prints it: the `env:`/`file:` reference as written, or the URL
    /// without its password.
    pub database_reference: String,
    /// What connections to `https://` receivers trust and present.
    pub upstream_tls: UpstreamTls,
    /// How the database is reached: `database_ca`, `pool_size`, `statement_timeout`.
    pub connection: OutboxConnection,
}

/// How an outbox reaches its database, as the store's keys say it for the store.
#[derive(Clone, Debug)]
pub struct OutboxConnection {
    /// Connections the relay keeps (`pool_size`): its claims, its marks, its purge and the
    /// admin endpoints' counts (its `LISTEN` has a connection of its own).
    pub pool_size: usize,
    /// How long one statement may run (`statement_timeout`); the relay's client-side deadline
    /// of each call is this and a margin.
    pub statement_timeout: Duration,
    /// What the database's certificate is verified against (`database_ca`); the platform's
    /// roots when unset.
    pub ca: Option<crate::store::DatabaseCa>,
}

impl Default for OutboxConnection {
    fn default() -> Self {
        Self {
            pool_size: POOL_SIZE,
            statement_timeout: Duration::from_secs(5),
            ca: None,
        }
    }
}

/// Database connections each outbox keeps unless `pool_size` says otherwise.
pub(crate) const POOL_SIZE: usize = 6;

/// How long a NATS server has to say its streams' duplicate windows, at start and in `--check`.
const WINDOW_CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// For `--check`: a line for each JetStream stream an outbox publishes to whose duplicate
/// window is shorter than `lease` plus `retry_max`, asked of the servers now.
pub(crate) fn duplicate_window_lines(settings: &[OutboxSettings]) -> Vec<String> {
    let any_nats = settings.iter().any(|outbox| {
        let relay = &outbox.relay;
        let mut urls = relay.deliver_to.iter().chain(relay.topics.values());
        urls.any(|url| DestinationKind::of(url) == Some(DestinationKind::JetStream))
    });
    if !any_nats {
        return Vec::new();
    }
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return vec!["the duplicate windows cannot be checked: no runtime".to_owned()];
    };
    runtime.block_on(async {
        let mut lines = Vec::new();
        for outbox in settings {
            lines.extend(duplicate_window_warnings(&outbox.relay, WINDOW_CHECK_TIMEOUT).await);
        }
        lines
    })
}

/// The outboxes of one process: each table and, once started, its relay.
#[derive(Debug, Default)]
pub(crate) struct Outboxes {
    relays: Mutex<Vec<Relay>>,
    /// Every outbox, for the admin endpoints: kept through a drain, which takes the relays.
    tables: Mutex<Vec<Outbox>>,
}

/// The outboxes built from the config, their tables checked, not yet relaying.
#[derive(Debug)]
pub(crate) struct Checked(Vec<(Outbox, Arc<UpstreamTransport>)>);

/// Builds each outbox and checks its table. `Err` names every refused table's problems; a
/// database that does not answer is logged and left to its relay.
pub(crate) async fn check(settings: &[OutboxSettings]) -> Result<Checked, String> {
    let mut checked = Vec::with_capacity(settings.len());
    let mut refused = Vec::new();
    for outbox in settings {
        let connection = &outbox.connection;
        let options = ConnectOptions {
            pool_size: connection.pool_size,
            statement_timeout: connection.statement_timeout,
            tls: connection.ca.as_ref().map(|ca| ca.config.clone()),
            application_name: format!("idempotency-proxy outbox {}", outbox.relay.name),
            ..ConnectOptions::default()
        };
        let opened = Outbox::new(outbox.relay.clone(), outbox.database.clone(), options)
            .map_err(|e| format!("outbox {:?}: {e}", outbox.relay.name.as_str()))?;
        match opened.prepare_table().await {
            Ok(_) => {}
            Err(OutboxError::Table(problems)) => {
                refused.push(format!(
                    "outbox {:?}: {problems}",
                    outbox.relay.name.as_str()
                ));
            }
            Err(e) => {
                tracing::warn!(outbox = %outbox.relay.name, database = %outbox.database, error = %e, "outbox: the database does not answer; its relay starts when it does");
            }
        }
        checked.push((opened, Arc::new(UpstreamTransport::new(outbox))));
        // Asked in the background: a NATS server that is down must not delay the start.
        let relay = outbox.relay.clone();
        tokio::spawn(async move {
            for line in duplicate_window_warnings(&relay, WINDOW_CHECK_TIMEOUT).await {
                tracing::warn!(outbox = %relay.name, "{line}");
            }
        });
    }
    if refused.is_empty() {
        Ok(Checked(checked))
    } else {
        Err(refused.join("; "))
    }
}

impl Outboxes {
    fn relays(&self) -> MutexGuard<'_, Vec<Relay>> {
        self.relays.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts a relay for each checked outbox, on the current runtime, and has `/metrics`
    /// and the status page count each table when they ask.
    pub(crate) fn start(&self, checked: Checked, scraped: &ScrapedGauges, status: &Status) {
        let mut relays = self.relays();
        let mut gauges = Vec::with_capacity(checked.0.len());
        let mut shown = Vec::with_capacity(checked.0.len());
        for (outbox, transport) in checked.0 {
            tracing::info!(outbox = %outbox.name(), database = %outbox.database(), table = %outbox.config().table, "outbox relay starting");
            let stats = Arc::new(TableStats::new(outbox.clone()));
            let (source, page): (Arc<dyn GaugeSource>, Arc<dyn OutboxStats>) =
                (stats.clone(), stats);
            let name = outbox.name().as_str().to_owned();
            gauges.push(Named { name, source });
            shown.push((outbox.name().clone(), page));
            self.tables().push(outbox.clone());
            relays.push(outbox.start_relay(transport));
        }
        scraped.replace("outbox", gauges);
        status.set_outboxes(shown);
    }

    fn tables(&self) -> MutexGuard<'_, Vec<Outbox>> {
        self.tables.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The outbox named `name`, if the config has one.
    pub(crate) fn get(&self, name: &str) -> Option<Outbox> {
        let tables = self.tables();
        tables.iter().find(|o| o.name().as_str() == name).cloned()
    }

    /// One line for each relay that is not doing its work, saying why.
    pub(crate) fn unready(&self) -> Vec<String> {
        let relays = self.relays();
        relays
            .iter()
            .filter_map(|relay| {
                let why = match relay.health() {
                    Health::Ready => return None,
                    Health::Starting => "has not reached its database yet".to_owned(),
                    Health::Unreachable(e) => format!("cannot reach its database ({e})"),
                    Health::TableRefused(e) => format!("cannot use its table ({e})"),
                    Health::Stopped => "is stopped".to_owned(),
                };
                Some(format!("outbox {:?} {why}", relay.outbox().name().as_str()))
            })
            .collect()
    }

    /// Drains every relay at once, within `timeout`.
    pub(crate) async fn drain(&self, timeout: Duration) {
        let relays = std::mem::take(&mut *self.relays());
        let drains: Vec<_> = relays
            .into_iter()
            .map(|relay| {
                tokio::spawn(async move {
                    let name = relay.outbox().name().clone();
                    let drained = relay.drain(timeout).await;
                    if drained.attempts_left > 0 || !drained.marks_written {
                        tracing::warn!(outbox = %name, attempts_left = drained.attempts_left, marks_written = drained.marks_written, "outbox: the drain timed out; unfinished rows are attempted again after their lease");
                    }
                })
            })
            .collect();
        for drain in drains {
            let _ = drain.await;
        }
    }
}
