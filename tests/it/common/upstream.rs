//! A real upstream service on a loopback socket that records what reaches it.
//!
//! Behaviour is chosen per request by query parameters, so one upstream serves every case:
//! `status=N`, `delay_ms=N` (or header `x-delay-ms`), `body_len=N` (a body of N bytes), `cookie=1` (adds `Set-Cookie`).
//! Header `x-hold: NAME` holds the answer until the test calls [`TestUpstream::release`] with
//! that name: a request stays in progress for as long as the test needs, however slow the
//! machine, where a delay would have to guess.
//! Every answer carries the upstream's execution counter in `x-execution` and in its body, so a
//! test can tell a replay (same counter) from a second execution (a new one).

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, Response, StatusCode, Uri};

use super::poll;

/// One request as the upstream saw it.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub(crate) uri: Uri,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

#[derive(Clone, Default)]
struct Shared {
    executions: Arc<AtomicU64>,
    seen: Arc<Mutex<Vec<Seen>>>,
    /// The holds (`x-hold`) the test has let go.
    released: Arc<Mutex<HashSet<String>>>,
}

pub(crate) struct TestUpstream {
    pub(crate) addr: SocketAddr,
    shared: Shared,
}

impl TestUpstream {
    pub(crate) async fn start() -> Self {
        let shared = Shared::default();
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { addr, shared }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Like [`TestUpstream::start`], speaking HTTPS with `config` (which may require a client
    /// certificate). Reach it at [`TestUpstream::https_url`].
    pub(crate) async fn start_tls(config: Arc<rustls::ServerConfig>) -> Self {
        let shared = Shared::default();
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, app) = (acceptor.clone(), app.clone());
                tokio::spawn(async move {
                    // A client refused in the handshake (no certificate) is simply gone.
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper_util::service::TowerToHyperService::new(app);
                    let builder = hyper_util::server::conn::auto::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    );
                    let io = hyper_util::rt::TokioIo::new(tls);
                    let _ = builder.serve_connection(io, service).await;
                });
            }
        });
        Self { addr, shared }
    }

    /// The HTTPS URL of an upstream started with [`TestUpstream::start_tls`], by the name its
    /// certificate carries.
    pub(crate) fn https_url(&self) -> String {
        format!("https://localhost:{}", self.addr.port())
    }

    /// Every request that reached the upstream, in order.
    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.shared.seen.lock().unwrap().clone()
    }

    /// Waits until a request with this idempotency key has reached the upstream (it is in
    /// progress there, or answered), at most 30 s.
    pub(crate) async fn until_executed(&self, key: &str) {
        let executed = async || self.executions_of(key) > 0;
        let what = format!("a request with key {key:?} at the upstream");
        poll::until(Duration::from_secs(30), what, executed).await;
    }

    /// Lets every request held under `hold` (header `x-hold`) answer, now and from now on.
    pub(crate) fn release(&self, hold: &str) {
        self.shared.released.lock().unwrap().insert(hold.to_owned());
    }

    /// How many requests carried this idempotency key (header `idempotency-key`, as sent).
    pub(crate) fn executions_of(&self, key: &str) -> usize {
        self.seen()
            .iter()
            .filter(|s| s.headers.get("idempotency-key").is_some_and(|v| v == key))
            .count()
    }
}

async fn handle(
    State(shared): State<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response<Body> {
    let query: HashMap<&str, &str> = uri
        .query()
        .unwrap_or("")
        .split('&')
        .filter_map(|p| p.split_once('='))
        .collect();
    let execution = shared.executions.fetch_add(1, Ordering::SeqCst) + 1;
    shared.seen.lock().unwrap().push(Seen {
        uri: uri.clone(),
        headers: headers.clone(),
        body: body.clone(),
    });
    let param = |name: &str| query.get(name).and_then(|v| v.parse::<u64>().ok());
    // A delay in a header is not part of the fingerprint: one request, fast or slow.
    let header_delay = headers
        .get("x-delay-ms")
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if let Some(ms) = param("delay_ms").or(header_delay) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    if let Some(hold) = headers.get("x-hold").and_then(|v| v.to_str().ok()) {
        let released = || shared.released.lock().unwrap().contains(hold);
        while !released() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let status = StatusCode::from_u16(param("status").unwrap_or(201) as u16).unwrap();
    let body = match param("body_len") {
        Some(len) => Body::from((0..len).map(|i| (i % 251) as u8).collect::<Vec<u8>>()),
        None => Body::from(format!(
            "{{\"execution\":{execution},\"method\":\"{method}\",\"path\":\"{}\",\"received\":{}}}",
            uri.path(),
            body.len()
        )),
    };
    let mut response = Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .header("x-execution", execution.to_string())
        .header("x-multi", "one")
        .header("x-multi", "two");
    if query.contains_key("cookie") {
        response = response.header("set-cookie", format!("session={execution}; HttpOnly"));
    }
    response.body(body).unwrap()
}
