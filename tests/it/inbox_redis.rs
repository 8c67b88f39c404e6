//! Inbox routes on Redis and Redis Cluster, with real proxy and Redis processes
//! (docs/reference.md#inbox-routes): three replicas sharing one Redis deliver every acknowledged request and never
//! attempt one delivery twice at once; a cluster master restarted mid-run loses nothing that
//! was acknowledged; a proxy killed with SIGKILL right after a burst, and a Redis killed and
//! restarted from its append-only file, still deliver everything after the next start.
//!
//! The shared Redis (`REDIS_URL`) is used under a route name no other run shares; the cluster
//! and the durable Redis are processes of the test's own, stopped by PID. Every case runs on
//! Redis (`on_redis::`) and on Valkey (`on_valkey::`, its one shared server a private one too).

use crate::common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::binary::{exit_code, sigkill, sigterm, start_binary};
use common::client::TestClient;
use common::inbox_upstream::InboxUpstream;
use common::poll;
use common::redis_cluster::RedisCluster;
use common::redis_server::{RedisServer, Server};
use common::temp::TempPath;
use idempotency_core::backend::RouteName;
use idempotency_proxy::store::DEFAULT_PREFIX;
use idempotency_proxy::store::{RedisStore, Store};
use idempotency_test_support::on_each_server;
use tokio::process::Child;

const WAIT: Duration = Duration::from_secs(60);

on_each_server!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    three_replicas_on_one_redis_deliver_everything_one_attempt_at_a_time,
    a_cluster_master_restarted_mid_run_loses_no_acknowledged_delivery,
    a_killed_proxy_and_a_killed_redis_still_deliver_every_acknowledgement,
);

/// One test at a time: each starts Redis servers of its own (or a cluster) and several
/// proxies, and kills some of them; run together on a small machine, their time-outs and
/// leases would be measured against each other's load.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A route name of this run only, so queues left by another run are never in the way.
fn unique_route(test: &str) -> String {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let nanos = nanos.as_nanos() % 1_000_000_000_000;
    format!("{test}-{}-{nanos}", std::process::id())
}

/// Writes a config with the inbox route `route` on `/hooks/` to `upstream`, plus `extra`.
fn config(file: &TempPath, route: &str, upstream: &str, extra: &str) {
    let text = format!(
        r#"
drain_timeout = "5s"

[[routes]]
name = "{route}"
path_prefix = "/hooks/"
upstream = "{upstream}"
mode = "inbox"
ttl = "10m"
lease = "2s"
deliver_timeout = "1s"
retry_initial = "100ms"
retry_max = "400ms"
{extra}
"#
    );
    std::fs::write(file.path(), text).unwrap();
}

/// Sends one webhook with `key`, answering its status.
async fn hook(client: &TestClient, key: &str) -> u16 {
    let headers = [("idempotency-key", key)];
    let answer = client.send("POST", "/hooks/event", &headers, "{}").await;
    answer.status.as_u16()
}

/// Sends webhooks `keys`, the n-th through `clients[n % len]`, all at once; answers the keys
/// that were acknowledged (`202`) and those that were not.
async fn burst(clients: &[TestClient], keys: Vec<String>) -> (Vec<String>, Vec<String>) {
    let sent: Vec<_> = keys
        .into_iter()
        .enumerate()
        .map(|(n, key)| {
            let client = clients[n % clients.len()].clone();
            tokio::spawn(async move { (hook(&client, &key).await, key) })
        })
        .collect();
    let (mut acked, mut refused) = (Vec::new(), Vec::new());
    for task in sent {
        let (status, key) = task.await.unwrap();
        if status == 202 {
            &mut acked
        } else {
            &mut refused
        }
        .push(key);
    }
    (acked, refused)
}

fn keys(tag: &str, count: usize) -> Vec<String> {
    (0..count).map(|n| format!("{tag}-{n}")).collect()
}

/// Starts `count` proxies on `store` with the config at `file`.
async fn replicas(
    count: usize,
    store: &str,
    file: &TempPath,
    upstream: &str,
) -> (Vec<Child>, Vec<TestClient>) {
    let file = file.path().display().to_string();
    let mut started = Vec::new();
    for _ in 0..count {
        let args = ["--store", store, "--config", &file];
        started.push(start_binary(upstream, &args).await);
    }
    started.into_iter().unzip()
}

/// Waits until the route's queues hold nothing: every delivery was settled as delivered.
async fn until_drained(store: &dyn Store, route: &str) {
    let route = RouteName::new(route).unwrap();
    let inbox = store.inbox().expect("Redis keeps inbox queues");
    let drained = async || {
        let counted = inbox.queues(&route, SystemTime::now()).await;
        counted.is_ok_and(|q| q.pending + q.in_flight + q.dead == 0)
    };
    poll::until(WAIT, "the queues drained", drained).await;
}

/// Every acknowledged key arrived, and each attempt of a key carried a higher number than the
/// one before. Numbers may skip: a claim counts an attempt, and a claim whose replica died (or
/// whose answer was lost) before the request went out is claimed again after its lease.
fn assert_all_delivered(upstream: &InboxUpstream, acked: &[String]) {
    for key in acked {
        let attempts: Vec<u32> = upstream.arrivals(key).iter().map(|a| a.attempt).collect();
        assert!(
            !attempts.is_empty(),
            "{key} was acknowledged but never delivered"
        );
        let rising = attempts.windows(2).all(|pair| pair[0] < pair[1]);
        assert!(rising && attempts[0] >= 1, "{key}'s attempts: {attempts:?}");
    }
}

async fn stop(children: Vec<Child>) {
    for child in children {
        sigterm(&child);
        assert_eq!(exit_code(child).await, Some(0));
    }
}

