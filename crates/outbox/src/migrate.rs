//! What the relay adds to a table at start: the columns, indexes and trigger argument of the
//! current layout (`schema.rs`) that a table of the earlier layout lacks. Nothing is run when
//! everything is in place, so a role holding only row rights starts on a table prepared by its
//! owner. When something is missing it is added in one transaction (columns, their values from
//! the rows' state, indexes, the trigger), or, when the role may not, the start is refused with
//! the statements its owner can run.

use idempotency_postgres::quote_identifier;
use idempotency_postgres::tokio_postgres::error::SqlState;
use idempotency_postgres::tokio_postgres::Client;

use crate::config::OnDead;
use crate::names::TableName;
use crate::schema::{self, HOLDING_INDEX, ORDER_FUNCTION, READY_INDEX};
use crate::OutboxError;

/// The indexes of the earlier layout, which the claim no longer uses.
const EARLIER_INDEXES: [&str; 2] = ["due", "aggregate"];

/// What a table has of the current layout.
#[derive(Debug, Clone, Default)]
pub(crate) struct Found {
    /// Whether it has `holding`, `waiting` and `retried_at`.
    pub(crate) columns: bool,
    /// The names of its indexes.
    pub(crate) indexes: Vec<String>,
    /// The order trigger, when it has one: whether it passes the argument that sets `waiting`.
    pub(crate) trigger: Option<bool>,
}

/// Its indexes, and its order trigger's argument count; `$1` the quoted table name.
pub(crate) const INDEXES_SQL: &str = "SELECT c.relname::text FROM pg_index i \
     JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = to_regclass($1)";
pub(crate) fn trigger_sql() -> String {
    format!(
        "SELECT t.tgnargs::int4 FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid \
         WHERE t.tgrelid = to_regclass($1) AND p.proname = '{ORDER_FUNCTION}' AND NOT t.tgisinternal"
    )
}

/// What is missing, and the statements that add it.
#[derive(Debug, Clone)]
pub(crate) struct Missing {
    /// Each missing object, named.
    pub(crate) objects: Vec<String>,
    /// The statements, in one transaction.
    pub(crate) sql: String,
}

/// What `table` lacks of the current layout; `None` when nothing.
pub(crate) fn missing(table: &TableName, found: &Found, on_dead: OnDead) -> Option<Missing> {
    let t = table.quoted();
    let mut objects = Vec::new();
    let mut sql = String::from("BEGIN;\n");
    if !found.columns {
        objects.push(format!(
            "columns holding, waiting and retried_at of {table}"
        ));
        sql.push_str(&columns(t, on_dead));
    }
    let has = |suffix: &str| {
        let name = schema::index_name(table, suffix);
        found.indexes.contains(&name)
    };
    for suffix in [READY_INDEX, HOLDING_INDEX] {
        if !has(suffix) {
            objects.push(format!("index {}", schema::index_name(table, suffix)));
        }
    }
    if !has(READY_INDEX) || !has(HOLDING_INDEX) {
        sql.push_str(&schema::claim_indexes(table));
    }
    if !found.columns {
        // After the order index: each pending row waits if an earlier row holds its aggregate.
        sql.push_str(&format!(
            "UPDATE {t} w SET waiting = true WHERE w.holding AND w.dead_at IS NULL
    AND w.aggregate_id IS NOT NULL AND EXISTS (SELECT 1 FROM {t} e
        WHERE e.aggregate_id = w.aggregate_id AND e.holding AND e.seq < w.seq);\n"
        ));
    }
    if found.trigger == Some(false) {
        objects.push(format!(
            "the argument of trigger {ORDER_FUNCTION} on {table}"
        ));
        sql.push_str(&schema::order_trigger(table));
    }
    if objects.is_empty() {
        return None;
    }
    for suffix in EARLIER_INDEXES.iter().filter(|s| has(s)) {
        sql.push_str(&format!(
            "DROP INDEX IF EXISTS {};\n",
            qualified_index(table, suffix)
        ));
    }
    sql.push_str("COMMIT;\n");
    Some(Missing { objects, sql })
}

/// The columns, added with `false` (so no row is rewritten), then `holding` made `true` where
/// a row holds its aggregate: not delivered, and not dead unless dead rows hold it (`block`).
fn columns(t: &str, on_dead: OnDead) -> String {
    let dead_holds = match on_dead {
        OnDead::Skip => "dead_at IS NULL",
        OnDead::Block => "true",
    };
    format!(
        "ALTER TABLE {t} ADD COLUMN IF NOT EXISTS holding boolean NOT NULL DEFAULT false,
    ADD COLUMN IF NOT EXISTS waiting boolean NOT NULL DEFAULT false,
    ADD COLUMN IF NOT EXISTS retried_at timestamptz;
ALTER TABLE {t} ALTER COLUMN holding SET DEFAULT true;
UPDATE {t} SET holding = true WHERE delivered_at IS NULL AND {dead_holds};\n"
    )
}

fn qualified_index(table: &TableName, suffix: &str) -> String {
    let index = quote_identifier(&schema::index_name(table, suffix));
    match table.schema() {
        Some(schema) => format!("{}.{index}", quote_identifier(schema)),
        None => index,
    }
}

/// Runs `missing`'s statements; a role that may not is refused with them.
pub(crate) async fn apply(
    client: &Client,
    table: &TableName,
    missing: &Missing,
) -> Result<(), OutboxError> {
    match client.batch_execute(&missing.sql).await {
        Ok(()) => {
            tracing::info!(table = %table, added = missing.objects.join(", "), "outbox: the table was brought to the current layout");
            Ok(())
        }
        Err(e) => {
            // The transaction is rolled back, so the connection is usable again.
            let _ = client.batch_execute("ROLLBACK").await;
            if e.code() != Some(&SqlState::INSUFFICIENT_PRIVILEGE) {
                return Err(e.into());
            }
            let problem = format!(
                "{} missing, and this role may not add them ({}); run as the table's owner:\n{}",
                missing.objects.join(", "),
                OutboxError::from(e),
                missing.sql
            );
            Err(OutboxError::Table(crate::table::TableProblems {
                table: table.as_str().to_owned(),
                problems: vec![problem],
            }))
        }
    }
}
