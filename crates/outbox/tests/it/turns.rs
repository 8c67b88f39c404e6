//! A claim costs what is due: rows waiting behind an earlier row of their aggregate, dead rows
//! and delivered rows are not on its path. An aggregate's next row is claimed as soon as the
//! earlier one is marked, not at the next poll. A table of the earlier layout is brought to
//! this one at start.

use crate::common;

use std::time::Duration;

use common::{event, ordered, Db, HyperTransport, Relays, WAIT};
use idempotency_outbox::{claim_statement, OnDead, PayloadKind, TableName};

/// Rows of the aggregate `stuck`: the first dead (so, under `block`, holding the rest back),
/// then `behind` more; and `delivered` delivered rows; all inserted as the application does,
/// through the order trigger.
async fn a_blocked_backlog(db: &Db, behind: i64, delivered: i64) {
    db.execute(&format!(
        "INSERT INTO outbox (id, topic, aggregate_id, payload)
             SELECT 'stuck-' || i, 't', 'stuck', '{{}}' FROM generate_series(0, {behind}) i;
         UPDATE outbox SET dead_at = now(), attempts = 1 WHERE id = 'stuck-0';
         INSERT INTO outbox (id, topic, payload, delivered_at, holding)
             SELECT 'done-' || i, 't', '{{}}', now(), false FROM generate_series(1, {delivered}) i;
         ANALYZE outbox;"
    ))
    .await;
}

/// The buffers the claim of `limit` rows reads, as `EXPLAIN (ANALYZE, BUFFERS)` counts them.
async fn claim_buffers(db: &Db, limit: i64) -> (i64, usize) {
    let claim = claim_statement(&TableName::default(), PayloadKind::Json)
        .replace("$1", "'explain'")
        .replace("$2::int8", "30000::int8")
        .replace("$3", &limit.to_string())
        .replace("$4", "'{}'")
        .replace("$5", "NULL");
    let mut client = db.pool.get().await.unwrap();
    let transaction = client.transaction().await.unwrap();
    let messages = transaction
        .simple_query(&format!("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {claim}"))
        .await
        .unwrap();
    transaction.rollback().await.unwrap();
    let (top, blocks) = common::explained(&messages);
    let claimed = top["Actual Rows"].as_u64().unwrap_or(0) as usize;
    (blocks, claimed)
}

#[tokio::test]
async fn a_claim_reads_only_what_is_due_whatever_waits_behind_a_dead_row() {
    let Some(db) = Db::fresh().await else { return };
    db.commit(
        &(0..10)
            .map(|i| event(&format!("free-{i}")))
            .collect::<Vec<_>>(),
    )
    .await;
    let (clean, claimed) = claim_buffers(&db, 10).await;
    assert_eq!(claimed, 10);

    a_blocked_backlog(&db, 20_000, 20_000).await;
    let waiting = db.count("SELECT count(*) FROM outbox WHERE waiting").await;
    assert_eq!(waiting, 20_000, "every row behind the dead one waits");
    let (blocked, claimed) = claim_buffers(&db, 10).await;
    assert_eq!(claimed, 10, "the ten free rows, and none of the stuck ones");
    // Walking the 20,000 waiting rows (and probing the order index for each) reads thousands
    // of buffers; the claim reads about what it read on the clean table.
    assert!(
        blocked <= clean + 40,
        "the claim read {blocked} buffers behind the backlog, {clean} without it"
    );
}

#[tokio::test]
async fn a_chain_of_one_aggregate_moves_on_each_mark_not_on_each_poll() {
    let Some(db) = Db::fresh().await else { return };
    let receiver = common::Receiver::start().await;
    let ids: Vec<String> = (0..20).map(|i| format!("chain-{i:02}")).collect();
    db.commit(
        &ids.iter()
            .map(|id| ordered(id, "order-1"))
            .collect::<Vec<_>>(),
    )
    .await;
    let mut config = db.config(&receiver);
    // Only the wake-up after each mark can deliver the chain before the test's deadline: a
    // poll would take 19 minutes.
    config.poll_interval = Duration::from_secs(60);
    let relay = db.outbox(config).start_relay(HyperTransport::shared());
    let last = ids.last().unwrap();
    db.until_delivered(last).await;
    let arrived: Vec<String> = receiver
        .keys()
        .into_iter()
        .filter(|k| k.starts_with("chain-"))
        .collect();
    assert_eq!(arrived, ids, "each once, in seq order");
    assert_eq!(receiver.overlaps(), 0);
    relay.drain(WAIT).await;
}

#[tokio::test]
async fn a_row_inserted_while_its_aggregate_is_released_is_not_left_waiting() {
    let Some(db) = Db::fresh().await else { return };
    let receiver = common::Receiver::start().await;
    let mut config = db.config(&receiver);
    config.poll_interval = Duration::from_secs(60);
    config.notify_channel = Some(idempotency_test_support::outbox::CHANNEL.to_owned());
    let relay = db.outbox(config).start_relay(HyperTransport::shared());
    // Each row is committed while the one before it may be being marked.
    for i in 0..30 {
        db.commit(&[ordered(&format!("race-{i:02}"), "order-2")])
            .await;
    }
    db.until_delivered("race-29").await;
    let arrived: Vec<String> = receiver
        .keys()
        .into_iter()
        .filter(|k| k.starts_with("race-"))
        .collect();
    let expected: Vec<String> = (0..30).map(|i| format!("race-{i:02}")).collect();
    assert_eq!(arrived, expected);
    relay.drain(WAIT).await;
}

