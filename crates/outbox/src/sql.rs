//! Every statement the relay and its admin operations run, written once per table.
//!
//! The relay's per-row cost is one share of a claim (one statement for up to all the slots
//! free), and one share of a mark (one statement for every attempt that ended meanwhile).
//! Every time is the database's (`now()`), never a relay's clock, so relays on machines whose
//! clocks differ still agree on what is due and whose lease holds.

use crate::config::OnDead;
use crate::names::TableName;
use crate::table::PayloadKind;

/// What a mark sets, as the mark statement's `kind` column spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i16)]
pub(crate) enum MarkKind {
    /// Delivered now.
    Delivered = 0,
    /// Due again after a wait.
    Retry = 1,
    /// Dead after an attempt.
    Dead = 2,
    /// Dead without an attempt: the row cannot be sent (its claim is not counted).
    Unsendable = 3,
}

/// The order in which a claim walks the due rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClaimOrder {
    /// Those due longest first: every claim that leaves no destination out.
    OldestFirst,
    /// Those due most lately first: a claim that leaves a full destination out, whose backlog
    /// (due, and older) it would otherwise walk before it met any other row.
    NewestFirst,
}

/// The claim for one table: `$1` owner, `$2` lease in ms, `$3` how many, `$4` topics left out
/// (their destination has no room), `$5` the only topics taken (when `deliver_to` has no room;
/// null: any other); the claimed rows.
///
/// A row is due when it is neither delivered nor dead nor waiting behind an earlier row of its
/// aggregate (the claim's index holds no other rows, so a claim walks only what is due), its
/// `next_attempt_at` has passed, no live lease holds it, and no earlier row (lower `seq`) of its
/// aggregate holds it back (`holding`; checked again here for a table without the order
/// trigger, which sets `waiting`). Rows another relay is claiming right now are skipped, never
/// waited for. An earlier row of the aggregate being claimed by another relay at the same
/// moment still holds it, so no two rows of one aggregate are ever in flight. The rows of a
/// destination with no room left are skipped where the walk meets them: they are due, and
/// cost the claim what due rows cost.
pub(crate) fn claim(table: &TableName, payload: PayloadKind, order: ClaimOrder) -> String {
    let t = table.quoted();
    let direction = match order {
        ClaimOrder::OldestFirst => "",
        ClaimOrder::NewestFirst => " DESC",
    };
    let body = match payload {
        PayloadKind::Bytes => "o.payload",
        PayloadKind::Json | PayloadKind::Text => "convert_to(o.payload::text, 'UTF8')",
    };
    format!(
        "WITH due AS (
            SELECT c.id FROM {t} c
            WHERE c.delivered_at IS NULL AND c.dead_at IS NULL AND NOT c.waiting
              AND c.next_attempt_at <= now()
              AND (c.lease_until IS NULL OR c.lease_until <= now())
              AND c.topic::text <> ALL($4::text[])
              AND ($5::text[] IS NULL OR c.topic::text = ANY($5::text[]))
              AND (c.aggregate_id IS NULL OR NOT EXISTS (
                    SELECT 1 FROM {t} e
                    WHERE e.aggregate_id = c.aggregate_id AND e.seq < c.seq AND e.holding))
            ORDER BY c.next_attempt_at{direction}
            LIMIT $3
            FOR NO KEY UPDATE OF c SKIP LOCKED)
         UPDATE {t} o
         SET attempts = o.attempts + 1, lease_owner = $1,
             lease_until = now() + $2::int8 * interval '1 millisecond'
         FROM due WHERE o.id = due.id
         RETURNING o.id::text, o.topic::text, o.aggregate_id::text, {body},
                   o.headers::text, o.attempts,
                   EXTRACT(EPOCH FROM clock_timestamp() - o.created_at)::float8,
                   EXTRACT(EPOCH FROM clock_timestamp()
                           - COALESCE(o.retried_at, o.created_at))::float8,
                   o.seq"
    )
}

/// `$1` the quoted table name, `$2` aggregates: those whose lock was free, now held by this
/// transaction. The order trigger takes the same lock from an insert to its commit, so while
/// this transaction holds it no row of the aggregate is being inserted unseen.
pub(crate) const LOCK_AGGREGATES: &str = "SELECT a FROM unnest($2::text[]) AS a
     WHERE pg_try_advisory_xact_lock(hashtextextended(
         (SELECT n.nspname || '.' || c.relname FROM pg_class c
          JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($1))
         || '/' || a, 0))";

/// `$1` the quoted table name, `$2` an aggregate: its lock, waited for.
pub(crate) const WAIT_FOR_AGGREGATE: &str = "SELECT pg_advisory_xact_lock(hashtextextended(
         (SELECT n.nspname || '.' || c.relname FROM pg_class c
          JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($1))
         || '/' || $2, 0))";

