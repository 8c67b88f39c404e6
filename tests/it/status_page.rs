//! The admin status page in a real browser: headless Chromium loads `GET /`, the page's script
//! polls `/status`, and the rendered DOM is checked against `/metrics` and `GET /outbox/{name}`
//! (an outbox relay on a private PostgreSQL, where there is one), and for anything a client or
//! an application sent that must never be shown.
//!
//! Without Chromium on the machine the browser checks say SKIPPED and pass, unless
//! `REQUIRE_BROWSER=1` (as CI sets it). `STATUS_PAGE_SCREENSHOT=PATH` also writes the
//! screenshot there (the picture in docs/operations.md, `docs/status-page.png`, is made that way).

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::client::TestClient;
use common::poll;
use common::postgres_server::{PostgresServer, Shutdown};
use common::proxy::TestProxy;
use common::receiver::{Receiver, Reply};
use common::temp::TempPath;
use common::upstream::TestUpstream;
use idempotency_core::backend::{IdempotencyKey, RouteName, ScopedKey};
use idempotency_outbox::{Event, EventId};
use idempotency_proxy::store::{MemoryStore, StoreError};
use idempotency_proxy::{InboxQueues, InboxStats};
use idempotency_test_support::outbox::OutboxDb;

const OUTCOMES: [&str; 7] = [
    "forwarded",
    "replayed",
    "conflict",
    "mismatch",
    "rejected",
    "released",
    "bypassed",
];

/// Card numbers and keys that must never reach the page.
const CARD: &str = "4242-4242-4242-4242";
const KEY_PREFIX: &str = "customer-7731-order";

/// Chromium, if the machine has it; says SKIPPED loudly when it does not and may not.
fn chromium() -> Option<PathBuf> {
    let names = ["chromium", "chromium-browser", "google-chrome"];
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path)
        .flat_map(|dir| names.map(|n| dir.join(n)))
        .find(|candidate| candidate.is_file());
    if found.is_none() {
        assert!(
            std::env::var("REQUIRE_BROWSER").as_deref() != Ok("1"),
            "REQUIRE_BROWSER=1 but no chromium on PATH"
        );
        eprintln!("\n*** SKIPPED: no chromium on PATH; the status page was not checked in a browser (apt-get install chromium) ***\n");
    }
    found
}

/// Runs headless Chromium on `url` with `action` (`--dump-dom` or `--screenshot=PATH`), after
/// the page has had 5 s of its own time to fetch `/status` and render.
async fn chromium_run(browser: &Path, url: &str, action: &str) -> String {
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    let profile = std::env::temp_dir().join(format!(
        "status-page-chromium-{}-{}",
        std::process::id(),
        RUNS.fetch_add(1, Ordering::Relaxed)
    ));
    let run = tokio::process::Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--window-size=1280,900",
            "--virtual-time-budget=5000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args([action, url])
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(90), run)
        .await
        .expect("chromium finishes within 90s")
        .expect("chromium starts");
    let _ = std::fs::remove_dir_all(&profile);
    assert!(
        output.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("the DOM is UTF-8")
}

/// The number in the page's totals cell for `route` and `outcome`.
fn dom_total(dom: &str, route: &str, outcome: &str) -> Option<u64> {
    let cell = format!("data-route=\"{route}\" data-outcome=\"{outcome}\">");
    let at = dom.find(&cell)? + cell.len();
    dom[at..].split('<').next()?.parse().ok()
}

