//! Two proxy replicas sharing one Redis: a storm of duplicates with one key runs upstream once.

use crate::common;

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
async fn storm(a: &TestProxy, b: &TestProxy, key: &'static str) -> Vec<common::answer::Answer> {
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
