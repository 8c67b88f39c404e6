//! Limits and smuggling, over raw sockets: slow and oversized heads, ambiguous framing, and
//! the connection cap. Raw bytes, because an HTTP client would not send any of this.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::logs::{slot_wait, Logs};
use common::proxy::TestProxy;
use common::raw::{read_response, unanswered};
use common::upstream::TestUpstream;
use idempotency_proxy::store::MemoryStore;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

async fn proxy(upstream: &TestUpstream, top_level: &str) -> TestProxy {
    let toml = format!("upstream = \"{}\"\n{top_level}\n", upstream.url());
    TestProxy::start(&toml, Arc::new(MemoryStore::new())).await
}

/// Sends `request` on a new connection and reads one response.
async fn exchange(proxy: &TestProxy, request: &[u8]) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    read_response(&mut stream, Duration::from_secs(30)).await
}

/// The request is refused with `400` (by the proxy or by hyper) and never reaches the upstream.
async fn assert_refused(request: &str) {
    let upstream = TestUpstream::start().await;
    let proxy = proxy(&upstream, "").await;
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let (status, text) = read_response(&mut stream, Duration::from_secs(30))
        .await
        .expect("an answer");
    assert_eq!(status, 400, "{request:?} got {text}");
    let closed = timeout(Duration::from_secs(30), stream.read_to_end(&mut Vec::new())).await;
    assert!(closed.is_ok(), "{request:?}: the connection stayed open");
    // Why the marker, once answered, shows the refused request never reaches the upstream:
    // the upstream records a request when it has it whole, before it answers. The proxy
    // answers what it forwards with the upstream's answer, and cuts a body it could not read
    // off, with its upstream connection, before the upstream has it whole; so when the proxy
    // answers `400` itself, the refused request has been recorded or never will be. A request
    // smuggled in its bytes would be read after that answer, from the same connection, which
    // the proxy has closed (read to its end above): nothing more of it is routed. The marker,
    // sent after all that, shows that what reaches the upstream is recorded: an empty record
    // is not a dead route.
    let marker = exchange(&proxy, MARKER).await.expect("the marker answered");
    assert_eq!(marker.0, 201, "the marker: {}", marker.1);
    let seen: Vec<_> = upstream
        .seen()
        .into_iter()
        .map(|s| s.uri.to_string())
        .collect();
    assert_eq!(seen, ["/marker"], "{request:?} reached the upstream");
}

/// A well-framed request that follows a refused one, to show what reaches the upstream.
const MARKER: &[u8] = b"GET /marker HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

#[tokio::test]
async fn content_length_with_transfer_encoding_is_refused() {
    let body = "5\r\nhello\r\n0\r\n\r\n";
    for headers in [
        "Content-Length: 16\r\nTransfer-Encoding: chunked",
        "Transfer-Encoding: chunked\r\nContent-Length: 16",
    ] {
        assert_refused(&format!(
            "POST /a HTTP/1.1\r\nHost: x\r\n{headers}\r\n\r\n{body}"
        ))
        .await;
    }
}

