//! Delivery against a real PostgreSQL and a real receiver over loopback: what is committed
//! arrives and what is rolled back never does; a failure is retried with the same key, after
//! `Retry-After` when the receiver asks; `410` and a spent budget make a row dead, and a row
//! that cannot be sent is dead at once while the others flow.

use crate::common;

use std::time::Duration;

use common::{event, Db, HyperTransport, Receiver, Relays, Reply, WAIT};
use idempotency_outbox::enqueue;
use idempotency_outbox::TableName;

#[tokio::test]
async fn every_committed_row_is_delivered_and_a_rolled_back_one_never() {
    let Some(db) = Db::fresh().await else { return };
    let receiver = Receiver::start().await;
    let relay = db
        .outbox(db.config(&receiver))
        .start_relay(HyperTransport::shared());
    db.commit(&[event("evt-1"), event("evt-2")]).await;
    {
        let mut client = db.pool.get().await.unwrap();
        let transaction = client.transaction().await.unwrap();
        enqueue(
            &transaction,
            &TableName::default(),
            &event("evt-rolled-back"),
        )
        .await
        .unwrap();
        transaction.rollback().await.unwrap();
    }
    // Committed after the rollback: once it is delivered, the rolled-back row had every
    // chance to be sent too.
    db.commit(&[event("evt-3")]).await;
    for id in ["evt-1", "evt-2", "evt-3"] {
        let row = db.until_delivered(id).await;
        assert_eq!((row.attempts, row.last_status), (1, Some(200)), "{id}");
    }
    assert!(receiver.arrivals("evt-rolled-back").is_empty());
    assert!(db.row("evt-rolled-back").await.is_none());
    let first = &receiver.arrivals("evt-1")[0];
    assert_eq!(first.method, http::Method::POST);
    assert_eq!(first.uri.path(), "/events");
    assert_eq!(first.attempt, 1);
    assert_eq!(first.headers["outbox-topic"], "payment.confirmed");
    assert_eq!(first.headers["content-type"], "application/json");
    let body: serde_json::Value = serde_json::from_slice(&first.body).unwrap();
    assert_eq!(body, serde_json::json!({ "event": "evt-1" }));
    let counts = relay.outbox().counts().await.unwrap();
    assert_eq!((counts.pending, counts.in_flight, counts.dead), (0, 0, 0));
    assert_eq!(counts.delivered_last_hour, 3);
    relay.drain(WAIT).await;
}

#[tokio::test]
async fn a_failed_attempt_is_retried_with_the_same_key() {
    let Some(db) = Db::fresh().await else { return };
    let receiver = Receiver::start().await;
    receiver.script("evt-flaky", [Reply::status(500), Reply::status(503)]);
    let relay = db
        .outbox(db.config(&receiver))
        .start_relay(HyperTransport::shared());
    db.commit(&[event("evt-flaky")]).await;
    let row = db.until_delivered("evt-flaky").await;
    assert_eq!(row.attempts, 3);
    let arrivals = receiver.arrivals("evt-flaky");
    let attempts: Vec<u32> = arrivals.iter().map(|a| a.attempt).collect();
    assert_eq!(attempts, [1, 2, 3]);
    assert!(arrivals
        .iter()
        .all(|a| a.headers["idempotency-key"] == "evt-flaky"));
    assert!(
        arrivals.windows(2).all(|w| w[0].body == w[1].body),
        "the same body each time"
    );
    relay.drain(WAIT).await;
}

