//! The [`Proxy`] handle: assembling the proxy from its settings, serving a listener until
//! shutdown, and reloading its config while it runs. The process around it (worker threads,
//! signals, the admin listener) is `process/`.
//!
//! What one config makes (the routes and their stacks, what the admin endpoints read) is a
//! generation (`generation.rs`); a reload ([`Proxy::reload`], with `reload.rs` deciding whether
//! the new config may replace the running one) builds the next one and swaps it in whole, while
//! what must outlive it (the store, the replay cache, the first requests still running, the
//! status page's record, the listener's TLS session keys) stays.

mod generation;
mod reload;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tokio::net::TcpListener;

use crate::config::config_digest;
use crate::config::{ConfigError, Overrides, Settings};
use crate::inbox::{QueueStats, RouteInbox};
use crate::net::server::{self, LiveApp};
use crate::operator::admin::{self, AdminView, Reload};
use crate::operator::scraped::{GaugeSource, Named};
use crate::operator::status::{ConfigSummary, Status};
use crate::outbox::{self, Outboxes};
use crate::store::{self, MemoryStore, Store, StoreError, StoreSpec};
use crate::tls::TlsListener;
use generation::Kept;
use idempotency_core::policy::RouteMode;
pub use reload::ReloadState;
use reload::Reloads;

