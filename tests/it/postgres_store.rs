//! The proxy over its Postgres store, and what it does when Postgres goes away: stopped,
//! killed (`-m immediate`, as after a crash) or restarted under load. Each fault test runs a
//! private PostgreSQL of its own (test-support's `PostgresServer`), so it can stop it; without
//! PostgreSQL's programs the tests report `SKIPPED`, unless `REQUIRE_POSTGRES=1`.
//!
//! Postgres keeps what it committed through a process kill (its WAL is replayed at the next
//! start), so unlike a Redis without persistence nothing acknowledged may be lost: a key whose
//! answer came back before the kill is replayed after the restart, never run again.

use crate::common;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::answer::Answer;
use common::binary::BIN;
use common::client::TestClient;
use common::poll;
use common::postgres_server::{shared_postgres, PostgresServer, Shutdown};
use common::proxy::TestProxy;
use common::upstream::TestUpstream;
use idempotency_postgres::{ConnectOptions, DatabaseUrl};
use idempotency_proxy::store::{PostgresStore, Store};
use tokio::time::Instant;

const BODY: &str = r#"{"amount":42}"#;
/// Replays come from the store, not from the proxy's local copy of recent records.
const NO_CACHE: &str = "replay_cache_ttl = \"0s\"";

/// Runs a test body, failing it if it does not finish in time.
async fn bounded<T>(limit: Duration, body: impl Future<Output = T>) -> T {
    tokio::time::timeout(limit, body)
        .await
        .unwrap_or_else(|_| panic!("the test did not finish within {limit:?}"))
}

/// A proxy in front of `upstream` over a Postgres store on `server`, with short time-outs so
/// an outage is refused rather than waited out.
async fn proxy_over(server: &PostgresServer, upstream: &TestUpstream) -> TestProxy {
    let url = DatabaseUrl::resolve(&server.url()).unwrap();
    let options = ConnectOptions {
        pool_size: 8,
        statement_timeout: Duration::from_secs(1),
        connect_timeout: Duration::from_secs(1),
        ..ConnectOptions::default()
    };
    let store = PostgresStore::connect(&url, &options, None)
        .await
        .unwrap_or_else(|e| panic!("the store cannot open on {url}: {e}"));
    let store: Arc<dyn Store> = Arc::new(store);
    let toml = format!(
        "upstream = \"{}\"\n[defaults]\n{NO_CACHE}\n",
        upstream.url()
    );
    TestProxy::start(&toml, store).await
}

async fn readyz(proxy: &TestProxy) -> u16 {
    let answer = proxy.admin.send("GET", "/readyz", &[], "").await;
    answer.status.as_u16()
}

async fn wait_until_ready(proxy: &TestProxy) {
    let ready = async || readyz(proxy).await == 200;
    poll::until(
        Duration::from_secs(20),
        "/readyz 200 after Postgres came back",
        ready,
    )
    .await;
}

