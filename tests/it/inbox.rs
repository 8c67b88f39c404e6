//! Inbox routes over real sockets (docs/reference.md#inbox-routes): acknowledged at once whatever the
//! upstream does, delivered once each with its key, retried with backoff until dead, retried
//! by an operator, within the route's concurrency and rate caps.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::answer::Answer;
use common::client::TestClient;
use common::inbox_upstream::{free_addr, InboxUpstream};
use common::poll;
use common::proxy::TestProxy;
use common::records::{outcome, scoped};
use idempotency_core::backend::{Delivery, FencingToken, StoredRequest};
use idempotency_proxy::store::{MemoryStore, Store};
use serde_json::Value;
use tokio::time::Instant;

const WAIT: Duration = Duration::from_secs(20);

/// A proxy with one inbox route `hooks` on `/hooks/` to `upstream`, with `extra` route keys.
async fn inbox_proxy(upstream: &str, extra: &str) -> TestProxy {
    let toml = format!(
        r#"
[defaults]
retry_initial = "50ms"
retry_max = "200ms"

[[routes]]
name = "hooks"
path_prefix = "/hooks/"
upstream = "{upstream}"
mode = "inbox"
{extra}

[[routes]]
name = "api"
path_prefix = "/v1/"
upstream = "{upstream}"
"#
    );
    TestProxy::start(&toml, Arc::new(MemoryStore::new())).await
}

async fn hook(client: &TestClient, key: &str, body: &'static str) -> Answer {
    let headers = [("idempotency-key", key), ("x-github-event", "push")];
    client
        .send("POST", "/hooks/github?source=test", &headers, body)
        .await
}

async fn queues(proxy: &TestProxy) -> Value {
    let answer = proxy.admin.send("GET", "/inbox/hooks", &[], "").await;
    assert_eq!(answer.status, 200, "{answer:?}");
    answer.json()
}

/// Asks the admin endpoint until the queues say `done`, at most `WAIT`.
async fn until_queues(proxy: &TestProxy, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let counted = async || Some(queues(proxy).await).filter(&done);
    poll::until(WAIT, what, counted).await
}

fn drained(queues: &Value) -> bool {
    queues["pending"] == 0 && queues["in_flight"] == 0
}

#[tokio::test]
async fn acks_while_the_upstream_is_down_then_delivers_each_once_with_its_key() {
    let addr = free_addr();
    let proxy = inbox_proxy(&format!("http://{addr}"), "").await;
    let mut ids = Vec::new();
    for n in 0..20 {
        let answer = hook(&proxy.client, &format!("evt-{n}"), "{\"a\":1}").await;
        assert_eq!(answer.status, 202, "acknowledged at once: {answer:?}");
        assert_eq!(answer.header("content-type"), Some("application/json"));
        assert!(!answer.replayed());
        ids.push(answer.json()["delivery"].as_str().unwrap().to_owned());
    }
    for (n, id) in ids.iter().enumerate().take(5) {
        let again = hook(&proxy.client, &format!("evt-{n}"), "{\"a\":1}").await;
        assert_eq!(again.status, 202);
        assert!(
            again.replayed(),
            "a duplicate gets the acknowledgement replayed"
        );
        assert_eq!(
            again.json()["delivery"],
            *id,
            "the same delivery, not a second one"
        );
    }
    let counted = queues(&proxy).await;
    assert_eq!(
        counted["pending"].as_u64().unwrap() + counted["in_flight"].as_u64().unwrap(),
        20
    );

    let upstream = InboxUpstream::start_at(addr).await;
    upstream.until(WAIT, "every key", |u| u.keys() == 20).await;
    until_queues(&proxy, "the queue to drain", drained).await;
    for n in 0..20 {
        let arrivals = upstream.arrivals(&format!("evt-{n}"));
        assert_eq!(arrivals.len(), 1, "evt-{n} delivered once");
        let seen = &arrivals[0];
        assert_eq!(seen.method, "POST");
        assert_eq!(seen.uri, "/hooks/github?source=test");
        assert_eq!(seen.headers["x-github-event"], "push");
        assert_eq!(&seen.body[..], b"{\"a\":1}");
        assert!(seen.attempt >= 1);
        assert!(seen.headers.contains_key("x-forwarded-for"));
    }
    let other_body = hook(&proxy.client, "evt-0", "{\"a\":2}").await;
    assert_eq!(other_body.status, 422);
    assert_eq!(other_body.problem_type(), "key-reused");
    proxy.shutdown().await;
}

