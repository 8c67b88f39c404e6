//! Two proxy replicas sharing one Redis: a storm of duplicates with one key runs upstream once.

mod common;

use std::sync::Arc;

use common::proxy::TestProxy;
use common::upstream::TestUpstream;
use idempotency_proxy::store::Store;

const STORM: usize = 64;

async fn two_replicas(
    test: &str,
    upstream: &TestUpstream,
    defaults: &str,
) -> Option<(TestProxy, TestProxy)> {
    let store: Arc<dyn Store> = Arc::new(common::redis::store(test).await?);
    let toml = format!(
        "upstream = \"{}\"\n[defaults]\n{defaults}\n",
        upstream.url()
    );
    let a = TestProxy::start(&toml, store.clone()).await;
    let b = TestProxy::start(&toml, store).await;
    Some((a, b))
}

/// Sends `STORM` copies of one keyed request, alternating between the two replicas.
async fn storm(a: &TestProxy, b: &TestProxy, key: &'static str) -> Vec<common::client::Answer> {
    let sends = (0..STORM).map(|i| {
        let client = if i % 2 == 0 {
            a.client.clone()
        } else {
            b.client.clone()
        };
        tokio::spawn(async move {
            client
                .post("/v1/charges?delay_ms=200", key, r#"{"amount":42}"#)
                .await
        })
    });
    let mut answers = Vec::new();
    for send in sends.collect::<Vec<_>>() {
        answers.push(send.await.unwrap());
    }
    answers
}

#[tokio::test]
async fn storm_through_two_replicas_runs_upstream_once() {
    let upstream = TestUpstream::start().await;
    let Some((a, b)) = two_replicas("storm_conflict", &upstream, "").await else {
        return;
    };
    let answers = storm(&a, &b, "storm-1").await;

    assert_eq!(upstream.executions_of("storm-1"), 1);
    let first: Vec<_> = answers
        .iter()
        .filter(|a| a.status == 201 && !a.replayed())
        .collect();
    assert_eq!(
        first.len(),
        1,
        "exactly one client sees the original answer"
    );
    for answer in &answers {
        match answer.status.as_u16() {
            201 => assert_eq!(answer.body, first[0].body),
            409 => assert_eq!(answer.problem_type(), "request-in-flight"),
            other => panic!("unexpected status {other}: {answer:?}"),
        }
    }
    let late = a
        .client
        .post("/v1/charges?delay_ms=200", "storm-1", r#"{"amount":42}"#)
        .await;
    assert!(late.replayed());
    assert_eq!(late.body, first[0].body);
}

#[tokio::test]
async fn storm_in_wait_mode_gives_every_client_the_same_answer() {
    let upstream = TestUpstream::start().await;
    let defaults = "concurrent = \"wait\"\nwait_timeout = \"10s\"";
    let Some((a, b)) = two_replicas("storm_wait", &upstream, defaults).await else {
        return;
    };
    let answers = storm(&a, &b, "storm-2").await;

    assert_eq!(upstream.executions_of("storm-2"), 1);
    assert!(
        answers.iter().all(|a| a.status == 201),
        "{:?}",
        answers.iter().map(|a| a.status).collect::<Vec<_>>()
    );
    assert!(answers.iter().all(|a| a.body == answers[0].body));
    assert_eq!(answers.iter().filter(|a| !a.replayed()).count(), 1);
}

/// How long after the first request's answer a waiting duplicate on another replica gets the
/// replay: the cost of polling the store instead of being told. Prints the figures; run with
/// `cargo test --test redis_storm -- --ignored --nocapture wake_delay`.
#[tokio::test]
#[ignore]
async fn wake_delay_across_replicas() {
    let upstream = TestUpstream::start().await;
    let defaults = "concurrent = \"wait\"\nwait_timeout = \"10s\"";
    let Some((a, b)) = two_replicas("wake_delay", &upstream, defaults).await else {
        return;
    };
    let mut delays = Vec::new();
    for round in 0..20u64 {
        let key = format!("wake-{round}");
        let first_client = a.client.clone();
        let first_key = key.clone();
        let delay = format!("{}", 300 + round * 37);
        let first = tokio::spawn(async move {
            let headers = [
                ("idempotency-key", first_key.as_str()),
                ("x-delay-ms", delay.as_str()),
            ];
            first_client.send("POST", "/v1/x", &headers, "{}").await;
            tokio::time::Instant::now()
        });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let waiter = b.client.post_owned("/v1/x", &key, "{}").await;
        let replayed_at = tokio::time::Instant::now();
        assert!(waiter.replayed());
        delays.push(replayed_at.saturating_duration_since(first.await.unwrap()));
    }
    delays.sort();
    println!(
        "wake delay across replicas over {} rounds: min {:?}, median {:?}, max {:?}",
        delays.len(),
        delays[0],
        delays[delays.len() / 2],
        delays[delays.len() - 1]
    );
}
