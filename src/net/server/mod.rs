//! Accepting connections: HTTP/1.1 and h2c on one listener (or, with a certificate, HTTPS
//! only, HTTP/1.1 or h2 by ALPN) within the configured [`Limits`], ambiguously framed requests
//! refused, and a graceful drain on shutdown.
//!
//! Each connection's requests go through, outermost first:
//! - [`ProblemLayer`](crate::ProblemLayer), so every answer the proxy makes itself, wherever below it is made, is
//!   rendered once, with the configured problem base;
//! - the connection's own guard (`Peer::serve`): it tags each request with the client's
//!   address (and whether it came over TLS) and refuses an ambiguously framed one before
//!   anything routes or reads it;
//! - the [`Router`], which hands the request to its route's stack.
//!
//! The app those come from is the one in force when the request arrives ([`LiveApp`]): a reload
//! reaches open connections at their next request.

mod closing;
mod head_timer;
mod live;
mod opening;
mod slots;
mod streams;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use http::{header, HeaderValue, Response, Version};
use hyper::body::Incoming;
use hyper::Request;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

use crate::config::Limits;
use crate::net::framing::{self, FramingGuard, Verdicts};
use crate::net::router::{self, Router, RouterFuture};
use crate::net::upstream::{ClientAddr, ClientTls};
use crate::tls::TlsListener;
use closing::{Closing, DrainSignal, IdleLimit};
use head_timer::HeadTimer;
use idempotency_core::Problem;
pub(crate) use live::{App, LiveApp};
use opening::{opening, Protocol};
use slots::Slot;
pub(crate) use slots::Slots;
use streams::{CountedBody, OpenStreams};

/// The target of this module's log lines, kept fixed: `RUST_LOG` directives name it
/// (docs/reference.md#logs), and a move of the file must not change what they select.
const LOG_TARGET: &str = "idempotency_proxy::server";

/// Serves the app in force on `listener` (HTTPS only when `tls` is given) until `shutdown`
/// resolves, then stops accepting and lets the open connections finish, for at most
/// `drain_timeout` (asked for then, as a reload may have changed it).
pub(crate) async fn run(
    listener: TcpListener,
    live: Arc<LiveApp>,
    tls: Option<Arc<TlsListener>>,
    slots: Arc<Slots>,
    shutdown: impl Future<Output = ()>,
    drain_timeout: impl FnOnce() -> Duration,
) {
    let limits = live.current().limits;
    let mut serving = Serving {
        builder: (limits, builder(&limits)),
        live,
        tls,
        draining: DrainSignal::new(),
        connections: TaskTracker::new(),
    };
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = slots.admit(&listener, &serving.live) => accepted,
            () = &mut shutdown => break,
        };
        match accepted {
            Ok((stream, peer, slot)) => serving.spawn(stream, peer, slot),
            // Running out of file descriptors must not spin the loop.
            Err(e) => {
                tracing::warn!(target: LOG_TARGET, error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    drop(listener);
    serving.drain(drain_timeout()).await;
}

/// What every accepted connection is served with, and the connections being served.
struct Serving {
    /// The connection builder for the limits in force, rebuilt when a reload changes them.
    builder: (Limits, auto::Builder<TokioExecutor>),
    live: Arc<LiveApp>,
    tls: Option<Arc<TlsListener>>,
    draining: DrainSignal,
    connections: TaskTracker,
}

impl Serving {
    fn spawn(&mut self, stream: TcpStream, peer: SocketAddr, slot: Slot) {
        let limits = self.live.current().limits;
        if self.builder.0 != limits {
            self.builder = (limits, builder(&limits));
        }
        let connection = Connection {
            peer,
            slot,
            limits,
            live: self.live.clone(),
        };
        let builder = self.builder.1.clone();
        let served = serve(
            builder,
            self.draining.clone(),
            stream,
            connection,
            self.tls.clone(),
        );
        self.connections.spawn(served);
    }

    /// Asks every connection to close once its requests in progress are answered, and waits
    /// for them, at most `drain_timeout`. A client still sending its first bytes is waited for
    /// too (at most the header read time-out): its request may be on its way.
    async fn drain(self, drain_timeout: Duration) {
        tracing::info!(target: LOG_TARGET, "draining open connections");
        self.draining.start();
        self.connections.close();
        if tokio::time::timeout(drain_timeout, self.connections.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                target: LOG_TARGET,
                ?drain_timeout,
                "drain timed out; closing the remaining connections"
            );
        }
    }
}

fn builder(limits: &Limits) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        // A sleep per request head, nearly all dropped long before they fire: see `head_timer`.
        .timer(HeadTimer)
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(
            limits
                .max_header_bytes
                .max(Limits::MIN_HEADER_BYTES)
                .as_usize(),
        );
    // A peer that leaves a PING unanswered that long is gone: without this a dead peer with a
    // request in progress (an answer waiting for a flow-control window that never opens) would
    // hold its connection slot for ever.
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(limits.header_read_timeout)
        .keep_alive_timeout(limits.header_read_timeout)
        .max_header_list_size(u32::try_from(limits.max_header_bytes.as_u64()).unwrap_or(u32::MAX));
    builder
}

