//! What the admin status page shows (docs/reference.md#status-page): the process, the store, the running
//! config, each route's recent activity, each outbox's table and each consumer's counts.
//!
//! Requests record into their route's [`activity`](activity::RouteActivity) through the one
//! call every request already makes (the route's `telemetry::RouteTelemetry`); the page's
//! `/status` call reads it all back into a [`report`](report::Report). Nothing kept here holds
//! a raw key, a body, a header value, a secret or the store's address (which may hold a
//! password): keys appear as their log ids, the store as its kind.

pub(crate) mod activity;
mod decisions;
mod latency;
mod rates;
pub(crate) mod report;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use async_trait::async_trait;

use crate::store::StoreError;
use activity::RouteActivity;
use idempotency_consumer::Stats as ConsumerStats;
pub use idempotency_core::backend::InboxQueues;
use idempotency_core::backend::{now_millis, RouteName};
use idempotency_outbox::{OutboxCounts, OutboxName};

/// The running proxy as its status page describes it. A [`Proxy`](crate::Proxy) has one
/// ([`Proxy::status`](crate::Proxy::status)); whatever applies a new config tells it here, so
/// the page shows the config that is running and how the last reload went.
#[derive(Debug)]
pub struct Status {
    started: Instant,
    started_ms: u64,
    store_kind: &'static str,
    running: Mutex<Running>,
    inboxes: Mutex<HashMap<RouteName, Arc<dyn InboxStats>>>,
    outboxes: Mutex<Vec<(OutboxName, Arc<dyn OutboxStats>)>>,
    consumers: Mutex<Vec<Arc<ConsumerStats>>>,
}

#[derive(Debug, Clone)]
struct Running {
    digest: String,
    routes: Vec<(RouteName, Arc<RouteActivity>)>,
    last_reload: Option<Reload>,
}

/// How the last reload went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reload {
    pub(crate) at_ms: u64,
    pub(crate) applied: bool,
}

/// Reads an inbox route's queues for the status page. A route shows an inbox section exactly
/// when one of these is registered for it ([`Status::set_inbox`]).
#[async_trait]
pub trait InboxStats: Send + Sync + std::fmt::Debug + 'static {
    /// The queues now; an error shows as "unavailable" on the page.
    async fn queues(&self) -> Result<InboxQueues, StoreError>;
}

/// Reads an outbox's table for the status page ([`Status::set_outboxes`]).
#[async_trait]
pub(crate) trait OutboxStats: Send + Sync + std::fmt::Debug + 'static {
    /// The counts now; an error shows as "unavailable" on the page.
    async fn counts(&self) -> Result<OutboxCounts, StoreError>;
}

/// What the page says of a config: the proxy, which reads configs, describes each one it runs
/// in these terms, so the page never reads a config itself.
#[derive(Debug, Clone)]
pub struct ConfigSummary {
    /// The config's digest, as `POST /reload` answers it.
    pub digest: String,
    /// Its routes, in order.
    pub routes: Vec<RouteName>,
    /// The store's kind only: its address may carry a password.
    pub store_kind: &'static str,
}

impl Status {
    pub(crate) fn new(config: ConfigSummary) -> Self {
        Self {
            started: Instant::now(),
            started_ms: now_millis(),
            store_kind: config.store_kind,
            running: Mutex::new(Running {
                routes: activities(&config.routes),
                digest: config.digest,
                last_reload: None,
            }),
            inboxes: Mutex::default(),
            outboxes: Mutex::default(),
            consumers: Mutex::default(),
        }
    }

    /// A reload applied a new config: the page shows its digest and routes from now on.
    pub fn reload_applied(&self, config: ConfigSummary) {
        let mut running = self.running();
        running.routes = activities(&config.routes);
        running.digest = config.digest;
        running.last_reload = Some(Reload {
            at_ms: now_millis(),
            applied: true,
        });
    }

    /// A reload was refused: the running config stays, and the page says the last one failed.
    pub fn reload_refused(&self) {
        self.running().last_reload = Some(Reload {
            at_ms: now_millis(),
            applied: false,
        });
    }

    /// Makes `route` an inbox on the page, its queues read from `stats`.
    pub fn set_inbox(&self, route: &RouteName, stats: Arc<dyn InboxStats>) {
        let mut inboxes = self.inboxes.lock().unwrap_or_else(PoisonError::into_inner);
        inboxes.insert(route.clone(), stats);
    }

    /// No route is an inbox on the page until [`set_inbox`](Self::set_inbox) says so again
    /// (a reload may have turned one back into a proxy).
    pub fn clear_inboxes(&self) {
        self.inboxes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// The outboxes the page shows, in the config's order, each read from its `stats`. They
    /// are the process's, not a config's: a reload may not change them.
    pub(crate) fn set_outboxes(&self, outboxes: Vec<(OutboxName, Arc<dyn OutboxStats>)>) {
        *self.outboxes.lock().unwrap_or_else(PoisonError::into_inner) = outboxes;
    }

    /// The broker consumers the page shows, in the config's order: the process's, as the
    /// outboxes are.
    pub(crate) fn set_consumers(&self, consumers: Vec<Arc<ConsumerStats>>) {
        *self
            .consumers
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = consumers;
    }

    fn consumers(&self) -> Vec<Arc<ConsumerStats>> {
        let consumers = self
            .consumers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        consumers.clone()
    }

    /// The digest of the config that is running.
    pub fn running_digest(&self) -> String {
        self.running().digest.clone()
    }

    fn running(&self) -> std::sync::MutexGuard<'_, Running> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn inbox(&self, route: &RouteName) -> Option<Arc<dyn InboxStats>> {
        let inboxes = self.inboxes.lock().unwrap_or_else(PoisonError::into_inner);
        inboxes.get(route).cloned()
    }

    fn outboxes(&self) -> Vec<(OutboxName, Arc<dyn OutboxStats>)> {
        let outboxes = self.outboxes.lock().unwrap_or_else(PoisonError::into_inner);
        outboxes.clone()
    }
}

fn activities(routes: &[RouteName]) -> Vec<(RouteName, Arc<RouteActivity>)> {
    routes
        .iter()
        .map(|n| (n.clone(), RouteActivity::of(n)))
        .collect()
}

#[cfg(test)]
mod tests;
