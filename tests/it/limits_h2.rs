//! The limits for HTTP/2 clients (h2c): silent, idle and stalled connections are closed after
//! the header read time-out and free their slots, a slow request is answered, a drain does not
//! wait for a silent peer, and a peer that stops answering PINGs is dropped.
//!
//! Misbehaving clients write their frames by hand and answer nothing the proxy sends; a
//! well-behaved client is hyper's own.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::logs::{slot_wait, Logs};
use common::poll;
use common::proxy::TestProxy;
use common::raw::unanswered;
use common::upstream::TestUpstream;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use idempotency_proxy::store::MemoryStore;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio::time::timeout;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const HEADERS: u8 = 0x1;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

/// Long enough to tell "closed by the time-out" from "never closed".
const PATIENCE: Duration = Duration::from_secs(30);

async fn proxy(upstream: &TestUpstream, top_level: &str) -> TestProxy {
    let toml = format!("upstream = \"{}\"\n{top_level}\n", upstream.url());
    TestProxy::start(&toml, Arc::new(MemoryStore::new())).await
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let length = u32::try_from(payload.len()).unwrap().to_be_bytes();
    let mut frame = length[1..].to_vec();
    frame.extend([kind, flags]);
    frame.extend(stream.to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

/// The HPACK block of `GET path` for authority `x`: literals, neither indexed nor Huffman-coded.
fn get_block(path: &str) -> Vec<u8> {
    // `:method GET` and `:scheme http` from the static table, then `:path` by its name's index.
    let mut block = vec![0x82, 0x86, 0x04, u8::try_from(path.len()).unwrap()];
    block.extend_from_slice(path.as_bytes());
    block.extend([0x01, 1, b'x']);
    block
}

/// A client that writes its frames by hand and answers nothing: no SETTINGS ack, no PING ack.
struct SilentPeer {
    stream: TcpStream,
}

/// A frame the proxy sent: its type and stream.
type Seen = (u8, u32);

impl SilentPeer {
    /// Connects, sends the preface, an empty SETTINGS frame and `frames`, and waits for the
    /// proxy's SETTINGS, so the connection is being served.
    async fn connect(proxy: &TestProxy, frames: &[Vec<u8>]) -> Self {
        let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
        stream.write_all(PREFACE).await.unwrap();
        stream.write_all(&frame(SETTINGS, 0, 0, &[])).await.unwrap();
        for frame in frames {
            stream.write_all(frame).await.unwrap();
        }
        let mut peer = Self { stream };
        let first = timeout(PATIENCE, peer.next_frame()).await.unwrap();
        assert_eq!(first.map(|f| f.0), Some(SETTINGS));
        peer
    }

    async fn next_frame(&mut self) -> Option<Seen> {
        let mut head = [0u8; 9];
        self.stream.read_exact(&mut head).await.ok()?;
        let length = u32::from_be_bytes([0, head[0], head[1], head[2]]);
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        let mut payload = vec![0; usize::try_from(length).unwrap()];
        self.stream.read_exact(&mut payload).await.ok()?;
        Some((head[3], stream))
    }

    /// The frames the proxy sent until it closed the connection; panics if it is still open
    /// after [`PATIENCE`].
    async fn frames_until_closed(&mut self) -> Vec<Seen> {
        let read = async {
            let mut seen = Vec::new();
            while let Some(frame) = self.next_frame().await {
                seen.push(frame);
            }
            seen
        };
        timeout(PATIENCE, read)
            .await
            .expect("the proxy kept the connection open")
    }
}

/// hyper's HTTP/2 client on a new connection, and the task driving that connection.
async fn h2_client(proxy: &TestProxy) -> (SendRequest<Empty<Bytes>>, JoinHandle<bool>) {
    let io = TokioIo::new(TcpStream::connect(proxy.addr).await.unwrap());
    let (sender, connection) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
        .await
        .unwrap();
    (
        sender,
        tokio::spawn(async move { connection.await.is_ok() }),
    )
}

/// Sends `GET path` and reads the whole answer: its status.
async fn get(sender: &mut SendRequest<Empty<Bytes>>, path: &str) -> u16 {
    let request = http::Request::get(format!("http://x{path}"))
        .body(Empty::new())
        .unwrap();
    let answer = sender.send_request(request).await.unwrap();
    let status = answer.status().as_u16();
    answer.into_body().collect().await.unwrap();
    status
}

#[tokio::test]
async fn silent_h2c_connections_are_closed_and_free_their_slots() {
    let logs = Logs::capture();
    let upstream = TestUpstream::start().await;
    let proxy = proxy(
        &upstream,
        "header_read_timeout = \"1s\"\nmax_connections = 2",
    )
    .await;
    let started = Instant::now();
    let mut silent = [
        SilentPeer::connect(&proxy, &[]).await,
        SilentPeer::connect(&proxy, &[]).await,
    ];
    let mut third = TcpStream::connect(proxy.addr).await.unwrap();
    third
        .write_all(b"GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    logs.until_more(&slot_wait(2), 0).await;
    assert!(unanswered(&third), "served past the cap");
    for peer in &mut silent {
        let frames = peer.frames_until_closed().await;
        assert!(frames.iter().any(|f| f.0 == GOAWAY), "{frames:?}");
    }
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900),
        "closed after {waited:?}"
    );
    let mut answer = Vec::new();
    timeout(PATIENCE, third.read_to_end(&mut answer))
        .await
        .expect("the third client was not served")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
}

#[tokio::test]
async fn an_h2c_connection_idle_after_its_requests_is_closed() {
    let upstream = TestUpstream::start().await;
    // The time-out is long beside the pause below, so that a loaded machine still sends the
    // second request well within it.
    let proxy = proxy(&upstream, "header_read_timeout = \"3s\"").await;
    let (mut sender, connection) = h2_client(&proxy).await;
    assert_eq!(get(&mut sender, "/a").await, 201);
    // A request within the time-out starts the idle clock again: the connection is closed no
    // sooner than the time-out after the second answer, which came after it was asked for
    // (measured from there, however late the client reads it). Without the restart it would
    // close about two seconds after the second request.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let asked = Instant::now();
    assert_eq!(get(&mut sender, "/b").await, 201);
    let ended_cleanly = timeout(PATIENCE, connection)
        .await
        .expect("the idle connection was not closed")
        .unwrap();
    let idle = asked.elapsed();
    assert!(idle >= Duration::from_millis(2950), "closed after {idle:?}");
    assert!(ended_cleanly, "the client saw an error, not a GOAWAY");
    assert_eq!(upstream.seen().len(), 2);
}

#[tokio::test]
async fn a_stalled_h2_header_block_is_closed() {
    let upstream = TestUpstream::start().await;
    let proxy = proxy(&upstream, "header_read_timeout = \"1s\"").await;
    let started = Instant::now();
    // HEADERS without END_HEADERS: the rest of the block would come in CONTINUATION frames.
    let partial = frame(HEADERS, END_STREAM, 1, &get_block("/a")[..2]);
    let mut peer = SilentPeer::connect(&proxy, &[partial]).await;
    let frames = peer.frames_until_closed().await;
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900),
        "closed after {waited:?}"
    );
    assert!(!frames.iter().any(|f| f.0 == HEADERS), "{frames:?}");
    assert!(upstream.seen().is_empty());
}

