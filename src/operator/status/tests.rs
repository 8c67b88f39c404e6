//! The status report as a whole: what it shows of the config, reloads, inboxes and the store.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::{InboxQueues, InboxStats, OutboxStats, Status};
use crate::config::{load_str, Overrides, Settings};
use crate::proxy::summary;
use crate::store::{MemoryStore, StoreError};
use idempotency_core::backend::RouteName;
use idempotency_core::observe::Outcome;
use idempotency_outbox::{OutboxCounts, OutboxName};

fn settings(toml: &str) -> Settings {
    load_str("status.toml", toml, &Overrides::default()).unwrap()
}

const TWO_ROUTES: &str = r#"
store = "redis://:hunter2@127.0.0.1:6379/0"
[[routes]]
name = "status-payments"
path_prefix = "/v1/"
upstream = "http://127.0.0.1:9000"
[[routes]]
name = "status-hooks"
path_prefix = "/hooks/"
upstream = "http://127.0.0.1:9001"
"#;

async fn report_json(status: &Status) -> serde_json::Value {
    let report = status.report(&MemoryStore::new()).await;
    serde_json::to_value(report).unwrap()
}

#[tokio::test]
async fn names_the_store_by_kind_only() {
    let json = report_json(&Status::new(summary(&settings(TWO_ROUTES)))).await;
    assert_eq!(json["store"]["kind"], "redis");
    assert_eq!(json["store"]["health"], "ok");
    let text = json.to_string();
    assert!(
        !text.contains("hunter2") && !text.contains("6379"),
        "{text}"
    );
}

#[tokio::test]
async fn shows_the_running_digest_and_the_last_reload() {
    let first = settings(TWO_ROUTES);
    let status = Status::new(summary(&first));
    let json = report_json(&status).await;
    assert_eq!(
        json["config"]["digest"],
        crate::config::config_digest(&first)
    );
    assert_eq!(json["config"]["digest"].as_str().unwrap().len(), 64);
    assert!(json["config"]["last_reload"].is_null(), "never reloaded");

    let one_route = settings(&TWO_ROUTES.replace("status-hooks", "status-webhooks"));
    status.reload_applied(summary(&one_route));
    let json = report_json(&status).await;
    assert_eq!(
        json["config"]["digest"],
        crate::config::config_digest(&one_route)
    );
    assert_ne!(
        json["config"]["digest"],
        crate::config::config_digest(&first)
    );
    assert_eq!(json["config"]["last_reload"]["result"], "ok");
    assert_eq!(json["routes"][1]["name"], "status-webhooks");

    status.reload_refused();
    let json = report_json(&status).await;
    assert_eq!(json["config"]["last_reload"]["result"], "error");
    assert_eq!(
        json["config"]["digest"],
        crate::config::config_digest(&one_route),
        "the running config stays"
    );
}

#[test]
fn the_digest_follows_the_effect_not_the_layout() {
    let spaced = TWO_ROUTES
        .replace("name = ", "name     =   ")
        .replace('\n', "\n# a comment\n");
    let moved = TWO_ROUTES.replace(
        "upstream = \"http://127.0.0.1:9001\"",
        "upstream = \"http://127.0.0.1:9002\"",
    );
    let digest = |toml: &str| crate::config::config_digest(&settings(toml));
    assert_eq!(digest(TWO_ROUTES), digest(&spaced));
    assert_ne!(digest(TWO_ROUTES), digest(&moved));
}

#[derive(Debug)]
struct FixedInbox(Option<InboxQueues>);

#[async_trait]
impl InboxStats for FixedInbox {
    async fn queues(&self) -> Result<InboxQueues, StoreError> {
        self.0.ok_or_else(|| StoreError::unavailable("down"))
    }
}

