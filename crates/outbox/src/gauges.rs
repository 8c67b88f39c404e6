//! The gauges' reading of a table (`idempotency_outbox_pending`, `..._oldest_pending_seconds`,
//! `..._blocked_aggregates`): what a scrape of `/metrics` costs, every scrape, so a bounded
//! amount of work through the table's indexes however many rows it holds, rather than the
//! exact counts of [`Outbox::counts`], which walk every row of each state.
//!
//! Each part reads at most [`GAUGE_ROWS`] entries of one partial index, in that index's order,
//! with `LIMIT` (so the walk stops there):
//! - pending: the rows neither delivered, dead nor in flight, through the order index (which
//!   holds every row not yet delivered or dead, those waiting behind their aggregate included),
//!   counted up to `GAUGE_ROWS`: that number means that many or more;
//! - the oldest: the earliest `created_at` among the first `GAUGE_ROWS` rows of the order
//!   index and the first `GAUGE_ROWS` of the claim's index by when they are due (rows never
//!   attempted are due when created, so a backlog's oldest comes first there): exact while
//!   fewer rows than that are neither delivered nor dead, the age of an old row if not the
//!   oldest beyond;
//! - blocked aggregates (`on_dead = "block"` only): those held by one of the `GAUGE_ROWS`
//!   oldest dead rows, through the dead rows' index.
//!
//! Under `on_dead = "block"` dead rows keep their place in the order index, and the pending
//! count walks past them too.

use std::time::Duration;

use crate::config::OnDead;
use crate::names::TableName;
use crate::outbox::Outbox;
use crate::OutboxError;

/// The most entries each part of a gauges' reading walks; the pending gauge reads this when
/// at least this many rows are pending.
pub const GAUGE_ROWS: u64 = 10_000;

/// A table as its gauges show it: bounded readings (see [`Outbox::gauges`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OutboxGauges {
    /// Rows neither delivered, dead nor in flight, up to [`GAUGE_ROWS`] (that many or more).
    pub pending: u64,
    /// The age of the oldest row neither delivered nor dead: exact below [`GAUGE_ROWS`] such
    /// rows, at most that age beyond.
    pub oldest_pending: Duration,
    /// Aggregates held back by a dead row, among the [`GAUGE_ROWS`] oldest dead rows (0 under
    /// `on_dead = "skip"`).
    pub blocked_aggregates: u64,
}

/// `$1` how many entries each part walks: the pending count, the oldest's age in seconds, and
/// the blocked aggregates, in one row.
pub(crate) fn sql(table: &TableName, on_dead: OnDead) -> String {
    let t = table.quoted();
    let live = "delivered_at IS NULL AND dead_at IS NULL";
    let blocked = match on_dead {
        OnDead::Skip => "0::int8".to_owned(),
        OnDead::Block => format!(
            "(SELECT count(DISTINCT d.aggregate_id) FROM (
                 SELECT aggregate_id, seq, holding FROM {t} WHERE dead_at IS NOT NULL
                 ORDER BY seq LIMIT $1) d
               WHERE d.holding AND d.aggregate_id IS NOT NULL AND EXISTS (
                 SELECT 1 FROM {t} l WHERE l.aggregate_id = d.aggregate_id AND l.seq > d.seq
                   AND l.holding AND l.dead_at IS NULL))"
        ),
    };
    format!(
        "SELECT
           (SELECT count(*) FROM (
              SELECT 1 FROM {t} WHERE holding AND {live}
                AND (lease_until IS NULL OR lease_until <= now())
              ORDER BY aggregate_id, seq LIMIT $1) p),
           (SELECT COALESCE(EXTRACT(EPOCH FROM clock_timestamp() - min(o.created_at)), 0)::float8
            FROM ((SELECT created_at FROM {t} WHERE holding AND {live}
                   ORDER BY aggregate_id, seq LIMIT $1)
                  UNION ALL
                  (SELECT created_at FROM {t} WHERE {live} AND NOT waiting
                   ORDER BY next_attempt_at LIMIT $1)) o),
           {blocked}"
    )
}

impl Outbox {
    /// Reads the table as its gauges show it, in bounded work (the module's docs say how):
    /// what a scrape of `/metrics` asks for. [`Outbox::counts`] counts exactly.
    pub async fn gauges(&self) -> Result<OutboxGauges, OutboxError> {
        self.within(async {
            let client = self.client().await?;
            let config = self.config();
            let statement = client
                .prepare_cached(&sql(&config.table, config.on_dead))
                .await?;
            let cap = i64::try_from(GAUGE_ROWS).unwrap_or(i64::MAX);
            let row = client.query_one(&statement, &[&cap]).await?;
            let count = |i: usize| u64::try_from(row.get::<_, i64>(i)).unwrap_or(0);
            let oldest: f64 = row.get(1);
            Ok(OutboxGauges {
                pending: count(0),
                oldest_pending: Duration::try_from_secs_f64(oldest.max(0.0)).unwrap_or_default(),
                blocked_aggregates: count(2),
            })
        })
        .await
    }
}
