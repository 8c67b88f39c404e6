//! The DDL of an outbox table, as `idempotency-proxy outbox-schema` prints it: the table, the
//! indexes the relay's statements need, the trigger that keeps each aggregate's `seq` in commit
//! order, and, when a channel is named, the trigger that wakes the relay on every insert.
//!
//! Why the order trigger: `seq` is an identity, and an identity value is taken when a row is
//! inserted, not when its transaction commits. Two transactions of one aggregate can take 10
//! and 11 and commit 11 first; a relay that then delivers 11 (10 is not visible yet) has sent
//! them out of order. The trigger takes a lock on the aggregate (held until the transaction
//! ends) and only then gives the row its `seq`, so a later `seq` of an aggregate is only ever
//! taken after every earlier one's transaction has ended: once a row is visible, every row of
//! its aggregate with a lower `seq` is visible too, or rolled back.

use idempotency_postgres::quote_identifier;

use crate::names::TableName;

/// The function the order trigger runs, in the table's schema; the relay looks for it at start.
pub(crate) const ORDER_FUNCTION: &str = "idempotency_outbox_order";
const NOTIFY_FUNCTION: &str = "idempotency_outbox_notify";

/// The DDL for `table`; with `notify_channel`, the trigger that notifies it after each insert.
///
/// ```
/// use idempotency_outbox::{schema_sql, TableName};
/// let ddl = schema_sql(&TableName::new("app.outbox").unwrap(), Some("outbox"));
/// assert!(ddl.contains("CREATE TABLE IF NOT EXISTS \"app\".\"outbox\""));
/// assert!(ddl.contains("pg_notify"));
/// ```
pub fn schema_sql(table: &TableName, notify_channel: Option<&str>) -> String {
    let t = table.quoted();
    let index = |suffix: &str| quote_identifier(&format!("{}_{suffix}", table.table()));
    let function = |name: &str| match table.schema() {
        Some(schema) => format!("{}.{name}", quote_identifier(schema)),
        None => name.to_owned(),
    };
    let mut ddl = format!(
        r#"-- The outbox table {name}: the application inserts id, topic, aggregate_id, payload and
-- headers in the same transaction as its business change; the relay writes the rest.
BEGIN;

CREATE TABLE IF NOT EXISTS {t} (
    id              text        PRIMARY KEY,
    topic           text        NOT NULL,
    aggregate_id    text,
    payload         jsonb       NOT NULL,
    headers         jsonb,
    created_at      timestamptz NOT NULL DEFAULT now(),
    seq             bigint      GENERATED ALWAYS AS IDENTITY,
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    lease_owner     text,
    lease_until     timestamptz,
    delivered_at    timestamptz,
    dead_at         timestamptz,
    last_status     integer,
    last_error      text,
    holding         boolean     NOT NULL DEFAULT true,
    waiting         boolean     NOT NULL DEFAULT false,
    retried_at      timestamptz
) WITH (fillfactor = 80);

{indexes}-- keep_delivered's deletes, and the count of the last hour's deliveries.
CREATE INDEX IF NOT EXISTS {delivered} ON {t} (delivered_at)
    WHERE delivered_at IS NOT NULL;
-- The dead rows, in order.
CREATE INDEX IF NOT EXISTS {dead} ON {t} (seq)
    WHERE dead_at IS NOT NULL;

-- Each aggregate's seq in commit order: a row of an aggregate takes its seq only once it holds
-- the aggregate's lock, which its transaction keeps until it ends. Transactions of one
-- aggregate therefore queue behind each other from their event's insert to their commit:
-- insert the event last in the transaction.
{order}"#,
        name = table.as_str(),
        indexes = claim_indexes(table),
        delivered = index("delivered"),
        dead = index("dead"),
        order = order_trigger(table),
    );
    match notify_channel {
        Some(channel) => ddl.push_str(&notify_trigger(t, &function(NOTIFY_FUNCTION), channel)),
        None => ddl.push_str(
            "\n-- To wake the relay at once on each insert rather than at its next poll, print this\n\
             -- again with --notify-channel NAME and set notify_channel = \"NAME\" in its config.\n",
        ),
    }
    ddl.push_str("\nCOMMIT;\n");
    ddl
}

