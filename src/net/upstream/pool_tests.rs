//! The pool against a real upstream on a loopback socket: which requests share a connection,
//! and which connections are closed instead of kept.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioTimer;
use tokio::net::TcpListener;

use super::*;
use crate::net::upstream::exchange::{exchange, send, Failure};

/// An upstream that counts the connections it accepts and those it has closed. `/big` answers
/// 4 MiB, `/close` answers with `Connection: close`, anything else a short `ok`. It runs on a
/// thread and runtime of its own, so it closes connections on time even while the test's
/// thread is blocked.
struct CountingUpstream {
    address: Address,
    accepted: Arc<AtomicUsize>,
    closed: Arc<AtomicUsize>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// How long the upstream may take to close an idle connection on a loaded machine.
const CLOSING: Duration = Duration::from_secs(30);

impl CountingUpstream {
    /// `idle_close`: how long the upstream keeps an idle keep-alive connection open.
    async fn start(idle_close: Option<Duration>) -> Self {
        let accepted = Arc::new(AtomicUsize::new(0));
        let closed = Arc::new(AtomicUsize::new(0));
        let counters = (accepted.clone(), closed.clone());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (bound, addr) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
                let _ = bound.send(listener.local_addr().unwrap());
                tokio::select! {
                    _ = stopped => {}
                    () = accept(listener, counters, idle_close) => {}
                }
            });
        });
        let url: http::Uri = format!("http://{}", addr.await.unwrap()).parse().unwrap();
        Self {
            address: Address::from_uri(&url, None).unwrap(),
            accepted,
            closed,
            _stop: stop,
        }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    fn closed(&self) -> usize {
        self.closed.load(Ordering::SeqCst)
    }

    /// Waits until the upstream has closed a connection (its socket is gone), letting this
    /// thread's runtime run meanwhile.
    async fn until_closed(&self) {
        let closed = async || self.closed() > 0;
        idempotency_test_support::poll::until(CLOSING, "the upstream's close", closed).await;
    }

    /// Waits as [`Self::until_closed`] does, but blocking this thread, so its runtime's IO
    /// driver never runs and learns nothing of the close.
    fn until_closed_blocking(&self) {
        let deadline = std::time::Instant::now() + CLOSING;
        while self.closed() == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the upstream never closed"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    async fn post(&self, pool: &Arc<Pool>, path: &str) -> (StatusCode, Bytes) {
        post(pool, &self.address, path).await
    }
}

/// Sends a `POST` to `path` through `pool` and reads the answer whole.
async fn post(pool: &Arc<Pool>, address: &Address, path: &str) -> (StatusCode, Bytes) {
    let response = send(pool, address, pool.checkout(), request(path))
        .await
        .unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, body)
}

/// An upstream that answers the one request of its one connection, then, when the test says
/// so, closes it (its writing half): as an upstream shutting down closes its idle connections
/// at once, however recently they answered. It runs on a thread of its own.
struct ClosesWhenTold {
    address: Address,
    close: std::sync::mpsc::Sender<()>,
    closed: std::sync::mpsc::Receiver<()>,
}

impl ClosesWhenTold {
    fn start() -> Self {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url: http::Uri = format!("http://{}", listener.local_addr().unwrap())
            .parse()
            .unwrap();
        let (close, told) = std::sync::mpsc::channel();
        let (taken_in, closed) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let (mut stream, peer) = listener.accept().unwrap();
            let mut received = Vec::new();
            while !received.ends_with(BODY) {
                let mut chunk = [0u8; 4096];
                let n = stream.read(&mut chunk).unwrap();
                assert!(n > 0, "the pool hung up mid-request");
                received.extend_from_slice(&chunk[..n]);
            }
            let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
            stream.write_all(answer).unwrap();
            if told.recv().is_err() {
                return;
            }
            stream.shutdown(std::net::Shutdown::Write).unwrap();
            let local = stream.local_addr().unwrap();
            idempotency_test_support::tcp_state::until_fin_received_blocking(local, peer);
            let _ = taken_in.send(());
            // The socket stays open, for reading, until the test ends.
            let _ = told.recv();
        });
        Self {
            address: Address::from_uri(&url, None).unwrap(),
            close,
            closed,
        }
    }

    /// Closes the connection and waits, blocking this thread, until the pool's end of it has
    /// the close: a runtime on this thread sees nothing of it meanwhile.
    fn close_blocking(&self) {
        self.close.send(()).unwrap();
        self.closed.recv().unwrap();
    }
}