#[tokio::test]
async fn retry_after_is_waited_for_up_to_retry_max() {
    let Some(db) = Db::fresh().await else { return };
    let receiver = Receiver::start().await;
    let busy = Reply::status(503).with_header("retry-after", "2");
    let slow_down = Reply::status(429).with_header("retry-after", "3600");
    receiver.script("evt-busy", [busy]);
    receiver.script("evt-capped", [slow_down]);
    let mut config = db.config(&receiver);
    config.retry.max = Duration::from_secs(3);
    let relay = db.outbox(config).start_relay(HyperTransport::shared());
    db.commit(&[event("evt-busy"), event("evt-capped")]).await;
    db.until_delivered("evt-busy").await;
    db.until_delivered("evt-capped").await;
    let gap = |key: &str| {
        let arrivals = receiver.arrivals(key);
        assert_eq!(arrivals.len(), 2, "{key}");
        arrivals[1].at - arrivals[0].at
    };
    // The backoff alone would have retried within 20 ms.
    assert!(
        gap("evt-busy") >= Duration::from_millis(1900),
        "{:?}",
        gap("evt-busy")
    );
    assert!(
        gap("evt-capped") >= Duration::from_millis(2900),
        "{:?}",
        gap("evt-capped")
    );
    assert!(gap("evt-capped") < Duration::from_secs(3600));
    relay.drain(WAIT).await;
}

#[tokio::test]
async fn a_row_is_dead_after_its_attempts_or_on_410_and_kept() {
    let Some(db) = Db::fresh().await else { return };
    let receiver = Receiver::start().await;
    receiver.script("evt-down", (0..3).map(|_| Reply::status(500)));
    receiver.script("evt-gone", [Reply::status(410)]);
    let mut config = db.config(&receiver);
    config.max_attempts = 3;
    let relay = db.outbox(config).start_relay(HyperTransport::shared());
    db.commit(&[event("evt-down"), event("evt-gone"), event("evt-fine")])
        .await;
    let down = db.until_dead("evt-down").await;
    assert_eq!((down.attempts, down.last_status), (3, Some(500)));
    let error = down.last_error.unwrap();
    assert!(error.contains("attempt 3 of max_attempts 3"), "{error}");
    let gone = db.until_dead("evt-gone").await;
    assert_eq!((gone.attempts, gone.last_status), (1, Some(410)));
    db.until_delivered("evt-fine").await;
    assert_eq!(receiver.arrivals("evt-down").len(), 3);
    assert_eq!(receiver.arrivals("evt-gone").len(), 1);

    let outbox = relay.outbox().clone();
    let dead = outbox.dead(10, None).await.unwrap().unwrap();
    let ids: Vec<&str> = dead.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids, ["evt-down", "evt-gone"], "in insertion order");
    assert_eq!(dead[1].last_status, Some(410));
    assert_eq!(
        outbox.dead(10, Some("evt-down")).await.unwrap().unwrap()[0].id,
        "evt-gone"
    );
    let after_the_last = outbox.dead(10, Some("evt-gone")).await.unwrap();
    assert_eq!(
        after_the_last,
        Some(vec![]),
        "an empty page after a row that is there"
    );
    let after_none = outbox.dead(10, Some("evt-none")).await.unwrap();
    assert_eq!(after_none, None, "after a row that is not there, no page");
    assert_eq!(outbox.counts().await.unwrap().dead, 2);

    // A retry gives a fresh budget: the receiver answers now.
    assert!(outbox.retry_dead("evt-down").await.unwrap());
    let again = db.until_delivered("evt-down").await;
    assert_eq!(again.attempts, 1);
    assert!(outbox.delete_dead("evt-gone").await.unwrap());
    assert!(db.row("evt-gone").await.is_none());
    assert!(
        !outbox.delete_dead("evt-fine").await.unwrap(),
        "only dead rows"
    );
    assert!(!outbox.retry_dead("evt-none").await.unwrap());
    relay.drain(WAIT).await;
}

