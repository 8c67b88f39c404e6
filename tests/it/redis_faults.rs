//! What the proxy does when its Redis goes away: killed, restarted empty, or hung.
//!
//! Each test runs its own `redis-server` (the test-support crate's `redis_server`) so it can
//! kill it, and each is bounded in time as a whole: a hang fails the test instead of stalling
//! the suite.
//! Every case runs twice, on Redis (`on_redis::`) and on Valkey (`on_valkey::`), where the
//! store's fenced writes are the server's own commands instead of scripts.

use crate::common;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::answer::Answer;
use common::client::TestClient;
use common::poll;
use common::proxy::TestProxy;
use common::redis::{unique_prefix, Relay};
use common::redis_server::{RedisServer, Server};
use common::upstream::TestUpstream;
use idempotency_proxy::store::{RedisStore, Store};
use idempotency_test_support::on_each_server;
use tokio::time::Instant;

const BODY: &str = r#"{"amount":42}"#;
/// Replays come from the store, not from the proxy's local copy of recent records.
const NO_CACHE: &str = "replay_cache_ttl = \"0s\"";

on_each_server!(
    #[tokio::test]
    fail_closed_refuses_while_redis_is_dead_and_recovers_by_itself,
    fail_open_forwards_while_redis_is_dead_and_counts_it,
    restart_mid_stream_gives_correct_answers_or_clean_refusals,
    hung_redis_gets_503_within_the_operation_timeout,
    stalled_redis_refuses_then_serves_the_refused_keys_when_it_resumes,
    a_corrupt_record_is_refused_even_under_fail_open,
    a_recent_replay_is_answered_from_memory_while_redis_hangs,
);

/// Runs a test body, failing it if it does not finish in time.
async fn bounded<T>(limit: Duration, body: impl Future<Output = T>) -> T {
    tokio::time::timeout(limit, body)
        .await
        .unwrap_or_else(|_| panic!("the test did not finish within {limit:?}"))
}

/// A proxy in front of `upstream` whose store is the Redis at `url`, with the given
/// `[defaults]` lines and, if given, an operation time-out other than the store's default.
async fn proxy_over(
    url: &str,
    upstream: &TestUpstream,
    defaults: &str,
    op_timeout: Option<Duration>,
) -> TestProxy {
    let store = RedisStore::connect(url, &unique_prefix("faults"))
        .await
        .unwrap_or_else(|e| panic!("the store cannot connect to {url}: {e}"));
    let store = match op_timeout {
        Some(timeout) => store.with_op_timeout(timeout),
        None => store,
    };
    let store: Arc<dyn Store> = Arc::new(store);
    let toml = format!(
        "upstream = \"{}\"\n[defaults]\n{defaults}\n",
        upstream.url()
    );
    TestProxy::start(&toml, store).await
}

async fn readyz(proxy: &TestProxy) -> u16 {
    proxy
        .admin
        .send("GET", "/readyz", &[], "")
        .await
        .status
        .as_u16()
}

/// Polls `/readyz` until it answers 200, failing after `limit`.
async fn wait_until_ready(proxy: &TestProxy, limit: Duration) {
    let ready = async || readyz(proxy).await == 200;
    poll::until(limit, "/readyz 200 after Redis came back", ready).await;
}