async fn accept(
    listener: TcpListener,
    (accepted, closed): (Arc<AtomicUsize>, Arc<AtomicUsize>),
    idle_close: Option<Duration>,
) {
    while let Ok((stream, _)) = listener.accept().await {
        accepted.fetch_add(1, Ordering::SeqCst);
        let mut server = hyper::server::conn::http1::Builder::new();
        if let Some(idle) = idle_close {
            server.timer(TokioTimer::new()).header_read_timeout(idle);
        }
        let connection = server.serve_connection(TokioIo::new(stream), service_fn(answer));
        let closed = closed.clone();
        tokio::spawn(async move {
            // The connection, and its socket with it, is dropped once it has ended.
            let _ = connection.await;
            closed.fetch_add(1, Ordering::SeqCst);
        });
    }
}

const BODY: &[u8] = b"{\"amount\":100}";

fn request(path: &str) -> Request<Body> {
    Request::post(path)
        .header("host", "upstream")
        .body(Body::from(BODY))
        .unwrap()
}

async fn answer(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let _ = request.body();
    let response = match request.uri().path() {
        "/big" => Response::new(Full::new(Bytes::from(vec![b'x'; 4 << 20]))),
        "/close" => Response::builder()
            .header("connection", "close")
            .body(Full::new(Bytes::from_static(b"bye")))
            .unwrap(),
        _ => Response::new(Full::new(Bytes::from_static(b"ok"))),
    };
    Ok(response)
}

fn pool_with(idle_timeout: Duration, max_idle: usize) -> Arc<Pool> {
    Pool::new(PoolSettings {
        idle_timeout,
        max_idle,
    })
}

#[tokio::test]
async fn sequential_requests_share_one_connection() {
    let upstream = CountingUpstream::start(None).await;
    let pool = Pool::new(PoolSettings::default());
    for _ in 0..5 {
        assert_eq!(
            upstream.post(&pool, "/pay").await,
            (StatusCode::OK, Bytes::from_static(b"ok"))
        );
        assert_eq!(pool.idle_count(), 1);
    }
    assert_eq!(upstream.accepted(), 1);
}

#[tokio::test]
async fn a_connection_idle_past_the_timeout_is_not_used() {
    let upstream = CountingUpstream::start(None).await;
    let pool = pool_with(Duration::from_millis(100), 8);
    upstream.post(&pool, "/pay").await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    upstream.post(&pool, "/pay").await;
    assert_eq!(upstream.accepted(), 2);
}

#[tokio::test]
async fn the_sweeper_closes_expired_connections_when_nothing_is_sent() {
    let upstream = CountingUpstream::start(None).await;
    let pool = pool_with(Duration::from_millis(50), 8);
    upstream.post(&pool, "/pay").await;
    assert_eq!(pool.idle_count(), 1);
    let swept = async || pool.idle_count() == 0;
    idempotency_test_support::poll::until(CLOSING, "the idle connection swept", swept).await;
}

#[tokio::test]
async fn at_most_max_idle_connections_are_kept() {
    let upstream = CountingUpstream::start(None).await;
    let pool = pool_with(Duration::from_secs(10), 2);
    // Three answers in hand at once need three connections.
    let mut answers = Vec::new();
    for _ in 0..3 {
        answers.push(
            send(&pool, &upstream.address, pool.checkout(), request("/pay"))
                .await
                .unwrap(),
        );
    }
    assert_eq!(upstream.accepted(), 3);
    for answer in answers {
        answer.into_body().collect().await.unwrap();
    }
    assert_eq!(pool.idle_count(), 2);
}

#[tokio::test]
async fn a_body_dropped_early_closes_its_connection() {
    let upstream = CountingUpstream::start(None).await;
    let pool = Pool::new(PoolSettings::default());
    let response = send(&pool, &upstream.address, pool.checkout(), request("/big"))
        .await
        .unwrap();
    let mut body = response.into_body();
    let first = body.frame().await.unwrap().unwrap();
    assert!(first.data_ref().is_some_and(|d| d.len() < 4 << 20));
    drop(body);
    assert_eq!(pool.idle_count(), 0);
    upstream.post(&pool, "/pay").await;
    assert_eq!(upstream.accepted(), 2);
}

