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
use crate::tls;
use idempotency_core::BoxError;
use idempotency_core::RequestNotSent;

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

/// Sends `request` on `idle`, a connection taken from `pool` (by the caller, so that this
/// future holds no call of its own), or on a new one, and returns the answer. If the upstream
/// closed the idle connection before the request was taken off its queue, the request goes once
/// more on a new connection. A failure that left the request unsent is a [`RequestNotSent`].
///
/// One function that awaits one exchange at a time: its future is copied once per request
/// (boxed by the caller), and the chain of async functions it replaced, each holding its
/// arguments beside its callee's future, made it more than twice the size of one exchange.
pub(super) async fn send(
    pool: &Arc<Pool>,
    address: &Address,
    idle: Option<PooledConnection>,
    request: Request<Body>,
) -> Result<Response<UpstreamBody>, BoxError> {
    let was_idle = idle.is_some();
    let connection = match idle {
        Some(connection) => connection,
        None => open(address).await?,
    };
    let first = exchange(pool, connection, request).await;
    match first {
        Err(Failure::NotWritten(request, error)) if was_idle => {
            tracing::debug!(%error, "pooled upstream connection closed before the request was written; sending it on a new one");
            let fresh = open(address).await?;
            exchange(pool, fresh, *request)
                .await
                .map_err(Failure::into_error)
        }
        answered => answered.map_err(Failure::into_error),
    }
}

/// Boxed: connecting (and a TLS handshake) takes a large future, and held inline it would
/// make every exchange's future that much larger, to be copied on each request although most
/// requests take a pooled connection.
pub(super) async fn open(address: &Address) -> Result<PooledConnection, BoxError> {
    Box::pin(PooledConnection::open(address))
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
