//! What an inbox route's layer shares with the route's delivery worker.

use std::sync::Arc;

use tokio::sync::Notify;

/// The name of the counter of acknowledged inbox requests, by route.
pub(crate) const ACCEPTED_TOTAL: &str = "idempotency_inbox_accepted_total";

/// What an inbox route's layer shares with its delivery worker.
#[derive(Debug, Clone)]
pub struct InboxHook {
    /// Woken when a request is queued here, so the worker need not wait for its next poll.
    pub(super) wake: Arc<Notify>,
    pub(super) accepted: metrics::Counter,
}

impl InboxHook {
    /// A hook waking `wake` on every accept; counts under the route `route`.
    pub fn new(route: &crate::model::RouteName, wake: Arc<Notify>) -> Self {
        let accepted = metrics::counter!(ACCEPTED_TOTAL, "route" => route.as_str().to_owned());
        Self { wake, accepted }
    }
}
