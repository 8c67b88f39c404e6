//! The statements behind every operation, written once per store for its schema's tables.
//!
//! Each operation is one statement, so one round trip and one transaction. A reservation reads
//! and writes in that one statement: `live` finds an unexpired record; only when there is none
//! does `taken` insert, and `ON CONFLICT ... DO UPDATE ... WHERE expired` takes over an expired
//! row in place. A record that is still live is answered without being written, so a replay
//! costs no WAL and no commit flush. Two reservations racing for a new key both see "nothing
//! there"; the unique index makes one of them wait for the other's commit, then its `DO
//! UPDATE` finds a live row and does nothing, and its `live` (read before the race was
//! decided) is empty too: the statement answers neither, and the store runs it again, which
//! then sees the winner's record. That is the only case that takes a second round trip.
//!
//! Fenced writes (renew, complete, release) name the holder's token and `in_flight` in their
//! `WHERE`, and only an unexpired row: a holder whose lease ran out writes nothing, whether or
//! not another request took the key since. Times of records are the database's clock
//! (`now()`), the same for every replica; inbox due times are the caller's, as the inbox
//! contract passes them in, in Unix milliseconds.

/// The SQL texts, for one pair of tables.
#[derive(Debug)]
pub(crate) struct Statements {
    pub(crate) reserve: String,
    pub(crate) reserve_many: String,
    pub(crate) complete_many: String,
    pub(crate) renew: String,
    pub(crate) complete: String,
    pub(crate) release: String,
    pub(crate) get: String,
    pub(crate) remove: String,
    pub(crate) accept: String,
    pub(crate) claim: String,
    pub(crate) delivered: String,
    pub(crate) retry: String,
    pub(crate) bury: String,
    pub(crate) queues: String,
    pub(crate) dead: String,
    pub(crate) retry_dead: String,
    pub(crate) remove_dead: String,
    pub(crate) purge: String,
    pub(crate) pages: String,
}

/// The milliseconds left of a row's life, as the statements answer it.
const LEFT_MS: &str = "floor(extract(epoch FROM r.expires_at - now()) * 1000)::int8";

impl Statements {
    /// The statements over `records` and `deliveries`, each a quoted, qualified name.
    pub(crate) fn new(records: &str, deliveries: &str) -> Self {
        let r = records;
        let d = deliveries;
        let fenced = "scope = $1 AND key = $2 AND token = $3 AND in_flight AND expires_at > now()";
        Self {
            reserve: take_record(r, "true", "$5::float8"),
            reserve_many: reserve_many(r),
            complete_many: format!(
                "UPDATE {r} AS r SET in_flight = false, value = i.value, \
                     expires_at = now() + i.life * interval '1 second' \
                 FROM {INPUT} \
                 WHERE r.scope = i.scope AND r.key = i.key AND r.token = i.token \
                     AND r.in_flight AND r.expires_at > now() \
                 RETURNING i.ord"
            ),
            renew: format!(
                "UPDATE {r} SET expires_at = now() + $4::float8 * interval '1 second' WHERE {fenced}"
            ),
            complete: format!(
                "UPDATE {r} SET in_flight = false, value = $4, \
                 expires_at = now() + $5::float8 * interval '1 second' WHERE {fenced}"
            ),
            release: format!("DELETE FROM {r} WHERE {fenced}"),
            get: format!(
                "SELECT r.value, {LEFT_MS} FROM {r} r \
                 WHERE r.scope = $1 AND r.key = $2 AND r.expires_at > now()"
            ),
            remove: format!(
                "WITH live AS (SELECT in_flight FROM {r} \
                     WHERE scope = $1 AND key = $2 AND expires_at > now()), \
                 gone AS (DELETE FROM {r} WHERE scope = $1 AND key = $2 \
                     AND expires_at > now() AND (NOT in_flight OR $3) RETURNING 1) \
                 SELECT (SELECT in_flight FROM live), EXISTS (SELECT 1 FROM gone)"
            ),
            accept: accept(r, d),
            claim: format!(
                "WITH picked AS (SELECT id, due FROM {d} \
                     WHERE route = $1 AND NOT dead AND due <= $2 \
                     ORDER BY due LIMIT $3 FOR UPDATE SKIP LOCKED) \
                 UPDATE {d} q SET due = $4, leased_until = $4, token = $5, \
                     attempts = q.attempts + 1 \
                 FROM picked WHERE q.route = $1 AND q.id = picked.id \
                 RETURNING q.id, q.encoded, q.attempts, q.last_status, q.last_error, picked.due"
            ),
            delivered: format!("DELETE FROM {d} WHERE route = $1 AND id = $2 AND token = $3"),
            retry: format!(
                "UPDATE {d} SET due = $4, leased_until = NULL, token = NULL, \
                 last_status = $5, last_error = $6 WHERE route = $1 AND id = $2 AND token = $3"
            ),
            bury: format!(
                "UPDATE {d} SET dead = true, leased_until = NULL, token = NULL, \
                 last_status = $4, last_error = $5 WHERE route = $1 AND id = $2 AND token = $3"
            ),
            queues: format!(
                "SELECT count(*) FILTER (WHERE NOT dead), \
                     count(*) FILTER (WHERE NOT dead AND leased_until > $2), \
                     count(*) FILTER (WHERE dead), min(arrived) FILTER (WHERE NOT dead) \
                 FROM {d} WHERE route = $1"
            ),
            dead: format!(
                "SELECT id, encoded, attempts, last_status, last_error FROM {d} \
                 WHERE route = $1 AND dead AND id > $2 ORDER BY id LIMIT $3"
            ),
            retry_dead: format!(
                "UPDATE {d} SET dead = false, attempts = 0, due = $3, leased_until = NULL, \
                 token = NULL WHERE route = $1 AND id = $2 AND dead"
            ),
            remove_dead: format!("DELETE FROM {d} WHERE route = $1 AND id = $2 AND dead"),
            purge: format!(
                "DELETE FROM {r} WHERE ctid = ANY (ARRAY(SELECT ctid FROM {r} \
                     WHERE ctid >= ('(' || $1::int8 || ',0)')::tid \
                     AND ctid < ('(' || $2::int8 || ',0)')::tid \
                     AND expires_at <= now() FOR UPDATE SKIP LOCKED))"
            ),
            pages: format!(
                "SELECT (pg_relation_size('{}') / current_setting('block_size')::int8)::int8",
                r.replace('\'', "''")
            ),
        }
    }
}

