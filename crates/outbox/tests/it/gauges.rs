//! The gauges' reading of a table: what the exact counts say on a small table, and a bounded
//! walk through the indexes on a large one, whatever it holds beyond.

use crate::common;

use common::{event, ordered, Db, Receiver, Relays};
use idempotency_outbox::{gauges_statement, OnDead, TableName, GAUGE_ROWS};

const DAY: f64 = 86_400.0;

/// The plan of the gauges' statement, run (`EXPLAIN (ANALYZE, BUFFERS)`), and the buffers it
/// read.
async fn plan(db: &Db, on_dead: OnDead) -> (serde_json::Value, i64) {
    let sql =
        gauges_statement(&TableName::default(), on_dead).replace("$1", &GAUGE_ROWS.to_string());
    let client = db.pool.get().await.unwrap();
    let messages = client
        .simple_query(&format!("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}"))
        .await
        .unwrap();
    let (top, blocks) = common::explained(&messages);
    (top, blocks)
}

/// Every node type of a plan.
fn node_types(plan: &serde_json::Value, into: &mut Vec<String>) {
    if let Some(node) = plan["Node Type"].as_str() {
        into.push(node.to_owned());
    }
    for child in plan["Plans"].as_array().into_iter().flatten() {
        node_types(child, into);
    }
}

/// Inserts `count` pending rows without an aggregate, numbered from `from`.
async fn pending(db: &Db, from: u64, count: u64) {
    let to = from + count - 1;
    db.execute(&format!(
        "INSERT INTO outbox (id, topic, payload)
             SELECT 'p-' || i, 't', '{{}}' FROM generate_series({from}, {to}) i"
    ))
    .await;
}

#[tokio::test]
async fn on_a_small_table_the_gauges_say_what_the_counts_say() {
    let Some(db) = Db::fresh().await else { return };
    db.commit(&[
        ordered("a1", "order-1"),
        ordered("a2", "order-1"),
        event("b1"),
        event("c1"),
        event("d1"),
    ])
    .await;
    db.execute(
        "UPDATE outbox SET dead_at = now(), attempts = 1 WHERE id = 'a1';
         UPDATE outbox SET created_at = now() - interval '1 day' WHERE id = 'b1';
         UPDATE outbox SET lease_owner = 'elsewhere', lease_until = now() + interval '1 hour',
             attempts = 1 WHERE id = 'c1';
         UPDATE outbox SET delivered_at = now(), holding = false WHERE id = 'd1';",
    )
    .await;
    let receiver = Receiver::start().await;
    let mut config = db.config(&receiver);
    config.on_dead = OnDead::Block;
    let outbox = db.outbox(config);
    let counts = outbox.counts().await.unwrap();
    let gauges = outbox.gauges().await.unwrap();
    assert_eq!(
        (counts.pending, counts.blocked_aggregates),
        (2, 1),
        "a2 waiting behind the dead a1, and b1"
    );
    assert_eq!(
        (gauges.pending, gauges.blocked_aggregates),
        (counts.pending, counts.blocked_aggregates)
    );
    let oldest = gauges.oldest_pending.as_secs_f64();
    assert!(
        (DAY..DAY + 3_600.0).contains(&oldest),
        "b1's age: {oldest}, counted {:?}",
        counts.oldest_pending
    );
}

#[tokio::test]
async fn on_a_large_table_the_gauges_walk_a_bounded_part_of_its_indexes() {
    let Some(db) = Db::fresh().await else { return };
    let receiver = Receiver::start().await;
    let outbox = db.outbox(db.config(&receiver));
    pending(&db, 1, 20_000).await;
    db.execute("ANALYZE outbox").await;
    let (_, small) = plan(&db, OnDead::Skip).await;
    assert_eq!(outbox.gauges().await.unwrap().pending, GAUGE_ROWS);

    pending(&db, 20_001, 180_000).await;
    // A day's deliveries kept, and one row older than all the others, never attempted,
    // inserted last: the last row of the order index, the first one due.
    db.execute(
        "INSERT INTO outbox (id, topic, payload, delivered_at, holding)
             SELECT 'done-' || i, 't', '{}', now(), false FROM generate_series(1, 200000) i;
         INSERT INTO outbox (id, topic, payload, created_at, next_attempt_at)
             VALUES ('oldest', 't', '{}', now() - interval '1 day', now() - interval '1 day');
         ANALYZE outbox;",
    )
    .await;
    let rows = db.count("SELECT count(*) FROM outbox").await;
    assert_eq!(rows, 400_001);
    let gauges = outbox.gauges().await.unwrap();
    assert_eq!(gauges.pending, GAUGE_ROWS, "that many or more");
    assert!(gauges.oldest_pending.as_secs_f64() >= DAY, "{gauges:?}");

    let (large, read) = plan(&db, OnDead::Skip).await;
    let mut nodes = Vec::new();
    node_types(&large, &mut nodes);
    assert!(
        !nodes.iter().any(|n| n == "Seq Scan" || n == "Sort"),
        "index walks only: {nodes:?}"
    );
    // Twenty times the rows, and about the buffers read on the small table (an index level
    // more at most).
    assert!(
        read <= small + small / 5 + 20,
        "{read} buffers on the large table, {small} on the small one"
    );
    let (_, blocked) = plan(&db, OnDead::Block).await;
    assert!(blocked <= read + 20, "no dead rows to walk: {blocked}");
}
