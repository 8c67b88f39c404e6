//! The upstream's response body, which carries the connection it arrives on.
//!
//! Whoever reads the body drives the connection: reading it is what moves the bytes from the
//! socket into the body. When the body has ended, the connection goes back to its pool (if it is
//! idle and open); a body dropped before its end closes it, since the rest of that answer would
//! still be on the wire.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use super::pool::{Pool, PooledConnection};

/// A connection on loan to one exchange, and the pool it returns to.
pub(super) struct Lease {
    pool: Arc<Pool>,
    connection: PooledConnection,
}

impl Lease {
    pub(super) fn new(pool: Arc<Pool>, connection: PooledConnection) -> Self {
        Self { pool, connection }
    }
}

/// A response body from the upstream. Implements [`http_body::Body`].
pub(crate) struct UpstreamBody {
    incoming: Incoming,
    /// `None` once the connection has ended or gone back to the pool.
    lease: Option<Lease>,
}

impl UpstreamBody {
    pub(super) fn new(incoming: Incoming, lease: Option<Lease>) -> Self {
        let mut body = Self { incoming, lease };
        // An answer without a body (`204`, `Content-Length: 0`) is over already.
        if body.incoming.is_end_stream() {
            body.release();
        }
        body
    }

    fn release(&mut self) {
        if let Some(lease) = self.lease.take() {
            lease.pool.checkin(lease.connection);
        }
    }

    /// Lets the connection read (and finish writing the request); forgets it once it has ended,
    /// which leaves what it read in `incoming`.
    fn drive(&mut self, cx: &mut Context<'_>) {
        let ended = self
            .lease
            .as_mut()
            .is_some_and(|lease| lease.connection.poll_connection(cx).is_ready());
        if ended {
            self.lease = None;
        }
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        // What was read already goes out first; the socket is read only when that runs dry.
        let mut frame = Pin::new(&mut this.incoming).poll_frame(cx);
        if frame.is_pending() && this.lease.is_some() {
            this.drive(cx);
            frame = Pin::new(&mut this.incoming).poll_frame(cx);
        }
        match &frame {
            Poll::Ready(None) => this.release(),
            // With a known length, the reader may stop at the last byte without asking again.
            Poll::Ready(Some(Ok(_))) if this.incoming.is_end_stream() => this.release(),
            Poll::Ready(Some(Err(_))) => this.lease = None,
            _ => {}
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.incoming.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.incoming.size_hint()
    }
}

impl std::fmt::Debug for UpstreamBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamBody")
            .field("incoming", &self.incoming)
            .field("connection", &self.lease.is_some())
            .finish()
    }
}
