//! Three proxy replicas sharing one Redis Cluster: storms of duplicates over many keys run each
//! key upstream once, also while a master crashes and comes back.
//!
//! The crash test's cluster keeps an append-only file fsynced on every write, so a restarted
//! master comes back with every record it acknowledged. Without it the master would come back
//! empty, and a key whose record lived there could honestly run a second time after the restart;
//! what the test checks is that the proxy never runs a key twice while its store keeps what it
//! acknowledged, and that only the crashed master's keys fail (with `503`) meanwhile.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use common::client::Answer;
use common::proxy::TestProxy;
use common::redis_cluster::RedisCluster;
use common::upstream::TestUpstream;
use idempotency_proxy::store::{RedisStore, Store};

const KEYS: usize = 30;
const COPIES: usize = 8;
const PATH: &str = "/v1/charges?delay_ms=100";

/// Three replicas in front of `upstream`, sharing a store on `cluster` under a fresh prefix
/// (returned with them).
async fn replicas(
    test: &str,
    cluster: &RedisCluster,
    upstream: &TestUpstream,
) -> (Vec<TestProxy>, String) {
    let prefix = common::redis::unique_prefix(test);
    let store = RedisStore::connect_cluster(&cluster.seeds(), &prefix)
        .await
        .unwrap();
    let store: Arc<dyn Store> = Arc::new(store);
    let toml = format!("upstream = \"{}\"\n", upstream.url());
    let mut proxies = Vec::new();
    for _ in 0..3 {
        proxies.push(TestProxy::start(&toml, store.clone()).await);
    }
    (proxies, prefix)
}

/// Sends `COPIES` of a request for each of `KEYS` keys, spread over the replicas; copy `c` of
/// every key leaves `c * gap` after the start. Answers come back grouped by key.
async fn storm(proxies: &[TestProxy], run: &str, gap: Duration) -> HashMap<String, Vec<Answer>> {
    let mut sends = Vec::new();
    for copy in 0..COPIES {
        for k in 0..KEYS {
            let client = proxies[(k + copy) % proxies.len()].client.clone();
            let key = format!("{run}-{k}");
            let wait = gap * copy as u32;
            sends.push(tokio::spawn(async move {
                tokio::time::sleep(wait).await;
                let answer = client.post(PATH, &key, "{}").await;
                (key, answer)
            }));
        }
    }
    let mut answers: HashMap<String, Vec<Answer>> = HashMap::new();
    for send in sends {
        let (key, answer) = send.await.unwrap();
        answers.entry(key).or_default().push(answer);
    }
    answers
}