/// An accepted client, the connection slot it holds until it is gone, and the limits in force
/// when it was accepted.
struct Connection {
    peer: SocketAddr,
    slot: Slot,
    limits: Limits,
    live: Arc<LiveApp>,
}

/// Serves one accepted client until it is gone (or dropped), then frees its slot. The TLS
/// handshake runs here, in the connection's own task, never in the accept loop.
async fn serve(
    builder: auto::Builder<TokioExecutor>,
    draining: DrainSignal,
    stream: TcpStream,
    connection: Connection,
    tls: Option<Arc<TlsListener>>,
) {
    let accepted = Instant::now();
    let _ = stream.set_nodelay(true);
    let timeout = connection.limits.header_read_timeout;
    if let Some(tls) = tls {
        let Some(handshake) = tls.accept(stream, timeout).await else {
            return;
        };
        // The protocol is the one agreed by ALPN; a client that offered none speaks HTTP/1.1.
        let protocol = if handshake.http2 {
            Protocol::Http2
        } else {
            Protocol::Http1
        };
        let opened = Opened::new(protocol, true, accepted);
        return drive(builder, draining, connection, handshake.stream, opened).await;
    }
    let Some(protocol) = opening(&stream, timeout).await else {
        let peer = connection.peer;
        tracing::debug!(target: LOG_TARGET, %peer, "no request within the header read time-out");
        return;
    };
    drive(
        builder,
        draining,
        connection,
        stream,
        Opened::new(protocol, false, accepted),
    )
    .await;
}

/// How a connection opened: the protocol its client speaks, over TLS or not, and when.
struct Opened {
    protocol: Protocol,
    tls: bool,
    accepted: Instant,
}

impl Opened {
    fn new(protocol: Protocol, tls: bool, accepted: Instant) -> Self {
        Self {
            protocol,
            tls,
            accepted,
        }
    }

    /// The builder serving this protocol only, as it is known already.
    fn only(&self, builder: auto::Builder<TokioExecutor>) -> auto::Builder<TokioExecutor> {
        match self.protocol {
            Protocol::Http1 => builder.http1_only(),
            Protocol::Http2 => builder.http2_only(),
        }
    }

    /// For HTTP/2, how long the connection may go without a request in progress.
    fn idle_limit(&self, streams: Option<&OpenStreams>, timeout: Duration) -> Option<IdleLimit> {
        streams.map(|streams| IdleLimit {
            streams: streams.watch(),
            timeout,
            since: self.accepted,
        })
    }
}