#[tokio::test]
async fn the_refusal_is_a_bad_request_problem_and_closes_the_connection() {
    let upstream = TestUpstream::start().await;
    let proxy = proxy(&upstream, "").await;
    let request = "PUT /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n";
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let (status, text) = read_response(&mut stream, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(status, 400);
    assert!(text.contains("application/problem+json"), "{text}");
    assert!(
        text.contains("urn:problem-type:idempotency-proxy:bad-request"),
        "{text}"
    );
    assert!(read_response(&mut stream, Duration::from_secs(2))
        .await
        .is_none());
    assert!(
        upstream.seen().is_empty(),
        "the smuggled GET reached the upstream"
    );
}

#[tokio::test]
async fn two_differing_content_lengths_are_refused() {
    assert_refused(
        "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
    )
    .await;
    assert_refused("POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 6\r\n\r\nhello!").await;
}

#[tokio::test]
async fn transfer_encodings_other_than_chunked_are_refused() {
    let body = "5\r\nhello\r\n0\r\n\r\n";
    for te in [
        "Transfer-Encoding: gzip, chunked",
        "Transfer-Encoding: chunked, chunked",
        "Transfer-Encoding: gzip",
        "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked",
    ] {
        assert_refused(&format!("PUT /a HTTP/1.1\r\nHost: x\r\n{te}\r\n\r\n{body}")).await;
    }
}

#[tokio::test]
async fn a_malformed_chunk_size_is_refused() {
    for (method, key) in [("PUT", ""), ("POST", "Idempotency-Key: k1\r\n")] {
        assert_refused(&format!(
            "{method} /a HTTP/1.1\r\nHost: x\r\n{key}Transfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n"
        ))
        .await;
    }
}

#[tokio::test]
async fn well_framed_requests_share_a_connection() {
    let upstream = TestUpstream::start().await;
    let proxy = proxy(&upstream, "").await;
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    let chunked = "PUT /one HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n0\r\nX-Trailer: t\r\n\r\n";
    let sized = "PUT /two HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nworld";
    stream
        .write_all(format!("{chunked}{sized}").as_bytes())
        .await
        .unwrap();
    for _ in 0..2 {
        let (status, text) = read_response(&mut stream, Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(status, 201, "{text}");
    }
    let bodies: Vec<_> = upstream.seen().iter().map(|s| s.body.clone()).collect();
    assert_eq!(bodies, ["hello", "world"]);
}

#[tokio::test]
async fn slow_and_silent_clients_are_disconnected() {
    let upstream = TestUpstream::start().await;
    let proxy = proxy(&upstream, "header_read_timeout = \"300ms\"").await;
    for sent in ["", "POST /a HTTP/1.1\r\nHost: x\r\n"] {
        // Before the connection is made, so a slow client side cannot shorten the wait seen.
        let started = Instant::now();
        let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
        stream.write_all(sent.as_bytes()).await.unwrap();
        let mut rest = Vec::new();
        let closed = timeout(Duration::from_secs(30), stream.read_to_end(&mut rest)).await;
        assert!(closed.is_ok(), "{sent:?}: still open after 30s");
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(250),
            "{sent:?}: closed after {waited:?}"
        );
        assert!(
            !String::from_utf8_lossy(&rest).contains(" 2"),
            "{sent:?}: {rest:?}"
        );
    }
    assert!(upstream.seen().is_empty());
    // An idle keep-alive connection is a client that has not sent its next head.
    let mut idle = TcpStream::connect(proxy.addr).await.unwrap();
    idle.write_all(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(
        read_response(&mut idle, Duration::from_secs(30))
            .await
            .unwrap()
            .0,
        201
    );
    let closed = timeout(Duration::from_secs(30), idle.read(&mut [0u8; 1])).await;
    assert!(matches!(closed, Ok(Ok(0))), "{closed:?}");
}

#[tokio::test]
async fn oversized_headers_get_431() {
    let upstream = TestUpstream::start().await;
    let proxy = proxy(&upstream, "max_header_bytes = \"8KiB\"").await;
    let fits = format!(
        "GET /a HTTP/1.1\r\nHost: x\r\nX-Pad: {}\r\n\r\n",
        "a".repeat(4000)
    );
    assert_eq!(exchange(&proxy, fits.as_bytes()).await.unwrap().0, 201);
    let large = format!(
        "GET /a HTTP/1.1\r\nHost: x\r\nX-Pad: {}\r\n\r\n",
        "a".repeat(16 * 1024)
    );
    let (status, text) = exchange(&proxy, large.as_bytes()).await.expect("an answer");
    assert_eq!(status, 431, "{text}");
    assert_eq!(upstream.seen().len(), 1);
}

#[tokio::test]
async fn connections_past_the_cap_wait_for_a_slot() {
    let upstream = TestUpstream::start().await;
    let logs = Logs::capture();
    let proxy = proxy(&upstream, "max_connections = 2").await;
    let request = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n";
    let mut open = Vec::new();
    for _ in 0..2 {
        let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
        stream.write_all(request).await.unwrap();
        assert_eq!(
            read_response(&mut stream, Duration::from_secs(30))
                .await
                .unwrap()
                .0,
            201
        );
        open.push(stream);
    }
    let mut third = TcpStream::connect(proxy.addr).await.unwrap();
    third.write_all(request).await.unwrap();
    logs.until_more(&slot_wait(2), 0).await;
    assert!(unanswered(&third), "served past the cap");
    drop(open.pop());
    let (status, _) = read_response(&mut third, Duration::from_secs(30))
        .await
        .expect("served once a slot is free");
    assert_eq!(status, 201);
}

#[tokio::test]
async fn oversized_http2_header_lists_get_431() {
    let upstream = TestUpstream::start().await;
    let proxy = proxy(&upstream, "max_header_bytes = \"8KiB\"").await;
    let stream = TcpStream::connect(proxy.addr).await.unwrap();
    let io = hyper_util::rt::TokioIo::new(stream);
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io)
            .await
            .unwrap();
    tokio::spawn(connection);
    let request = |pad: usize| {
        http::Request::get(format!("http://{}/a", proxy.addr))
            .header("x-pad", "a".repeat(pad))
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap()
    };
    let fits = sender.send_request(request(1000)).await.unwrap();
    assert_eq!(fits.status(), 201);
    let answer = sender.send_request(request(16 * 1024)).await;
    let status = answer.as_ref().map(|r| r.status().as_u16());
    assert!(matches!(status, Ok(431)), "{answer:?}");
    assert_eq!(upstream.seen().len(), 1);
}
