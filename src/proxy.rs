//! Assembling the proxy from its settings, and running it until shutdown.
//!
//! Each route gets its own stack, outermost first:
//! - the router picks the route (longest prefix, host), so the layer below sees only its own
//!   route's requests and applies that route's policy;
//! - the idempotency layer admits, reserves, replays or refuses before anything is sent,
//!   so a duplicate never costs an upstream connection;
//! - the forwarding client is innermost, so what the layer stores is exactly what the
//!   upstream said, and "never sent" can be told from "sent, then lost".

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio_util::task::TaskTracker;
use tower::Layer;

use crate::config::Settings;
use crate::idempotency::{IdempotencyLayer, Policy, ReplayCache};
use crate::router::{Route, Router};
use crate::secret::Secret;
use crate::store::{self, SealedStore, Store, StoreError};
use crate::{admin, server, upstream};

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot open the store: {0}")]
    Store(#[from] StoreError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// The proxy's parts, built once from the settings.
#[derive(Clone)]
pub struct Proxy {
    router: Router,
    store: Arc<dyn Store>,
    policies: Vec<Arc<Policy>>,
    /// The first requests running upstream, across all routes.
    executions: TaskTracker,
    admin_token: Option<Secret>,
    replay_cache: Arc<ReplayCache>,
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
        let executions = TaskTracker::new();
        let replay_cache = Arc::new(ReplayCache::new(REPLAY_CACHE_BUDGET));
        let routes = settings.routes.iter().map(|route| Route {
            name: route.policy.route.clone(),
            path_prefix: route.path_prefix.clone(),
            host: route.host.clone(),
            service: IdempotencyLayer::new(store.clone(), route.policy.clone())
                .with_task_tracker(executions.clone())
                .with_replay_cache(replay_cache.clone())
                .layer(upstream::Upstream::new(
                    route.upstream.clone(),
                    upstream::PoolSettings {
                        idle_timeout: route.upstream_idle_timeout,
                        ..upstream::PoolSettings::default()
                    },
                )),
        });
        let policies = settings.routes.iter().map(|r| Arc::new(r.policy.clone()));
        Self {
            router: Router::new(routes.collect(), settings.problem_base.clone()),
            store,
            policies: policies.collect(),
            executions,
            admin_token: settings.admin_token.clone(),
            replay_cache,
        }
    }

    /// Waits, at most `limit`, for first requests still running upstream to record their
    /// outcomes, including those whose clients have gone. Returns how many were left.
    pub async fn finish_executions(&self, limit: Duration) -> usize {
        self.executions.close();
        let _ = tokio::time::timeout(limit, self.executions.wait()).await;
        self.executions.len()
    }

    /// Opens the configured store and builds the routes over it.
    pub async fn open(settings: &Settings) -> Result<Self, StartError> {
        let store = store::open(&settings.store).await?;
        Ok(Self::with_store(settings, store))
    }

    pub fn router(&self) -> Router {
        self.router.clone()
    }

    pub fn admin(&self) -> axum::Router {
        let records = admin::Records {
            store: self.store.clone(),
            policies: self.policies.clone(),
            replay_cache: Some(self.replay_cache.clone()),
        };
        admin::router(records, self.admin_token.clone())
    }
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, StartError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind { addr, source })
}

/// Runs the proxy (and the admin listener, if set) until `shutdown` resolves, then drains.
pub async fn serve(
    settings: Settings,
    shutdown: impl Future<Output = ()>,
) -> Result<(), StartError> {
    admin::describe_metrics();
    let proxy = Proxy::open(&settings).await?;
    let listener = bind(settings.listen).await?;
    let admin = match settings.admin_listen {
        Some(addr) => Some(spawn_admin(&proxy, addr).await?),
        None => None,
    };
    tracing::info!(listen = %settings.listen, store = %settings.store, routes = settings.routes.len(), "proxy listening");
    // One drain budget for both: open connections, then operations whose clients have gone.
    let requested = Arc::new(OnceLock::new());
    let noted = requested.clone();
    let shutdown = async move {
        shutdown.await;
        let _ = noted.set(Instant::now());
    };
    server::run(
        listener,
        proxy.router(),
        settings.limits,
        shutdown,
        settings.drain_timeout,
    )
    .await;
    let spent = requested.get().map_or(Duration::ZERO, Instant::elapsed);
    let left = proxy
        .finish_executions(settings.drain_timeout.saturating_sub(spent))
        .await;
    if left > 0 {
        tracing::warn!(left, "drain timed out with operations still running; their keys free when their leases run out");
    }
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
