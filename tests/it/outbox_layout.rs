//! A table of the earlier layout under the binary (docs/reference.md#outbox-relays): opened by
//! a role that may not run DDL, it stops the start with exit 2, naming each missing object and
//! the statements its owner can run, and changes nothing; once the owner has run exactly those
//! statements, the same role runs the relay.

use crate::common;

use common::outbox::{outbox_table, RelayProcess};
use common::postgres_server::shared_postgres;
use common::receiver::Receiver;
use idempotency_test_support::outbox::{ordered, OutboxDb};

/// The earlier layout: no `holding`, `waiting` or `retried_at`, the claim and order indexes it
/// had, and the order trigger without its argument.
const EARLIER_LAYOUT: &str = "DROP INDEX outbox_ready; DROP INDEX outbox_holding;
    ALTER TABLE outbox DROP COLUMN holding, DROP COLUMN waiting, DROP COLUMN retried_at;
    CREATE INDEX outbox_due ON outbox (next_attempt_at)
        WHERE delivered_at IS NULL AND dead_at IS NULL;
    CREATE INDEX outbox_aggregate ON outbox (aggregate_id, seq) WHERE delivered_at IS NULL;
    DROP TRIGGER idempotency_outbox_order ON outbox;
    CREATE TRIGGER idempotency_outbox_order BEFORE INSERT ON outbox
        FOR EACH ROW EXECUTE FUNCTION idempotency_outbox_order();";

/// The statements a refusal printed: from its `BEGIN;` to its `COMMIT;`.
fn statements(log: &str) -> &str {
    let start = log
        .find("BEGIN;\n")
        .unwrap_or_else(|| panic!("no BEGIN in {log}"));
    let end = log[start..]
        .find("COMMIT;\n")
        .unwrap_or_else(|| panic!("no COMMIT in {log}"));
    &log[start..start + end + "COMMIT;\n".len()]
}

#[tokio::test]
async fn a_role_that_may_not_bring_an_earlier_table_up_to_date_stops_the_start_with_exit_2() {
    let Some(server) = shared_postgres() else {
        return;
    };
    let db = OutboxDb::on(server.fresh_database()).await;
    db.execute(EARLIER_LAYOUT).await;
    db.commit(&[ordered("e1", "order-1"), ordered("e2", "order-1")])
        .await;
    let database = db.url.rsplit('/').next().unwrap().to_owned();
    let url = server.row_only_role(&database, &["outbox"], &["outbox_seq_seq"]);
    let receiver = Receiver::start().await;
    let config = outbox_table(&url, &receiver.url("/events"), "");

    let (code, log) = RelayProcess::spawn("outbox-earlier-layout", &config)
        .exit()
        .await;
    assert_eq!(code, Some(2), "{log}");
    for object in [
        "outbox \"payments\": table \"outbox\": columns holding, waiting and retried_at of outbox",
        "index outbox_ready, index outbox_holding",
        "the argument of trigger idempotency_outbox_order on outbox missing",
        "this role may not add them",
        "run as the table's owner:\nBEGIN;\n",
    ] {
        assert!(log.contains(object), "{object:?} in {log}");
    }
    let printed = statements(&log);
    for statement in [
        "ALTER TABLE \"outbox\" ADD COLUMN IF NOT EXISTS holding boolean NOT NULL DEFAULT false,",
        "CREATE INDEX IF NOT EXISTS \"outbox_ready\" ON \"outbox\" (next_attempt_at)",
        "CREATE INDEX IF NOT EXISTS \"outbox_holding\" ON \"outbox\" (aggregate_id, seq)",
        "FOR EACH ROW EXECUTE FUNCTION idempotency_outbox_order('waiting');",
        "DROP INDEX IF EXISTS \"outbox_due\";",
        "DROP INDEX IF EXISTS \"outbox_aggregate\";",
    ] {
        assert!(printed.contains(statement), "{statement:?} in {printed}");
    }
    let added = "SELECT count(*) FROM information_schema.columns \
                 WHERE table_name = 'outbox' AND column_name IN ('holding', 'waiting', 'retried_at')";
    assert_eq!(
        db.count(added).await,
        0,
        "the refused start changed nothing"
    );

    // The owner runs what was printed, as printed; the same role then runs the relay.
    db.execute(printed).await;
    assert_eq!(db.count(added).await, 3);
    let relay = RelayProcess::start("outbox-earlier-layout-fixed", &config).await;
    relay.until_ready().await;
    db.until_delivered("e2").await;
    assert_eq!(receiver.keys(), ["e1", "e2"], "in order, each once");
    assert!(
        !relay.log().contains("brought to the current layout"),
        "no DDL left to run"
    );
}