/// The claim's index and the order index (see the module's docs).
pub(crate) fn claim_indexes(table: &TableName) -> String {
    let t = table.quoted();
    format!(
        r#"-- The relay's claim: only rows that may be attempted (not delivered, not dead, not waiting
-- behind an earlier row of their aggregate), by when they are due.
CREATE INDEX IF NOT EXISTS {ready} ON {t} (next_attempt_at)
    WHERE delivered_at IS NULL AND dead_at IS NULL AND NOT waiting;
-- Order: the rows that hold their aggregate back, by aggregate in seq order.
CREATE INDEX IF NOT EXISTS {holding} ON {t} (aggregate_id, seq)
    WHERE holding;
"#,
        ready = quote_identifier(&index_name(table, READY_INDEX)),
        holding = quote_identifier(&index_name(table, HOLDING_INDEX)),
    )
}

/// The suffixes of the claim's index and the order index.
pub(crate) const READY_INDEX: &str = "ready";
pub(crate) const HOLDING_INDEX: &str = "holding";

/// An index's name: the table's, then the suffix.
pub(crate) fn index_name(table: &TableName, suffix: &str) -> String {
    format!("{}_{suffix}", table.table())
}

/// The function the order trigger runs (shared by the outbox tables of a schema) and the
/// trigger on `table`. Its argument says that the table has `waiting` to set: a table of the
/// earlier layout, whose trigger has none, keeps the earlier behaviour from the same function.
pub(crate) fn order_trigger(table: &TableName) -> String {
    let t = table.quoted();
    let function = match table.schema() {
        Some(schema) => format!("{}.{ORDER_FUNCTION}", quote_identifier(schema)),
        None => ORDER_FUNCTION.to_owned(),
    };
    let trigger = quote_identifier(ORDER_FUNCTION);
    format!(
        r#"CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    behind boolean;
BEGIN
    IF NEW.aggregate_id IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(hashtextextended(
            TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME || '/' || NEW.aggregate_id, 0));
        NEW.seq := nextval(pg_get_serial_sequence(
            quote_ident(TG_TABLE_SCHEMA) || '.' || quote_ident(TG_TABLE_NAME), 'seq'));
        IF TG_NARGS > 0 THEN
            -- Read after the lock: a relay passing the turn holds it too, so this sees its
            -- release, or it sees this row once it is committed.
            EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I.%I WHERE aggregate_id = $1 AND holding)',
                           TG_TABLE_SCHEMA, TG_TABLE_NAME)
                INTO behind USING NEW.aggregate_id;
            NEW.waiting := behind;
        END IF;
    END IF;
    RETURN NEW;
END $$;
DROP TRIGGER IF EXISTS {trigger} ON {t};
CREATE TRIGGER {trigger} BEFORE INSERT ON {t}
    FOR EACH ROW EXECUTE FUNCTION {function}('waiting');
"#
    )
}

/// A statement-level trigger: one `NOTIFY` per inserting statement, sent when its transaction
/// commits (and never for one that rolls back).
fn notify_trigger(t: &str, function: &str, channel: &str) -> String {
    let trigger = quote_identifier(NOTIFY_FUNCTION);
    let channel = channel.replace('\'', "''");
    format!(
        r#"
-- Wakes the relay (notify_channel = "{channel}") when an inserting transaction commits.
CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_ARGV[0], '');
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS {trigger} ON {t};
CREATE TRIGGER {trigger} AFTER INSERT ON {t}
    FOR EACH STATEMENT EXECUTE FUNCTION {function}('{channel}');
"#
    )
}
