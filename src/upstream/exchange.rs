//! Sending one request and receiving its answer's head, driven by the task that sends it.
//!
//! The request is queued on a connection's sender, and this task polls the connection itself
//! until the head arrives: that poll writes the request head and body and reads the answer, with
//! no hand-over to another task and back. The connection then rides along in the body.
//!
//! What may be retried is decided by what hyper reports: a request it hands back was never taken
//! off the connection's queue, so not a byte of it was written, and it goes out once more on a
//! fresh connection. A request that was taken is never sent again, whatever happened after.

use std::future::{poll_fn, Future};
use std::pin::pin;
use std::sync::Arc;

use axum::body::Body;
use http::{Request, Response};

use super::body::{Lease, UpstreamBody};
use super::pool::{Pool, PooledConnection};
use super::transport::Address;
use crate::error::BoxError;
use crate::error::RequestNotSent;
use crate::tls;

/// Why an exchange gave no answer.
pub(super) enum Failure {
    /// The connection closed before the request was taken from its queue.
    NotWritten(Box<Request<Body>>, hyper::Error),
    /// Anything after: the upstream may have received it.
    Failed(hyper::Error),
}

impl Failure {
    fn into_error(self) -> BoxError {
        match self {
            Failure::NotWritten(_, e) => Box::new(RequestNotSent(e.into())),
            // The upstream refused the TLS handshake, heard of only now (see `refused_handshake`).
            Failure::Failed(e) if tls::refused_handshake(&e) => Box::new(RequestNotSent(e.into())),
            Failure::Failed(e) => e.into(),
        }
    }
}

/// Sends `request` on an idle connection from `pool`, or on a new one, and returns the answer.
/// A failure that left the request unsent is a [`RequestNotSent`].
pub(super) async fn send(
    pool: &Arc<Pool>,
    address: &Address,
    request: Request<Body>,
) -> Result<Response<UpstreamBody>, BoxError> {
    match pool.checkout() {
        Some(pooled) => send_on_pooled(pool, address, pooled, request).await,
        None => exchange(pool, open(address).await?, request)
            .await
            .map_err(Failure::into_error),
    }
}

/// Sends `request` on a connection that was idle in the pool; if the upstream closed it before
/// the request was taken off its queue, sends it once more on a new connection.
pub(super) async fn send_on_pooled(
    pool: &Arc<Pool>,
    address: &Address,
    pooled: PooledConnection,
    request: Request<Body>,
) -> Result<Response<UpstreamBody>, BoxError> {
    match exchange(pool, pooled, request).await {
        Ok(response) => Ok(response),
        Err(Failure::NotWritten(request, error)) => {
            tracing::debug!(%error, "pooled upstream connection closed before the request was written; sending it on a new one");
            let fresh = open(address).await?;
            exchange(pool, fresh, *request)
                .await
                .map_err(Failure::into_error)
        }
        Err(failure) => Err(failure.into_error()),
    }
}

async fn open(address: &Address) -> Result<PooledConnection, BoxError> {
    PooledConnection::open(address)
        .await
        .map_err(|e| Box::new(RequestNotSent(e)) as BoxError)
}

/// Queues the request on `connection` and drives it until the answer's head is in.
pub(super) async fn exchange(
    pool: &Arc<Pool>,
    mut connection: PooledConnection,
    request: Request<Body>,
) -> Result<Response<UpstreamBody>, Failure> {
    let mut answer = pin!(connection.sender().try_send_request(request));
    let mut connection = Some(connection);
    let answered = poll_fn(|cx| {
        // An ended connection has answered its request already, with a response or an error.
        let ended = connection
            .as_mut()
            .is_some_and(|open| open.poll_connection(cx).is_ready());
        if ended {
            connection = None;
        }
        answer.as_mut().poll(cx)
    })
    .await;
    match answered {
        Ok(response) => {
            let lease = connection.map(|open| Lease::new(pool.clone(), open));
            Ok(response.map(|incoming| UpstreamBody::new(incoming, lease)))
        }
        Err(mut error) => match error.take_message() {
            Some(request) => Err(Failure::NotWritten(Box::new(request), error.into_error())),
            None => Err(Failure::Failed(error.into_error())),
        },
    }
}