async fn three_replicas_on_one_redis_deliver_everything_one_attempt_at_a_time(server: Server) {
    let _alone = ONE_AT_A_TIME.lock().await;
    let Some(url) = common::redis::shared_url(server).await else {
        return;
    };
    let route = unique_route("replicas");
    let upstream = InboxUpstream::start().await;
    // Refused at first, so deliveries are retried, by whichever replica claims them next.
    upstream.answer(503);
    upstream.take(Duration::from_millis(50));
    let file = TempPath::new(&format!("{route}.toml"));
    config(&file, &route, &upstream.url(), "deliver_concurrency = 8");
    let (children, clients) = replicas(3, &url, &file, &upstream.url()).await;
    let (acked, refused) = burst(&clients, keys("replica", 90)).await;
    assert!(refused.is_empty(), "not acknowledged: {refused:?}");
    // Every key refused at least once, and some of them again, by whichever replica.
    let retrying = |u: &InboxUpstream| {
        u.keys() == acked.len() && acked.iter().any(|k| u.arrivals(k).len() > 1)
    };
    upstream
        .until(WAIT, "every key refused, and retries", retrying)
        .await;
    upstream.answer(200);
    let store = RedisStore::connect(&url, DEFAULT_PREFIX).await.unwrap();
    until_drained(&store, &route).await;
    assert_all_delivered(&upstream, &acked);
    let retried = acked
        .iter()
        .filter(|k| upstream.arrivals(k).len() > 1)
        .count();
    assert!(retried > 0, "the refusals made no delivery try again");
    assert_eq!(
        upstream.overlaps(),
        0,
        "two attempts of one delivery at once"
    );
    stop(children).await;
}

async fn a_cluster_master_restarted_mid_run_loses_no_acknowledged_delivery(server: Server) {
    let _alone = ONE_AT_A_TIME.lock().await;
    let started = tokio::task::spawn_blocking(move || RedisCluster::start_on(server, true));
    let Some(mut cluster) = started.await.unwrap() else {
        return;
    };
    let route = unique_route("cluster");
    let upstream = InboxUpstream::start().await;
    upstream.answer(503);
    let file = TempPath::new(&format!("{route}.toml"));
    config(&file, &route, &upstream.url(), "");
    let spec = cluster.spec();
    let (children, clients) = replicas(2, &spec, &file, &upstream.url()).await;
    let (mut acked, refused) = burst(&clients, keys("before", 60)).await;
    assert!(refused.is_empty(), "not acknowledged: {refused:?}");
    // Mid-run: every delivery attempted (and refused) once at least.
    let attempted = |u: &InboxUpstream| u.keys() == acked.len();
    upstream.until(WAIT, "every key attempted", attempted).await;
    tokio::task::block_in_place(|| cluster.kill(1));
    // While the master is down, keys in its slots are refused (never acknowledged), and the
    // others go on: those acknowledged now are attempted, their shards being on live masters.
    let (during, mut unanswered) = burst(&clients, keys("during", 30)).await;
    let all_attempted = |u: &InboxUpstream| during.iter().all(|k| !u.arrivals(k).is_empty());
    upstream
        .until(WAIT, "attempts with a master down", all_attempted)
        .await;
    acked.extend(during);
    tokio::task::block_in_place(|| cluster.restart(1));
    // A sender tries again what was refused.
    let resend = async || {
        let (now_acked, still) = burst(&clients, std::mem::take(&mut unanswered)).await;
        acked.extend(now_acked);
        unanswered = still;
        unanswered.is_empty()
    };
    poll::until(
        WAIT,
        "every refused key acknowledged when sent again",
        resend,
    )
    .await;
    upstream.answer(200);
    let store = RedisStore::connect_cluster(&cluster.seeds(), DEFAULT_PREFIX)
        .await
        .unwrap();
    until_drained(&store, &route).await;
    assert_eq!(acked.len(), 90);
    assert_all_delivered(&upstream, &acked);
    stop(children).await;
}

async fn a_killed_proxy_and_a_killed_redis_still_deliver_every_acknowledgement(server: Server) {
    let _alone = ONE_AT_A_TIME.lock().await;
    let dir = std::env::temp_dir().join(unique_route("idempotency-proxy-aof"));
    let Some(mut redis) = RedisServer::start_durable_on(server, dir.clone()).await else {
        return;
    };
    let route = unique_route("kill");
    let upstream = InboxUpstream::start().await;
    // Every answer is held until the proxy runs again: the kill comes before anything was
    // delivered, however slow the machine is to send the burst.
    upstream.hold();
    let file = TempPath::new(&format!("{route}.toml"));
    config(&file, &route, &upstream.url(), "deliver_concurrency = 4");
    let (mut children, clients) = replicas(1, &redis.url(), &file, &upstream.url()).await;
    let (acked, refused) = burst(&clients, keys("kill", 40)).await;
    assert!(refused.is_empty(), "not acknowledged: {refused:?}");
    let proxy = children.remove(0);
    sigkill(&proxy);
    let _ = exit_code(proxy).await;
    let before = upstream.keys();
    assert!(before < 40, "the kill came after every delivery ({before})");
    // Redis goes down hard too (SIGKILL by PID) and comes back from its append-only file.
    redis.restart().await;
    let (children, _) = replicas(1, &redis.url(), &file, &upstream.url()).await;
    upstream.release(1000);
    let store = RedisStore::connect(&redis.url(), DEFAULT_PREFIX)
        .await
        .unwrap();
    until_drained(&store, &route).await;
    assert_all_delivered(&upstream, &acked);
    stop(children).await;
    drop(redis);
    let _ = std::fs::remove_dir_all(dir);
}