#[tokio::test]
async fn failures_back_off_until_dead_and_an_operator_retry_delivers() {
    let upstream = InboxUpstream::start().await;
    upstream.answer(500);
    let proxy = inbox_proxy(&upstream.url(), "max_attempts = 4\nretry_max = \"400ms\"").await;
    assert_eq!(hook(&proxy.client, "doomed", "{}").await.status, 202);
    upstream
        .until(WAIT, "four attempts", |u| u.arrivals("doomed").len() == 4)
        .await;
    let dead = until_queues(&proxy, "the delivery to die", |q| q["dead"] == 1).await;
    assert!(drained(&dead), "{dead}");
    let arrivals = upstream.arrivals("doomed");
    let attempts: Vec<u32> = arrivals.iter().map(|a| a.attempt).collect();
    assert_eq!(attempts, [1, 2, 3, 4]);
    // Each wait is drawn below its ceiling (50ms, 100ms, 200ms); the slack covers the poll
    // interval and a loaded machine (whose scheduler alone can stall a task for a second), and
    // is still far below what a backoff in the wrong unit would wait.
    for (n, pair) in arrivals.windows(2).enumerate() {
        let ceiling = Duration::from_millis(50 << n) + Duration::from_secs(5);
        let gap = pair[1].at - pair[0].at;
        assert!(gap <= ceiling, "gap {n} was {gap:?}");
    }

    let listed = proxy.admin.send("GET", "/inbox/hooks/dead", &[], "").await;
    assert_eq!(listed.status, 200);
    let listed = listed.json();
    let entry = &listed[0];
    assert_eq!(entry["attempts"], 4);
    assert_eq!(entry["last_status"], 500);
    assert_eq!(entry["last_error"], "upstream answered 500");
    let received = entry["received_at"].as_str().unwrap();
    assert!(humantime::parse_rfc3339(received).is_ok(), "{received}");
    let id = entry["id"].as_str().unwrap().to_owned();

    upstream.answer(200);
    let retry = format!("/inbox/hooks/dead/{id}/retry");
    assert_eq!(proxy.admin.send("POST", &retry, &[], "").await.status, 204);
    upstream
        .until(WAIT, "the retried attempt", |u| {
            u.arrivals("doomed").len() == 5
        })
        .await;
    assert_eq!(
        upstream.arrivals("doomed")[4].attempt,
        1,
        "a fresh attempt budget"
    );
    let after = until_queues(&proxy, "delivery", drained).await;
    assert_eq!(after["dead"], 0);
    assert_eq!(proxy.admin.send("POST", &retry, &[], "").await.status, 404);
    proxy.shutdown().await;
}

#[tokio::test]
async fn dead_deliveries_page_and_go_and_unknown_names_are_404() {
    let upstream = InboxUpstream::start().await;
    upstream.answer(503);
    let proxy = inbox_proxy(&upstream.url(), "max_attempts = 1").await;
    for n in 0..3 {
        assert_eq!(
            hook(&proxy.client, &format!("k{n}"), "{}").await.status,
            202
        );
    }
    until_queues(&proxy, "three dead", |q| q["dead"] == 3).await;
    let page = |query: String| {
        let admin = proxy.admin.clone();
        async move {
            admin
                .send("GET", &format!("/inbox/hooks/dead{query}"), &[], "")
                .await
                .json()
        }
    };
    let all = page(String::new()).await;
    let ids: Vec<&str> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 3);
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "in id order");
    let first = page("?limit=2".into()).await;
    assert_eq!(first.as_array().unwrap().len(), 2);
    let rest = page(format!("?limit=2&after={}", ids[1])).await;
    assert_eq!(rest[0]["id"], ids[2]);
    assert_eq!(rest.as_array().unwrap().len(), 1);
    let gone = format!("/inbox/hooks/dead/{}", ids[0]);
    assert_eq!(proxy.admin.send("DELETE", &gone, &[], "").await.status, 204);
    assert_eq!(proxy.admin.send("DELETE", &gone, &[], "").await.status, 404);
    assert_eq!(queues(&proxy).await["dead"], 2);
    for (method, path) in [
        ("GET", "/inbox/nope".to_owned()),
        ("GET", "/inbox/api".to_owned()),
        ("GET", "/inbox/nope/dead".to_owned()),
        ("POST", "/inbox/hooks/dead/not-an-id/retry".to_owned()),
        (
            "POST",
            format!("/inbox/hooks/dead/{}/retry", "0".repeat(32)),
        ),
    ] {
        let answer = proxy.admin.send(method, &path, &[], "").await;
        assert_eq!(answer.status, 404, "{method} {path}");
        let kind = if path.contains("/dead/") {
            "no-delivery"
        } else {
            "no-route"
        };
        assert_eq!(answer.problem_type(), kind, "{method} {path}");
    }
    let bad = proxy
        .admin
        .send("GET", "/inbox/hooks/dead?limit=0", &[], "")
        .await;
    assert_eq!(bad.status, 400);
    assert_eq!(bad.problem_type(), "bad-request");
    proxy.shutdown().await;
}

