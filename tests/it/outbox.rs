//! Outbox relays run by the binary (docs/reference.md#outbox-relays), against a private
//! PostgreSQL and a real receiver: `outbox-schema` prints a table the start-up check accepts, a
//! table it refuses stops the start with exit 2 naming each column, `--check` prints no secret,
//! a relay killed mid-attempt loses nothing and sends the same key again after its lease,
//! SIGTERM drains, and a database that stops under the relay makes `/readyz` name the outbox
//! until it is back.

use crate::common;

use std::process::Command;

use common::binary::{sigkill, sigterm, BIN};
use common::outbox::{outbox_table, RelayProcess, WAIT};
use common::poll;
use common::postgres_server::{shared_postgres, PostgresServer, Shutdown};
use common::receiver::{Receiver, Reply};
use idempotency_test_support::outbox::{event, OutboxDb};

fn run(args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args(args)
        .output()
        .expect("the binary runs")
}

#[tokio::test]
async fn outbox_schema_prints_a_table_the_start_up_check_accepts() {
    let Some(server) = shared_postgres() else {
        return;
    };
    let args = [
        "outbox-schema",
        "--table",
        "app.events",
        "--notify-channel",
        "events",
    ];
    let printed = run(&args);
    assert!(printed.status.success(), "{printed:?}");
    let ddl = String::from_utf8(printed.stdout).unwrap();
    assert!(
        ddl.contains("CREATE TABLE IF NOT EXISTS \"app\".\"events\""),
        "{ddl}"
    );
    let db = OutboxDb::empty(server.fresh_database());
    db.execute("CREATE SCHEMA app").await;
    db.execute(&ddl).await;
    // Again: the DDL runs over a table it made.
    db.execute(&ddl).await;

    let receiver = Receiver::start().await;
    let keys = "table = \"app.events\"\nnotify_channel = \"events\"";
    let config = outbox_table(&db.url, &receiver.url("/events"), keys)
        .replace("notify_channel = \"outbox\"\n", "");
    let relay = RelayProcess::start("outbox-schema-relay", &config).await;
    relay.until_ready().await;
    db.execute("INSERT INTO app.events (id, topic, payload) VALUES ('evt-1', 't', '{\"a\": 1}')")
        .await;
    receiver
        .until(WAIT, "evt-1 sent", |r| !r.arrivals("evt-1").is_empty())
        .await;

    let refused = run(&["outbox-schema", "--table", "a.b.c"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--table"));
    // A name that would end the DDL's comment, or make index names collide, is refused.
    for args in [
        ["--table", "outbox\nDROP TABLE accounts; --"],
        ["--table", &"t".repeat(60)],
        ["--notify-channel", "wake\nDROP TABLE accounts; --"],
    ] {
        let refused = run(&["outbox-schema", args[0], args[1]]);
        assert_eq!(refused.status.code(), Some(2), "{args:?}");
        let said = String::from_utf8_lossy(&refused.stderr);
        assert!(said.contains(args[0]), "{said}");
        assert!(refused.stdout.is_empty(), "nothing printed for {args:?}");
    }
}

#[tokio::test]
async fn a_table_the_relay_cannot_use_stops_the_start_with_exit_2_naming_each_column() {
    let Some(server) = shared_postgres() else {
        return;
    };
    let db = OutboxDb::on(server.fresh_database()).await;
    db.execute("ALTER TABLE outbox DROP COLUMN lease_owner, ALTER COLUMN last_status TYPE text")
        .await;
    let config = outbox_table(&db.url, "http://127.0.0.1:9/events", "");
    let (code, log) = RelayProcess::spawn("outbox-bad-table", &config)
        .exit()
        .await;
    assert_eq!(code, Some(2), "{log}");
    assert!(
        log.contains("outbox \"payments\": table \"outbox\""),
        "{log}"
    );
    assert!(log.contains("column lease_owner is missing"), "{log}");
    assert!(
        log.contains("column last_status is text, expected integer"),
        "{log}"
    );
}

#[tokio::test]
async fn check_prints_every_outbox_key_and_no_secret() {
    let config = common::temp::TempPath::new("outbox-check.toml");
    let table = outbox_table(
        "env:OUTBOX_CHECK_DATABASE_URL",
        "http://127.0.0.1:9/events",
        "signing_secret = \"env:OUTBOX_CHECK_SECRET\"",
    );
    std::fs::write(config.path(), table).unwrap();
    let output = Command::new(BIN)
        .args(["--config", &config.path().display().to_string(), "--check"])
        .env(
            "OUTBOX_CHECK_DATABASE_URL",
            "postgres://relay:hunter2@db.internal/payments",
        )
        .env(
            "OUTBOX_CHECK_SECRET",
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        )
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let printed = String::from_utf8(output.stdout).unwrap();
    assert!(
        !printed.contains("hunter2") && !printed.contains("whsec_"),
        "{printed}"
    );
    assert!(
        printed.contains("database = \"env:OUTBOX_CHECK_DATABASE_URL\""),
        "{printed}"
    );
    assert!(printed.contains("keep_delivered = \"1day\""), "{printed}");
    assert!(
        printed.contains("destination_concurrency = 16"),
        "deliver_concurrency's, unless set: {printed}"
    );

    let bad = outbox_table(
        "postgres://u@h/d",
        "http://127.0.0.1:9/events",
        "on_dead = \"sometimes\"",
    );
    std::fs::write(config.path(), bad).unwrap();
    let output = run(&["--config", &config.path().display().to_string(), "--check"]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains(":12: key \"on_dead\""), "{stderr}");
}

#[tokio::test]
async fn a_relay_killed_mid_attempt_sends_the_same_key_again_after_its_lease() {
    let Some(db) = OutboxDb::fresh().await else {
        return;
    };
    let receiver = Receiver::start().await;
    receiver.script("evt-cut", [Reply::status(200).held()]);
    let config = outbox_table(&db.url, &receiver.url("/events"), "");
    let mut relay = RelayProcess::start("outbox-kill-9", &config).await;
    db.commit(&[event("evt-before")]).await;
    db.until_delivered("evt-before").await;
    db.commit(&[event("evt-cut")]).await;
    receiver
        .until(WAIT, "evt-cut being attempted", |r| r.held() == 1)
        .await;
    sigkill(&relay.child);
    let _ = relay.child.wait().await;
    receiver.release();
    db.commit(&[event("evt-after")]).await;

    let relay = RelayProcess::start("outbox-kill-9-again", &config).await;
    for id in ["evt-before", "evt-cut", "evt-after"] {
        db.until_delivered(id).await;
    }
    let attempts = receiver.arrivals("evt-cut");
    assert_eq!(attempts.len(), 2);
    assert!(attempts
        .iter()
        .all(|a| a.headers["idempotency-key"] == "evt-cut"));
    assert_eq!((attempts[0].attempt, attempts[1].attempt), (1, 2));
    // The lease (deliver_timeout and its margin) ran out before the second attempt.
    assert!(attempts[1].at - attempts[0].at >= std::time::Duration::from_secs(5));
    assert_eq!(receiver.arrivals("evt-before").len(), 1);
    sigterm(&relay.child);
    assert_eq!(relay.exit().await.0, Some(0));
}

#[tokio::test]
async fn sigterm_lets_the_attempt_in_flight_finish_and_claims_no_more() {
    let Some(db) = OutboxDb::fresh().await else {
        return;
    };
    let receiver = Receiver::start().await;
    receiver.script("evt-slow", [Reply::status(200).held()]);
    let extra = "deliver_concurrency = 1";
    let config = format!(
        "drain_timeout = \"20s\"\n{}",
        outbox_table(&db.url, &receiver.url("/events"), extra)
    );
    let relay = RelayProcess::start("outbox-sigterm", &config).await;
    db.commit(&[event("evt-slow")]).await;
    receiver
        .until(WAIT, "evt-slow being attempted", |r| r.held() == 1)
        .await;
    db.commit(&[event("evt-waiting")]).await;
    sigterm(&relay.child);
    relay.until_logged("shutdown requested").await;
    receiver.release();
    let (code, log) = relay.exit().await;
    assert_eq!(code, Some(0), "{log}");
    let slow = db.row("evt-slow").await.unwrap();
    assert!(slow.delivered, "the attempt in flight was marked: {slow:?}");
    let waiting = db.row("evt-waiting").await.unwrap();
    assert_eq!(
        (waiting.attempts, waiting.lease_owner),
        (0, None),
        "never claimed"
    );
    assert!(receiver.arrivals("evt-waiting").is_empty());
}

#[tokio::test]
async fn readyz_names_the_outbox_whose_database_is_down_until_it_is_back() {
    let Some(mut server) = PostgresServer::start().await else {
        return;
    };
    let db = OutboxDb::on(server.fresh_database()).await;
    let receiver = Receiver::start().await;
    let config = outbox_table(&db.url, &receiver.url("/events"), "");
    let relay = RelayProcess::start("outbox-db-down", &config).await;
    relay.until_ready().await;
    db.commit(&[event("evt-before")]).await;
    db.until_delivered("evt-before").await;

    server.stop(Shutdown::Immediate);
    let (status, body) = poll::until(WAIT, "/readyz unready", async || {
        Some(relay.readyz().await).filter(|(status, _)| *status == 503)
    })
    .await;
    assert_eq!(status, 503);
    assert!(
        body.contains("outbox \"payments\" cannot reach its database"),
        "{body}"
    );

    server.restart().await;
    relay.until_ready().await;
    db.commit(&[event("evt-after")]).await;
    db.until_delivered("evt-after").await;
    relay.until_logged("the relay resumes").await;
    assert!(relay.log().contains("the relay is paused"));
}

/// The value of the series `name{outbox="payments"...}` in a `/metrics` text.
fn series(metrics: &str, name: &str) -> f64 {
    let line = metrics
        .lines()
        .find(|l| l.starts_with(name) && l.contains("outbox=\"payments\""))
        .unwrap_or_else(|| panic!("no {name} in {metrics}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

#[tokio::test]
async fn metrics_count_attempts_and_the_table_when_scraped() {
    let Some(db) = OutboxDb::fresh().await else {
        return;
    };
    let receiver = Receiver::start().await;
    receiver.script("a1", [Reply::status(410)]);
    let extra = "on_dead = \"block\"";
    let config = outbox_table(&db.url, &receiver.url("/events"), extra);
    let relay = RelayProcess::start("outbox-metrics", &config).await;
    db.commit(&[
        idempotency_test_support::outbox::ordered("a1", "order-A"),
        idempotency_test_support::outbox::ordered("a2", "order-A"),
        event("b1"),
    ])
    .await;
    db.until_dead("a1").await;
    db.until_delivered("b1").await;
    let metrics = String::from_utf8(
        relay
            .admin
            .send("GET", "/metrics", &[], "")
            .await
            .body
            .to_vec(),
    )
    .unwrap();
    assert_eq!(
        series(&metrics, "idempotency_outbox_pending{"),
        1.0,
        "a2, held"
    );
    assert_eq!(
        series(&metrics, "idempotency_outbox_blocked_aggregates{"),
        1.0
    );
    assert!(series(&metrics, "idempotency_outbox_oldest_pending_seconds{") > 0.0);
    let dead = "idempotency_outbox_attempts_total{outbox=\"payments\",result=\"dead\"}";
    assert_eq!(series(&metrics, dead), 1.0);
    assert_eq!(
        series(&metrics, "idempotency_outbox_delivery_seconds_count{"),
        1.0,
        "b1"
    );
}
