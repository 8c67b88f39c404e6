//! Assembling the proxy from its settings, and running it until shutdown.
//!
//! Each route gets its own stack, outermost first:
//! - the router picks the route (longest prefix, host), so the layer below sees only its own
//!   route's requests and applies that route's policy;
//! - the idempotency layer admits, reserves, replays or refuses before anything is sent,
//!   so a duplicate never costs an upstream connection;
//! - the forwarding client is innermost, so what the layer stores is exactly what the
//!   upstream said, and "never sent" can be told from "sent, then lost".
//!
//! Under every route's layer, the store is wrapped, outermost first, by the replay cache (so a
//! replay costs no round trip and no decryption) and by the sealing decorator when records are
//! encrypted at rest.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio_util::task::TaskTracker;
use tower::Layer;

use crate::admin;
use crate::config::{RouteSettings, Settings};
use crate::idempotency::{IdempotencyLayer, Policy};
use crate::metric_catalog;
use crate::problem::ProblemLayer;
use crate::router::{Route, Router};
use crate::secret::Secret;
use crate::server::{self, App};
use crate::status::Status;
use crate::store::{self, CachingStore, ReplayCache, SealedStore, Store, StoreError};
use crate::upstream::{PoolSettings, Upstream};

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The store could not be opened.
    #[error("cannot open the store: {0}")]
    Store(#[from] StoreError),
    /// A listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// The whole proxy, built once from its settings: routes, store, admin endpoints.
#[derive(Clone)]
pub struct Proxy {
    app: App,
    /// The store with the replay cache in front, so an operator's `DELETE` drops the local copy.
    store: Arc<dyn Store>,
    policies: Vec<Arc<Policy>>,
    /// The first requests running upstream, across all routes.
    executions: TaskTracker,
    admin_token: Option<Secret>,
    drain_timeout: Duration,
    status: Arc<Status>,
}

/// The bytes of completed records a proxy keeps in memory for replays.
const REPLAY_CACHE_BUDGET: usize = 8 * 1024 * 1024;

impl Proxy {
    /// Builds the routes over an already opened store, sealing its records when the settings
    /// name an encryption key.
    pub fn with_store(settings: &Settings, store: Arc<dyn Store>) -> Self {
        // Routes register their metrics as they are built: the recorder must be there first.
        admin::metrics_handle();
        let store = match &settings.encryption {
            Some(keys) => Arc::new(SealedStore::new(store, keys.clone())),
            None => store,
        };
        let cache = Arc::new(ReplayCache::new(REPLAY_CACHE_BUDGET));
        let executions = TaskTracker::new();
        let routes = settings.routes.iter().map(|route| {
            let store = cached(&store, &cache, route);
            let layer = IdempotencyLayer::with_task_tracker(
                store,
                route.policy.clone(),
                executions.clone(),
            );
            let pool = PoolSettings {
                idle_timeout: route.upstream_idle_timeout,
                ..PoolSettings::default()
            };
            Route {
                path_prefix: route.path_prefix.clone(),
                host: route.host.clone(),
                service: layer.layer(Upstream::new(route.upstream.clone(), pool)),
            }
        });
        let app = App {
            router: Router::new(routes.collect()),
            problems: ProblemLayer::new(settings.problem_base.clone()),
            limits: settings.limits,
        };
        let admin_store = Arc::new(CachingStore::new(
            store,
            cache,
            Duration::ZERO,
            Duration::ZERO,
        ));
        Self {
            app,
            store: admin_store,
            policies: settings
                .routes
                .iter()
                .map(|r| Arc::new(r.policy.clone()))
                .collect(),
            executions,
            admin_token: settings.admin_token.clone(),
            drain_timeout: settings.drain_timeout,
            status: Arc::new(Status::new(settings)),
        }
    }

    /// Opens the configured store and builds the routes over it.
    pub async fn open(settings: &Settings) -> Result<Self, StartError> {
        let store = store::open(&settings.store).await?;
        Ok(Self::with_store(settings, store))
    }

    /// The admin endpoints (health, readiness, metrics, records), to serve on a listener of
    /// their own.
    pub fn admin(&self) -> axum::Router {
        let records = admin::Records {
            store: self.store.clone(),
            policies: self.policies.clone(),
            status: self.status.clone(),
        };
        admin::router(records, self.admin_token.clone())
    }

    /// What the admin status page reports; tell it when a new config is applied or refused.
    pub fn status(&self) -> &Arc<Status> {
        &self.status
    }

    /// Serves clients on `listener` until `shutdown` resolves, then drains: open connections,
    /// then operations whose clients have gone, within one `drain_timeout`.
    pub async fn serve(&self, listener: TcpListener, shutdown: impl Future<Output = ()>) {
        let requested = Arc::new(OnceLock::new());
        let noted = requested.clone();
        let shutdown = async move {
            shutdown.await;
            let _ = noted.set(Instant::now());
        };
        server::run(listener, self.app.clone(), shutdown, self.drain_timeout).await;
        let spent = requested.get().map_or(Duration::ZERO, Instant::elapsed);
        let left = self
            .finish_executions(self.drain_timeout.saturating_sub(spent))
            .await;
        if left > 0 {
            tracing::warn!(left, "drain timed out with operations still running; their keys free when their leases run out");
        }
    }

    /// Waits, at most `limit`, for first requests still running upstream to record their
    /// outcomes, including those whose clients have gone. Returns how many were left.
    async fn finish_executions(&self, limit: Duration) -> usize {
        self.executions.close();
        let _ = tokio::time::timeout(limit, self.executions.wait()).await;
        self.executions.len()
    }
}

/// A route's view of the store: replays from the shared cache for the route's
/// `replay_cache_ttl`.
fn cached(
    store: &Arc<dyn Store>,
    cache: &Arc<ReplayCache>,
    route: &RouteSettings,
) -> Arc<dyn Store> {
    let (fresh_for, record_ttl) = (route.replay_cache_ttl, route.policy.ttl);
    Arc::new(CachingStore::new(
        store.clone(),
        cache.clone(),
        fresh_for,
        record_ttl,
    ))
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, StartError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind { addr, source })
}

/// Runs the proxy the settings describe (and its admin listener, if set) until `shutdown`
/// resolves, then drains.
pub(crate) async fn serve(
    settings: Settings,
    shutdown: impl Future<Output = ()>,
) -> Result<(), StartError> {
    metric_catalog::describe_metrics();
    let proxy = Proxy::open(&settings).await?;
    let listener = bind(settings.listen).await?;
    let admin = match settings.admin_listen {
        Some(addr) => Some(spawn_admin(&proxy, addr).await?),
        None => None,
    };
    tracing::info!(listen = %settings.listen, store = %settings.store, routes = settings.routes.len(), "proxy listening");
    proxy.serve(listener, shutdown).await;
    drop(admin);
    tracing::info!("stopped");
    Ok(())
}

/// Serves the admin endpoints on `addr` until the returned sender is dropped. They stay up
/// through the drain, so probes and metrics can watch it.
async fn spawn_admin(proxy: &Proxy, addr: SocketAddr) -> Result<oneshot::Sender<()>, StartError> {
    let listener = bind(addr).await?;
    let (stop, stopped) = oneshot::channel::<()>();
    let admin = axum::serve(listener, proxy.admin()).with_graceful_shutdown(async move {
        let _ = stopped.await;
    });
    tokio::spawn(async move { admin.await });
    tracing::info!(%addr, "admin listening");
    Ok(stop)
}