#[tokio::test]
async fn no_more_than_deliver_concurrency_attempts_at_once() {
    let upstream = InboxUpstream::start().await;
    // Answers are held until the attempts have piled up to the limit, however slow the
    // machine: an attempt past it would arrive meanwhile.
    upstream.hold();
    let proxy = inbox_proxy(&upstream.url(), "deliver_concurrency = 3").await;
    for n in 0..12 {
        assert_eq!(
            hook(&proxy.client, &format!("c{n}"), "{}").await.status,
            202
        );
    }
    let piled_up = |u: &InboxUpstream| u.most_in_flight() >= 3;
    upstream
        .until(WAIT, "three attempts at once", piled_up)
        .await;
    upstream.release(1000);
    upstream.until(WAIT, "every key", |u| u.keys() == 12).await;
    until_queues(&proxy, "the queue to drain", drained).await;
    let most = upstream.most_in_flight();
    assert!(most <= 3, "{most} attempts at once");
    proxy.shutdown().await;
}

/// Ten deliveries accepted at once on a route with `deliver_rate = 5`: the upstream, which
/// counts arrivals as a receiver's own limiter does, sees them at least 200 ms apart, never six
/// within a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliver_rate_paces_the_arrivals_at_the_upstream() {
    let upstream = InboxUpstream::start().await;
    let proxy = inbox_proxy(&upstream.url(), "deliver_rate = 5").await;
    for n in 0..10 {
        assert_eq!(
            hook(&proxy.client, &format!("r{n}"), "{}").await.status,
            202
        );
    }
    upstream.until(WAIT, "every key", |u| u.keys() == 10).await;
    upstream.assert_paced(5);
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_request_without_a_key_is_proxied_and_nothing_is_queued() {
    let upstream = InboxUpstream::start().await;
    upstream.answer(201);
    let proxy = inbox_proxy(&upstream.url(), "").await;
    let plain = proxy.client.send("POST", "/hooks/plain", &[], "{}").await;
    assert_eq!(plain.status, 201, "the upstream's own answer");
    assert_eq!(upstream.arrivals("").len(), 1);
    let counted = queues(&proxy).await;
    assert_eq!(counted["pending"], 0);
    let status = proxy.admin.send("GET", "/status", &[], "").await.json();
    let routes = status["routes"].as_array().unwrap();
    let section = |name: &str| {
        let route = routes.iter().find(|r| r["name"] == name).unwrap();
        route.get("inbox").cloned()
    };
    assert_eq!(section("hooks").unwrap()["state"], "ok", "{status}");
    assert!(section("api").is_none(), "a proxy route shows no queues");
    proxy.shutdown().await;
}

/// A delivery on route `aged`, acknowledged `age` ago, queued straight into `store`.
async fn queue_received_ago(store: &MemoryStore, age: Duration) {
    let request = StoredRequest {
        method: http::Method::POST,
        target: "/aged/a".into(),
        headers: http::HeaderMap::new(),
        body: bytes::Bytes::new(),
    };
    let key = scoped("aged", None, "old");
    let mut delivery = Delivery::new(key.clone(), request);
    delivery.received_at -= age;
    let ack = outcome(FencingToken::generate(), bytes::Bytes::new());
    let inbox = store.inbox().unwrap();
    let ttl = Duration::from_secs(3600);
    inbox.accept(&key, &ack, &delivery, ttl).await.unwrap();
}

/// The `oldest_pending_seconds` gauge of route `aged`, if it was set.
async fn oldest_gauge(proxy: &TestProxy) -> Option<f64> {
    let metrics = proxy.admin.send("GET", "/metrics", &[], "").await;
    let text = String::from_utf8_lossy(&metrics.body).into_owned();
    let line = "idempotency_inbox_oldest_pending_seconds{route=\"aged\"} ";
    let value = text.lines().find_map(|l| l.strip_prefix(line))?;
    Some(value.trim().parse().unwrap()).filter(|v| *v > 0.0)
}

