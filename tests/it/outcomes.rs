//! What is stored when the upstream is slow, fails, or answers too much, over real sockets.
//! (Duplicates that arrive while the first request runs, and leases, are in
//! `crates/core/tests/it/layer/`, where the test holds the first request open instead of racing
//! it.)

use crate::common;

use common::proxy::TestProxy;
use common::upstream::TestUpstream;

/// A port nothing listens on: bound, then released.
async fn closed_port_url() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}")
}

#[tokio::test]
async fn unreachable_upstream_is_502_and_frees_the_key() {
    let proxy = TestProxy::in_front_of(&closed_port_url().await, "").await;
    for _ in 0..2 {
        let answer = proxy.client.post("/v1/x", "nowhere", "{}").await;
        assert_eq!(answer.status, 502);
        assert_eq!(answer.problem_type(), "upstream-unavailable");
        assert!(
            !answer.replayed(),
            "a request that was never sent is not stored"
        );
    }
}

#[tokio::test]
async fn upstream_timeout_is_kept_as_504_so_a_retry_never_runs_twice() {
    let upstream = TestUpstream::start().await;
    let proxy = TestProxy::in_front_of(&upstream.url(), "upstream_timeout = \"200ms\"").await;
    let first = proxy
        .client
        .post("/v1/x?delay_ms=800", "timeout-keep", "{}")
        .await;
    assert_eq!(first.status, 504);
    assert_eq!(first.problem_type(), "upstream-timeout");
    let retry = proxy
        .client
        .post("/v1/x?delay_ms=800", "timeout-keep", "{}")
        .await;
    assert_eq!(retry.status, 504);
    assert!(retry.replayed());
    assert_eq!(upstream.executions_of("timeout-keep"), 1);
}

#[tokio::test]
async fn upstream_timeout_with_release_lets_the_retry_run() {
    let upstream = TestUpstream::start().await;
    let proxy = TestProxy::in_front_of(
        &upstream.url(),
        "upstream_timeout = \"200ms\"\non_ambiguous = \"release\"",
    )
    .await;
    let first = proxy
        .client
        .post("/v1/x?delay_ms=800", "timeout-release", "{}")
        .await;
    assert_eq!(first.status, 504);
    let retry = proxy
        .client
        .post("/v1/x?delay_ms=800", "timeout-release", "{}")
        .await;
    assert!(!retry.replayed());
    assert_eq!(upstream.executions_of("timeout-release"), 2);
}

#[tokio::test]
async fn upstream_502_is_ambiguous_and_kept_by_default() {
    let upstream = TestUpstream::start().await;
    let proxy = TestProxy::in_front_of(&upstream.url(), "").await;
    proxy.client.post("/v1/x?status=502", "gw", "{}").await;
    let retry = proxy.client.post("/v1/x?status=502", "gw", "{}").await;
    assert_eq!(retry.status, 502);
    assert!(retry.replayed());
    assert_eq!(upstream.executions_of("gw"), 1);
}

#[tokio::test]
async fn connection_closed_after_the_request_was_read_is_ambiguous() {
    // An upstream that reads the request and hangs up without answering.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut buf = [0u8; 4096];
            let _ = tokio::io::AsyncReadExt::read(&mut socket, &mut buf).await;
            drop(socket);
        }
    });
    let proxy = TestProxy::in_front_of(&format!("http://{addr}"), "").await;
    let first = proxy.client.post("/v1/x", "hangup", "{}").await;
    assert_eq!(first.status, 502);
    assert_eq!(first.problem_type(), "upstream-unavailable");
    let retry = proxy.client.post("/v1/x", "hangup", "{}").await;
    assert!(
        retry.replayed(),
        "the operation may have run, so the retry must not run it again"
    );
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[tokio::test]
async fn response_too_large_to_keep_is_streamed_whole_then_gone() {
    let upstream = TestUpstream::start().await;
    let proxy = TestProxy::in_front_of(&upstream.url(), "max_cached_body = \"1KiB\"").await;
    let first = proxy
        .client
        .post("/v1/export?body_len=200000", "export", "{}")
        .await;
    assert_eq!(first.status, 201);
    assert_eq!(first.body.len(), 200_000);
    assert!(
        first
            .body
            .iter()
            .enumerate()
            .all(|(i, b)| *b == (i % 251) as u8),
        "every byte arrives in order"
    );
    let retry = proxy
        .client
        .post("/v1/export?body_len=200000", "export", "{}")
        .await;
    assert_eq!(retry.status, 410);
    assert_eq!(retry.problem_type(), "response-not-kept");
    assert_eq!(upstream.executions_of("export"), 1);
}