/// The value of the fail-open counter for a route in Prometheus text, 0 when absent.
fn fail_open_count(metrics: &str, route: &str) -> u64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("idempotency_fail_open_total{"))
        .filter(|l| l.contains(&format!("route=\"{route}\"")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

async fn scrape(proxy: &TestProxy) -> String {
    let answer = proxy.admin.send("GET", "/metrics", &[], "").await;
    String::from_utf8(answer.body.to_vec()).unwrap()
}

fn assert_store_unavailable(answer: &Answer) {
    assert_eq!(answer.status, 503, "{answer:?}");
    assert_eq!(answer.problem_type(), "store-unavailable");
}

async fn fail_closed_refuses_while_redis_is_dead_and_recovers_by_itself(server: Server) {
    let Some(mut redis) = RedisServer::start_on(server).await else {
        return;
    };
    let upstream = TestUpstream::start().await;
    // The store's own operation time-out (2s), as the binary runs it.
    let proxy = proxy_over(&redis.url(), &upstream, "", None).await;

    bounded(Duration::from_secs(90), async {
        let before = proxy.client.post("/v1/charges", "before-kill", BODY).await;
        assert_eq!(before.status, 201, "{before:?}");
        assert_eq!(readyz(&proxy).await, 200);

        redis.kill();
        let refused = proxy.client.post("/v1/charges", "while-dead", BODY).await;
        assert_store_unavailable(&refused);
        assert_eq!(upstream.executions_of("while-dead"), 0);
        assert_eq!(readyz(&proxy).await, 503);

        redis.restart().await;
        // The same proxy, not restarted: its connection must come back without help.
        wait_until_ready(&proxy, Duration::from_secs(30)).await;
        let after = proxy.client.post("/v1/charges", "while-dead", BODY).await;
        assert_eq!(after.status, 201, "{after:?}");
        assert!(!after.replayed());
        let again = proxy.client.post("/v1/charges", "while-dead", BODY).await;
        assert!(again.replayed(), "{again:?}");
        assert_eq!(again.body, after.body);
        assert_eq!(upstream.executions_of("while-dead"), 1);
    })
    .await;
}

async fn fail_open_forwards_while_redis_is_dead_and_counts_it(server: Server) {
    let Some(mut redis) = RedisServer::start_on(server).await else {
        return;
    };
    let upstream = TestUpstream::start().await;
    let defaults = "on_store_error = \"fail_open\"";
    let proxy = proxy_over(&redis.url(), &upstream, defaults, None).await;

    bounded(Duration::from_secs(90), async {
        redis.kill();
        let before = fail_open_count(&scrape(&proxy).await, "default");
        let forwarded = proxy.client.post("/v1/charges", "open-door", BODY).await;
        assert_eq!(forwarded.status, 201, "{forwarded:?}");
        assert!(!forwarded.replayed());
        assert_eq!(upstream.executions_of("open-door"), 1);
        // Other tests in this binary share the process-wide recorder: compare, don't equate.
        let after = fail_open_count(&scrape(&proxy).await, "default");
        assert!(after > before, "fail-open counter {before} -> {after}");
    })
    .await;
}

const KEYS: usize = 40;
const SENDS_PER_KEY: usize = 5;
/// Keys are sent in blocks of this many, round robin, so each key's sends are spread out.
const KEYS_PER_BLOCK: usize = 8;
const CONCURRENCY: usize = 4;
/// Redis is killed once this many answers have come back, and restarted after `DOWNTIME`:
/// longer than the reconnect attempts and the operation time-out, so requests are refused during
/// the outage instead of only waiting it out.
const KILL_AFTER: usize = 60;
/// Sends from this place in the stream on (the first of the third block, whose keys are all
/// new; the kill lands in the second) wait until Redis is dead, so some first requests always
/// meet the outage. Without the wait, replays answered from memory can carry every worker into
/// the third block before the kill lands; each then holds a key reserved just before it and
/// waits out the outage storing its outcome, and no reservation is tried while Redis is down.
const SENT_AFTER_THE_KILL: usize = 2 * KEYS_PER_BLOCK * SENDS_PER_KEY;
const DOWNTIME: Duration = Duration::from_millis(2500);
/// No single request may take longer: reserve, then up to three tries at storing the outcome,
/// each bounded by the 2s operation time-out, plus the upstream's delay, about 8s, with room
/// for a loaded machine (a hang's limit, not a speed's).
const REQUEST_BOUND: Duration = Duration::from_secs(30);

struct Exchange {
    key: usize,
    sent: Instant,
    answered: Instant,
    answer: Answer,
}

/// The order of the stream: blocks of `KEYS_PER_BLOCK` keys, each key sent `SENDS_PER_KEY`
/// times, round robin within its block.
fn stream_order() -> Vec<usize> {
    let mut order = Vec::with_capacity(KEYS * SENDS_PER_KEY);
    for block in (0..KEYS).step_by(KEYS_PER_BLOCK) {
        for _ in 0..SENDS_PER_KEY {
            order.extend(block..(block + KEYS_PER_BLOCK).min(KEYS));
        }
    }
    order
}

fn key_name(key: usize) -> String {
    format!("stream-{key:02}")
}

/// A stream of keyed requests while Redis is killed and restarted part-way.
///
/// Redis runs without persistence, so the restarted Redis has lost every record: the realistic
/// worst case (a crash of a Redis without AOF, or a failover to a replica that had not received
/// the latest writes). What the proxy can and cannot promise then:
///
/// - Every answer is a correct one or a clean refusal: a fresh `201`, a replay of an answer the
///   upstream really gave for that key, `409 request-in-flight`, or `503 store-unavailable`.
///   Never a hang, a panic, or any other 5xx.
/// - A key whose requests all happened before the kill, or all after the restart, runs upstream
///   exactly once: the proxy reconnects by itself, and the empty Redis is empty for it.
/// - A key whose requests straddle the outage may run twice: its record, completed or in
///   flight, was lost with Redis, so a retry after the restart finds nothing and goes upstream
///   again (possibly while the first execution is still running). Deduplication is only as
///   durable as the store; a Redis that loses data gives up this promise for the keys it lost.
///   What the fencing still guarantees is that a worker from before the outage cannot write its
///   outcome over a record created after it, so every replay matches an answer of that key.
async fn restart_mid_stream_gives_correct_answers_or_clean_refusals(server: Server) {
    let Some(mut redis) = RedisServer::start_on(server).await else {
        return;
    };
    let upstream = TestUpstream::start().await;
    let proxy = proxy_over(&redis.url(), &upstream, "", None).await;

    let exchanges = bounded(Duration::from_secs(180), async {
        let order = Arc::new(stream_order());
        let next = Arc::new(AtomicUsize::new(0));
        let answered = Arc::new(AtomicUsize::new(0));
        let log = Arc::new(Mutex::new(Vec::<Exchange>::new()));
        let (killed, dead) = tokio::sync::watch::channel(false);
        let workers: Vec<_> = (0..CONCURRENCY)
            .map(|_| {
                let (order, next, answered, log) =
                    (order.clone(), next.clone(), answered.clone(), log.clone());
                let mut dead = dead.clone();
                let client: TestClient = proxy.client.clone();
                tokio::spawn(async move {
                    loop {
                        let i = next.fetch_add(1, Ordering::SeqCst);
                        let Some(&key) = order.get(i) else { return };
                        if i >= SENT_AFTER_THE_KILL {
                            let _ = dead.wait_for(|dead| *dead).await;
                        }
                        let name = key_name(key);
                        let sent = Instant::now();
                        let request = client.post("/v1/charges?delay_ms=10", &name, BODY);
                        let answer = tokio::time::timeout(REQUEST_BOUND, request)
                            .await
                            .unwrap_or_else(|_| {
                                panic!("{name}: no answer within {REQUEST_BOUND:?}")
                            });
                        let answered_at = Instant::now();
                        log.lock().unwrap().push(Exchange {
                            key,
                            sent,
                            answered: answered_at,
                            answer,
                        });
                        answered.fetch_add(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();

        let streaming = async || answered.load(Ordering::SeqCst) >= KILL_AFTER;
        let what = format!("{KILL_AFTER} answers before the kill");
        poll::until(Duration::from_secs(60), what, streaming).await;
        let killed_at = Instant::now();
        redis.kill();
        let _ = killed.send(true);
        tokio::time::sleep(DOWNTIME).await;
        redis.restart().await;
        let restarted_at = Instant::now();

        for worker in workers {
            worker.await.expect("a worker panicked");
        }
        let exchanges = std::mem::take(&mut *log.lock().unwrap());
        (exchanges, killed_at, restarted_at)
    })
    .await;
    let (exchanges, killed_at, restarted_at) = exchanges;
    assert_eq!(exchanges.len(), KEYS * SENDS_PER_KEY);

    // Every answer is a correct one or a clean refusal.
    let mut fresh: HashMap<usize, HashSet<Bytes>> = HashMap::new();
    let mut replays: Vec<(usize, &Answer)> = Vec::new();
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for exchange in &exchanges {
        let answer = &exchange.answer;
        let kind = match answer.status.as_u16() {
            201 if answer.replayed() => {
                replays.push((exchange.key, answer));
                "replayed"
            }
            201 => {
                fresh
                    .entry(exchange.key)
                    .or_default()
                    .insert(answer.body.clone());
                "fresh"
            }
            409 => {
                assert_eq!(answer.problem_type(), "request-in-flight", "{answer:?}");
                "in-flight"
            }
            503 => {
                assert_eq!(answer.problem_type(), "store-unavailable", "{answer:?}");
                "store-unavailable"
            }
            other => panic!("unexpected status {other}: {answer:?}"),
        };
        *counts.entry(kind).or_default() += 1;
    }
    for (key, answer) in &replays {
        let bodies = fresh.get(key).cloned().unwrap_or_default();
        assert!(
            bodies.contains(&answer.body),
            "{}: a replay of an answer the upstream never gave: {answer:?}",
            key_name(*key)
        );
    }
    // Every execution upstream went to a client as a fresh answer: nothing ran unseen.
    for key in 0..KEYS {
        let seen = fresh.get(&key).map_or(0, HashSet::len);
        assert_eq!(
            upstream.executions_of(&key_name(key)),
            seen,
            "{}",
            key_name(key)
        );
    }

    // Keys wholly on one side of the outage ran exactly once.
    let mut before = 0;
    let mut after = 0;
    for key in 0..KEYS {
        let mine: Vec<_> = exchanges.iter().filter(|e| e.key == key).collect();
        let wholly_before = mine.iter().all(|e| e.answered < killed_at);
        let wholly_after = mine.iter().all(|e| e.sent > restarted_at);
        if wholly_before || wholly_after {
            assert_eq!(
                upstream.executions_of(&key_name(key)),
                1,
                "{} (wholly {} the outage)",
                key_name(key),
                if wholly_before { "before" } else { "after" }
            );
        }
        before += usize::from(wholly_before);
        after += usize::from(wholly_after);
    }
    // Otherwise the test proved nothing about either side.
    assert!(
        before > 0 && after > 0,
        "keys wholly before: {before}, wholly after: {after}; answers: {counts:?}"
    );
    assert!(
        counts.get("store-unavailable").copied().unwrap_or(0) > 0,
        "the outage was never seen: {counts:?}"
    );
}

async fn hung_redis_gets_503_within_the_operation_timeout(server: Server) {
    let Some(redis) = RedisServer::start_on(server).await else {
        return;
    };
    let target = format!("127.0.0.1:{}", redis.port());
    let relay = Relay::in_front_of(&redis.url(), &target).await;
    let upstream = TestUpstream::start().await;
    let op_timeout = Duration::from_millis(500);
    // The store's path is what is tested: no replay may come from the local cache.
    let proxy = proxy_over(&relay.url, &upstream, NO_CACHE, Some(op_timeout)).await;

    bounded(Duration::from_secs(90), async {
        let before = proxy.client.post("/v1/charges", "before-hang", BODY).await;
        assert_eq!(before.status, 201, "{before:?}");

        relay.freeze();
        let sends: Vec<_> = (0..8)
            .map(|i| {
                let client = proxy.client.clone();
                tokio::spawn(async move {
                    let key = if i == 0 {
                        "before-hang".to_owned()
                    } else {
                        format!("during-hang-{i}")
                    };
                    client.post("/v1/charges", &key, BODY).await
                })
            })
            .collect();
        // The frozen relay never answers, so an answer at all (within the bound around this
        // block, a hang's limit, not a speed's) comes from the operation time-out.
        for send in sends {
            assert_store_unavailable(&send.await.unwrap());
        }
        assert_eq!(
            upstream.seen().len(),
            1,
            "only the request before the hang ran"
        );
        assert_eq!(readyz(&proxy).await, 503);
    })
    .await;
}

/// A Redis that stalls (SIGSTOP) and then carries on: clients are refused while it stalls, and
/// a refusal leaves nothing behind. The stalled Redis still receives the reservations of the
/// refused requests and runs them once it resumes; those must not hold the keys afterwards, or
/// a client retrying after its `503` would be told `409 request-in-flight` until the lease ran
/// out, for a request that never ran.
async fn stalled_redis_refuses_then_serves_the_refused_keys_when_it_resumes(server: Server) {
    let Some(redis) = RedisServer::start_on(server).await else {
        return;
    };
    let upstream = TestUpstream::start().await;
    let op_timeout = Duration::from_millis(500);
    let proxy = proxy_over(&redis.url(), &upstream, NO_CACHE, Some(op_timeout)).await;

    bounded(Duration::from_secs(90), async {
        let before = proxy.client.post("/v1/charges", "before-stall", BODY).await;
        assert_eq!(before.status, 201, "{before:?}");

        redis.pause();
        let keys: [&'static str; 4] = ["stalled-1", "stalled-2", "stalled-3", "before-stall"];
        let sends: Vec<_> = keys
            .into_iter()
            .map(|key| {
                let client = proxy.client.clone();
                tokio::spawn(async move { client.post("/v1/charges", key, BODY).await })
            })
            .collect();
        for send in sends {
            assert_store_unavailable(&send.await.unwrap());
        }
        assert_eq!(readyz(&proxy).await, 503);
        assert_eq!(
            upstream.seen().len(),
            1,
            "only the request before the stall ran"
        );

        redis.resume();
        wait_until_ready(&proxy, Duration::from_secs(30)).await;
        for key in &keys[..3] {
            let retry = proxy.client.post("/v1/charges", key, BODY).await;
            assert_eq!(retry.status, 201, "{key}: {retry:?}");
            assert!(!retry.replayed(), "{key}: {retry:?}");
            assert_eq!(upstream.executions_of(key), 1, "{key}");
        }
        let replay = proxy.client.post("/v1/charges", "before-stall", BODY).await;
        assert!(replay.replayed(), "{replay:?}");
        assert_eq!(replay.body, before.body);
        assert_eq!(upstream.executions_of("before-stall"), 1);
    })
    .await;
}

async fn a_corrupt_record_is_refused_even_under_fail_open(server: Server) {
    let Some(url) = common::redis::shared_url(server).await else {
        return;
    };
    let mut conn = common::redis::connection_to(&url).await;
    let upstream = TestUpstream::start().await;
    let prefix = unique_prefix("corrupt");
    let store = RedisStore::connect(&url, &prefix).await.unwrap();
    let toml = format!(
        "upstream = \"{}\"\n[defaults]\non_store_error = \"fail_open\"\n",
        upstream.url()
    );
    let proxy = TestProxy::start(&toml, Arc::new(store)).await;
    let _: () = redis::cmd("SET")
        .arg(format!("{prefix}default:-:mangled"))
        .arg("not a record")
        .arg("EX")
        .arg(60)
        .query_async(&mut conn)
        .await
        .unwrap();
    let answer = proxy.client.post("/v1/x", "mangled", BODY).await;
    assert_store_unavailable(&answer);
    assert_eq!(
        upstream.executions_of("mangled"),
        0,
        "a record is there, so the operation may have run"
    );
}

async fn a_recent_replay_is_answered_from_memory_while_redis_hangs(server: Server) {
    let Some(redis) = RedisServer::start_on(server).await else {
        return;
    };
    let target = format!("127.0.0.1:{}", redis.port());
    let relay = Relay::in_front_of(&redis.url(), &target).await;
    let upstream = TestUpstream::start().await;
    let defaults = "replay_cache_ttl = \"30s\"";
    let proxy = proxy_over(
        &relay.url,
        &upstream,
        defaults,
        Some(Duration::from_millis(500)),
    )
    .await;
    bounded(Duration::from_secs(90), async {
        let first = proxy.client.post("/v1/charges", "cached", BODY).await;
        relay.freeze();
        let replay = proxy.client.post("/v1/charges", "cached", BODY).await;
        assert!(replay.replayed(), "{replay:?}");
        assert_eq!(replay.body, first.body);
        let other_body = proxy.client.post("/v1/charges", "cached", "{}").await;
        assert_eq!(
            other_body.status, 422,
            "the cached copy still guards against key reuse"
        );
        assert_store_unavailable(&proxy.client.post("/v1/charges", "not-cached", BODY).await);
    })
    .await;
}