#[tokio::test]
async fn the_oldest_pending_age_is_told_to_the_millisecond() {
    let store = Arc::new(MemoryStore::new());
    // Waiting for 1.5 s when the proxy starts (for an upstream that is down): whole seconds
    // would say 1.
    let waited = Duration::from_millis(1500);
    let queued = Instant::now();
    queue_received_ago(&store, waited).await;
    let toml = format!(
        "[[routes]]\nname = \"aged\"\npath_prefix = \"/aged/\"\nupstream = \"http://{}\"\nmode = \"inbox\"\nmax_attempts = 1000\n",
        free_addr()
    );
    let proxy = TestProxy::start(&toml, store).await;
    // The age between two moments, give or take the store's whole milliseconds.
    let age_within = |reported: f64, from: Instant, to: Instant| {
        let (low, high) = (waited + (from - queued), waited + (to - queued));
        let ms = Duration::from_millis(5);
        let reported = Duration::from_secs_f64(reported);
        assert!(
            reported + ms >= low && reported <= high + ms,
            "{reported:?} is not within {low:?}..={high:?}"
        );
    };
    let asked = Instant::now();
    let answer = proxy.admin.send("GET", "/inbox/aged", &[], "").await;
    let reported = answer.json()["oldest_pending_seconds"].as_f64().unwrap();
    age_within(reported, asked, Instant::now());
    // The gauge is counted when scraped, so it is there from the first scrape.
    let asked = Instant::now();
    let gauge = oldest_gauge(&proxy)
        .await
        .expect("the gauge, from the first scrape");
    age_within(gauge, asked, Instant::now());
    proxy.shutdown().await;
}

/// The value of `metric` for route `hooks` on `/metrics`, if it has one.
async fn hooks_gauge(proxy: &TestProxy, metric: &str) -> Option<f64> {
    let metrics = proxy.admin.send("GET", "/metrics", &[], "").await;
    assert_eq!(metrics.status, 200);
    let text = String::from_utf8_lossy(&metrics.body).into_owned();
    let line = format!("{metric}{{route=\"hooks\"}} ");
    let value = text.lines().find_map(|l| l.strip_prefix(line.as_str()))?;
    Some(value.trim().parse().unwrap())
}

/// Reads `/metrics` between two reads of `GET /inbox/hooks`, which must agree on the queues:
/// the pending gauge says what both say, and the oldest age is between theirs.
async fn gauges_agree(proxy: &TestProxy, pending: u64, in_flight: u64) {
    let before = queues(proxy).await;
    let gauge = hooks_gauge(proxy, "idempotency_inbox_pending").await;
    let oldest = hooks_gauge(proxy, "idempotency_inbox_oldest_pending_seconds").await;
    let after = queues(proxy).await;
    for counted in [&before, &after] {
        assert_eq!(
            (counted["pending"].as_u64(), counted["in_flight"].as_u64()),
            (Some(pending), Some(in_flight)),
            "{counted}"
        );
    }
    assert_eq!(
        gauge,
        Some(pending as f64),
        "the pending gauge, with {after}"
    );
    let (low, high) = (
        before["oldest_pending_seconds"].as_f64().unwrap(),
        after["oldest_pending_seconds"].as_f64().unwrap(),
    );
    let oldest = oldest.expect("the oldest pending age gauge");
    assert!(
        (low..=high).contains(&oldest),
        "the oldest age gauge says {oldest}, the admin view {low} then {high}"
    );
}

/// With one attempt at a time and the upstream holding its answers, the queues change only
/// when the test lets an answer go; right after each change the gauges say what
/// `GET /inbox/{route}` says.
#[tokio::test]
async fn the_queue_gauges_agree_with_the_admin_view_whenever_metrics_are_read() {
    let upstream = InboxUpstream::start().await;
    upstream.hold();
    let proxy = inbox_proxy(&upstream.url(), "deliver_concurrency = 1").await;
    for n in 0..3 {
        assert_eq!(
            hook(&proxy.client, &format!("g{n}"), "{}").await.status,
            202
        );
    }
    for delivered in 0..3 {
        let arrived = delivered + 1;
        let what = format!("attempt {arrived} at the upstream");
        upstream.until(WAIT, &what, |u| u.keys() == arrived).await;
        let waiting = (2 - delivered) as u64;
        until_queues(&proxy, "the admin view to follow", |q| {
            q["pending"] == waiting && q["in_flight"] == 1
        })
        .await;
        gauges_agree(&proxy, waiting, 1).await;
        upstream.release(1);
    }
    until_queues(&proxy, "the queue to drain", drained).await;
    gauges_agree(&proxy, 0, 0).await;
    proxy.shutdown().await;
}
