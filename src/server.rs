//! Accepting connections: HTTP/1.1 and h2c on one listener within the configured [`Limits`],
//! ambiguously framed requests refused, and a graceful drain on shutdown.
//!
//! Each connection's requests go through, outermost first:
//! - [`ProblemLayer`], so every answer the proxy makes itself, wherever below it is made, is
//!   rendered once, with the configured problem base;
//! - the connection's own guard ([`PerConnection`]): it tags each request with the client's
//!   address and refuses an ambiguously framed one before anything routes or reads it;
//! - the [`Router`], which hands the request to its route's stack.

mod closing;
mod opening;
mod streams;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use http::{header, HeaderValue, Response, Version};
use hyper::body::Incoming;
use hyper::Request;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::{Layer, Service};

use crate::config::Limits;
use crate::error::ProxyError;
use crate::framing::{self, FramingGuard, Verdicts};
use crate::problem::{ProblemLayer, ProblemService};
use crate::router::{Router, RouterFuture};
use crate::upstream::ClientAddr;
use closing::{Closing, IdleLimit};
use opening::{opening, Protocol};
use streams::{CountedBody, OpenStreams};

/// What the server serves: the routes, how problems are rendered, what a client may cost.
#[derive(Debug, Clone)]
pub(crate) struct App {
    pub(crate) router: Router,
    pub(crate) problems: ProblemLayer,
    pub(crate) limits: Limits,
}

/// Serves `app` on `listener` until `shutdown` resolves, then stops accepting and lets the
/// open connections finish, for at most `drain_timeout`.
pub(crate) async fn run(
    listener: TcpListener,
    app: App,
    shutdown: impl Future<Output = ()>,
    drain_timeout: Duration,
) {
    let limits = app.limits;
    let serving = Serving {
        builder: builder(&limits),
        app,
        draining: CancellationToken::new(),
        connections: TaskTracker::new(),
    };
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    tokio::pin!(shutdown);
    loop {
        // Waiting for a slot before accepting leaves further clients in the listen backlog,
        // where they cost nothing, instead of accepting and dropping them.
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
            () = &mut shutdown => break,
        };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        match accepted {
            Ok((stream, peer)) => serving.spawn(Connection {
                stream,
                peer,
                slot,
                limits,
            }),
            // Running out of file descriptors must not spin the loop.
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    drop(listener);
    serving.drain(drain_timeout).await;
}

/// What every accepted connection is served with, and the connections being served.
struct Serving {
    builder: auto::Builder<TokioExecutor>,
    app: App,
    draining: CancellationToken,
    connections: TaskTracker,
}

impl Serving {
    fn spawn(&self, connection: Connection) {
        let served = serve_connection(
            self.builder.clone(),
            self.draining.clone(),
            connection,
            &self.app,
        );
        self.connections.spawn(served);
    }

    /// Asks every connection to close once its requests in progress are answered, and waits
    /// for them, at most `drain_timeout`. A client still sending its first bytes is waited for
    /// too (at most the header read time-out): its request may be on its way.
    async fn drain(self, drain_timeout: Duration) {
        tracing::info!("draining open connections");
        self.draining.cancel();
        self.connections.close();
        if tokio::time::timeout(drain_timeout, self.connections.wait())
            .await
            .is_err()
        {
            tracing::warn!(
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
        .timer(TokioTimer::new())
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

/// An accepted client and the connection slot it holds until it is gone.
struct Connection {
    stream: TcpStream,
    peer: SocketAddr,
    slot: OwnedSemaphorePermit,
    limits: Limits,
}

/// Serves one accepted client until it is gone (or dropped), then frees its slot.
fn serve_connection(
    builder: auto::Builder<TokioExecutor>,
    draining: CancellationToken,
    connection: Connection,
    app: &App,
) -> impl Future<Output = ()> + Send + 'static {
    let guard = PerConnection {
        router: app.router.clone(),
        peer: connection.peer,
        verdicts: Verdicts::new(),
    };
    let service = app.problems.layer(guard);
    serve(builder, draining, connection, service)
}

async fn serve(
    builder: auto::Builder<TokioExecutor>,
    draining: CancellationToken,
    connection: Connection,
    service: ProblemService<PerConnection>,
) {
    let Connection {
        stream,
        peer,
        slot: _slot,
        limits,
    } = connection;
    let accepted = Instant::now();
    let _ = stream.set_nodelay(true);
    let Some(protocol) = opening(&stream, limits.header_read_timeout).await else {
        tracing::debug!(%peer, "no request within the header read time-out");
        return;
    };
    let verdicts = service.get_ref().verdicts.clone();
    let streams = (protocol == Protocol::Http2).then(OpenStreams::new);
    let idle = streams.as_ref().map(|streams| IdleLimit {
        streams: streams.watch(),
        timeout: limits.header_read_timeout,
        since: accepted,
    });
    let closing = Closing { draining, idle };
    let service = connection_service(service, streams);
    let io = FramingGuard::new(stream, limits.max_header_bytes.as_usize(), verdicts);
    let connection = pin!(builder.serve_connection(TokioIo::new(io), service));
    if let Some(Err(e)) =
        closing::drive(connection, auto::Connection::graceful_shutdown, closing).await
    {
        tracing::debug!(error = %e, %peer, "connection ended with an error");
    }
}

/// What serves one connection's requests: the app's stack, with HTTP/2 streams counted until
/// their answers are sent, so an idle connection can be told from a busy one.
fn connection_service(
    service: ProblemService<PerConnection>,
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
        let answer = service.clone().call(request);
        async move {
            let response = answer.await?;
            Ok(response.map(|body| CountedBody::new(body, stream)))
        }
    })
}

/// What serves one connection's requests below the problem renderer: tags each with the
/// client's address, refuses those whose framing is ambiguous, and routes the rest.
#[derive(Clone)]
pub(crate) struct PerConnection {
    router: Router,
    peer: SocketAddr,
    verdicts: Arc<Verdicts>,
}

impl Service<Request<Incoming>> for PerConnection {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = RouterFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: Request<Incoming>) -> RouterFuture {
        request.extensions_mut().insert(ClientAddr(self.peer));
        let refusal = self
            .verdicts
            .next_request()
            .or_else(|| framing::check_headers(request.headers()).err());
        match refusal {
            Some(reason) => RouterFuture::answered(refuse(reason, request.version(), self.peer)),
            None => self.router.call(request),
        }
    }
}

/// The answer to an ambiguously framed request; on HTTP/1 the connection is closed after it,
/// as nothing that follows on it can be trusted to start where the client meant.
fn refuse(reason: &'static str, version: Version, peer: SocketAddr) -> Response<Body> {
    tracing::warn!(%peer, reason, "refused an ambiguously framed request");
    let mut response = ProxyError::BadRequest(reason).into_response();
    if version < Version::HTTP_2 {
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
    tracing::info!("shutdown requested");
}
