//! Hooks for the `idempotency-proxy` crates (the proxy, its outbox relay, its stores), not for
//! services: what the proxy shares with the layer beyond a service's view of it. A service
//! using the layer needs none of this, and nothing here is promised to stay as it is.
//!
//! - An inbox route's [`InboxHook`], set with [`LayerBuilder::with_inbox`](crate::LayerBuilder::with_inbox).
//! - [`serve`]: a request through a shared [`IdempotencyService`] without cloning it; [`Inner`] and
//!   [`AnswerBody`], what it asks of the wrapped service.
//! - The metric names and per-route handles ([`RouteMetrics`]), for the proxy's catalogue.
//! - What an upstream failure reads as ([`UpstreamFailure`]), the headers never forwarded
//!   ([`strip_hop_by_hop`]), a gRPC call ([`grpc`]).
//! - Shared helpers of the proxy's crates: [`humane_duration`], [`ErrorChain`]. What the
//!   outbox relay shares with the layer (backoff, webhook signing, secrets) is in
//!   `idempotency-delivery`.

use bytes::Bytes;
use http::Request;
use http_body::Body as HttpBody;

pub use crate::error::ErrorChain;
pub use crate::error::UpstreamFailure;
pub use crate::headers::strip_hop_by_hop;
pub use crate::idempotency::metrics::{
    FAIL_OPEN_TOTAL, IN_FLIGHT, REQUESTS_TOTAL, STORE_SECONDS, STORE_UNAVAILABLE_TOTAL,
    UPSTREAM_SECONDS,
};
pub use crate::idempotency::{AnswerBody, InboxHook, Inner, RouteMetrics, StoredHeaders};
pub use crate::problem::Rendered;
pub use crate::units::humane_duration;
use crate::{BoxError, IdempotencyService};

/// Reading gRPC calls: what a route of `protocol = "grpc"` needs beyond [`GrpcCode`](crate::policy::GrpcCode).
pub mod grpc {
    pub use crate::grpc::{is_call, GrpcCall};
}

/// What `call` does, through a shared reference: a caller that holds the service in a shared
/// list (the proxy's router) need not clone it first. A clone and its drop write each shared
/// count the service holds, counts every worker thread writes, so each write moves a cache line
/// between cores.
pub fn serve<S, ReqBody, ResBody>(
    service: &IdempotencyService<S>,
    request: Request<ReqBody>,
) -> crate::ResponseFuture
where
    S: Inner<ResBody> + Clone,
    ReqBody: HttpBody<Data = Bytes, Error: Into<BoxError>> + Send + 'static,
    ResBody: AnswerBody,
{
    service.serve(request)
}
