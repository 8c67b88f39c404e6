//! What the layer tells whoever watches it about each request, beyond its metrics.
//!
//! The layer counts requests, store and upstream latency through the `metrics` facade, which
//! any recorder can collect. A log line per request and a live view of a route are the
//! embedding program's business: the proxy writes its access line and keeps its status page
//! from these calls. A route's observer is called on the request path, so it must be cheap.

use std::fmt;
use std::time::Duration;

use crate::error::{Cause, Problem};
use crate::grpc::GrpcCode;
use crate::outcome::Outcome;

/// One finished request, as the layer saw it.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct FinishedRequest<'a> {
    /// What the layer did with it.
    pub outcome: Outcome,
    /// The status it was answered with.
    pub status: u16,
    /// On a gRPC route, the call's `grpc-status`, where it is known (a stream passed on
    /// unread ends with a status the proxy does not see).
    pub grpc_status: Option<GrpcCode>,
    /// The scoped key's short digest (never the key itself), if it had a key.
    pub key_id: Option<&'a str>,
    /// How long it took, from arrival to the answer's head.
    pub elapsed: Duration,
    /// The problem the layer answered, if it answered one itself.
    pub problem: Option<&'a Problem>,
    /// Why it failed, for a log: never shown to the client.
    pub cause: Option<&'a Cause>,
}

/// Watches one route's requests. Every method has a default that does nothing.
pub trait RequestObserver: Send + Sync + fmt::Debug + 'static {
    /// A request was answered.
    fn request_finished(&self, _request: &FinishedRequest<'_>) {}

    /// The number of first requests running upstream moved by `by`.
    fn in_flight_moved(&self, _by: i64) {}

    /// A store operation on the request path (reserve, complete) took `took`.
    fn store_operation(&self, _took: Duration) {}
}

/// The observer of a layer that was given none: the metrics are all there is.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoObserver;

impl RequestObserver for NoObserver {}
