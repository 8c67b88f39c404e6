//! What the admin status page shows (SPEC section 12): the process, the store, the running
//! config, and each route's recent activity.
//!
//! Requests record into their route's [`activity`](activity::RouteActivity) through the one
//! call every request already makes (`telemetry::RouteMetrics::request_finished`); the page's
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
use sha2::{Digest, Sha256};

use crate::config::Settings;
pub use crate::model::InboxQueues;
use crate::model::{now_millis, RouteName};
use crate::store::{StoreError, StoreSpec};
use activity::RouteActivity;

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

/// The SHA-256 (hex) of the config as `--check` prints it: two configs with the same effect
/// have the same digest, whatever their layout or comments. `POST /reload` answers the same.
pub fn config_digest(settings: &Settings) -> String {
    hex::encode(Sha256::digest(settings.to_toml().as_bytes()))
}

impl Status {
    pub(crate) fn new(settings: &Settings) -> Self {
        Self {
            started: Instant::now(),
            started_ms: now_millis(),
            store_kind: store_kind(&settings.store),
            running: Mutex::new(Running {
                digest: config_digest(settings),
                routes: routes_of(settings),
                last_reload: None,
            }),
            inboxes: Mutex::default(),
        }
    }

    /// A reload applied `settings`: the page shows their digest and routes from now on.
    pub fn reload_applied(&self, settings: &Settings) {
        let mut running = self.running();
        running.digest = config_digest(settings);
        running.routes = routes_of(settings);
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

    /// The digest of the config that is running ([`config_digest`]).
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
}

fn routes_of(settings: &Settings) -> Vec<(RouteName, Arc<RouteActivity>)> {
    let names = settings.routes.iter().map(|r| &r.policy.route);
    names.map(|n| (n.clone(), RouteActivity::of(n))).collect()
}

/// The store's kind only: its address may carry a password.
fn store_kind(spec: &StoreSpec) -> &'static str {
    spec.kind()
}

#[cfg(test)]
mod tests;
