//! Accepting connections: HTTP/1.1 and h2c on one listener within the configured [`Limits`],
//! ambiguously framed requests refused, and a graceful drain on shutdown.
//!
//! Each connection's requests go through, outermost first:
//! - [`ProblemLayer`], so every answer the proxy makes itself, wherever below it is made, is
//!   rendered once, with the configured problem base;
//! - the connection's own guard ([`PerConnection`]): it tags each request with the client's
//!   address and refuses an ambiguously framed one before anything routes or reads it;
//! - the [`Router`], which hands the request to its route's stack.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use http::{header, HeaderValue, Response, Version};
use hyper::body::Incoming;
use hyper::Request;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower::{Layer, Service};

use crate::config::Limits;
use crate::error::ProxyError;
use crate::framing::{self, FramingGuard, Verdicts};
use crate::problem::ProblemLayer;
use crate::router::{Router, RouterFuture};
use crate::upstream::ClientAddr;

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
    let builder = builder(&limits);
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        // Waiting for a slot before accepting leaves further clients in the listen backlog,
        // where they cost nothing, instead of accepting and dropping them.
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
            () = &mut shutdown => break,
        };
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let connection = Connection { stream, peer, slot, limits };
                    serve_connection(&builder, &graceful, connection, &app);
                }
                // Running out of file descriptors must not spin the loop.
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    tracing::info!("draining open connections");
    if tokio::time::timeout(drain_timeout, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            ?drain_timeout,
            "drain timed out; closing the remaining connections"
        );
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
    builder
        .http2()
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

fn serve_connection(
    builder: &auto::Builder<TokioExecutor>,
    graceful: &GracefulShutdown,
    connection: Connection,
    app: &App,
) {
    let Connection {
        stream,
        peer,
        slot,
        limits,
    } = connection;
    let _ = stream.set_nodelay(true);
    let verdicts = Verdicts::new();
    let guard = PerConnection {
        router: app.router.clone(),
        peer,
        verdicts: verdicts.clone(),
    };
    let service = TowerToHyperService::new(app.problems.layer(guard));
    let io = FramingGuard::new(stream, limits.max_header_bytes.as_usize(), verdicts);
    let builder = builder.clone();
    // Taken now, so a drain also waits for a client still sending its first bytes (at most
    // the header read time-out).
    let watcher = graceful.watcher();
    tokio::spawn(async move {
        let _slot = slot;
        if !request_started(io.get_ref(), limits.header_read_timeout).await {
            tracing::debug!(%peer, "no request within the header read time-out");
            return;
        }
        let connection = builder
            .serve_connection(TokioIo::new(io), service)
            .into_owned();
        if let Err(e) = watcher.watch(connection).await {
            tracing::debug!(error = %e, %peer, "connection ended with an error");
        }
    });
}

/// What serves one connection's requests below the problem renderer: tags each with the
/// client's address, refuses those whose framing is ambiguous, and routes the rest.
#[derive(Clone)]
struct PerConnection {
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

/// Waits, at most `timeout`, until the client has sent enough to tell HTTP/1 from HTTP/2 (or has
/// closed). hyper-util reads those bytes with no time-out of its own, and hyper's header
/// time-out starts only after them: without this a client that connects and stays silent would
/// hold its connection slot for ever.
async fn request_started(stream: &TcpStream, timeout: Duration) -> bool {
    const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    let decided = async {
        let mut seen = [0u8; 24];
        loop {
            let n = stream.peek(&mut seen).await?;
            if n == 0 || n == seen.len() || seen[..n] != H2_PREFACE[..n] {
                return Ok::<_, std::io::Error>(());
            }
            // A prefix of the HTTP/2 preface: the rest is on its way.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    matches!(tokio::time::timeout(timeout, decided).await, Ok(Ok(())))
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
