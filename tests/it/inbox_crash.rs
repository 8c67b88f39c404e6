//! Inbox routes on the file store, through a SIGKILL and a drain: what was acknowledged is
//! delivered after the next start, and a drain lets attempts in flight finish but starts no
//! more.

use crate::common;

use std::process::Stdio;
use std::time::Duration;

use common::binary::{exit_code, sigkill, sigterm, start_binary, start_binary_with_env};
use common::client::TestClient;
use common::inbox_upstream::InboxUpstream;
use common::poll;
use common::temp::TempPath;

const WAIT: Duration = Duration::from_secs(30);

/// The proxy's flags for a file store and a config file, both named after `name`, with the
/// inbox route `hooks` to `upstream` and `extra` route keys; the files go with the paths.
fn file_store_proxy(name: &str, upstream: &str, extra: &str) -> (Vec<String>, [TempPath; 2]) {
    let config_file = TempPath::new(&format!("{name}.toml"));
    let store = TempPath::new(&format!("{name}.db"));
    config(&config_file, upstream, extra);
    let args = vec![
        "--store".to_owned(),
        store.store_spec(),
        "--config".to_owned(),
        config_file.path().display().to_string(),
    ];
    (args, [config_file, store])
}

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
    let upstream = InboxUpstream::start().await;
    // Every answer is held until the second proxy runs: the kill comes before anything was
    // delivered, however slow the machine is to send the burst.
    upstream.hold();
    let (args, _files) = file_store_proxy("inbox-kill", &upstream.url(), "");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
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
    upstream.release(1000);
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
    let upstream = InboxUpstream::start().await;
    // The two attempts in flight are held until the proxy is draining, so they are still in
    // flight when it stops starting new ones, however slow the machine is to get there.
    upstream.hold();
    let (args, _files) =
        file_store_proxy("inbox-drain", &upstream.url(), "deliver_concurrency = 2");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let log = TempPath::new("inbox-drain.log");
    let log_file = std::fs::File::create(log.path()).unwrap();
    let log_to = || Stdio::from(log_file.try_clone().unwrap());
    let env = [("RUST_LOG", "info")];
    let (first, client) = start_binary_with_env(&upstream.url(), &args, log_to, &env).await;
    for n in 0..6 {
        assert_eq!(hook(&client, &format!("drain-{n}")).await, 202);
    }
    upstream
        .until(WAIT, "two attempts in flight", |u| u.keys() == 2)
        .await;
    sigterm(&first);
    // The inbox stops starting attempts before the listener drains, which it logs.
    let draining = async || {
        let text = std::fs::read_to_string(log.path()).unwrap();
        text.contains("draining open connections")
    };
    poll::until(WAIT, "the drain begun", draining).await;
    upstream.release(2);
    assert_eq!(exit_code(first).await, Some(0));
    assert_eq!(upstream.all().len(), 2, "no attempt started after SIGTERM");
    let (second, _) = start_binary(&upstream.url(), &args).await;
    upstream.release(1000);
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