fn assert_store_unavailable(answer: &Answer) {
    assert_eq!(answer.status, 503, "{answer:?}");
    assert_eq!(answer.problem_type(), "store-unavailable");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_closed_while_postgres_is_stopped_then_reconnects_by_itself() {
    let Some(mut postgres) = PostgresServer::start().await else {
        return;
    };
    let upstream = TestUpstream::start().await;
    let proxy = proxy_over(&postgres, &upstream).await;

    bounded(Duration::from_secs(60), async {
        let before = proxy.client.post("/v1/charges", "before-stop", BODY).await;
        assert_eq!(before.status, 201, "{before:?}");
        assert_eq!(readyz(&proxy).await, 200);

        postgres.stop(Shutdown::Fast);
        let refused = proxy.client.post("/v1/charges", "while-down", BODY).await;
        assert_store_unavailable(&refused);
        assert_eq!(upstream.executions_of("while-down"), 0);
        assert_eq!(readyz(&proxy).await, 503);

        postgres.restart().await;
        // The same proxy, not restarted: its pool must make new connections without help.
        wait_until_ready(&proxy).await;
        let replayed = proxy.client.post("/v1/charges", "before-stop", BODY).await;
        assert!(replayed.replayed(), "{replayed:?}");
        assert_eq!(replayed.body, before.body);
        let after = proxy.client.post("/v1/charges", "while-down", BODY).await;
        assert_eq!(after.status, 201, "{after:?}");
        assert!(!after.replayed());
        assert_eq!(upstream.executions_of("before-stop"), 1);
        assert_eq!(upstream.executions_of("while-down"), 1);
    })
    .await;
}

/// Keys sent while Postgres runs, before the kill: `CONCURRENCY` clients, one key after another.
const BEFORE: std::ops::Range<usize> = 0..32;
/// Keys sent all at once right after the kill, while Postgres is down.
const DURING: std::ops::Range<usize> = 32..40;
/// Keys sent after the restart.
const AFTER: std::ops::Range<usize> = 40..56;
const CONCURRENCY: usize = 4;
/// Postgres is killed once this many keys have been answered.
const KILL_AFTER: usize = 12;
const DOWNTIME: Duration = Duration::from_millis(1500);
/// A hang's limit, with room for a loaded machine, not a speed's.
const REQUEST_BOUND: Duration = Duration::from_secs(30);
/// Every request of the stream, and a retry must be the same request.
const TARGET: &str = "/v1/charges?delay_ms=20";

struct Exchange {
    key: usize,
    answered: Instant,
    answer: Answer,
}

fn key_name(key: usize) -> String {
    format!("load-{key:02}")
}

/// Sends each key of `keys` once, `clients` at a time, logging every answer.
async fn send_all(
    client: &TestClient,
    keys: std::ops::Range<usize>,
    clients: usize,
    log: &Arc<Mutex<Vec<Exchange>>>,
) {
    let next = Arc::new(AtomicUsize::new(keys.start));
    let workers: Vec<_> = (0..clients)
        .map(|_| {
            let (next, log, client, end) = (next.clone(), log.clone(), client.clone(), keys.end);
            tokio::spawn(async move {
                loop {
                    let key = next.fetch_add(1, Ordering::SeqCst);
                    if key >= end {
                        return;
                    }
                    let name = key_name(key);
                    let request = client.post(TARGET, &name, BODY);
                    let answer = tokio::time::timeout(REQUEST_BOUND, request)
                        .await
                        .unwrap_or_else(|_| panic!("{name}: no answer in {REQUEST_BOUND:?}"));
                    let answered = Instant::now();
                    log.lock().unwrap().push(Exchange {
                        key,
                        answered,
                        answer,
                    });
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.expect("a client panicked");
    }
}

/// Keyed first requests from several clients while Postgres is killed with `-m immediate` and
/// started again. Every answer is a fresh `201`, `409` or `503 store-unavailable`; requests
/// sent while it is down get `503` and never reach the upstream; every key answered before the
/// kill is replayed after the restart with the body it was first answered (nothing
/// acknowledged was lost) and ran upstream once; every key sent after the restart runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_under_load_loses_nothing_acknowledged() {
    let Some(mut postgres) = PostgresServer::start().await else {
        return;
    };
    let upstream = TestUpstream::start().await;
    let proxy = proxy_over(&postgres, &upstream).await;
    let log = Arc::new(Mutex::new(Vec::<Exchange>::new()));

    let killed_at = bounded(Duration::from_secs(180), async {
        let before = tokio::spawn({
            let (client, log) = (proxy.client.clone(), log.clone());
            async move { send_all(&client, BEFORE, CONCURRENCY, &log).await }
        });
        let streaming = async || log.lock().unwrap().len() >= KILL_AFTER;
        poll::until(
            Duration::from_secs(30),
            "answers before the kill",
            streaming,
        )
        .await;
        let killed_at = Instant::now();
        postgres.stop(Shutdown::Immediate);
        send_all(&proxy.client, DURING, DURING.len(), &log).await;
        tokio::time::sleep(DOWNTIME).await;
        postgres.restart().await;
        before.await.expect("the clients before the kill panicked");
        wait_until_ready(&proxy).await;
        send_all(&proxy.client, AFTER, CONCURRENCY, &log).await;
        killed_at
    })
    .await;
    let exchanges = std::mem::take(&mut *log.lock().unwrap());
    assert_eq!(exchanges.len(), AFTER.end);

    let mut counts: HashMap<u16, usize> = HashMap::new();
    for exchange in &exchanges {
        let answer = &exchange.answer;
        match answer.status.as_u16() {
            201 => {}
            409 => assert_eq!(answer.problem_type(), "request-in-flight", "{answer:?}"),
            503 => assert_store_unavailable(answer),
            other => panic!("unexpected status {other}: {answer:?}"),
        }
        *counts.entry(answer.status.as_u16()).or_default() += 1;
    }
    let (mut before, mut during) = (0, 0);
    for exchange in &exchanges {
        let name = key_name(exchange.key);
        if exchange.answered < killed_at && exchange.answer.status == 201 {
            // Acknowledged before the kill: committed, so it must come back.
            let again = proxy.client.post(TARGET, &name, BODY).await;
            assert!(again.replayed(), "{name} was lost with the kill: {again:?}");
            assert_eq!(again.body, exchange.answer.body, "{name}");
            assert_eq!(upstream.executions_of(&name), 1, "{name}");
            before += 1;
        }
        if DURING.contains(&exchange.key) {
            assert_store_unavailable(&exchange.answer);
            assert_eq!(upstream.executions_of(&name), 0, "{name}");
            during += 1;
        }
        if AFTER.contains(&exchange.key) {
            assert_eq!(exchange.answer.status, 201, "{name}: {:?}", exchange.answer);
            assert_eq!(upstream.executions_of(&name), 1, "{name}");
        }
    }
    assert!(
        before >= KILL_AFTER && during == DURING.len(),
        "{before}, {during}: {counts:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_refuses_a_table_of_another_layout_with_exit_2() {
    let Some(server) = tokio::task::block_in_place(shared_postgres) else {
        return;
    };
    let url = server.fresh_database();
    let database = url.rsplit('/').next().unwrap().to_owned();
    server.psql_on(
        &database,
        "CREATE TABLE idempotency_records (id int PRIMARY KEY)",
    );
    let output = tokio::process::Command::new(BIN)
        .args([
            "--upstream",
            "http://127.0.0.1:9",
            "--listen",
            "127.0.0.1:0",
        ])
        .args(["--store", &url])
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("idempotency_records") && stderr.contains("another layout"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_serves_from_a_url_given_by_env_and_creates_its_schema() {
    let Some(server) = tokio::task::block_in_place(shared_postgres) else {
        return;
    };
    let url = server.fresh_database();
    let database = url.rsplit('/').next().unwrap().to_owned();
    let upstream = TestUpstream::start().await;
    let config = common::temp::TempPath::new("postgres-store.toml");
    std::fs::write(
        config.path(),
        "store = \"env:PROXY_TEST_DATABASE_URL\"\nstore_schema = \"proxy\"\n",
    )
    .unwrap();
    let config_path = config.path().to_str().unwrap().to_owned();
    let (_child, client) = common::binary::start_binary_with_env(
        &upstream.url(),
        &["--config", &config_path],
        std::process::Stdio::null,
        &[("PROXY_TEST_DATABASE_URL", &url)],
    )
    .await;
    let first = client.post("/v1/charges", "by-env", BODY).await;
    assert_eq!(first.status, 201, "{first:?}");
    let again = client.post("/v1/charges", "by-env", BODY).await;
    assert!(again.replayed(), "{again:?}");
    let rows = server.psql_on(&database, "SELECT count(*) FROM proxy.idempotency_records");
    assert_eq!(rows, "1");
}

/// An inline URL's password never reaches the log: not in the start's line naming the store,
/// nor in a refused reload's line naming the old and new values. (The private server trusts
/// its local connections, so the password is carried but never checked.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_never_logs_the_store_password() {
    let Some(server) = tokio::task::block_in_place(shared_postgres) else {
        return;
    };
    let url = server.fresh_database();
    let with_password = |password: &str| {
        let written = url.replace("postgres@", &format!("postgres:{password}@"));
        format!("store = \"{written}\"\n")
    };
    let masked = url.replace("postgres@", "postgres:***@");
    let upstream = TestUpstream::start().await;
    let config = common::temp::TempPath::new("postgres-password.toml");
    std::fs::write(config.path(), with_password("hunter2")).unwrap();
    let log_file = common::temp::TempPath::new("postgres-password.log");
    let log = std::fs::File::create(log_file.path()).unwrap();
    let config_path = config.path().to_str().unwrap().to_owned();
    let (child, client) =
        common::binary::start_binary_logging(&upstream.url(), &["--config", &config_path], || {
            std::process::Stdio::from(log.try_clone().unwrap())
        })
        .await;
    let first = client.post("/v1/charges", "logged", BODY).await;
    assert_eq!(first.status, 201, "{first:?}");

    std::fs::write(config.path(), with_password("hunter3")).unwrap();
    common::signal::send(child.id().unwrap(), "HUP");
    let read = || std::fs::read_to_string(log_file.path()).unwrap();
    let refused = async || read().contains("config reload refused");
    poll::until(
        Duration::from_secs(30),
        "the refused reload logged",
        refused,
    )
    .await;
    let text = read();
    assert!(
        !text.contains("hunter2") && !text.contains("hunter3"),
        "{text}"
    );
    let listening = text.lines().find(|l| l.contains("proxy listening"));
    assert!(listening.is_some_and(|l| l.contains(&masked)), "{text}");
    let reload = text.lines().find(|l| l.contains("config reload refused"));
    assert!(
        reload.is_some_and(|l| l.contains(&format!("{masked} -> {masked} (another password)"))),
        "{text}"
    );
}
