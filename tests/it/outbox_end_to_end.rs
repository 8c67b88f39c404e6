//! The whole loop, "never lost, never twice": the application's transaction writes its business
//! change and its event together; a relay (the binary, relay only) delivers the event to this
//! proxy (the binary again) in front of the receiver; the relay is killed after the receiver
//! answered and before its mark reached the database. The next relay sends the row again, with
//! the same key, and the proxy answers it from what it stored: the receiver's effect happens
//! once.

use crate::common;

use common::binary::{sigterm, start_binary};
use common::outbox::{outbox_table, RelayProcess, WAIT};
use common::poll;
use common::receiver::{Receiver, Reply};
use common::temp::TempPath;
use idempotency_outbox::{enqueue, Event, EventId, TableName};
use idempotency_test_support::outbox::OutboxDb;

/// The application: the order is paid and its event written, in one transaction.
async fn pay(db: &OutboxDb, order: i64) {
    let mut client = db.pool.get().await.unwrap();
    let transaction = client.transaction().await.unwrap();
    let paid = "UPDATE orders SET status = 'paid' WHERE id = $1";
    assert_eq!(transaction.execute(paid, &[&order]).await.unwrap(), 1);
    let id = EventId::new(format!("payment-confirmed-{order}")).unwrap();
    let body = serde_json::json!({ "order": order, "status": "paid" });
    let event = Event::json(id, "payment.confirmed", &body)
        .unwrap()
        .aggregate(format!("order-{order}"));
    enqueue(&transaction, &TableName::default(), &event)
        .await
        .unwrap();
    transaction.commit().await.unwrap();
}

/// Sessions waiting for a lock in an `UPDATE` of the outbox: the relay's mark, held back.
async fn waiting_marks(db: &OutboxDb) -> i64 {
    db.count("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'UPDATE \"outbox\"%'").await
}

#[tokio::test]
async fn a_relay_killed_between_the_receivers_answer_and_its_mark_causes_one_effect() {
    let Some(db) = OutboxDb::fresh().await else {
        return;
    };
    db.execute("CREATE TABLE orders (id bigint PRIMARY KEY, status text NOT NULL); INSERT INTO orders VALUES (7, 'new')").await;
    let receiver = Receiver::start().await;
    receiver.script("payment-confirmed-7", [Reply::status(201).held()]);
    // The proxy in front of the receiver: every event's key is required, and kept.
    let proxy_config = TempPath::new("outbox-e2e-proxy.toml");
    let routes = format!(
        "[[routes]]\nname = \"fulfilment\"\npath_prefix = \"/hooks/\"\nupstream = \"{}\"\nrequire_key = true\n",
        receiver.url("")
    );
    std::fs::write(proxy_config.path(), routes).unwrap();
    let config_flag = proxy_config.path().display().to_string();
    let (proxy, proxy_client) = start_binary(
        &receiver.url(""),
        &["--config", &config_flag, "--store", "memory"],
    )
    .await;
    let hooks = format!("http://{}/hooks/payments", proxy_client.addr());
    let relay_config = outbox_table(&db.url, &hooks, "");
    let relay = RelayProcess::start("outbox-e2e-relay", &relay_config).await;

    pay(&db, 7).await;
    receiver
        .until(WAIT, "the receiver has the event", |r| r.held() == 1)
        .await;
    // Hold the row, so the relay's mark waits; then let the receiver answer.
    let mut holder = db.pool.get().await.unwrap();
    let lock = holder.transaction().await.unwrap();
    lock.execute(
        "SELECT 1 FROM outbox WHERE id = 'payment-confirmed-7' FOR UPDATE",
        &[],
    )
    .await
    .unwrap();
    receiver.release();
    poll::until(WAIT, "the relay's mark waits for the row", async || {
        waiting_marks(&db).await > 0
    })
    .await;
    // The relay dies, and its mark with it: its session is ended before the row is let go.
    common::binary::sigkill(&relay.child);
    let _ = relay.exit().await;
    db.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'UPDATE \"outbox\"%'").await;
    lock.rollback().await.unwrap();
    let row = db.row("payment-confirmed-7").await.unwrap();
    assert!(!row.delivered, "the mark never landed: {row:?}");

    let relay = RelayProcess::start("outbox-e2e-relay-again", &relay_config).await;
    let row = db.until_delivered("payment-confirmed-7").await;
    assert_eq!(row.attempts, 2, "sent twice by the relays");
    assert_eq!(
        row.last_status,
        Some(201),
        "the second answered from what the proxy kept"
    );
    let effects = receiver.arrivals("payment-confirmed-7");
    assert_eq!(effects.len(), 1, "the receiver's effect happened once");
    assert_eq!(effects[0].uri.path(), "/hooks/payments");
    relay
        .until_logged("attempt=2 result=\"delivered\" status=201")
        .await;
    sigterm(&relay.child);
    assert_eq!(relay.exit().await.0, Some(0));
    sigterm(&proxy);
}
