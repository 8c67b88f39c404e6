//! Reloading the config without a restart (docs/reference.md#reload), over real sockets: `POST /reload`
//! on the admin listener, `SIGHUP` to the real binary, a policy flipped under a busy keep-alive
//! connection, and the refusals that leave the running config as it was.

use crate::common;

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use idempotency_proxy::config::{self, Overrides};
use idempotency_proxy::store::MemoryStore;
use sha2::{Digest, Sha256};
use tokio::net::TcpStream;
use tokio::sync::watch;

use common::binary::start_binary_logging;
use common::logs::{slot_wait, Logs};
use common::poll;
use common::proxy::TestProxy;
use common::signal;
use common::upstream::TestUpstream;

/// A config file in a directory of its own.
fn config_file(test: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "idempotency-proxy-reload-{test}-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("proxy.toml");
    std::fs::write(&file, text).unwrap();
    file
}

fn config(upstream: &str, require_key: bool) -> String {
    format!(
        "upstream = \"{upstream}\"\nstore = \"memory\"\n[defaults]\nrequire_key = {require_key}\n"
    )
}

async fn reload(proxy: &TestProxy) -> common::answer::Answer {
    proxy.admin.send("POST", "/reload", &[], "").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_flipped_under_a_busy_keep_alive_connection_fails_no_request() {
    let upstream = TestUpstream::start().await;
    let file = config_file("busy", &config(&upstream.url(), false));
    let (proxy, _) = TestProxy::from_file(&file, Arc::new(MemoryStore::new())).await;
    let tcp = TcpStream::connect(proxy.addr).await.unwrap();
    let (mut sender, connection) = http1::handshake(TokioIo::new(tcp)).await.unwrap();
    tokio::spawn(connection);
    let (reloaded_tx, reloaded) = watch::channel(false);
    let client = tokio::spawn(async move {
        // Each status, with whether the reload had been answered before the request was sent.
        let mut statuses = Vec::new();
        for _ in 0..400 {
            let after = *reloaded.borrow();
            let request = Request::post("/v1/charges")
                .header("host", "proxy")
                .header("x-delay-ms", "2")
                .body(Body::from("{}"))
                .unwrap();
            let response = sender.send_request(request).await.expect("never dropped");
            let status = response.status();
            response.into_body().collect().await.expect("read whole");
            statuses.push((after, status));
            if after && statuses.iter().filter(|(a, _)| *a).count() >= 20 {
                break;
            }
        }
        statuses
    });
    // Requests at the upstream were sent before the reload, and are counted so.
    let sent = async || upstream.seen().len() >= 5;
    poll::until(
        Duration::from_secs(30),
        "five requests before the reload",
        sent,
    )
    .await;
    std::fs::write(&file, config(&upstream.url(), true)).unwrap();
    let answer = reload(&proxy).await;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    reloaded_tx.send(true).unwrap();
    let statuses = client.await.unwrap();
    let before: Vec<_> = statuses.iter().filter(|(after, _)| !after).collect();
    let after: Vec<_> = statuses.iter().filter(|(after, _)| *after).collect();
    assert!(before.len() >= 5 && after.len() >= 20, "{statuses:?}");
    assert!(before
        .iter()
        .take(5)
        .all(|(_, s)| *s == StatusCode::CREATED));
    assert!(
        after.iter().all(|(_, s)| *s == StatusCode::BAD_REQUEST),
        "{after:?}"
    );
    // The policy flipped once, between two requests, and never back.
    let flips = statuses.windows(2).filter(|w| w[0].1 != w[1].1).count();
    assert_eq!(flips, 1, "{statuses:?}");
}

#[tokio::test]
async fn an_answered_reload_gives_the_digest_of_the_checked_config() {
    let upstream = TestUpstream::start().await;
    let file = config_file("digest", &config(&upstream.url(), false));
    let (proxy, handle) = TestProxy::from_file(&file, Arc::new(MemoryStore::new())).await;
    let before = handle.reload_state();
    assert!(before.last.is_none());
    std::fs::write(&file, config(&upstream.url(), true)).unwrap();
    let answer = reload(&proxy).await;
    assert_eq!(answer.status, StatusCode::OK);
    let digest = answer.json()["digest"].as_str().unwrap().to_owned();
    let overrides = Overrides {
        config: Some(file.clone()),
        ..Overrides::default()
    };
    let printed = config::load(&overrides).unwrap().to_toml();
    assert_eq!(digest, hex::encode(Sha256::digest(printed.as_bytes())));
    let state = handle.reload_state();
    assert_eq!(state.digest, digest);
    assert_ne!(state.digest, before.digest);
    assert!(matches!(state.last, Some((_, Ok(())))));
    // The status page shows the running config by the same digest, whole, so a script can
    // compare the two.
    let status = proxy.admin.send("GET", "/status", &[], "").await.json();
    assert_eq!(status["config"]["digest"], digest.as_str());
    assert_eq!(handle.status().running_digest(), digest);
    let missing = proxy.client.send("POST", "/v1/charges", &[], "{}").await;
    assert_eq!(missing.problem_type(), "missing-key");
}

/// The count of reloads with `result` in the admin's metrics.
async fn reloads_counted(proxy: &TestProxy, result: &str) -> u64 {
    let metrics = proxy.admin.send("GET", "/metrics", &[], "").await;
    let text = String::from_utf8_lossy(&metrics.body).into_owned();
    let line = format!("idempotency_config_reloads_total{{result=\"{result}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(line.as_str()))
        .map_or(0, |n| n.trim().parse().unwrap())
}

#[tokio::test]
async fn an_invalid_file_or_a_changed_store_changes_nothing() {
    let upstream = TestUpstream::start().await;
    let good = config(&upstream.url(), false);
    let file = config_file("invalid", &good);
    let (proxy, handle) = TestProxy::from_file(&file, Arc::new(MemoryStore::new())).await;
    let digest = handle.reload_state().digest;
    let refusals_before = reloads_counted(&proxy, "error").await;
    let cases = [
        (
            good.replace("require_key = false", "require_key = true\nttl = \"soon\""),
            5,
            "ttl",
        ),
        (
            good.replace("store = \"memory\"", "store = \"file:/tmp/other.db\""),
            2,
            "store",
        ),
        (format!("listen = \"127.0.0.1:1\"\n{good}"), 1, "listen"),
    ];
    for (text, line, key) in cases {
        std::fs::write(&file, &text).unwrap();
        let refused = reload(&proxy).await;
        assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{refused:?}");
        assert_eq!(refused.problem_type(), "bad-config");
        let detail = refused.json()["detail"].as_str().unwrap().to_owned();
        let at = format!("{}:{line}: key \"{key}\"", file.display());
        assert!(detail.starts_with(&at), "{detail}");
        let state = handle.reload_state();
        assert_eq!(state.digest, digest);
        assert_eq!(state.last.unwrap().1.unwrap_err().to_string(), detail);
        // Still the old policy: no key is needed.
        let unkeyed = proxy.client.send("POST", "/v1/charges", &[], "{}").await;
        assert_eq!(unkeyed.status, StatusCode::CREATED);
    }
    assert!(reloads_counted(&proxy, "error").await >= refusals_before + 3);
}

/// A refused change of the store names both values with their passwords masked: the answer,
/// the reload state and the log line (which says the same reason) never hold a password.
#[tokio::test]
async fn a_refused_store_change_never_shows_a_password() {
    let upstream = TestUpstream::start().await;
    // The file names a Redis store; the test proxy serves from memory, as the running config
    // is all a reload compares against.
    let running = config(&upstream.url(), false).replace(
        "store = \"memory\"",
        "store = \"redis://:hunter2@127.0.0.1:6379/0\"",
    );
    let file = config_file("password", &running);
    let (proxy, handle) = TestProxy::from_file(&file, Arc::new(MemoryStore::new())).await;
    let cases = [
        (
            "store = \"postgres://app:hunter3@127.0.0.1:5432/app\"",
            "redis://:***@127.0.0.1:6379/0 -> postgres://app:***@127.0.0.1:5432/app",
        ),
        // Only the password differs: still refused, and still not shown.
        (
            "store = \"redis://:hunter3@127.0.0.1:6379/0\"",
            "redis://:***@127.0.0.1:6379/0 -> redis://:***@127.0.0.1:6379/0 (another password)",
        ),
    ];
    for (store, shown) in cases {
        let text = running.replace("store = \"redis://:hunter2@127.0.0.1:6379/0\"", store);
        std::fs::write(&file, &text).unwrap();
        let refused = reload(&proxy).await;
        assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{refused:?}");
        let detail = refused.json()["detail"].as_str().unwrap().to_owned();
        assert!(detail.contains(shown), "{detail}");
        for secret in ["hunter2", "hunter3"] {
            assert!(
                !String::from_utf8_lossy(&refused.body).contains(secret),
                "{refused:?}"
            );
        }
        let last = handle.reload_state().last.unwrap().1;
        assert_eq!(last.unwrap_err().to_string(), detail);
    }
}

#[tokio::test]
async fn the_reload_endpoint_and_a_changed_token_are_guarded() {
    let upstream = TestUpstream::start().await;
    let dir = config_file("token", "").parent().unwrap().to_owned();
    let (old, new) = (dir.join("old.token"), dir.join("new.token"));
    std::fs::write(&old, "old-t0ken\n").unwrap();
    std::fs::write(&new, "new-t0ken\n").unwrap();
    let with = |token: &PathBuf| {
        format!(
            "admin_token = \"file:{}\"\n{}",
            token.display(),
            config(&upstream.url(), false)
        )
    };
    let file = config_file("token", &with(&old));
    let (proxy, _) = TestProxy::from_file(&file, Arc::new(MemoryStore::new())).await;
    assert_eq!(reload(&proxy).await.status, StatusCode::UNAUTHORIZED);
    std::fs::write(&file, with(&new)).unwrap();
    let reloaded = proxy
        .admin
        .send(
            "POST",
            "/reload",
            &[("authorization", "Bearer old-t0ken")],
            "",
        )
        .await;
    assert_eq!(reloaded.status, StatusCode::OK);
    for (token, status) in [
        ("old-t0ken", StatusCode::UNAUTHORIZED),
        ("new-t0ken", StatusCode::OK),
    ] {
        let bearer = format!("Bearer {token}");
        let headers = [("authorization", bearer.as_str())];
        let metrics = proxy.admin.send("GET", "/metrics", &headers, "").await;
        assert_eq!(metrics.status, status, "{token}");
    }
}

#[tokio::test]
async fn sighup_reloads_the_running_binary() {
    let upstream = TestUpstream::start().await;
    let file = config_file("sighup", "[defaults]\nrequire_key = false\n");
    let file_flag = file.display().to_string();
    let log = std::fs::File::create(file.with_extension("log")).unwrap();
    let flags = ["--config", &file_flag, "--store", "memory"];
    let log_to = || Stdio::from(log.try_clone().unwrap());
    let (mut child, client) = start_binary_logging(&upstream.url(), &flags, log_to).await;
    let unkeyed = client.send("POST", "/v1/charges", &[], "{}").await;
    assert_eq!(unkeyed.status, StatusCode::CREATED);
    std::fs::write(&file, "[defaults]\nrequire_key = true\n").unwrap();
    signal::send(child.id().unwrap(), "HUP");
    let refused = async || {
        let answer = client.send("POST", "/v1/charges", &[], "{}").await;
        answer.status == StatusCode::BAD_REQUEST
    };
    poll::until(Duration::from_secs(30), "the new policy applied", refused).await;
    assert!(
        child.try_wait().unwrap().is_none(),
        "SIGHUP ended the process"
    );
    // The reload is logged once it is in force, so the line may come a moment after.
    let log = file.with_extension("log");
    let logged = async || {
        let log = std::fs::read_to_string(&log).unwrap();
        log.contains("config reloaded")
    };
    poll::until(Duration::from_secs(30), "the reload logged", logged).await;
}

/// Sends a keyless POST on `sender` and returns its status.
async fn post_on(sender: &mut http1::SendRequest<Body>) -> StatusCode {
    let request = Request::post("/v1/charges")
        .header("host", "proxy")
        .body(Body::from("{}"))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status();
    response.into_body().collect().await.unwrap();
    status
}

async fn open_connection(addr: std::net::SocketAddr) -> http1::SendRequest<Body> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (sender, connection) = http1::handshake(TokioIo::new(tcp)).await.unwrap();
    tokio::spawn(connection);
    sender
}

#[tokio::test]
async fn a_raised_connection_limit_lets_a_waiting_client_in() {
    let upstream = TestUpstream::start().await;
    let with_limit = |n: u32| format!("max_connections = {n}\n{}", config(&upstream.url(), false));
    let file = config_file("slots", &with_limit(1));
    let logs = Logs::capture();
    let (proxy, _) = TestProxy::from_file(&file, Arc::new(MemoryStore::new())).await;
    let mut first = open_connection(proxy.addr).await;
    assert_eq!(post_on(&mut first).await, StatusCode::CREATED);
    // The second client is taken off the listen queue and waits for the only slot, which the
    // first holds: the proxy says so once it has looked at the limit.
    let mut second = open_connection(proxy.addr).await;
    let waiting = tokio::spawn(async move { post_on(&mut second).await });
    logs.until_more(&slot_wait(1), 0).await;
    assert!(!waiting.is_finished(), "served past max_connections");
    std::fs::write(&file, with_limit(2)).unwrap();
    assert_eq!(reload(&proxy).await.status, StatusCode::OK);
    let served = tokio::time::timeout(Duration::from_secs(30), waiting).await;
    assert_eq!(served.expect("let in").unwrap(), StatusCode::CREATED);
    assert_eq!(post_on(&mut first).await, StatusCode::CREATED);
}
