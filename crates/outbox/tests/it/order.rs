//! Order per aggregate: a row is not attempted while an earlier row of its aggregate is
//! pending or in flight; a dead row releases its aggregate (`on_dead = "skip"`) or holds it
//! until it is retried or deleted (`"block"`); and two transactions of one aggregate that
//! commit out of `seq` order (identity values are taken at insert, not at commit) cannot be
//! delivered out of order, because the table's order trigger gives a row its `seq` only once
//! the earlier transaction of its aggregate has ended.

use crate::common;

use common::{event, ordered, Db, HyperTransport, Receiver, Relays, Reply, WAIT};
use idempotency_outbox::{enqueue, OnDead, TableName};

/// `ids`' arrivals in the order they came, each id once per attempt.
fn arrival_order(receiver: &Receiver, ids: &[&str]) -> Vec<String> {
    let keys = receiver.keys();
    keys.into_iter()
        .filter(|k| ids.contains(&k.as_str()))
        .collect()
}

#[tokio::test]
async fn under_skip_a_failing_first_row_holds_its_aggregate_until_it_is_dead() {
    let Some(db) = Db::fresh().await else { return };
    let receiver = Receiver::start().await;
    receiver.script(
        "a1",
        [Reply::status(500), Reply::status(500), Reply::status(500)],
    );
    let mut config = db.config(&receiver);
    config.max_attempts = 3;
    let relay = db.outbox(config).start_relay(HyperTransport::shared());
    db.commit(&[
        ordered("a1", "order-A"),
        ordered("a2", "order-A"),
        ordered("b1", "order-B"),
    ])
    .await;
    db.commit(&[ordered("a3", "order-A"), event("loose")]).await;
    db.until_dead("a1").await;
    for id in ["a2", "a3", "b1", "loose"] {
        db.until_delivered(id).await;
    }
    assert_eq!(
        arrival_order(&receiver, &["a1", "a2", "a3"]),
        ["a1", "a1", "a1", "a2", "a3"]
    );
    assert_eq!(receiver.overlaps(), 0);
    assert_eq!(relay.outbox().counts().await.unwrap().blocked_aggregates, 0);
    relay.drain(WAIT).await;
}

#[tokio::test]
async fn under_block_a_dead_first_row_holds_its_aggregate_until_it_is_retried() {
    let Some(db) = Db::fresh().await else { return };
    let receiver = Receiver::start().await;
    receiver.script("a1", [Reply::status(410)]);
    let mut config = db.config(&receiver);
    config.on_dead = OnDead::Block;
    let relay = db.outbox(config).start_relay(HyperTransport::shared());
    db.commit(&[
        ordered("a1", "order-A"),
        ordered("a2", "order-A"),
        ordered("a3", "order-A"),
    ])
    .await;
    db.until_dead("a1").await;
    // Committed after a1 died: once it is delivered, a claim has run that would have taken
    // a2 had a dead a1 not held it.
    db.commit(&[ordered("b1", "order-B")]).await;
    db.until_delivered("b1").await;
    assert_eq!(arrival_order(&receiver, &["a1", "a2", "a3"]), ["a1"]);
    let counts = relay.outbox().counts().await.unwrap();
    assert_eq!(
        (counts.blocked_aggregates, counts.dead, counts.pending),
        (1, 1, 2)
    );

    assert!(relay.outbox().retry_dead("a1").await.unwrap());
    for id in ["a1", "a2", "a3"] {
        db.until_delivered(id).await;
    }
    assert_eq!(
        arrival_order(&receiver, &["a1", "a2", "a3"]),
        ["a1", "a1", "a2", "a3"]
    );
    assert_eq!(relay.outbox().counts().await.unwrap().blocked_aggregates, 0);
    relay.drain(WAIT).await;
}

#[tokio::test]
async fn under_block_deleting_the_dead_row_releases_its_aggregate() {
    let Some(db) = Db::fresh().await else { return };
    let receiver = Receiver::start().await;
    receiver.script("a1", [Reply::status(410)]);
    let mut config = db.config(&receiver);
    config.on_dead = OnDead::Block;
    let relay = db.outbox(config).start_relay(HyperTransport::shared());
    db.commit(&[ordered("a1", "order-A"), ordered("a2", "order-A")])
        .await;
    db.until_dead("a1").await;
    assert!(relay.outbox().delete_dead("a1").await.unwrap());
    db.until_delivered("a2").await;
    relay.drain(WAIT).await;
}

/// Whether a session waits for a lock in an `INSERT` right now.
async fn an_insert_waits_for_a_lock(db: &Db) -> bool {
    let client = db.pool.get().await.unwrap();
    let sql = "SELECT count(*) FROM pg_stat_activity \
               WHERE wait_event_type = 'Lock' AND query LIKE 'INSERT%'";
    client.query_one(sql, &[]).await.unwrap().get::<_, i64>(0) > 0
}