#[tokio::test]
async fn a_table_of_the_earlier_layout_is_brought_to_this_one_at_start() {
    let Some(db) = Db::fresh().await else { return };
    // The earlier layout: no holding or waiting, the old claim and order indexes, and the
    // trigger without its argument.
    db.execute(
        "DROP INDEX outbox_ready; DROP INDEX outbox_holding;
         ALTER TABLE outbox DROP COLUMN holding, DROP COLUMN waiting;
         CREATE INDEX outbox_due ON outbox (next_attempt_at)
             WHERE delivered_at IS NULL AND dead_at IS NULL;
         CREATE INDEX outbox_aggregate ON outbox (aggregate_id, seq) WHERE delivered_at IS NULL;
         DROP TRIGGER idempotency_outbox_order ON outbox;
         CREATE TRIGGER idempotency_outbox_order BEFORE INSERT ON outbox
             FOR EACH ROW EXECUTE FUNCTION idempotency_outbox_order();",
    )
    .await;
    db.commit(&[ordered("old-1", "order-3"), ordered("old-2", "order-3")])
        .await;
    db.execute("UPDATE outbox SET dead_at = now() WHERE id = 'old-1'")
        .await;
    let receiver = common::Receiver::start().await;
    let mut config = db.config(&receiver);
    config.on_dead = OnDead::Block;
    let outbox = db.outbox(config);
    outbox.prepare_table().await.unwrap();
    let state = "SELECT string_agg(id || ':' || holding || ':' || waiting, ' ' ORDER BY seq) \
                 FROM outbox";
    let client = db.pool.get().await.unwrap();
    let rows: String = client.query_one(state, &[]).await.unwrap().get(0);
    assert_eq!(rows, "old-1:true:false old-2:true:true");
    let indexes = db
        .count(
            "SELECT count(*) FROM pg_indexes WHERE indexname IN ('outbox_due', 'outbox_aggregate')",
        )
        .await;
    assert_eq!(indexes, 0, "the earlier indexes are dropped");
    // Rows inserted after are placed by the trigger, which now has its argument.
    db.commit(&[ordered("old-3", "order-3")]).await;
    let waiting = db
        .count("SELECT count(*) FROM outbox WHERE id = 'old-3' AND waiting")
        .await;
    assert_eq!(waiting, 1);
    // A second start finds everything in place.
    outbox.prepare_table().await.unwrap();
    assert!(outbox.delete_dead("old-1").await.unwrap());
    let relay = outbox.start_relay(HyperTransport::shared());
    db.until_delivered("old-3").await;
    relay.drain(WAIT).await;
}

#[tokio::test]
async fn keep_dead_deletes_dead_rows_once_that_old_and_their_aggregate_moves_on() {
    let Some(db) = Db::fresh().await else { return };
    let receiver = common::Receiver::start().await;
    receiver.script("k1", [common::Reply::status(410)]);
    let mut config = db.config(&receiver);
    config.on_dead = OnDead::Block;
    config.keep_dead = Some(Duration::from_millis(300));
    let relay = db.outbox(config).start_relay(HyperTransport::shared());
    db.commit(&[ordered("k1", "order-k"), ordered("k2", "order-k")])
        .await;
    // k1 dies, holds k2 back until it is deleted, then k2 goes.
    db.until_delivered("k2").await;
    assert!(db.row("k1").await.is_none(), "the dead row is deleted");
    assert_eq!(
        receiver
            .keys()
            .into_iter()
            .filter(|k| k.starts_with('k'))
            .collect::<Vec<_>>(),
        ["k1", "k2"]
    );
    relay.drain(WAIT).await;
}

#[tokio::test]
async fn a_retried_row_gets_a_fresh_age_budget_as_well_as_attempts() {
    let Some(db) = Db::fresh().await else { return };
    let receiver = common::Receiver::start().await;
    // First a receiver that is down (nothing listens on its port) until the row dies of age.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let down = format!("http://{}/events", closed.local_addr().unwrap());
    drop(closed);
    let mut config = db.config(&receiver);
    config.max_age = Duration::from_secs(3);
    config.max_attempts = 100_000;
    let mut outage = config.clone();
    outage.deliver_to = Some(down.parse().unwrap());
    let relay = db.outbox(outage).start_relay(HyperTransport::shared());
    db.commit(&[event("old")]).await;
    let dead = db.until_dead("old").await;
    let why = dead.last_error.unwrap_or_default();
    assert!(why.contains("max_age"), "it died of its age: {why}");
    relay.drain(WAIT).await;

    // The receiver is back but for one more failure: with the age counted from the insert,
    // that failure would kill the row again at once.
    receiver.script("old", [common::Reply::status(503)]);
    let relay = db.outbox(config).start_relay(HyperTransport::shared());
    assert!(relay.outbox().retry_dead("old").await.unwrap());
    let delivered = db.until_delivered("old").await;
    assert_eq!(delivered.attempts, 2, "one failure, then the delivery");
    relay.drain(WAIT).await;
}