/// Checks one key's answers against what the upstream saw; returns how many were `503`.
fn check_key(key: &str, answers: &[Answer], upstream: &TestUpstream, may_fail: bool) -> usize {
    let originals: Vec<&Answer> = answers
        .iter()
        .filter(|a| a.status == 201 && !a.replayed())
        .collect();
    assert!(originals.len() <= 1, "{key} ran {} times", originals.len());
    assert_eq!(upstream.executions_of(key), originals.len(), "{key}");
    let mut unavailable = 0;
    for answer in answers {
        match answer.status.as_u16() {
            201 => assert_eq!(Some(&answer.body), originals.first().map(|o| &o.body)),
            409 => assert_eq!(answer.problem_type(), "request-in-flight"),
            503 if may_fail => {
                assert_eq!(answer.problem_type(), "store-unavailable");
                unavailable += 1;
            }
            other => panic!("{key}: unexpected {other}: {answer:?}"),
        }
    }
    unavailable
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_over_three_replicas_runs_each_key_once() {
    let Some(cluster) = tokio::task::block_in_place(common::redis_cluster::shared) else {
        return;
    };
    let upstream = TestUpstream::start().await;
    let (proxies, prefix) = replicas("cluster-storm", cluster, &upstream).await;
    let answers = storm(&proxies, "calm", Duration::ZERO).await;
    assert_eq!(answers.len(), KEYS);
    for (key, answers) in &answers {
        check_key(key, answers, &upstream, false);
        assert_eq!(upstream.executions_of(key), 1, "{key}");
    }
    // The records are spread over the masters, so the storm really crossed the cluster.
    let pattern = format!("{prefix}*");
    let held: Vec<usize> = (0..3)
        .map(|node| cluster.cli(node, &["KEYS", &pattern]).lines().count())
        .collect();
    assert_eq!(
        held.iter().sum::<usize>(),
        KEYS,
        "records per master: {held:?}"
    );
    assert!(held.iter().all(|&n| n > 0), "records per master: {held:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_crashing_mid_storm_never_runs_a_key_twice() {
    let Some(mut cluster) = tokio::task::spawn_blocking(|| RedisCluster::start(true))
        .await
        .unwrap()
    else {
        return;
    };
    let upstream = TestUpstream::start().await;
    let (proxies, prefix) = replicas("cluster-crash", &cluster, &upstream).await;
    // Copies leave every 150ms for ~1s; master 0 dies 250ms in and is down for 500ms, then
    // takes a couple of seconds to serve again.
    let chaos = tokio::task::spawn_blocking(move || {
        std::thread::sleep(Duration::from_millis(250));
        cluster.kill(0);
        std::thread::sleep(Duration::from_millis(500));
        cluster.restart(0);
        cluster
    });
    let answers = storm(&proxies, "crash", Duration::from_millis(150)).await;
    let cluster = chaos.await.unwrap();
    let mut unavailable = 0;
    for (key, answers) in &answers {
        unavailable += check_key(key, answers, &upstream, true);
    }
    assert!(
        unavailable > 0,
        "the crash came too late to touch the storm"
    );
    // With the cluster whole again, every key answers once the client has its slot map back,
    // and none runs a second time.
    for (key, answers) in &answers {
        let late = answer_after_recovery(&proxies[0], key).await;
        let mut all = answers.clone();
        all.push(late);
        check_key(key, &all, &upstream, true);
    }
    report(&cluster, &prefix, &answers);
}

/// A keyed request, repeated while it fails with `503`, for at most 10s.
///
/// It may still fail then: now and then the cluster client stays in slot-map recovery long after
/// the master is back, and every request waits out the operation time-out. That costs
/// availability, never a second execution, which is what this test holds the proxy to.
async fn answer_after_recovery(proxy: &TestProxy, key: &str) -> Answer {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let answer = proxy.client.post(PATH, key, "{}").await;
        if answer.status != 503 || tokio::time::Instant::now() > deadline {
            if answer.status == 503 {
                eprintln!("{key} still failed 10s after the restart");
            }
            return answer;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Prints how the `503`s fell: on keys of the crashed master, or on the others' (the cluster
/// client pauses every request while it rebuilds its slot map, so some may).
fn report(cluster: &RedisCluster, prefix: &str, answers: &HashMap<String, Vec<Answer>>) {
    let on_crashed = keys_held_by(cluster, 0, prefix);
    let (mut crashed, mut others) = (0, 0);
    for (key, answers) in answers {
        let failed = answers.iter().filter(|a| a.status == 503).count();
        if on_crashed.contains(key) {
            crashed += failed;
        } else {
            others += failed;
        }
    }
    let total = KEYS * COPIES;
    let held = on_crashed.len();
    eprintln!("503s of {total}: {crashed} on the crashed master's {held} keys, {others} on others");
}

/// The idempotency keys whose records `node` holds (a storage key ends with `:` and the key).
fn keys_held_by(cluster: &RedisCluster, node: usize, prefix: &str) -> Vec<String> {
    let listed = cluster.cli(node, &["KEYS", &format!("{prefix}*")]);
    listed
        .lines()
        .filter_map(|line| line.rsplit(':').next())
        .map(str::to_owned)
        .collect()
}