/// Starts a second transaction that inserts `id` of `aggregate` and commits, and waits until its
/// insert waits for the lock the first transaction of the aggregate holds.
async fn a_second_transaction_waits(
    db: &Db,
    id: &'static str,
    aggregate: &'static str,
) -> tokio::task::JoinHandle<()> {
    let pool = db.pool.clone();
    let second = tokio::spawn(async move {
        let mut client = pool.get().await.unwrap();
        let transaction = client.transaction().await.unwrap();
        enqueue(&transaction, &TableName::default(), &ordered(id, aggregate))
            .await
            .unwrap();
        transaction.commit().await.unwrap();
    });
    common::poll::until(WAIT, format!("{id}'s insert waits"), async || {
        an_insert_waits_for_a_lock(db).await
    })
    .await;
    second
}

#[tokio::test]
async fn two_transactions_of_one_aggregate_are_delivered_in_commit_order() {
    let Some(db) = Db::fresh().await else { return };
    let receiver = Receiver::start().await;
    let relay = db
        .outbox(db.config(&receiver))
        .start_relay(HyperTransport::shared());
    let table = TableName::default();
    // The first transaction inserts x1 and stays open.
    let mut first = db.pool.get().await.unwrap();
    let first = first.transaction().await.unwrap();
    enqueue(&first, &table, &ordered("x1", "order-X"))
        .await
        .unwrap();
    // The second inserts x2 of the same aggregate: it waits until the first ends, so it can
    // never commit first with a later seq.
    let second = a_second_transaction_waits(&db, "x2", "order-X").await;
    // Meanwhile the relay claims: an unrelated row goes, nothing of order-X does.
    db.commit(&[event("unrelated")]).await;
    db.until_delivered("unrelated").await;
    assert!(arrival_order(&receiver, &["x1", "x2"]).is_empty());

    first.commit().await.unwrap();
    second.await.unwrap();
    let (x1, x2) = (
        db.until_delivered("x1").await,
        db.until_delivered("x2").await,
    );
    assert!(x1.seq < x2.seq, "{x1:?} {x2:?}");
    assert_eq!(arrival_order(&receiver, &["x1", "x2"]), ["x1", "x2"]);
    relay.drain(WAIT).await;
}

#[tokio::test]
async fn a_rolled_back_first_transaction_lets_the_second_go_alone() {
    let Some(db) = Db::fresh().await else { return };
    let receiver = Receiver::start().await;
    let relay = db
        .outbox(db.config(&receiver))
        .start_relay(HyperTransport::shared());
    let mut first = db.pool.get().await.unwrap();
    let first = first.transaction().await.unwrap();
    enqueue(&first, &TableName::default(), &ordered("y1", "order-Y"))
        .await
        .unwrap();
    let second = a_second_transaction_waits(&db, "y2", "order-Y").await;
    first.rollback().await.unwrap();
    second.await.unwrap();
    db.until_delivered("y2").await;
    assert!(db.row("y1").await.is_none());
    assert_eq!(arrival_order(&receiver, &["y1", "y2"]), ["y2"]);
    relay.drain(WAIT).await;
}

#[tokio::test]
async fn rows_of_many_aggregates_keep_their_order_under_concurrency() {
    let Some(db) = Db::fresh().await else { return };
    let receiver = Receiver::start().await;
    // Every third attempt fails, so rows wait behind retried ones.
    for n in (0..60).step_by(3) {
        receiver.script(&format!("agg{}-{}", n % 4, n), [Reply::status(503)]);
    }
    let mut config = db.config(&receiver);
    config.deliver_concurrency = 8;
    let relay = db.outbox(config).start_relay(HyperTransport::shared());
    for n in 0..60 {
        let aggregate = format!("agg{}", n % 4);
        db.commit(&[ordered(&format!("{aggregate}-{n}"), &aggregate)])
            .await;
    }
    for n in 0..60 {
        db.until_delivered(&format!("agg{}-{n}", n % 4)).await;
    }
    for aggregate in 0..4 {
        let prefix = format!("agg{aggregate}-");
        let mut delivered: Vec<u32> = Vec::new();
        for arrival in receiver.all().iter().filter(|a| a.key.starts_with(&prefix)) {
            let n: u32 = arrival.key[prefix.len()..].parse().unwrap();
            if delivered.last() != Some(&n) {
                delivered.push(n);
            }
        }
        let mut sorted = delivered.clone();
        sorted.sort_unstable();
        assert_eq!(delivered, sorted, "aggregate {aggregate} out of order");
        assert_eq!(delivered.len(), 15);
    }
    assert_eq!(receiver.overlaps(), 0);
    relay.drain(WAIT).await;
}
