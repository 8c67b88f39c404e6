//! Pooled upstream connections against upstreams that close idle keep-alive connections on
//! their own schedule (docs/reference.md#upstream-connections): no request is lost to a connection the upstream closed,
//! and a request the upstream received is never sent a second time.

use crate::common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::StatusCode;
use common::client::TestClient;
use common::proxy::TestProxy;
use idempotency_proxy::store::MemoryStore;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A raw HTTP/1.1 upstream: it closes a connection that stays idle for `keep_alive` after its
/// last answer, and after `answers_per_connection` answers it reads the next request and hangs
/// up without answering. It counts connections and the requests that reached it, per key.
struct ClosingUpstream {
    url: String,
    connections: Arc<AtomicUsize>,
    executions: Arc<Mutex<HashMap<String, usize>>>,
}

#[derive(Clone, Copy)]
struct Behaviour {
    keep_alive: Duration,
    answers_per_connection: usize,
}

impl ClosingUpstream {
    async fn start(behaviour: Behaviour) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let connections = Arc::new(AtomicUsize::new(0));
        let executions = Arc::new(Mutex::new(HashMap::new()));
        let (counted, seen) = (connections.clone(), executions.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(serve(stream, behaviour, seen.clone()));
            }
        });
        Self {
            url,
            connections,
            executions,
        }
    }

    fn executions(&self) -> HashMap<String, usize> {
        self.executions.lock().unwrap().clone()
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

async fn serve(
    mut stream: TcpStream,
    behaviour: Behaviour,
    executions: Arc<Mutex<HashMap<String, usize>>>,
) {
    let mut buf = Vec::new();
    for answered in 0.. {
        // Idle: the keep-alive timer runs until the first byte of the next request.
        if buf.is_empty() {
            match tokio::time::timeout(behaviour.keep_alive, read_more(&mut stream, &mut buf)).await
            {
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => return,
            }
        }
        let Some(key) = read_request(&mut stream, &mut buf).await else {
            return;
        };
        let execution = {
            let mut executions = executions.lock().unwrap();
            let count = executions.entry(key).or_insert(0);
            *count += 1;
            *count
        };
        if answered >= behaviour.answers_per_connection {
            return;
        }
        let body = format!("{{\"execution\":{execution}}}");
        let head = format!(
            "HTTP/1.1 201 Created\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        if stream.write_all((head + &body).as_bytes()).await.is_err() {
            return;
        }
    }
}

/// Reads into `buf`; `None` at the end of the stream or on an error.
async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<usize> {
    let mut chunk = [0u8; 4096];
    match stream.read(&mut chunk).await {
        Ok(0) | Err(_) => None,
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            Some(n)
        }
    }
}

/// Reads one whole request (head and `Content-Length` body) off the front of `buf`, reading
/// more as needed; returns its `Idempotency-Key` ("" if none).
async fn read_request(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<String> {
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut request = httparse::Request::new(&mut headers);
        if let httparse::Status::Complete(head_len) = request.parse(buf).ok()? {
            let header = |name: &str| {
                request
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case(name))
                    .map(|h| String::from_utf8_lossy(h.value).into_owned())
            };
            let body_len: usize = header("content-length").map_or(0, |v| v.parse().unwrap());
            let key = header("idempotency-key").unwrap_or_default();
            while buf.len() < head_len + body_len {
                read_more(stream, buf).await?;
            }
            buf.drain(..head_len + body_len);
            return Some(key);
        }
        read_more(stream, buf).await?;
    }
}

/// splitmix64: gaps that differ from run to run, reproducible from the printed seed.
struct Jitter(u64);

impl Jitter {
    fn next_unit(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) as f64 / u64::MAX as f64
    }

    /// Between half and one and a half times `keep_alive`, but not within 15 ms of it: a close
    /// landing in the microseconds between the proxy's check and its write is a race no proxy
    /// can win, which is why `upstream_idle_timeout` belongs below the upstream's own.
    fn gap_around(&mut self, keep_alive: Duration) -> Duration {
        self.gap_between(keep_alive, 0.5, 1.5)
    }

    /// Between half of `keep_alive` and 15 ms short of it: the connection is still open.
    fn gap_below(&mut self, keep_alive: Duration) -> Duration {
        self.gap_between(keep_alive, 0.5, 1.0)
    }

    fn gap_between(&mut self, keep_alive: Duration, low: f64, high: f64) -> Duration {
        loop {
            let gap = keep_alive.mul_f64(low + (high - low) * self.next_unit());
            if gap.abs_diff(keep_alive) >= Duration::from_millis(15) {
                return gap;
            }
        }
    }
}

/// Keyed POSTs to `path`, one after another with jittered gaps; returns each key's status.
/// The first gap is always shorter than the upstream's keep-alive, so that every sequence on
/// a route that keeps connections longer has a connection to reuse, however the rest fall.
async fn sequence(
    client: TestClient,
    path: String,
    keep_alive: Duration,
    requests: usize,
    mut jitter: Jitter,
) -> Vec<(String, StatusCode)> {
    let mut statuses = Vec::with_capacity(requests);
    for i in 0..requests {
        if i > 0 {
            let gap = if i == 1 {
                jitter.gap_below(keep_alive)
            } else {
                jitter.gap_around(keep_alive)
            };
            tokio::time::sleep(gap).await;
        }
        let key = format!("{}-{i}", path.replace('/', "-"));
        let answer = client.post_owned(&path, &key, "{\"amount\":100}").await;
        statuses.push((key, answer.status));
    }
    statuses
}

