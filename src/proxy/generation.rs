//! One generation of the proxy: what is built from one config, and replaced whole by a reload.
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
//!
//! What must outlive a generation is [`Kept`]: the store itself, the replay cache, the
//! tracker of first requests and delivery attempts still running upstream (a drain waits for
//! those of every generation), the inbox routes' delivery workers, which each generation
//! restarts with its own routes, and the gauges `/metrics` reads when scraped, which each
//! generation points at its own inbox routes. Metrics and the status page's counts are process-wide already. Each route's
//! upstream connection pool belongs to its generation: a reload may change the route's
//! upstream, its idle time-out or its certificates, and the old pool's idle connections close
//! once the last request of the old generation is done with them.

use idempotency_core::policy::Protocol;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::task::TaskTracker;
use tower::Layer;

use crate::config::{RouteSettings, Settings};
use crate::inbox::{Inboxes, RouteInbox};
use crate::net::router::{Route, Router};
use crate::net::server::{App, Slots};
use crate::net::upstream::{stored_headers, PoolSettings, Upstream};
use crate::operator::admin::AdminView;
use crate::operator::scraped::ScrapedGauges;
use crate::operator::telemetry::RouteTelemetry;
use crate::store::{CachingStore, ReplayCache, SealedStore, Store, StoreSpec};
use idempotency_core::policy::RouteMode;
use idempotency_core::ProblemLayer;
use idempotency_core::{proxy::InboxHook, IdempotencyLayer};

/// The bytes of completed records a proxy keeps in memory for replays.
const REPLAY_CACHE_BUDGET: usize = 8 * 1024 * 1024;

/// What every generation shares, built once.
pub(super) struct Kept {
    /// The store as opened: not sealed, as the keys may change with a reload.
    pub(super) store: Arc<dyn Store>,
    cache: Arc<ReplayCache>,
    pub(super) executions: TaskTracker,
    /// The connections being served, by every worker: `max_connections` is for the process.
    pub(super) slots: Arc<Slots>,
    /// The delivery workers of inbox routes; their attempts run in `executions`.
    pub(super) inboxes: Inboxes,
    /// What `/metrics` reads right before it renders: each generation's inbox queues.
    pub(super) scraped: ScrapedGauges,
}

impl Kept {
    pub(super) fn new(store: Arc<dyn Store>) -> Self {
        let executions = TaskTracker::new();
        Self {
            store,
            cache: Arc::new(ReplayCache::new(REPLAY_CACHE_BUDGET)),
            inboxes: Inboxes::new(executions.clone()),
            executions,
            slots: Arc::default(),
            scraped: ScrapedGauges::default(),
        }
    }
}

/// What one config makes: the app the server serves, and what the admin endpoints read.
pub(super) struct Generation {
    pub(super) app: App,
    pub(super) admin: AdminView,
    /// The inbox routes, for their delivery workers.
    pub(super) inboxes: Vec<RouteInbox>,
}

/// Builds the routes `settings` describe over what is kept, sealing records when the settings
/// name an encryption key.
pub(super) fn build(settings: &Settings, kept: &Kept) -> Generation {
    let store = match &settings.encryption {
        Some(keys) => Arc::new(SealedStore::new(kept.store.clone(), keys.clone())),
        None => kept.store.clone(),
    };
    let mut inboxes = Vec::new();
    let routes = settings.routes.iter().map(|route| {
        let pool = PoolSettings {
            idle_timeout: route.upstream_idle_timeout,
            ..PoolSettings::default()
        };
        let tls = route.upstream_tls.client_config_for_https().cloned();
        let upstream = match route.policy.protocol {
            Protocol::Http => Upstream::new(route.upstream.clone(), pool, tls),
            Protocol::Grpc => Upstream::grpc(route.upstream.clone(), tls),
        };
        let cached = cached(settings, &store, &kept.cache, route);
        let layer = IdempotencyLayer::builder(cached, route.policy.clone())
            .with_task_tracker(kept.executions.clone())
            .with_observer(RouteTelemetry::new(&route.policy.route))
            .with_problem_base(settings.problem_base.clone());
        let layer = if route.policy.mode == RouteMode::Inbox {
            inboxes.push(RouteInbox {
                route: route.policy.route.clone(),
                store: store.clone(),
                upstream: upstream.clone(),
                policy: route.delivery.clone(),
                lease: route.policy.lease,
            });
            let wake = kept.inboxes.wake(&route.policy.route);
            layer.with_inbox(InboxHook::new(&route.policy.route, wake, stored_headers))
        } else {
            layer
        };
        // The config loader validated every policy, and `servable` refused an inbox route on a
        // store without queues before any generation is built, so `build` cannot panic.
        let layer = layer.build();
        Route {
            path_prefix: route.path_prefix.clone(),
            host: route.host.clone(),
            service: layer.layer(upstream),
        }
    });
    let routes: Vec<_> = routes.collect();
    let app = App {
        router: Router::new(routes),
        problems: ProblemLayer::new(settings.problem_base.clone()),
        limits: settings.limits,
    };
    Generation {
        app,
        admin: admin_view(settings, store, &kept.cache),
        inboxes,
    }
}

fn admin_view(settings: &Settings, store: Arc<dyn Store>, cache: &Arc<ReplayCache>) -> AdminView {
    let policies = settings.routes.iter().map(|route| {
        let name = route.policy.route.as_str().to_owned();
        (name, Arc::new(route.policy.clone()))
    });
    AdminView {
        // The replay cache in front, so an operator's `DELETE` drops the local copy too.
        store: Arc::new(CachingStore::new(
            store,
            cache.clone(),
            Duration::ZERO,
            Duration::ZERO,
        )),
        policies: policies.collect::<HashMap<_, _>>(),
        token: settings.admin_token.clone(),
        problems: settings.problem_base.clone(),
    }
}

/// A route's view of the store: replays from the shared cache for the route's
/// `replay_cache_ttl`. The memory store is its own cache: a copy in front of it would only cost
/// a second copy of each record and a second lookup.
fn cached(
    settings: &Settings,
    store: &Arc<dyn Store>,
    cache: &Arc<ReplayCache>,
    route: &RouteSettings,
) -> Arc<dyn Store> {
    if settings.store == StoreSpec::Memory && settings.encryption.is_none() {
        return store.clone();
    }
    let (fresh_for, record_ttl) = (route.replay_cache_ttl, route.policy.ttl);
    Arc::new(CachingStore::new(
        store.clone(),
        cache.clone(),
        fresh_for,
        record_ttl,
    ))
}
