//! Inbox routes on the file store, through a SIGKILL and a drain: what was acknowledged is
//! delivered after the next start, and a drain lets attempts in flight finish but starts no
//! more.

mod common;

use std::time::Duration;

use common::binary::{exit_code, sigkill, sigterm, start_binary};
use common::client::TestClient;
use common::inbox_upstream::InboxUpstream;
use common::temp::TempPath;

const WAIT: Duration = Duration::from_secs(30);

/// One test at a time: `start_binary` picks a free port and the proxy binds it with
/// `SO_REUSEPORT`, so two proxies started at once may share a port, and one test's SIGKILL
/// would then cut the other's connections.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A config file with the inbox route `hooks` to `upstream`, and `extra` route keys.
fn config(file: &TempPath, upstream: &str, extra: &str) {
    let text = format!(
        r#"
drain_timeout = "10s"

[[routes]]
name = "hooks"
path_prefix = "/hooks/"
upstream = "{upstream}"
mode = "inbox"
lease = "2s"
deliver_timeout = "1s"
retry_initial = "100ms"
retry_max = "500ms"
{extra}
"#
    );
    std::fs::write(file.path(), text).unwrap();
}

async fn hook(client: &TestClient, key: &str) -> u16 {
    let headers = [("idempotency-key", key)];
    client
        .send("POST", "/hooks/x", &headers, "{}")
        .await
        .status
        .as_u16()
}

#[tokio::test]
async fn every_acknowledged_delivery_arrives_after_a_sigkill() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let upstream = InboxUpstream::start().await;
    upstream.take(Duration::from_millis(300));
    let (config_file, store) = (
        TempPath::new("inbox-kill.toml"),
        TempPath::new("inbox-kill.db"),
    );
    config(&config_file, &upstream.url(), "");
    let args = [
        "--store",
        &store.store_spec(),
        "--config",
        &config_file.path().display().to_string(),
    ];
    let (first, client) = start_binary(&upstream.url(), &args).await;
    let burst: Vec<_> = (0..30)
        .map(|n| {
            let client = client.clone();
            tokio::spawn(async move { hook(&client, &format!("burst-{n}")).await })
        })
        .collect();
    for sent in burst {
        assert_eq!(sent.await.unwrap(), 202);
    }
    sigkill(&first);
    let _ = exit_code(first).await;
    let before = upstream.keys();
    assert!(
        before < 30,
        "the kill came before everything was delivered ({before})"
    );
    let (second, _) = start_binary(&upstream.url(), &args).await;
    upstream
        .until(WAIT, "every acknowledged delivery", |u| u.keys() == 30)
        .await;
    for n in 0..30 {
        assert!(!upstream.arrivals(&format!("burst-{n}")).is_empty());
    }
    sigterm(&second);
    assert_eq!(exit_code(second).await, Some(0));
}

#[tokio::test]
async fn a_drain_finishes_attempts_in_flight_and_starts_no_more() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let upstream = InboxUpstream::start().await;
    upstream.take(Duration::from_millis(800));
    let (config_file, store) = (
        TempPath::new("inbox-drain.toml"),
        TempPath::new("inbox-drain.db"),
    );
    config(&config_file, &upstream.url(), "deliver_concurrency = 2");
    let args = [
        "--store",
        &store.store_spec(),
        "--config",
        &config_file.path().display().to_string(),
    ];
    let (first, client) = start_binary(&upstream.url(), &args).await;
    for n in 0..6 {
        assert_eq!(hook(&client, &format!("drain-{n}")).await, 202);
    }
    upstream
        .until(WAIT, "two attempts in flight", |u| u.keys() == 2)
        .await;
    sigterm(&first);
    assert_eq!(exit_code(first).await, Some(0));
    assert_eq!(upstream.all().len(), 2, "no attempt started after SIGTERM");
    let (second, _) = start_binary(&upstream.url(), &args).await;
    upstream.until(WAIT, "the rest", |u| u.keys() == 6).await;
    // The two that finished during the drain were settled, so they are not sent again.
    for n in 0..6 {
        assert_eq!(
            upstream.arrivals(&format!("drain-{n}")).len(),
            1,
            "drain-{n} once"
        );
    }
    sigterm(&second);
    assert_eq!(exit_code(second).await, Some(0));
}
