//! How an attempt reaches its receiver: any HTTP client, behind one small trait. The proxy
//! binary sends through its own upstream connection pool (with `upstream_ca` and client
//! certificates); an application that runs a relay in its own process gives it its own client.

use async_trait::async_trait;
use bytes::Bytes;
use http::{Request, Response};
use idempotency_core::BoxError;

/// Sends one request and answers the receiver's status and headers.
///
/// The request's URI is absolute (the destination URL); its headers are complete (the relay's
/// own among them). An implementation reads the answer's body (or drops it) before it returns,
/// so that its connection can be used again; the relay bounds the whole call by
/// `deliver_timeout`. A request that could not be sent, or a connection that broke, is an
/// `Err`: the attempt failed, and the row is tried again.
#[async_trait]
pub trait Transport: Send + Sync + std::fmt::Debug + 'static {
    /// Sends `request`.
    async fn send(&self, request: Request<Bytes>) -> Result<Response<()>, BoxError>;
}