/// The requests of a batch, as rows: the same five parameters as the single statements take,
/// each an array with one element per request, and each request's place in the batch.
const INPUT: &str = "unnest($1::text[], $2::text[], $3::int8[], $4::bytea[], $5::float8[]) \
     WITH ORDINALITY AS i(scope, key, token, value, life, ord)";

/// `reserve` for many keys at once, each distinct: the same `live` and `taken` steps over the
/// batch's rows, inserting in key order (two batches that meet on keys then wait for each other
/// in one order, never in a cycle). Answers, per request in order: the live record's value or
/// NULL, and whether the write happened.
fn reserve_many(r: &str) -> String {
    format!(
        "WITH input AS (SELECT * FROM {INPUT}), \
         live AS (SELECT i.ord, r.value FROM input i JOIN {r} r \
             ON r.scope = i.scope AND r.key = i.key WHERE r.expires_at > now()), \
         taken AS (INSERT INTO {r} AS r (scope, key, token, in_flight, value, expires_at) \
             SELECT i.scope, i.key, i.token, true, i.value, \
                 now() + i.life * interval '1 second' \
             FROM input i WHERE NOT EXISTS (SELECT 1 FROM live l WHERE l.ord = i.ord) \
             ORDER BY i.scope, i.key \
         ON CONFLICT (scope, key) DO UPDATE SET token = excluded.token, \
             in_flight = excluded.in_flight, value = excluded.value, \
             expires_at = excluded.expires_at \
             WHERE r.expires_at <= now() \
         RETURNING r.scope, r.key) \
         SELECT l.value, EXISTS (SELECT 1 FROM taken t WHERE t.scope = i.scope AND t.key = i.key) \
         FROM input i LEFT JOIN live l ON l.ord = i.ord ORDER BY i.ord"
    )
}

/// The statement that writes a fresh record under `$1, $2` with token `$3`, value `$4` and a
/// life of `$life` seconds, unless a live record is there: answers that record's value (or
/// NULL) and whether the write happened.
fn take_record(r: &str, in_flight: &str, life: &str) -> String {
    format!(
        "WITH {}, {} SELECT (SELECT value FROM live), EXISTS (SELECT 1 FROM taken)",
        live(r),
        taken(r, in_flight, life)
    )
}

fn live(r: &str) -> String {
    format!("live AS (SELECT value FROM {r} WHERE scope = $1 AND key = $2 AND expires_at > now())")
}

fn taken(r: &str, in_flight: &str, life: &str) -> String {
    format!(
        "taken AS (INSERT INTO {r} AS r (scope, key, token, in_flight, value, expires_at) \
             SELECT $1::text, $2::text, $3::int8, {in_flight}, $4::bytea, now() + {life} * interval '1 second' \
             WHERE NOT EXISTS (SELECT 1 FROM live) \
         ON CONFLICT (scope, key) DO UPDATE SET token = excluded.token, \
             in_flight = excluded.in_flight, value = excluded.value, \
             expires_at = excluded.expires_at \
             WHERE r.expires_at <= now() \
         RETURNING 1)"
    )
}

/// An inbox acceptance: the acknowledgement recorded as a completed record, and the delivery
/// queued only when that record was written, in one statement (so one transaction).
/// `$6..$11`: route, id, encoding, arrival ms, attempts, last status, last error.
fn accept(r: &str, d: &str) -> String {
    format!(
        "WITH {}, {}, queued AS (INSERT INTO {d} \
             (route, id, encoded, arrived, due, attempts, last_status, last_error, dead) \
             SELECT $6::text, $7::bytea, $8::bytea, $9::int8, $9::int8, $10::int4, $11::int4, $12::text, false \
             WHERE EXISTS (SELECT 1 FROM taken) RETURNING 1) \
         SELECT (SELECT value FROM live), EXISTS (SELECT 1 FROM queued)",
        live(r),
        taken(r, "false", "$5::float8"),
    )
}