/// The relay's other statements for one table, each fenced by the claim: the row's
/// `lease_owner` is this relay's and its `attempts` the claim's, so a relay whose lease ran
/// out and whose row another relay claimed since writes nothing.
#[derive(Debug, Clone)]
pub(crate) struct RelaySql {
    /// `$1` ids, `$2` attempts, `$3` kinds, `$4` waits in ms, `$5` statuses, `$6` errors,
    /// `$7` owner: the ids whose claim still held.
    pub(crate) mark: String,
    /// `$1` ids, `$2` attempts, `$3` owner: delivered rows deleted at once
    /// (`keep_delivered = "0s"`); the ids whose claim still held.
    pub(crate) delete_delivered: String,
    /// `$1` ids, `$2` attempts, `$3` owner: claims given back unattempted.
    pub(crate) release: String,
    /// `$1` age in ms, `$2` how many: delivered rows older than that, deleted.
    pub(crate) purge: String,
    /// `$1` age in ms, `$2` how many: dead rows dead longer than that, deleted, oldest first;
    /// their aggregates.
    pub(crate) purge_dead: String,
    /// `$1` aggregates: the first row holding each, when it waits, may now be attempted.
    pub(crate) promote: String,
    /// Heads of aggregates left waiting though nothing holds them (a relay that crashed
    /// between a release and passing the turn, an insert whose snapshot predates a release):
    /// may now be attempted. One index step per aggregate with rows holding it.
    pub(crate) sweep: String,
}

impl RelaySql {
    pub(crate) fn new(table: &TableName, on_dead: OnDead) -> Self {
        let t = table.quoted();
        // Under "skip" a dead row no longer holds its aggregate; under "block" it does.
        let dead_holds = match on_dead {
            OnDead::Skip => "false",
            OnDead::Block => "true",
        };
        let mark = format!(
            "UPDATE {t} o SET
                 delivered_at = CASE WHEN m.kind = 0 THEN now() END,
                 holding = CASE WHEN m.kind = 0 THEN false
                     WHEN m.kind >= 2 THEN {dead_holds} ELSE o.holding END,
                 dead_at = CASE WHEN m.kind >= 2 THEN now() END,
                 next_attempt_at = CASE WHEN m.kind = 1
                     THEN now() + m.wait_ms * interval '1 millisecond' ELSE o.next_attempt_at END,
                 attempts = CASE WHEN m.kind = 3 THEN o.attempts - 1 ELSE o.attempts END,
                 last_status = m.status, last_error = m.error,
                 lease_owner = NULL, lease_until = NULL
             FROM unnest($1::text[], $2::int4[], $3::int2[], $4::int8[], $5::int4[], $6::text[])
                  AS m(id, attempt, kind, wait_ms, status, error)
             WHERE o.id = m.id AND o.lease_owner = $7 AND o.attempts = m.attempt
             RETURNING o.id::text, CASE WHEN NOT o.holding THEN o.aggregate_id::text END"
        );
        let claimed = "unnest($1::text[], $2::int4[]) AS m(id, attempt)";
        let fence = "o.id = m.id AND o.lease_owner = $3 AND o.attempts = m.attempt";
        let delete_delivered = format!(
            "DELETE FROM {t} o USING {claimed} WHERE {fence}
             RETURNING o.id::text, o.aggregate_id::text"
        );
        let release = format!(
            "UPDATE {t} o SET attempts = o.attempts - 1, lease_owner = NULL, lease_until = NULL
             FROM {claimed} WHERE {fence}"
        );
        let purge = format!(
            "DELETE FROM {t} WHERE id IN (
                 SELECT id FROM {t} WHERE delivered_at < now() - $1::int8 * interval '1 millisecond'
                 ORDER BY delivered_at LIMIT $2 FOR UPDATE SKIP LOCKED)"
        );
        let purge_dead = format!(
            "DELETE FROM {t} WHERE id IN (
                 SELECT id FROM {t} WHERE dead_at IS NOT NULL
                   AND dead_at < now() - $1::int8 * interval '1 millisecond'
                 ORDER BY seq LIMIT $2 FOR UPDATE SKIP LOCKED)
             RETURNING aggregate_id::text"
        );
        Self {
            mark,
            delete_delivered,
            release,
            purge,
            purge_dead,
            promote: promote(table),
            sweep: sweep(table),
        }
    }
}

/// `$1` aggregates: each one's first holding row stops waiting; the count of rows that did.
pub(crate) fn promote(table: &TableName) -> String {
    let t = table.quoted();
    format!(
        "UPDATE {t} o SET waiting = false
         WHERE o.waiting AND o.id IN (
             SELECT (SELECT h.id FROM {t} h WHERE h.aggregate_id = a AND h.holding
                     ORDER BY h.seq LIMIT 1)
             FROM unnest($1::text[]) AS a)"
    )
}

