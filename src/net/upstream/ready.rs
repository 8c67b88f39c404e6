//! A request made ready to send, on a connection already taken from the pool or opened, for a
//! sender that decides the moment it goes: an inbox attempt waits for its turn in the route's
//! `deliver_rate` with its connection open, so that the time a new connection takes is spent
//! before its turn, not between its turn and the upstream, where it would bunch paced requests
//! up at the upstream.

use axum::body::Body;
use http::{Request, Response};
use tower::Service;

use super::exchange;
use super::pool::PooledConnection;
use super::{Upstream, UpstreamBody};
use idempotency_core::proxy::strip_hop_by_hop;
use idempotency_core::{BoxError, RequestNotSent};

/// A request with its connection, ready to be sent.
pub(crate) struct Ready {
    upstream: Upstream,
    request: Request<Body>,
    /// `None` for a gRPC route, whose calls share its one HTTP/2 connection.
    connection: Option<PooledConnection>,
}

impl std::fmt::Debug for Ready {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ready")
            .field("target", self.request.uri())
            .field("connection", &self.connection.is_some())
            .finish()
    }
}

impl Upstream {
    /// `request`, as it is to be forwarded, with a connection for it: the pool's newest open
    /// one, or a new one. Opening one may fail: the request was not sent.
    pub(crate) async fn ready(&self, mut request: Request<Body>) -> Result<Ready, BoxError> {
        let upstream = self.clone();
        if self.target.multiplexed.is_some() {
            return Ok(Ready {
                upstream,
                request,
                connection: None,
            });
        }
        self.prepare(&mut request)
            .map_err(|e| Box::new(RequestNotSent(e.into())) as BoxError)?;
        let Some(address) = &self.target.address else {
            return Err(Box::new(RequestNotSent(
                "the upstream URL names no host".into(),
            )));
        };
        let connection = match self.target.pool.checkout() {
            Some(idle) => idle,
            None => exchange::open(address).await?,
        };
        Ok(Ready {
            upstream,
            request,
            connection: Some(connection),
        })
    }
}

impl Ready {
    /// Sends the request and returns the answer, as [`Upstream`]'s `call` does. Should the
    /// upstream have closed the connection meanwhile, before the request was written, it goes
    /// on a new one.
    pub(crate) async fn send(self) -> Result<Response<UpstreamBody>, BoxError> {
        let Ready {
            mut upstream,
            request,
            connection,
        } = self;
        let target = upstream.target.clone();
        let (Some(connection), Some(address)) = (connection, &target.address) else {
            return upstream.call(request).await;
        };
        let mut response = exchange::send(&target.pool, address, Some(connection), request).await?;
        strip_hop_by_hop(response.headers_mut());
        Ok(response)
    }
}
