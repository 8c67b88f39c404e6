//! What the server serves right now, replaced whole by a reload.
//!
//! Each request is served by the [`App`] in force when it arrives (its routes, policies and
//! problem base), so a reload applies to the very next request on every open connection, and a
//! request already under way finishes with the route it started with. Per request rather than
//! per connection: a client that keeps one connection open for hours must still get the new
//! policy. The load is an atomic read, far below what routing costs.
//! What belongs to the connection itself (its header limits) is taken once, when it is accepted.

use std::sync::Arc;

use arc_swap::{ArcSwap, Guard};
use tokio::sync::futures::Notified;
use tokio::sync::Notify;

use crate::config::Limits;
use crate::net::router::Router;
use idempotency_core::ProblemLayer;

/// What the server serves: the routes, how problems are rendered, what a client may cost.
#[derive(Debug, Clone)]
pub(crate) struct App {
    pub(crate) router: Router,
    pub(crate) problems: ProblemLayer,
    pub(crate) limits: Limits,
}

/// The app in force, and a signal to whoever waits for it to change.
#[derive(Debug)]
pub(crate) struct LiveApp {
    app: ArcSwap<App>,
    replaced: Notify,
}

impl LiveApp {
    pub(crate) fn new(app: App) -> Arc<Self> {
        Arc::new(Self {
            app: ArcSwap::from_pointee(app),
            replaced: Notify::new(),
        })
    }

    /// The app in force now.
    pub(crate) fn current(&self) -> Arc<App> {
        self.app.load_full()
    }

    /// The app in force now, to use before the next `.await`: cheaper than
    /// [`current`](Self::current) on the request path, as it takes no reference count.
    pub(super) fn load(&self) -> Guard<Arc<App>> {
        self.app.load()
    }

    /// Serves `app` to every request that arrives from now on.
    pub(crate) fn replace(&self, app: App) {
        self.app.store(Arc::new(app));
        self.replaced.notify_waiters();
    }

    /// Resolves at the next [`replace`](Self::replace) after it is enabled or first polled.
    pub(super) fn replaced(&self) -> Notified<'_> {
        self.replaced.notified()
    }
}