fn sweep(table: &TableName) -> String {
    let t = table.quoted();
    let first = |after: &str| {
        format!(
            "SELECT h.aggregate_id, h.id, h.waiting FROM {t} h
             WHERE h.holding AND {after} ORDER BY h.aggregate_id, h.seq LIMIT 1"
        )
    };
    format!(
        "WITH RECURSIVE heads(aggregate_id, id, waiting) AS (
             ({start})
             UNION ALL
             SELECT n.* FROM heads p, LATERAL ({next}) n)
         UPDATE {t} o SET waiting = false FROM heads
         WHERE heads.waiting AND o.id = heads.id AND o.waiting",
        start = first("h.aggregate_id IS NOT NULL"),
        next = first("h.aggregate_id > p.aggregate_id"),
    )
}

/// The admin operations' statements for one table.
#[derive(Debug, Clone)]
pub(crate) struct AdminSql {
    /// The counts, in one row. Blocked aggregates are found from the dead rows that still hold
    /// theirs (none under `on_dead = "skip"`), through the dead and order indexes.
    pub(crate) counts: String,
    /// `$1` how many, `$2` after which id (or null): dead rows in `seq` order.
    pub(crate) dead: String,
    /// `$1` id: whether the table holds a row of that id.
    pub(crate) exists: String,
    /// `$1` id: a dead row pending again, with a fresh attempt budget; its aggregate.
    pub(crate) retry: String,
    /// `$1` id: a dead row deleted; its aggregate.
    pub(crate) delete: String,
    /// `$1` aggregates: see [`promote`].
    pub(crate) promote: String,
    /// `$1`..`$5`: one event inserted (the application's helper).
    pub(crate) insert: [String; 3],
}

impl AdminSql {
    pub(crate) fn new(table: &TableName) -> Self {
        let t = table.quoted();
        let live = "delivered_at IS NULL AND dead_at IS NULL";
        let counts = format!(
            "SELECT
               (SELECT count(*) FROM {t} WHERE {live} AND (lease_until IS NULL OR lease_until <= now())),
               (SELECT count(*) FROM {t} WHERE {live} AND lease_until > now()),
               (SELECT count(*) FROM {t} WHERE dead_at IS NOT NULL),
               (SELECT count(*) FROM {t} WHERE delivered_at > now() - interval '1 hour'),
               (SELECT COALESCE(EXTRACT(EPOCH FROM clock_timestamp() - min(created_at)), 0)::float8
                  FROM {t} WHERE {live}),
               (SELECT count(DISTINCT d.aggregate_id) FROM {t} d
                  WHERE d.dead_at IS NOT NULL AND d.holding AND d.aggregate_id IS NOT NULL
                    AND EXISTS (
                    SELECT 1 FROM {t} l WHERE l.aggregate_id = d.aggregate_id AND l.seq > d.seq
                      AND l.holding AND l.dead_at IS NULL))"
        );
        let dead = format!(
            "SELECT id::text, topic::text, aggregate_id::text, attempts, last_status, last_error::text,
                    created_at
             FROM {t}
             WHERE dead_at IS NOT NULL
               AND ($2::text IS NULL OR seq > (SELECT seq FROM {t} WHERE id = $2::text))
             ORDER BY seq LIMIT $1"
        );
        let exists = format!("SELECT EXISTS (SELECT 1 FROM {t} WHERE id = $1)");
        // A retried row holds its aggregate again, and waits if an earlier row holds it.
        let retry = format!(
            "UPDATE {t} r SET dead_at = NULL, attempts = 0, next_attempt_at = now(),
                 lease_owner = NULL, lease_until = NULL, holding = true, retried_at = now(),
                 waiting = r.aggregate_id IS NOT NULL AND EXISTS (
                     SELECT 1 FROM {t} e WHERE e.aggregate_id = r.aggregate_id
                       AND e.holding AND e.seq < r.seq)
             WHERE r.id = $1 AND r.dead_at IS NOT NULL
             RETURNING r.aggregate_id::text"
        );
        let delete = format!(
            "DELETE FROM {t} WHERE id = $1 AND dead_at IS NOT NULL RETURNING aggregate_id::text"
        );
        let insert = |payload: &str| {
            format!(
                "INSERT INTO {t} (id, topic, aggregate_id, payload, headers) \
                 VALUES ($1, $2, $3, {payload}, $5::text::jsonb)"
            )
        };
        Self {
            counts,
            dead,
            exists,
            retry,
            delete,
            promote: promote(table),
            insert: [
                insert("$4::text::jsonb"),
                insert("$4::text"),
                insert("$4::bytea"),
            ],
        }
    }
}