#[tokio::test]
async fn a_row_that_cannot_be_sent_is_dead_at_once_while_the_others_flow() {
    let Some(db) = Db::fresh().await else { return };
    let receiver = Receiver::start().await;
    db.execute("ALTER TABLE outbox ALTER COLUMN payload DROP NOT NULL")
        .await;
    let mut config = db.config(&receiver);
    // Only one topic has a destination.
    let url = config.deliver_to.take().unwrap();
    config.topics.insert("payment.confirmed".into(), url);
    let relay = db.outbox(config).start_relay(HyperTransport::shared());
    db.execute(
        "INSERT INTO outbox (id, topic, payload, headers) VALUES
           ('bad-topic', 'order.shipped', '{}', NULL),
           ('bad-headers', 'payment.confirmed', '{}', '[\"x\"]'),
           ('bad-header-value', 'payment.confirmed', '{}', '{\"x-n\": 7}'),
           ('bad-payload', 'payment.confirmed', NULL, NULL),
           ('good', 'payment.confirmed', '{}', '{\"x-tenant\": \"t1\"}')",
    )
    .await;
    db.commit(&[event("good-2")]).await;
    let reasons = [
        ("bad-topic", "no destination for topic \"order.shipped\""),
        ("bad-headers", "headers is not a JSON object of strings"),
        ("bad-header-value", "the value of \"x-n\" is not a string"),
        ("bad-payload", "the payload is null"),
    ];
    for (id, reason) in reasons {
        let row = db.until_dead(id).await;
        let error = row.last_error.unwrap();
        assert!(error.contains(reason), "{id}: {error}");
        assert_eq!(
            (row.attempts, row.last_status),
            (0, None),
            "{id}: never attempted"
        );
    }
    db.until_delivered("good").await;
    db.until_delivered("good-2").await;
    assert_eq!(receiver.arrivals("good")[0].headers["x-tenant"], "t1");
    let keys = receiver.keys();
    assert!(keys.iter().all(|k| k.starts_with("good")), "{keys:?}");
    relay.drain(WAIT).await;
}

#[tokio::test]
async fn a_notify_wakes_the_relay_long_before_its_poll() {
    let Some(db) = Db::fresh().await else { return };
    let receiver = Receiver::start().await;
    let mut config = db.config(&receiver);
    config.poll_interval = Duration::from_secs(3600);
    config.notify_channel = Some("outbox".into());
    let relay = db.outbox(config).start_relay(HyperTransport::shared());
    // The first poll happens at start; what comes after can only be found by a NOTIFY.
    poll_once_done(&db, &relay).await;
    db.commit(&[event("evt-notified")]).await;
    db.until_delivered("evt-notified").await;
    relay.drain(WAIT).await;
}

/// Waits until the relay has made its first claim (it is ready), and its listener is up
/// (a notification sent now is heard).
async fn poll_once_done(db: &Db, relay: &idempotency_outbox::Relay) {
    common::poll::until(WAIT, "the relay ready", async || relay.health().is_ready()).await;
    common::poll::until(WAIT, "the relay listening", async || {
        let client = db.pool.get().await.unwrap();
        let sql = "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN%'";
        let listening: i64 = client.query_one(sql, &[]).await.unwrap().get(0);
        listening > 0
    })
    .await;
}

#[tokio::test]
async fn delivered_rows_are_deleted_after_keep_delivered_and_dead_ones_kept() {
    let Some(db) = Db::fresh().await else { return };
    let receiver = Receiver::start().await;
    receiver.script("evt-dead", [Reply::status(410)]);
    let mut config = db.config(&receiver);
    config.keep_delivered = Duration::ZERO;
    let relay = db.outbox(config).start_relay(HyperTransport::shared());
    db.commit(&[event("evt-dead"), event("evt-gone-soon")])
        .await;
    receiver
        .until(WAIT, "evt-gone-soon sent", |r| {
            !r.arrivals("evt-gone-soon").is_empty()
        })
        .await;
    common::poll::until(WAIT, "evt-gone-soon deleted", async || {
        db.row("evt-gone-soon").await.is_none()
    })
    .await;
    assert!(db.until_dead("evt-dead").await.dead);
    relay.drain(WAIT).await;

    // Kept a while, then deleted in the background, dead rows still kept.
    let mut config = db.config(&receiver);
    config.keep_delivered = Duration::from_millis(300);
    let relay = db.outbox(config).start_relay(HyperTransport::shared());
    db.commit(&[event("evt-kept-a-while")]).await;
    db.until_delivered("evt-kept-a-while").await;
    common::poll::until(WAIT, "evt-kept-a-while deleted", async || {
        db.row("evt-kept-a-while").await.is_none()
    })
    .await;
    assert!(db.row("evt-dead").await.unwrap().dead);
    relay.drain(WAIT).await;
}
