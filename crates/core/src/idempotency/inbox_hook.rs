//! What an inbox route's layer shares with the route's delivery worker, which lives in the
//! proxy: the layer only stores and acknowledges, the worker delivers.

use std::sync::Arc;

use http::request::Parts;
use http::HeaderMap;
use tokio::sync::Notify;

use crate::model::RouteName;

/// The name of the counter of acknowledged inbox requests, by route.
pub(crate) const ACCEPTED_TOTAL: &str = "idempotency_inbox_accepted_total";

/// The headers a queued request is delivered with, from the request as it arrived: the
/// proxy's forwarding rules (hop-by-hop headers out, `X-Forwarded-For` in).
pub type StoredHeaders = fn(&Parts) -> HeaderMap;

/// What an inbox route's layer shares with its delivery worker.
#[derive(Debug, Clone)]
pub struct InboxHook {
    /// Woken when a request is queued here, so the worker need not wait for its next poll.
    pub(super) wake: Arc<Notify>,
    pub(super) accepted: metrics::Counter,
    pub(super) stored_headers: StoredHeaders,
}

impl InboxHook {
    /// A hook waking `wake` on every accept, counting under `route`, and storing each request
    /// with the headers `stored_headers` picks.
    pub fn new(route: &RouteName, wake: Arc<Notify>, stored_headers: StoredHeaders) -> Self {
        let accepted = metrics::counter!(ACCEPTED_TOTAL, "route" => route.as_str().to_owned());
        Self {
            wake,
            accepted,
            stored_headers,
        }
    }
}
