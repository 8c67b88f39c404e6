//! The delivery workers of every inbox route, across reloads.
//!
//! A generation names its inbox routes; [`Inboxes::start`] stops the workers of the previous
//! generation (they start no more attempts; those running finish) and starts one per inbox
//! route of the new one, so a reload that adds, removes or changes an inbox route is followed
//! at once. What outlives a generation is kept per route name: the wake-up the route's layer
//! pokes on every accept, the slots of `deliver_concurrency` (kept while the number stays
//! the same, so attempts of the old and new workers share them), and the `deliver_rate` pace
//! (kept whole, so the attempt after a reload is spaced from the last one sent before it).
//! Workers run on the runtime that built the proxy (the main one; clients are served by runtimes of their own), and their
//! attempts in the tracker a drain waits on.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::runtime::Handle;
use tokio::sync::{watch, Notify, Semaphore};
use tokio_util::task::TaskTracker;

use super::metrics::InboxMetrics;
use super::rate::DeliverRate;
use super::worker::{RouteInbox, Worker};
use idempotency_core::backend::RouteName;

/// Every inbox route's worker.
#[derive(Debug)]
pub(crate) struct Inboxes {
    runtime: Option<Handle>,
    attempts: TaskTracker,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    wakes: HashMap<RouteName, Arc<Notify>>,
    slots: HashMap<RouteName, (usize, Arc<Semaphore>)>,
    rates: HashMap<RouteName, Arc<DeliverRate>>,
    /// Set to stop the running workers.
    stop: Option<watch::Sender<bool>>,
    /// After a drain began: no worker starts again.
    stopped: bool,
}

impl Inboxes {
    /// Workers on the current runtime (if any), their attempts tracked by `attempts`.
    pub(crate) fn new(attempts: TaskTracker) -> Self {
        Self {
            runtime: Handle::try_current().ok(),
            attempts,
            state: Mutex::default(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The wake-up of `route`'s worker, the same across generations.
    pub(crate) fn wake(&self, route: &RouteName) -> Arc<Notify> {
        let mut state = self.state();
        state.wakes.entry(route.clone()).or_default().clone()
    }

    /// Stops the running workers and starts one for each of `routes`.
    pub(crate) fn start(&self, routes: Vec<RouteInbox>) {
        let mut state = self.state();
        if let Some(stop) = state.stop.take() {
            let _ = stop.send(true);
        }
        if state.stopped || routes.is_empty() {
            return;
        }
        let Some(runtime) = &self.runtime else {
            return tracing::error!(
                "inbox routes cannot deliver: the proxy was built outside a runtime"
            );
        };
        let (stop, stopped) = watch::channel(false);
        for inbox in routes {
            let worker = self.worker(&mut state, inbox);
            runtime.spawn(Arc::new(worker).run(stopped.clone()));
        }
        state.stop = Some(stop);
    }

    fn worker(&self, state: &mut State, inbox: RouteInbox) -> Worker {
        let route = inbox.route.clone();
        let concurrency = inbox.policy.deliver_concurrency;
        let slots = state
            .slots
            .entry(route.clone())
            .or_insert_with(|| (0, Arc::new(Semaphore::new(0))));
        if slots.0 != concurrency {
            *slots = (concurrency, Arc::new(Semaphore::new(concurrency)));
        }
        let permits = slots.1.clone();
        let rate = state.rates.entry(route.clone()).or_default().clone();
        rate.set_rate(inbox.policy.deliver_rate);
        Worker {
            wake: state.wakes.entry(route.clone()).or_default().clone(),
            permits,
            rate,
            attempts: self.attempts.clone(),
            metrics: InboxMetrics::new(&route),
            inbox,
        }
    }

    /// A drain began: workers start no more attempts, now or after a reload.
    pub(crate) fn stop(&self) {
        let mut state = self.state();
        state.stopped = true;
        if let Some(stop) = state.stop.take() {
            let _ = stop.send(true);
        }
    }
}