const KEEP_ALIVES_MS: [u64; 4] = [300, 1000, 2000, 5000];

/// Each upstream has two routes: the default `upstream_idle_timeout` (1s), and 10s, above every
/// upstream's keep-alive, so every gap longer than the upstream's finds a closed connection.
fn config(upstreams: &[ClosingUpstream]) -> String {
    let mut toml = String::new();
    for (upstream, ms) in upstreams.iter().zip(KEEP_ALIVES_MS) {
        for (kind, idle) in [
            ("default", ""),
            ("long", "upstream_idle_timeout = \"10s\"\n"),
        ] {
            toml += &format!(
                "[[routes]]\nname = \"k{ms}-{kind}\"\npath_prefix = \"/k{ms}/{kind}/\"\n\
                 upstream = \"{}\"\n{idle}",
                upstream.url
            );
        }
    }
    toml
}

/// One thread, as each of the binary's workers is: a client connection and the upstream
/// connections it uses stay on the thread that pools them, so a short gap always finds its
/// connection (a runtime that moves tasks between threads would find it in another thread's
/// idle list).
#[tokio::test(flavor = "current_thread")]
async fn no_request_is_lost_to_a_connection_the_upstream_closed_while_idle() {
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    println!("jitter seed {seed}");
    let mut upstreams = Vec::new();
    for ms in KEEP_ALIVES_MS {
        let keep_alive = Duration::from_millis(ms);
        upstreams.push(
            ClosingUpstream::start(Behaviour {
                keep_alive,
                answers_per_connection: usize::MAX,
            })
            .await,
        );
    }
    let proxy = TestProxy::start(&config(&upstreams), Arc::new(MemoryStore::new())).await;
    let mut runs = Vec::new();
    for (n, ms) in KEEP_ALIVES_MS.into_iter().enumerate() {
        let keep_alive = Duration::from_millis(ms);
        // About 15 s of gaps per sequence.
        let requests = (15_000 / ms as usize).max(3) + 1;
        for (m, path) in ["default", "long", "default", "long"].iter().enumerate() {
            let path = format!("/k{ms}/{path}/{m}/pay");
            let jitter = Jitter(seed ^ (n * 4 + m) as u64);
            let client = TestClient::new(proxy.addr);
            runs.push(tokio::spawn(sequence(
                client, path, keep_alive, requests, jitter,
            )));
        }
    }
    let mut answers = Vec::new();
    for run in runs {
        answers.extend(run.await.unwrap());
    }
    let failed: Vec<_> = answers
        .iter()
        .filter(|(_, status)| *status != StatusCode::CREATED)
        .collect();
    assert!(failed.is_empty(), "seed {seed}: {failed:?}");
    for (upstream, ms) in upstreams.iter().zip(KEEP_ALIVES_MS) {
        let executions = upstream.executions();
        let sent: Vec<_> = answers
            .iter()
            .filter(|(key, _)| key.starts_with(&format!("-k{ms}-")))
            .collect();
        for (key, _) in &sent {
            assert_eq!(executions.get(key), Some(&1), "seed {seed}: {key}");
        }
        assert_eq!(executions.len(), sent.len(), "seed {seed}");
        // Gaps shorter than the upstream's keep-alive reuse a connection: each sequence on the
        // `long` route has at least one.
        assert!(
            upstream.connections() < sent.len(),
            "k{ms}: {} connections for {} requests",
            upstream.connections(),
            sent.len()
        );
    }
}

/// The upstream read the request and closed the connection without an answer: the operation
/// may have run, so the client gets `502`, it is kept as the outcome, and nothing is resent,
/// neither on a fresh connection nor on one that had served a request before.
#[tokio::test]
async fn an_upstream_that_hangs_up_after_reading_is_answered_502_and_never_retried() {
    for answers_per_connection in [0, 1] {
        let upstream = ClosingUpstream::start(Behaviour {
            keep_alive: Duration::from_secs(30),
            answers_per_connection,
        })
        .await;
        let proxy = TestProxy::in_front_of(&upstream.url, "").await;
        // Where the upstream answers once per connection, a request first puts one in the pool,
        // so the request checked rides a connection that served before.
        let warm_up = |key: &'static str| {
            let client = proxy.client.clone();
            async move {
                if answers_per_connection == 1 {
                    let warm = client.post("/pay", key, "{}").await;
                    assert_eq!(warm.status, StatusCode::CREATED);
                }
            }
        };
        warm_up("warm-up-1").await;
        let first = proxy.client.post("/pay", "hung-up", "{}").await;
        assert_eq!(first.status, StatusCode::BAD_GATEWAY);
        assert_eq!(first.problem_type(), "upstream-unavailable");
        let retry = proxy.client.post("/pay", "hung-up", "{}").await;
        assert_eq!(retry.status, StatusCode::BAD_GATEWAY);
        assert!(retry.replayed(), "{retry:?}");
        warm_up("warm-up-2").await;
        let plain = proxy.client.send("POST", "/plain", &[], "{}").await;
        assert_eq!(plain.status, StatusCode::BAD_GATEWAY);
        let executions = upstream.executions();
        assert_eq!(executions.get("hung-up"), Some(&1), "{executions:?}");
        assert_eq!(executions.get(""), Some(&1), "{executions:?}");
    }
}