/// Serves the requests of a connection whose protocol is known, over `io` (the TCP stream, or
/// the TLS stream over it), until it ends or is closed.
async fn drive<IO>(
    builder: auto::Builder<TokioExecutor>,
    draining: DrainSignal,
    connection: Connection,
    io: IO,
    opened: Opened,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    // The slot is held until the connection is gone.
    let Connection {
        peer,
        slot: _slot,
        limits,
        live,
    } = connection;
    let verdicts = Verdicts::new();
    let streams = (opened.protocol == Protocol::Http2).then(OpenStreams::new);
    let idle = opened.idle_limit(streams.as_ref(), limits.header_read_timeout);
    let (addr, tls) = (peer, opened.tls);
    let service = connection_service(
        live,
        Peer {
            addr,
            client: ClientAddr::new(addr),
            verdicts: verdicts.clone(),
            tls,
        },
        streams,
    );
    // The framing guard reads the plain bytes, above TLS, where request heads are.
    let io = FramingGuard::new(io, limits.max_header_bytes.as_usize(), verdicts);
    let builder = opened.only(builder);
    let connection = pin!(builder.serve_connection(TokioIo::new(io), service));
    let closing = Closing { draining, idle };
    if let Some(Err(e)) =
        closing::drive(connection, auto::Connection::graceful_shutdown, closing).await
    {
        tracing::debug!(target: LOG_TARGET, error = %e, %peer, "connection ended with an error");
    }
}

/// What serves one connection's requests: the stack of the app in force when each arrives,
/// with HTTP/2 streams counted until their answers are sent, so an idle connection can be told
/// from a busy one.
fn connection_service(
    live: Arc<LiveApp>,
    peer: Peer,
    streams: Option<OpenStreams>,
) -> impl hyper::service::Service<
    Request<Incoming>,
    Response = Response<CountedBody<Body>>,
    Error = Infallible,
    Future: Send + 'static,
> + Send
       + 'static {
    hyper::service::service_fn(move |request: Request<Incoming>| {
        let stream = streams.as_ref().map(OpenStreams::open);
        // The app is borrowed, not cloned: every count a clone writes is one the other worker
        // threads write too, and moving its cache line between cores is the costly part.
        let app = live.load();
        let answer = app.problems.render(peer.serve(&app.router, request));
        async move {
            let response = answer.await?;
            Ok(response.map(|body| CountedBody::new(body, stream)))
        }
    })
}

/// Who is at the other end of a connection, and what its bytes showed: what its requests share.
#[derive(Clone)]
struct Peer {
    addr: SocketAddr,
    client: ClientAddr,
    verdicts: Arc<Verdicts>,
    tls: bool,
}

impl Peer {
    /// The connection's own guard, below the problem renderer: tags a request with the client's
    /// address, refuses one whose framing is ambiguous, and routes the rest.
    fn serve(&self, router: &Router, mut request: Request<Incoming>) -> RouterFuture {
        request.extensions_mut().insert(self.client.clone());
        if self.tls {
            request.extensions_mut().insert(ClientTls);
        }
        let refusal = self
            .verdicts
            .next_request()
            .or_else(|| framing::check_headers(request.headers()).err());
        match refusal {
            Some(reason) => RouterFuture::answered(refuse(reason, &request, self.addr)),
            None => router.route(request),
        }
    }
}

/// The answer to an ambiguously framed request; on HTTP/1 the connection is closed after it,
/// as nothing that follows on it can be trusted to start where the client meant.
fn refuse<B>(reason: &'static str, request: &Request<B>, peer: SocketAddr) -> Response<Body> {
    tracing::warn!(target: LOG_TARGET, %peer, reason, "refused an ambiguously framed request");
    let mut response = router::refusal(request, Problem::BadRequest(reason));
    if request.version() < Version::HTTP_2 {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// Resolves on Ctrl-C or SIGTERM: the signals that ask for a drain.
pub(crate) async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!(target: LOG_TARGET, "shutdown requested");
}