#[tokio::test]
async fn a_slow_h2_request_is_answered() {
    let upstream = TestUpstream::start().await;
    let proxy = proxy(&upstream, "header_read_timeout = \"1s\"").await;
    let (mut sender, _connection) = h2_client(&proxy).await;
    assert_eq!(get(&mut sender, "/slow?delay_ms=2000").await, 201);
    assert_eq!(get(&mut sender, "/after").await, 201);
}

#[tokio::test]
async fn a_drain_does_not_wait_for_a_silent_h2_peer() {
    let upstream = TestUpstream::start().await;
    // The test proxy drains for at most 5s; the header read time-out is the default 10s.
    let logs = Logs::capture();
    let proxy = proxy(&upstream, "").await;
    let mut peer = SilentPeer::connect(&proxy, &[]).await;
    let (mut idle_sender, idle_connection) = h2_client(&proxy).await;
    assert_eq!(get(&mut idle_sender, "/a").await, 201);
    proxy.shutdown().await;
    // Waiting for the silent peer would have run into the drain's time-out, which says so.
    assert_eq!(logs.count("draining open connections"), 1);
    assert_eq!(
        logs.count("drain timed out"),
        0,
        "the drain waited for the silent peer"
    );
    let frames = peer.frames_until_closed().await;
    assert!(frames.iter().any(|f| f.0 == GOAWAY), "{frames:?}");
    assert!(timeout(PATIENCE, idle_connection).await.unwrap().unwrap());
}

#[tokio::test]
async fn a_drain_lets_an_open_h2_stream_finish() {
    let upstream = TestUpstream::start().await;
    let proxy = proxy(&upstream, "").await;
    let (mut sender, connection) = h2_client(&proxy).await;
    let slow = tokio::spawn(async move { get(&mut sender, "/slow?delay_ms=1500").await });
    let at_upstream = async || !upstream.seen().is_empty();
    poll::until(PATIENCE, "the slow request at the upstream", at_upstream).await;
    proxy.shutdown().await;
    assert_eq!(slow.await.unwrap(), 201);
    assert!(timeout(PATIENCE, connection).await.unwrap().unwrap());
}

#[tokio::test]
async fn an_h2_peer_that_stops_answering_pings_is_dropped_mid_request() {
    let upstream = TestUpstream::start().await;
    let proxy = proxy(&upstream, "header_read_timeout = \"1s\"").await;
    let request = frame(
        HEADERS,
        END_STREAM | END_HEADERS,
        1,
        &get_block("/slow?delay_ms=4000"),
    );
    let mut peer = SilentPeer::connect(&proxy, &[request]).await;
    let frames = peer.frames_until_closed().await;
    assert!(frames.contains(&(PING, 0)), "{frames:?}");
    assert!(
        !frames.iter().any(|f| f.0 == HEADERS),
        "answered: {frames:?}"
    );
    assert_eq!(upstream.seen().len(), 1);
}