#[tokio::test]
async fn an_inbox_section_only_where_one_is_registered() {
    let status = Status::new(summary(&settings(TWO_ROUTES)));
    let queues = InboxQueues {
        pending: 4,
        in_flight: 1,
        dead: 2,
        oldest_pending: Duration::from_millis(90_250),
    };
    let hooks = RouteName::new("status-hooks").unwrap();
    status.set_inbox(&hooks, Arc::new(FixedInbox(Some(queues))));
    let json = report_json(&status).await;
    assert!(
        json["routes"][0].get("inbox").is_none(),
        "a proxy route has no inbox section"
    );
    let inbox = &json["routes"][1]["inbox"];
    assert_eq!(inbox["state"], "ok");
    assert_eq!(
        (inbox["pending"].as_u64(), inbox["dead"].as_u64()),
        (Some(4), Some(2))
    );
    assert_eq!(inbox["oldest_pending_seconds"].as_f64(), Some(90.25));

    status.set_inbox(&hooks, Arc::new(FixedInbox(None)));
    let json = report_json(&status).await;
    assert_eq!(json["routes"][1]["inbox"]["state"], "unavailable");
}

#[derive(Debug)]
struct FixedOutbox(Option<OutboxCounts>);

#[async_trait]
impl OutboxStats for FixedOutbox {
    async fn counts(&self) -> Result<OutboxCounts, StoreError> {
        self.0.ok_or_else(|| StoreError::unavailable("down"))
    }
}

#[tokio::test]
async fn each_outbox_in_the_configs_order_with_its_counts_or_unavailable() {
    let status = Status::new(summary(&settings(TWO_ROUTES)));
    assert_eq!(
        report_json(&status).await["outboxes"],
        serde_json::json!([])
    );
    let counts = OutboxCounts {
        pending: 3,
        in_flight: 1,
        dead: 2,
        delivered_last_hour: 40,
        oldest_pending: Duration::from_millis(3_042),
        blocked_aggregates: 1,
    };
    let name = |n: &str| OutboxName::new(n).unwrap();
    let up: Arc<dyn OutboxStats> = Arc::new(FixedOutbox(Some(counts)));
    let down: Arc<dyn OutboxStats> = Arc::new(FixedOutbox(None));
    status.set_outboxes(vec![(name("payments"), up), (name("refunds"), down)]);
    let json = report_json(&status).await;
    assert_eq!(
        json["outboxes"],
        serde_json::json!([
            {"name": "payments", "state": "ok", "pending": 3, "in_flight": 1, "dead": 2,
             "delivered_last_hour": 40, "oldest_pending_seconds": 3.042, "blocked_aggregates": 1},
            {"name": "refunds", "state": "unavailable"},
        ])
    );
}

#[tokio::test]
async fn counts_decisions_and_the_replay_ratio() {
    let toml = TWO_ROUTES.replace("status-payments", "status-counted");
    let status = Status::new(summary(&settings(&toml)));
    let activity = super::RouteActivity::of(&RouteName::new("status-counted").unwrap());
    activity.request_finished(Outcome::Forwarded, 201, None, Some("aaaaaaaaaaaa"));
    for _ in 0..3 {
        activity.request_finished(Outcome::Replayed, 201, None, Some("aaaaaaaaaaaa"));
    }
    activity.request_finished(Outcome::Conflict, 409, None, Some("bbbbbbbbbbbb"));
    let json = report_json(&status).await;
    let route = &json["routes"][0];
    assert_eq!(route["totals"]["replayed"], 3);
    assert_eq!(route["totals"]["conflict"], 1);
    assert_eq!(route["replay_ratio"], 0.75);
    assert_eq!(
        route["per_second"]["forwarded"].as_array().unwrap().len(),
        60
    );
    let decisions = json["decisions"].as_array().unwrap();
    assert_eq!(decisions.len(), 5);
    assert_eq!(
        decisions
            .iter()
            .filter(|d| d["outcome"] == "conflict" && d["status"] == 409)
            .count(),
        1
    );
    assert!(decisions.iter().all(|d| d["route"] == "status-counted"));
}