#[tokio::test]
async fn a_connection_the_upstream_closes_is_not_kept() {
    let upstream = CountingUpstream::start(None).await;
    let pool = Pool::new(PoolSettings::default());
    let (status, body) = upstream.post(&pool, "/close").await;
    assert_eq!((status, &body[..]), (StatusCode::OK, &b"bye"[..]));
    assert_eq!(pool.idle_count(), 0);
    upstream.post(&pool, "/pay").await;
    assert_eq!(upstream.accepted(), 2);
}

#[tokio::test]
async fn a_pooled_connection_closed_while_idle_is_replaced_before_writing() {
    let upstream = CountingUpstream::start(Some(Duration::from_millis(50))).await;
    let pool = pool_with(Duration::from_secs(10), 8);
    upstream.post(&pool, "/pay").await;
    assert_eq!(pool.idle_count(), 1);
    // The upstream closes it meanwhile; the pool still holds it, unpolled.
    upstream.until_closed().await;
    assert_eq!(pool.idle_count(), 1);
    let checked = pool.checkout();
    assert!(checked.is_none(), "a closed connection was handed out");
    assert_eq!(
        upstream.post(&pool, "/pay").await,
        (StatusCode::OK, Bytes::from_static(b"ok"))
    );
    assert_eq!(upstream.accepted(), 2);
}

/// The runtime learns of the upstream's close only when its IO driver runs, which this test's
/// thread never lets it do: the check must ask the kernel.
#[tokio::test(flavor = "current_thread")]
async fn a_close_the_runtime_has_not_seen_yet_is_still_found() {
    let upstream = CountingUpstream::start(Some(Duration::from_millis(50))).await;
    let pool = pool_with(Duration::from_secs(10), 8);
    upstream.post(&pool, "/pay").await;
    upstream.until_closed_blocking();
    assert!(
        pool.checkout().is_none(),
        "a closed connection was handed out"
    );
}

/// An upstream shutting down closes its idle connections at once, however recently they
/// answered: a connection checked in a moment ago is checked with the kernel all the same, here
/// while this thread's runtime has had no chance to see the close.
#[tokio::test(flavor = "current_thread")]
async fn a_close_right_after_the_answer_is_found_before_the_runtime_sees_it() {
    let upstream = ClosesWhenTold::start();
    let pool = pool_with(Duration::from_secs(10), 8);
    assert_eq!(
        post(&pool, &upstream.address, "/pay").await,
        (StatusCode::OK, Bytes::from_static(b"ok"))
    );
    assert_eq!(pool.idle_count(), 1);
    upstream.close_blocking();
    assert!(
        pool.checkout().is_none(),
        "a closed connection was handed out"
    );
}

/// Past the check, the upstream closes the connection before hyper takes the request off its
/// queue: hyper hands the request back, whole, for another connection.
#[tokio::test]
async fn a_request_queued_on_a_connection_that_closed_comes_back_unsent() {
    let upstream = CountingUpstream::start(Some(Duration::from_millis(50))).await;
    let pool = pool_with(Duration::from_secs(10), 8);
    upstream.post(&pool, "/pay").await;
    let connection = pool.checkout().expect("an open connection");
    upstream.until_closed().await;
    match exchange(&pool, connection, request("/again")).await {
        Err(Failure::NotWritten(request, _)) => assert_eq!(request.uri(), "/again"),
        Err(Failure::Failed(e)) => panic!("reported as sent: {e}"),
        Ok(_) => panic!("answered on a closed connection"),
    }
    assert_eq!(upstream.accepted(), 1);
}

/// The same close, through the whole send: the request goes out on a new connection.
#[tokio::test]
async fn a_request_handed_back_is_sent_once_more_on_a_new_connection() {
    let upstream = CountingUpstream::start(Some(Duration::from_millis(50))).await;
    let pool = pool_with(Duration::from_secs(10), 8);
    upstream.post(&pool, "/pay").await;
    let connection = pool.checkout().expect("an open connection");
    upstream.until_closed().await;
    let response = send(
        &pool,
        &upstream.address,
        Some(connection),
        request("/again"),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(upstream.accepted(), 2);
}