/// Why the proxy could not start. Its causes are its sources: print it with them
/// ([`ErrorChain`](idempotency_core::proxy::ErrorChain)), as the binary does.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The store could not be opened.
    #[error("cannot open the store")]
    Store(#[from] StoreError),
    /// A route is an inbox, and the store keeps no inbox queues.
    #[error("{0}")]
    Inbox(String),
    /// An outbox's table lacks what its relay needs (each problem named).
    #[error("{0}")]
    OutboxTable(String),
    /// The Postgres store's tables have another layout, or its settings cannot be used.
    #[error("cannot open the store: {context}")]
    StoreTable {
        /// What is wrong with them.
        context: std::borrow::Cow<'static, str>,
        /// The database's error, when there is one.
        #[source]
        source: Option<idempotency_core::BoxError>,
    },
    /// A listener could not be bound.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// The whole proxy: routes, store, admin endpoints, built from its settings and rebuilt from
/// the config file by [`reload`](Self::reload). Clones share everything.
#[derive(Clone)]
pub struct Proxy {
    inner: Arc<Inner>,
}

struct Inner {
    kept: Kept,
    /// What the server serves.
    live: Arc<LiveApp>,
    /// What the admin endpoints read.
    admin: Arc<ArcSwap<AdminView>>,
    /// The listener's handshakes, when it speaks HTTPS.
    tls: Option<Arc<TlsListener>>,
    reloads: Reloads,
    /// What the status page reports; it outlives every reload, and hears of each.
    status: Arc<Status>,
    /// The outbox relays, which a reload may not change.
    outboxes: Arc<Outboxes>,
}

impl Proxy {
    /// Builds the routes over an already opened store, sealing its records when the settings
    /// name an encryption key.
    pub fn with_store(settings: &Settings, store: Arc<dyn Store>) -> Self {
        // Routes register their metrics as they are built: the recorder must be there first.
        admin::metrics_handle();
        let kept = Kept::new(store);
        let generation = generation::build(settings, &kept);
        let status = Arc::new(Status::new(summary(settings)));
        start_deliveries(&kept, &status, generation.inboxes);
        let inner = Inner {
            live: LiveApp::new(generation.app),
            admin: Arc::new(ArcSwap::from_pointee(generation.admin)),
            tls: settings
                .tls
                .as_ref()
                .map(|tls| Arc::new(TlsListener::new(tls))),
            reloads: Reloads::new(settings),
            status,
            kept,
            outboxes: Arc::default(),
        };
        Self {
            inner: Arc::new(inner),
        }
    }

    /// Checks each outbox's table, opens the configured store, builds the routes over it and
    /// starts the outbox relays. A relay-only process (outboxes and no routes) opens no store.
    pub async fn open(settings: &Settings) -> Result<Self, StartError> {
        let outboxes = outbox::check(&settings.outboxes)
            .await
            .map_err(StartError::OutboxTable)?;
        let store: Arc<dyn Store> = if settings.routes.is_empty() {
            Arc::new(MemoryStore::new())
        } else {
            store::open_with(&settings.store, &settings.postgres)
                .await
                .map_err(|e| refused_table(&settings.store, e))?
        };
        servable(settings, &*store).map_err(|e| StartError::Inbox(e.to_string()))?;
        let proxy = Self::with_store(settings, store);
        proxy.start_checked_outboxes(outboxes);
        Ok(proxy)
    }

    /// Checks each outbox's table and starts its relay (docs/reference.md#outbox-relays), for a
    /// proxy built by [`with_store`](Self::with_store); [`open`](Self::open) does this itself.
    pub async fn start_outboxes(&self, settings: &Settings) -> Result<(), StartError> {
        let outboxes = outbox::check(&settings.outboxes)
            .await
            .map_err(StartError::OutboxTable)?;
        self.start_checked_outboxes(outboxes);
        Ok(())
    }

    fn start_checked_outboxes(&self, outboxes: outbox::Checked) {
        let inner = &self.inner;
        inner
            .outboxes
            .start(outboxes, &inner.kept.scraped, &inner.status);
    }

    /// Drains the outbox relays (docs/reference.md#outbox-relays) within `timeout`: no more
    /// claims, attempts in flight finish and are marked, unstarted claims are given back.
    pub async fn drain_outboxes(&self, timeout: Duration) {
        self.inner.outboxes.drain(timeout).await;
    }

    /// Where [`reload`](Self::reload) reads the config: the command line (and environment) the
    /// settings were loaded from, naming the file. Until this is called a reload reads no file
    /// and no flags, which leaves a proxy with no upstream and is refused.
    pub fn reload_from(self, overrides: Overrides) -> Self {
        self.inner.reloads.set_source(overrides);
        self
    }

    /// Reads the config again (docs/reference.md#reload) and, if it is valid and changes nothing that
    /// only a restart can change, serves every request that arrives from now on with it:
    /// routes, policies, limits, secrets, keys and certificates. Requests in flight finish
    /// under the config they started with, and no connection is dropped. Returns the new
    /// config's digest, or why the running config stays.
    pub fn reload(&self) -> Result<String, ConfigError> {
        let inner = &self.inner;
        let servable = |settings: &Settings| servable(settings, &*inner.kept.store);
        let outcome = inner.reloads.reload(servable, |settings| {
            let generation = generation::build(settings, &inner.kept);
            start_deliveries(&inner.kept, &inner.status, generation.inboxes);
            inner.live.replace(generation.app);
            inner.admin.store(Arc::new(generation.admin));
            if let (Some(listener), Some(pair)) = (&inner.tls, &settings.tls) {
                listener.replace(pair);
            }
            inner.status.reload_applied(summary(settings));
        });
        if outcome.is_err() {
            inner.status.reload_refused();
        }
        outcome
    }

    /// The running config's digest, and when the last reload was asked for and how it went.
    pub fn reload_state(&self) -> ReloadState {
        self.inner.reloads.state()
    }

    /// The admin endpoints (health, readiness, metrics, records, reload), to serve on a
    /// listener of their own.
    pub fn admin(&self) -> axum::Router {
        let status = self.inner.status.clone();
        let outboxes = self.inner.outboxes.clone();
        let scraped = self.inner.kept.scraped.clone();
        admin::router(
            self.inner.admin.clone(),
            Arc::new(self.clone()),
            status,
            outboxes,
            scraped,
        )
    }

    /// What the admin status page reports. [`reload`](Self::reload) tells it when a new config
    /// is applied or refused.
    pub fn status(&self) -> &Arc<Status> {
        &self.inner.status
    }

    /// A reload reads files and parses certificates: blocking work, kept off the workers that
    /// serve requests.
    pub(crate) async fn reload_off_the_runtime(self) -> Result<String, ConfigError> {
        match tokio::task::spawn_blocking(move || self.reload()).await {
            Ok(outcome) => outcome,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }

    /// The running config's `drain_timeout`: how long a shutdown waits for what is in flight.
    pub(crate) fn drain_timeout(&self) -> Duration {
        self.inner.reloads.running().drain_timeout
    }

    /// Serves clients on `listener` (HTTPS only, when the settings name a certificate) until
    /// `shutdown` resolves, then drains: open connections, then operations whose clients have
    /// gone, within one `drain_timeout` (the running config's, at the time of the drain).
    pub async fn serve(&self, listener: TcpListener, shutdown: impl Future<Output = ()>) {
        let requested = Arc::new(OnceLock::new());
        let noted = requested.clone();
        let proxy = self.clone();
        let shutdown = async move {
            shutdown.await;
            // Inbox deliveries start no more attempts; those running finish with the drain.
            proxy.inner.kept.inboxes.stop();
            let _ = noted.set(Instant::now());
        };
        let (live, tls) = (self.inner.live.clone(), self.inner.tls.clone());
        let drain_timeout = || self.inner.reloads.running().drain_timeout;
        let slots = self.inner.kept.slots.clone();
        server::run(listener, live, tls, slots, shutdown, drain_timeout).await;
        let spent = requested.get().map_or(Duration::ZERO, Instant::elapsed);
        let left = self
            .finish_executions(drain_timeout().saturating_sub(spent))
            .await;
        if left > 0 {
            tracing::warn!(left, "drain timed out with operations still running; their keys free when their leases run out");
        }
    }

    /// Waits, at most `limit`, for first requests still running upstream to record their
    /// outcomes, including those whose clients have gone. Returns how many were left.
    async fn finish_executions(&self, limit: Duration) -> usize {
        let executions = &self.inner.kept.executions;
        executions.close();
        let _ = tokio::time::timeout(limit, executions.wait()).await;
        executions.len()
    }
}

/// Whether the store can serve every route of `settings`: an inbox route needs a store that
/// keeps inbox queues, which is checked before the proxy starts or a reload applies, never
/// found out by a request.
fn servable(settings: &Settings, store: &dyn Store) -> Result<(), ConfigError> {
    let inbox = settings
        .routes
        .iter()
        .find(|r| r.policy.mode == RouteMode::Inbox);
    match (inbox, store.inbox()) {
        (Some(route), None) => Err(ConfigError::Unservable(format!(
            "route {:?}: mode \"inbox\": inbox routes need a store that supports them (the {} store does not)",
            route.policy.route.as_str(),
            settings.store.kind(),
        ))),
        _ => Ok(()),
    }
}

/// Starts the delivery workers of a generation's inbox routes, shows their queues on the
/// status page, and has `/metrics` count them when scraped.
fn start_deliveries(kept: &Kept, status: &Status, inboxes: Vec<RouteInbox>) {
    status.clear_inboxes();
    let mut gauges = Vec::with_capacity(inboxes.len());
    for inbox in &inboxes {
        let stats = Arc::new(QueueStats::new(inbox.route.clone(), inbox.store.clone()));
        status.set_inbox(&inbox.route, stats.clone());
        let source: Arc<dyn GaugeSource> = stats;
        let name = inbox.route.as_str().to_owned();
        gauges.push(Named { name, source });
    }
    kept.scraped.replace("inbox", gauges);
    kept.inboxes.start(inboxes);
}

impl Reload for Proxy {
    fn reload(&self) -> Pin<Box<dyn Future<Output = Result<String, ConfigError>> + Send>> {
        Box::pin(self.clone().reload_off_the_runtime())
    }
}

/// A Postgres store that refuses to open for its tables or settings (not for an unreachable
/// database) is a bad config, found at start.
fn refused_table(spec: &StoreSpec, error: StoreError) -> StartError {
    match (spec, error) {
        (StoreSpec::Postgres(_), StoreError::Open { context, source }) => {
            StartError::StoreTable { context, source }
        }
        (_, error) => StartError::Store(error),
    }
}

/// What the status page says of a config.
pub(crate) fn summary(settings: &Settings) -> ConfigSummary {
    ConfigSummary {
        digest: config_digest(settings),
        routes: settings
            .routes
            .iter()
            .map(|r| r.policy.route.clone())
            .collect(),
        store_kind: settings.store.kind(),
    }
}
