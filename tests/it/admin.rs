//! The admin listener: health, readiness, metrics that move, and inspecting or dropping a record.

use crate::common;

use common::proxy::TestProxy;
use common::upstream::TestUpstream;

/// The value of one counter sample in Prometheus text, 0 when absent.
fn counter(metrics: &str, route: &str, outcome: &str) -> u64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("idempotency_requests_total{"))
        .filter(|l| {
            l.contains(&format!("route=\"{route}\""))
                && l.contains(&format!("outcome=\"{outcome}\""))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[tokio::test]
async fn health_and_readiness_answer() {
    let upstream = TestUpstream::start().await;
    let proxy = TestProxy::in_front_of(&upstream.url(), "").await;
    assert_eq!(
        proxy.admin.send("GET", "/healthz", &[], "").await.status,
        200
    );
    assert_eq!(
        proxy.admin.send("GET", "/readyz", &[], "").await.status,
        200
    );
}

#[tokio::test]
async fn replay_moves_the_replayed_counter() {
    let upstream = TestUpstream::start().await;
    let proxy = TestProxy::in_front_of(&upstream.url(), "").await;
    let scrape = || async {
        String::from_utf8(
            proxy
                .admin
                .send("GET", "/metrics", &[], "")
                .await
                .body
                .to_vec(),
        )
        .unwrap()
    };
    proxy.client.post("/v1/x", "metered", "{}").await;
    let before = scrape().await;
    proxy.client.post("/v1/x", "metered", "{}").await;
    let after = scrape().await;
    // Other tests in this binary share the process-wide recorder, so compare, don't equate.
    assert!(
        counter(&after, "default", "replayed") > counter(&before, "default", "replayed"),
        "{after}"
    );
    assert!(counter(&after, "default", "forwarded") >= 1);
}

#[tokio::test]
async fn a_record_can_be_inspected_without_its_body_and_dropped() {
    let upstream = TestUpstream::start().await;
    let proxy = TestProxy::in_front_of(&upstream.url(), "scope_header = \"Authorization\"").await;
    let auth = [
        ("idempotency-key", "inspect-me"),
        ("authorization", "Bearer alice"),
    ];
    let first = proxy.client.send("POST", "/v1/x", &auth, "{}").await;

    let scope = [("x-idempotency-scope", "Bearer alice")];
    let view = proxy
        .admin
        .send("GET", "/keys/default/inspect-me", &scope, "")
        .await;
    assert_eq!(view.status, 200);
    let json = view.json();
    assert_eq!(json["state"], "completed");
    assert_eq!(json["status"], 201);
    assert_eq!(json["body_length"], first.body.len());
    assert!(
        !String::from_utf8_lossy(&view.body).contains("execution"),
        "the body is never shown"
    );

    let other_client = proxy
        .admin
        .send(
            "GET",
            "/keys/default/inspect-me",
            &[("x-idempotency-scope", "Bearer bob")],
            "",
        )
        .await;
    assert_eq!(
        other_client.status, 404,
        "another client's scope does not reach alice's record"
    );

    assert_eq!(
        proxy
            .admin
            .send("DELETE", "/keys/default/inspect-me", &scope, "")
            .await
            .status,
        204
    );
    let rerun = proxy.client.send("POST", "/v1/x", &auth, "{}").await;
    assert!(!rerun.replayed(), "a dropped record lets the key run again");
    assert_eq!(upstream.executions_of("inspect-me"), 2);
}

#[tokio::test]
async fn an_admin_token_guards_metrics_and_keys_but_not_probes() {
    let upstream = TestUpstream::start().await;
    let token_file = std::env::temp_dir().join(format!(
        "idempotency-proxy-admin-token-{}",
        std::process::id()
    ));
    std::fs::write(&token_file, "t0ken\n").unwrap();
    let toml = format!(
        "upstream = \"{}\"\nadmin_token = \"file:{}\"\n",
        upstream.url(),
        token_file.display()
    );
    let proxy = TestProxy::start(
        &toml,
        std::sync::Arc::new(idempotency_proxy::store::MemoryStore::new()),
    )
    .await;
    proxy.client.post("/v1/x", "guarded", "{}").await;

    assert_eq!(
        proxy.admin.send("GET", "/healthz", &[], "").await.status,
        200
    );
    assert_eq!(
        proxy.admin.send("GET", "/readyz", &[], "").await.status,
        200
    );
    for path in ["/metrics", "/keys/default/guarded"] {
        let anonymous = proxy.admin.send("GET", path, &[], "").await;
        assert_eq!(anonymous.status, 401, "{path}");
        assert_eq!(anonymous.header("www-authenticate"), Some("Bearer"));
        assert_eq!(anonymous.problem_type(), "unauthorized", "{path}");
        assert_eq!(anonymous.json()["status"], 401);
        let wrong = proxy
            .admin
            .send("GET", path, &[("authorization", "Bearer t0ke")], "")
            .await;
        assert_eq!(wrong.status, 401, "{path}");
        assert_eq!(wrong.problem_type(), "unauthorized", "{path}");
        let right = proxy
            .admin
            .send("GET", path, &[("authorization", "Bearer t0ken")], "")
            .await;
        assert_eq!(right.status, 200, "{path}");
    }
    let refused_delete = proxy
        .admin
        .send("DELETE", "/keys/default/guarded", &[], "")
        .await;
    assert_eq!(refused_delete.status, 401);
    assert!(
        proxy.client.post("/v1/x", "guarded", "{}").await.replayed(),
        "a refused DELETE removed nothing"
    );
    std::fs::remove_file(token_file).unwrap();
}

/// Starts a keyed POST that the upstream holds until it is released under the key's name, and
/// returns once the upstream has it, so its record is in flight.
async fn hold_in_flight(
    proxy: &TestProxy,
    upstream: &TestUpstream,
    key: &'static str,
) -> tokio::task::JoinHandle<common::answer::Answer> {
    let client = proxy.client.clone();
    let first = tokio::spawn(async move {
        let headers = [("idempotency-key", key), ("x-hold", key)];
        client.send("POST", "/v1/x", &headers, "{}").await
    });
    upstream.until_executed(key).await;
    first
}

#[tokio::test]
async fn an_in_flight_record_is_dropped_only_when_forced() {
    let upstream = TestUpstream::start().await;
    let proxy = TestProxy::in_front_of(&upstream.url(), "").await;

    let first = hold_in_flight(&proxy, &upstream, "still-running").await;
    let refused = proxy
        .admin
        .send("DELETE", "/keys/default/still-running", &[], "")
        .await;
    assert_eq!(refused.status, 409);
    assert_eq!(
        refused.header("content-type"),
        Some("application/problem+json")
    );
    assert!(
        refused.problem_type().ends_with("request-in-flight"),
        "{refused:?}"
    );
    assert!(refused.json()["detail"]
        .as_str()
        .unwrap()
        .contains("force=true"));
    upstream.release("still-running");
    let first = first.await.unwrap();
    let retry = proxy
        .client
        .send(
            "POST",
            "/v1/x",
            &[("idempotency-key", "still-running")],
            "{}",
        )
        .await;
    assert!(retry.replayed(), "the refused DELETE kept the record");
    assert_eq!(retry.body, first.body);
    assert_eq!(upstream.executions_of("still-running"), 1);

    let held = hold_in_flight(&proxy, &upstream, "stuck").await;
    let typo = proxy
        .admin
        .send("DELETE", "/keys/default/stuck?force=yes", &[], "")
        .await;
    assert_eq!(
        typo.status, 400,
        "an unreadable force is refused, not guessed"
    );
    let forced = proxy
        .admin
        .send("DELETE", "/keys/default/stuck?force=true", &[], "")
        .await;
    assert_eq!(forced.status, 204);
    let rerun = proxy.client.post("/v1/x", "stuck", "{}").await;
    assert!(!rerun.replayed(), "a forced removal lets the key run again");
    assert_eq!(upstream.executions_of("stuck"), 2);
    upstream.release("stuck");
    held.await.unwrap();

    let gone = proxy
        .admin
        .send("DELETE", "/keys/default/never-seen", &[], "")
        .await;
    assert_eq!(gone.status, 404);
    assert!(gone.problem_type().ends_with("no-record"), "{gone:?}");
}
