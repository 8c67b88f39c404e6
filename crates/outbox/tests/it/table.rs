//! The start-up check of a real table: the printed DDL passes; a table of the user's with
//! other payload types is read as such; missing and mistyped columns are each named; a table
//! without the order trigger passes, and says so.

use crate::common;

use common::{Db, Relays};
use idempotency_outbox::{OutboxError, PayloadKind, TableName};
use idempotency_test_support::postgres_server::shared_postgres;

async fn empty_db() -> Option<Db> {
    Some(Db::empty(shared_postgres()?.fresh_database()))
}

#[tokio::test]
async fn the_printed_ddl_passes_and_a_broken_table_is_named_column_by_column() {
    let Some(db) = Db::fresh().await else { return };
    let receiver = common::Receiver::start().await;
    let outbox = db.outbox(db.config(&receiver));
    let layout = outbox.check_table().await.unwrap();
    assert_eq!((layout.payload, layout.ordered), (PayloadKind::Json, true));

    db.execute("ALTER TABLE outbox DROP COLUMN lease_until, ALTER COLUMN attempts TYPE bigint, DROP COLUMN dead_at")
        .await;
    let Err(OutboxError::Table(refused)) = outbox.check_table().await else {
        panic!("refused")
    };
    assert_eq!(
        refused.problems,
        [
            "column attempts is bigint, expected integer",
            "column lease_until is missing",
            "column dead_at is missing"
        ]
    );
    assert!(
        refused.to_string().contains("outbox-schema --table outbox"),
        "{refused}"
    );
}

#[tokio::test]
async fn a_table_of_the_users_own_with_a_bytea_payload_and_no_triggers() {
    let Some(db) = empty_db().await else { return };
    db.execute(
        "CREATE SCHEMA app;
         CREATE TABLE app.events (
             id varchar(64) PRIMARY KEY, topic text NOT NULL, aggregate_id text,
             payload bytea NOT NULL, headers jsonb,
             created_at timestamptz NOT NULL DEFAULT now(),
             seq bigint GENERATED ALWAYS AS IDENTITY,
             attempts integer NOT NULL DEFAULT 0,
             next_attempt_at timestamptz NOT NULL DEFAULT now(),
             lease_owner text, lease_until timestamptz, delivered_at timestamptz,
             dead_at timestamptz, last_status integer, last_error text)",
    )
    .await;
    let receiver = common::Receiver::start().await;
    let mut config = db.config(&receiver);
    config.table = TableName::new("app.events").unwrap();
    let layout = db.outbox(config.clone()).check_table().await.unwrap();
    assert_eq!(
        (layout.payload, layout.ordered),
        (PayloadKind::Bytes, false)
    );

    // Its rows are sent as bytes.
    let relay = db
        .outbox(config)
        .start_relay(common::HyperTransport::shared());
    db.execute("INSERT INTO app.events (id, topic, payload) VALUES ('b1', 't', '\\x00ff10')")
        .await;
    receiver
        .until(common::WAIT, "b1 sent", |r| !r.arrivals("b1").is_empty())
        .await;
    let arrival = &receiver.arrivals("b1")[0];
    assert_eq!(arrival.body.as_ref(), [0x00, 0xff, 0x10]);
    assert_eq!(arrival.headers["content-type"], "application/octet-stream");
    relay.drain(common::WAIT).await;

    let mut missing = db.config(&receiver);
    missing.table = TableName::new("app.nothing").unwrap();
    let Err(OutboxError::Table(refused)) = db.outbox(missing).check_table().await else {
        panic!("refused")
    };
    assert_eq!(refused.problems, ["the table does not exist"]);
}