/// The request counter for `route` and `outcome` in Prometheus text, 0 when absent.
fn metric_total(metrics: &str, route: &str, outcome: &str) -> u64 {
    let labels = [
        format!("route=\"{route}\""),
        format!("outcome=\"{outcome}\""),
    ];
    metrics
        .lines()
        .filter(|l| l.starts_with("idempotency_requests_total{"))
        .filter(|l| labels.iter().all(|label| l.contains(label.as_str())))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

fn two_routes(upstream: &str, payments: &str, hooks: &str, extra: &str) -> String {
    format!(
        "store = \"memory\"\n{extra}\n\
         [[routes]]\nname = \"{payments}\"\npath_prefix = \"/v1/\"\nupstream = \"{upstream}\"\nrequire_key = true\n\
         [[routes]]\nname = \"{hooks}\"\npath_prefix = \"/hooks/\"\nupstream = \"{upstream}\"\n"
    )
}

fn key(n: usize) -> String {
    format!("{KEY_PREFIX}-{n}")
}

fn body(n: usize) -> String {
    format!("{{\"card\":\"{CARD}\",\"amount\":{n}}}")
}

async fn post(client: &TestClient, path: &str, key: &str, body: String) -> u16 {
    let headers = [
        ("idempotency-key", key),
        ("content-type", "application/json"),
    ];
    client
        .send("POST", path, &headers, body)
        .await
        .status
        .as_u16()
}

/// A few seconds of mixed traffic on both routes: every outcome but `released`.
async fn traffic(proxy: &TestProxy, upstream: &TestUpstream) {
    let client = &proxy.client;
    for round in 0..4 {
        for n in round * 3..round * 3 + 3 {
            assert_eq!(post(client, "/v1/charges", &key(n), body(n)).await, 201);
            assert_eq!(
                post(client, "/v1/charges", &key(n), body(n)).await,
                201,
                "replayed"
            );
        }
        let reused = post(client, "/v1/charges", &key(round * 3), body(999)).await;
        assert_eq!(reused, 422, "same key, another body");
        let no_key = client.send("POST", "/v1/charges", &[], body(1)).await;
        assert_eq!(no_key.status, 400, "payments require a key");
        assert_eq!(
            post(client, "/hooks/github", &key(100 + round), body(round)).await,
            201
        );
        let read = client.send("GET", "/hooks/github", &[], "").await;
        assert!(
            read.status.is_success() && !read.replayed(),
            "a GET is passed through"
        );
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    let slow = [("idempotency-key", "slow-order"), ("x-hold", "slow-order")];
    let first = {
        let client = client.clone();
        tokio::spawn(async move { client.send("POST", "/v1/charges", &slow, body(7)).await })
    };
    upstream.until_executed("slow-order").await;
    let duplicate = client.send("POST", "/v1/charges", &slow, body(7)).await;
    assert_eq!(duplicate.status, 409, "the first is still in flight");
    upstream.release("slow-order");
    assert_eq!(first.await.unwrap().status, 201);
}

/// An `[[outboxes]]` table named `payments` on `db`, relaying to `receiver`; an attempt may wait
/// minutes for its answer, so a held one stays in flight while the page is looked at.
fn outbox_config(database: &str, receiver: &Receiver) -> String {
    format!(
        "[[outboxes]]\nname = \"payments\"\ndatabase = \"{database}\"\ndeliver_to = \"{}\"\n\
         poll_interval = \"100ms\"\nnotify_channel = \"outbox\"\ndeliver_timeout = \"5m\"\n\
         on_dead = \"block\"\n",
        receiver.url("/events")
    )
}

/// An event whose body holds a card number, which the page must never show.
fn card_event(id: &str) -> Event {
    let body = serde_json::json!({ "card": CARD, "event": id });
    let id = EventId::new(id).unwrap();
    Event::json(id, "payment.confirmed", &body).unwrap()
}

/// Rows in each state the page counts: `a1` dead (`410`), `a2` pending behind it (its
/// aggregate blocked), `held` in flight, `fine` delivered.
async fn outbox_rows(db: &OutboxDb, receiver: &Receiver) {
    receiver.script("a1", [Reply::status(410)]);
    receiver.script("held", [Reply::status(200).held()]);
    let (a1, a2) = (card_event("a1"), card_event("a2"));
    db.commit(&[a1.aggregate("order-A"), a2.aggregate("order-A")])
        .await;
    db.commit(&[card_event("fine"), card_event("held")]).await;
    db.until_dead("a1").await;
    db.until_delivered("fine").await;
    let wait = Duration::from_secs(30);
    receiver
        .until(wait, "held being attempted", |r| r.held() == 1)
        .await;
}

/// The text of the queue section marked `attribute="name"` (an inbox route's or an
/// outbox's), from its start to the end of the section.
fn queue_text(dom: &str, attribute: &str, name: &str) -> Option<String> {
    let at = dom.find(&format!("{attribute}=\"{name}\""))?;
    let section = &dom[at..];
    let end = section.find("</div>")?;
    let text = section[..end]
        .split('<')
        .filter_map(|part| part.split_once('>'));
    Some(text.map(|(_, text)| text).collect())
}

/// The outbox's section says what `GET /outbox/payments` says, in the inboxes' words.
async fn check_outbox_section(proxy: &TestProxy, dom: &str) {
    let counts = proxy.admin.send("GET", "/outbox/payments", &[], "").await;
    assert_eq!(counts.status, 200, "{counts:?}");
    let counts = counts.json();
    for field in [
        "pending",
        "in_flight",
        "dead",
        "delivered_last_hour",
        "blocked_aggregates",
    ] {
        assert_eq!(counts[field], 1, "{field}: {counts}");
    }
    let text = queue_text(dom, "data-outbox", "payments")
        .unwrap_or_else(|| panic!("no outbox section:\n{dom}"));
    for shown in [
        "pending 1",
        "in flight 1",
        "dead 1",
        "oldest pending ",
        "delivered last hour 1",
        "blocked aggregates 1",
    ] {
        assert!(text.contains(shown), "{shown:?} in {text:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_what_metrics_count_and_nothing_a_client_sent() {
    let upstream = TestUpstream::start().await;
    let (payments, hooks) = ("page-payments", "page-hooks");
    let mut toml = two_routes(&upstream.url(), payments, hooks, "");
    // With a PostgreSQL (else SKIPPED, loudly, and the page shows routes only), an outbox too.
    let outbox = OutboxDb::fresh().await;
    let receiver = Receiver::start().await;
    if let Some(db) = &outbox {
        toml.push_str(&outbox_config(&db.url, &receiver));
    }
    let proxy = TestProxy::with_outboxes(&toml, Arc::new(MemoryStore::new())).await;
    if let Some(db) = &outbox {
        outbox_rows(db, &receiver).await;
    }
    traffic(&proxy, &upstream).await;

    let status = proxy.admin.send("GET", "/status", &[], "").await;
    assert_eq!(status.status, 200);
    let json_text = String::from_utf8_lossy(&status.body).into_owned();
    for secret in [CARD, KEY_PREFIX, "slow-order"] {
        assert!(!json_text.contains(secret), "/status shows {secret:?}");
    }
    let digest = status.json()["config"]["digest"]
        .as_str()
        .unwrap()
        .to_owned();
    let Some(browser) = chromium() else { return };
    let url = format!("http://{}/", proxy.admin_addr);
    let dom = chromium_run(&browser, &url, "--dump-dom").await;
    assert!(
        dom.contains("data-state=\"ok\""),
        "the page rendered its data:\n{dom}"
    );
    let shown = format!("title=\"{digest}\">{}<", &digest[..12]);
    assert!(
        dom.contains(&shown),
        "the digest's start, and the whole on hover"
    );
    let metrics = proxy.admin.send("GET", "/metrics", &[], "").await;
    let metrics = String::from_utf8_lossy(&metrics.body).into_owned();
    for route in [payments, hooks] {
        for outcome in OUTCOMES {
            let shown = dom_total(&dom, route, outcome);
            assert_eq!(
                shown,
                Some(metric_total(&metrics, route, outcome)),
                "{route} {outcome}"
            );
        }
    }
    for (route, outcome, at_least) in [
        (payments, "forwarded", 13),
        (payments, "replayed", 12),
        (payments, "mismatch", 4),
        (payments, "conflict", 1),
        (payments, "rejected", 4),
        (hooks, "forwarded", 4),
        (hooks, "bypassed", 4),
    ] {
        assert!(
            dom_total(&dom, route, outcome) >= Some(at_least),
            "{route} {outcome}"
        );
    }
    for secret in [CARD, KEY_PREFIX, "slow-order", "amount", "order-A"] {
        assert!(!dom.contains(secret), "the page shows {secret:?}");
    }
    if outbox.is_some() {
        check_outbox_section(&proxy, &dom).await;
    }
    let slow_key = ScopedKey::new(
        RouteName::new(payments).unwrap(),
        None,
        IdempotencyKey::new("slow-order".to_owned()).unwrap(),
    );
    assert!(
        dom.contains(slow_key.log_id().as_str()),
        "the decisions list keys by their log id"
    );

    let shot = std::env::var_os("STATUS_PAGE_SCREENSHOT").map_or_else(
        || std::env::temp_dir().join(format!("status-page-{}.png", std::process::id())),
        PathBuf::from,
    );
    chromium_run(&browser, &url, &format!("--screenshot={}", shot.display())).await;
    let png = std::fs::read(&shot).expect("chromium wrote the screenshot");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 20_000,
        "{} bytes",
        png.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_an_admin_token_the_page_asks_for_it_before_showing_anything() {
    let upstream = TestUpstream::start().await;
    let token_file = std::env::temp_dir().join(format!("status-page-token-{}", std::process::id()));
    std::fs::write(&token_file, "s3cret-admin\n").unwrap();
    let extra = format!("admin_token = \"file:{}\"", token_file.display());
    let toml = two_routes(&upstream.url(), "token-payments", "token-hooks", &extra);
    let proxy = TestProxy::start(&toml, Arc::new(MemoryStore::new())).await;
    std::fs::remove_file(&token_file).unwrap();
    assert_eq!(
        post(&proxy.client, "/v1/charges", &key(1), body(1)).await,
        201
    );

    let page = proxy.admin.send("GET", "/", &[], "").await;
    assert_eq!(page.status, 200, "the page itself holds no data");
    assert_eq!(
        page.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    let policy = page.header("content-security-policy").unwrap();
    assert!(policy.contains("default-src 'none'") && policy.contains("connect-src 'self'"));
    let html = String::from_utf8_lossy(&page.body);
    assert!(!html.contains("token-payments") && !html.contains("s3cret"));
    assert!(
        !html.contains("src=\"http") && !html.contains("href=\"http"),
        "no assets from elsewhere"
    );

    assert_eq!(
        proxy.admin.send("GET", "/status", &[], "").await.status,
        401
    );
    let wrong = [("authorization", "Bearer s3cret-admi")];
    assert_eq!(
        proxy.admin.send("GET", "/status", &wrong, "").await.status,
        401
    );
    let right = [("authorization", "Bearer s3cret-admin")];
    let status = proxy.admin.send("GET", "/status", &right, "").await;
    assert_eq!(status.status, 200);
    assert_eq!(status.json()["routes"][0]["name"], "token-payments");

    let Some(browser) = chromium() else { return };
    let url = format!("http://{}/", proxy.admin_addr);
    let dom = chromium_run(&browser, &url, "--dump-dom").await;
    assert!(
        dom.contains("data-state=\"token\""),
        "the page asks for the token:\n{dom}"
    );
    assert!(
        !dom.contains("token-payments"),
        "and shows no route before it has one"
    );
}

/// Queues that stay as they are, so the age the page shows can be known in advance.
#[derive(Debug)]
struct Waited(Duration);

#[async_trait::async_trait]
impl InboxStats for Waited {
    async fn queues(&self) -> Result<InboxQueues, StoreError> {
        Ok(InboxQueues {
            pending: 1,
            in_flight: 0,
            dead: 0,
            oldest_pending: self.0,
        })
    }
}

/// The oldest pending age is shown as precisely as `/inbox/{route}` and the gauge carry it
/// where that matters (under ten seconds, to the tenth), then in whole seconds, minutes and
/// hours, never rounded up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_oldest_pending_age_is_shown_as_the_api_tells_it() {
    let upstream = TestUpstream::start().await;
    let shown = [
        ("age-none", 0, "0 s"),
        ("age-short", 700, "0.7 s"),
        ("age-tenths", 9_960, "9.9 s"),
        ("age-seconds", 12_400, "12 s"),
        ("age-minutes", 192_500, "3 min 12 s"),
        ("age-whole-minutes", 180_000, "3 min"),
        ("age-hours", 11_130_000, "3 h 5 min"),
    ];
    let mut toml = String::from("store = \"memory\"\n");
    for (n, (route, _, _)) in shown.iter().enumerate() {
        toml.push_str(&format!(
            "[[routes]]\nname = \"{route}\"\npath_prefix = \"/{n}/\"\nupstream = \"{}\"\n",
            upstream.url()
        ));
    }
    let file = TempPath::new("status-page-ages.toml");
    std::fs::write(file.path(), toml).unwrap();
    let (test_proxy, proxy) = TestProxy::from_file(file.path(), Arc::new(MemoryStore::new())).await;
    for (route, ms, _) in shown {
        let waited = Arc::new(Waited(Duration::from_millis(ms)));
        proxy
            .status()
            .set_inbox(&RouteName::new(route).unwrap(), waited);
    }
    let Some(browser) = chromium() else { return };
    let url = format!("http://{}/", test_proxy.admin_addr);
    let dom = chromium_run(&browser, &url, "--dump-dom").await;
    let wrong: Vec<_> = shown
        .iter()
        .filter_map(|(route, _, age)| {
            let text = queue_text(&dom, "data-inbox", route)
                .unwrap_or_else(|| panic!("no {route}:\n{dom}"));
            let right = text.ends_with(&format!("oldest pending {age}"));
            (!right).then(|| format!("{route}: {text:?}, not {age:?}"))
        })
        .collect();
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// The counter of requests refused because the store failed, for `route`.
fn store_unavailable_total(metrics: &str, route: &str) -> u64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("idempotency_store_unavailable_total{"))
        .filter(|l| l.contains(&format!("route=\"{route}\"")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[tokio::test]
async fn a_dead_store_shows_as_unreachable_and_its_refusals_are_counted() {
    let Some(mut redis) = common::redis_server::RedisServer::start().await else {
        return;
    };
    let upstream = TestUpstream::start().await;
    let store = idempotency_proxy::store::RedisStore::connect(&redis.url(), "status-page")
        .await
        .unwrap()
        .with_op_timeout(Duration::from_millis(500));
    let toml = format!(
        "store = \"redis://127.0.0.1:{}\"\n[[routes]]\nname = \"dead-store\"\npath_prefix = \"/\"\nupstream = \"{}\"\n",
        redis.port(),
        upstream.url()
    );
    let proxy = TestProxy::start(&toml, Arc::new(store)).await;
    assert_eq!(post(&proxy.client, "/v1/x", "before", body(1)).await, 201);
    let status = proxy.admin.send("GET", "/status", &[], "").await.json();
    assert_eq!(status["store"]["kind"], "redis");
    assert_eq!(status["store"]["health"], "ok");
    assert!(
        status["store"]["latency"]["samples"].as_u64() >= Some(2),
        "reserve and complete"
    );

    redis.kill();
    assert_eq!(
        post(&proxy.client, "/v1/x", "while-dead", body(2)).await,
        503
    );
    let status = proxy.admin.send("GET", "/status", &[], "").await.json();
    assert_ne!(status["store"]["health"], "ok");
    assert_eq!(status["routes"][0]["totals"]["rejected"], 1);
    let text = status.to_string();
    assert!(
        !text.contains("127.0.0.1") && !text.contains("redis://"),
        "the store's address is not shown: {text}"
    );
    let metrics = proxy.admin.send("GET", "/metrics", &[], "").await;
    let metrics = String::from_utf8_lossy(&metrics.body);
    assert_eq!(
        store_unavailable_total(&metrics, "dead-store"),
        1,
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outbox_whose_database_is_down_shows_as_unavailable() {
    let Some(mut server) = PostgresServer::start().await else {
        return;
    };
    let db = OutboxDb::on(server.fresh_database()).await;
    let receiver = Receiver::start().await;
    let toml = format!("store = \"memory\"\n{}", outbox_config(&db.url, &receiver));
    let proxy = TestProxy::with_outboxes(&toml, Arc::new(MemoryStore::new())).await;
    let status = proxy.admin.send("GET", "/status", &[], "").await.json();
    assert_eq!(status["outboxes"][0]["name"], "payments");
    assert_eq!(status["outboxes"][0]["state"], "ok", "{status}");

    server.stop(Shutdown::Immediate);
    // A count stands for a moment (so scrapes stay cheap): the page says so once it expires.
    let what = "the status page naming the outbox unavailable";
    let status = poll::until(Duration::from_secs(30), what, async || {
        let status = proxy.admin.send("GET", "/status", &[], "").await.json();
        (status["outboxes"][0]["state"] == "unavailable").then_some(status)
    })
    .await;
    let text = status.to_string();
    assert!(
        !text.contains("127.0.0.1") && !text.contains("postgres://"),
        "no address: {text}"
    );
    let Some(browser) = chromium() else { return };
    let url = format!("http://{}/", proxy.admin_addr);
    let dom = chromium_run(&browser, &url, "--dump-dom").await;
    let text = queue_text(&dom, "data-outbox", "payments")
        .unwrap_or_else(|| panic!("no outbox section:\n{dom}"));
    assert!(text.contains("unavailable"), "{text:?}");
}
