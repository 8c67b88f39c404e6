//! The binary over the durable file store, through crashes and shutdowns: what was
//! acknowledged survives a SIGKILL, a reservation left by a killed proxy frees after its lease,
//! and a shutdown lets an operation whose client has gone record its outcome.

use crate::common;

use std::time::Duration;

use common::binary::{exit_code, sigkill, sigterm, start_binary};
use common::poll;
use common::temp::TempPath;
use common::upstream::TestUpstream;

#[tokio::test]
async fn a_completed_key_replays_after_a_sigkill_and_an_in_flight_key_frees_after_its_lease() {
    let upstream = TestUpstream::start().await;
    let file = TempPath::new("sigkill.db");
    let args = [
        "--store",
        &file.store_spec(),
        "--config",
        &lease_config(&upstream.url()),
    ];
    let (first_proxy, client) = start_binary(&upstream.url(), &args).await;
    let done = client.post("/v1/x", "done-before-crash", "{}").await;
    assert_eq!(done.status, 201);
    let in_flight_client = client.clone();
    let interrupted = tokio::spawn(async move {
        // Held at the upstream until the proxy is killed, however long that takes.
        let slow = [
            ("idempotency-key", "running-at-crash"),
            ("x-hold", "running-at-crash"),
        ];
        in_flight_client
            .send_raw("POST", "/v1/x", &slow, "{}")
            .await
    });
    // The upstream has it: the proxy reserved the key before forwarding.
    upstream.until_executed("running-at-crash").await;
    sigkill(&first_proxy);
    assert!(
        interrupted.await.unwrap().is_err(),
        "the killed proxy never answered"
    );
    upstream.release("running-at-crash");
    drop(first_proxy);

    let (second_proxy, client) = start_binary(&upstream.url(), &args).await;
    let replay = client.post("/v1/x", "done-before-crash", "{}").await;
    assert!(
        replay.replayed(),
        "an acknowledged completion survived the crash: {replay:?}"
    );
    assert_eq!(replay.body, done.body);
    let during_lease = client.post("/v1/x", "running-at-crash", "{}").await;
    assert_eq!(
        during_lease.status, 409,
        "the dead holder's lease still guards the key"
    );
    // The lease (10s) ran from the reservation, before the kill: the key frees when it runs
    // out, and until then every retry is answered `409` as the one above.
    let freed = async || {
        let answer = client.post("/v1/x", "running-at-crash", "{}").await;
        (answer.status != 409).then_some(answer)
    };
    let after_lease = poll::until(Duration::from_secs(60), "the lease run out", freed).await;
    assert_eq!(
        after_lease.status, 201,
        "the key freed when the lease ran out: {after_lease:?}"
    );
    assert!(!after_lease.replayed());
    sigterm(&second_proxy);
    assert_eq!(exit_code(second_proxy).await, Some(0));
}

#[tokio::test]
async fn shutdown_records_the_outcome_of_an_operation_whose_client_left() {
    let upstream = TestUpstream::start().await;
    let file = TempPath::new("drain.db");
    let args = ["--store", &file.store_spec()];
    let (proxy, client) = start_binary(&upstream.url(), &args).await;
    let leaving = client.clone();
    let gone = tokio::spawn(async move {
        let slow = [("idempotency-key", "client-left"), ("x-delay-ms", "800")];
        leaving.send("POST", "/v1/x", &slow, "{}").await
    });
    upstream.until_executed("client-left").await;
    gone.abort();
    // The client is gone once its task is: its connection is dropped with it.
    assert!(gone.await.unwrap_err().is_cancelled());
    sigterm(&proxy);
    assert_eq!(exit_code(proxy).await, Some(0));
    assert_eq!(
        upstream.executions_of("client-left"),
        1,
        "the operation ran to its end"
    );

    let (proxy, client) = start_binary(&upstream.url(), &args).await;
    let retry = client.post("/v1/x", "client-left", "{}").await;
    assert!(
        retry.replayed(),
        "the outcome was stored before the proxy exited: {retry:?}"
    );
    assert_eq!(upstream.executions_of("client-left"), 1);
    sigterm(&proxy);
    assert_eq!(exit_code(proxy).await, Some(0));
}

/// A config file with a short lease, so a dead holder's reservation frees within the test, and
/// long beside a restart of the proxy on a loaded machine, so it still guards the key after one.
fn lease_config(upstream: &str) -> String {
    let path = std::env::temp_dir().join(format!(
        "idempotency-proxy-crash-{}.toml",
        std::process::id()
    ));
    std::fs::write(
        &path,
        format!("upstream = \"{upstream}\"\n[defaults]\nlease = \"10s\"\n"),
    )
    .unwrap();
    path.display().to_string()
}
