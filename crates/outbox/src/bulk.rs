//! Dead rows retried or deleted in bulk, by topic, aggregate and age: what an operator does
//! after a receiver's outage ("fix it, then retry what died meanwhile"). Each call touches at
//! most `limit` rows, oldest first, in one short transaction; the caller repeats it while it
//! answers `limit`.

use std::time::SystemTime;

use idempotency_postgres::tokio_postgres::types::ToSql;

use crate::names::TableName;
use crate::outbox::Outbox;
use crate::sql::WAIT_FOR_AGGREGATE;
use crate::OutboxError;

/// Which dead rows a bulk call takes: every filter given must match.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeadFilter {
    /// Rows of this topic.
    pub topic: Option<String>,
    /// Rows of this aggregate.
    pub aggregate_id: Option<String>,
    /// Rows inserted before this time (`created_at`).
    pub before: Option<SystemTime>,
    /// At most this many rows.
    pub limit: u32,
}

/// `$1` topic, `$2` aggregate, `$3` before, `$4` limit: the matching dead rows, oldest first,
/// locked (rows another call holds are left to it).
fn picked(t: &str) -> String {
    format!(
        "picked AS (SELECT id, aggregate_id, seq FROM {t}
             WHERE dead_at IS NOT NULL AND ($1::text IS NULL OR topic = $1)
               AND ($2::text IS NULL OR aggregate_id = $2)
               AND ($3::timestamptz IS NULL OR created_at < $3)
             ORDER BY seq LIMIT $4 FOR UPDATE SKIP LOCKED)"
    )
}

/// Retries the picked rows: pending at once with a fresh attempt and age budget, each holding its
/// aggregate again and waiting if an earlier row (or an earlier picked row) holds it.
pub(crate) fn retry_sql(table: &TableName) -> String {
    let t = table.quoted();
    format!(
        "WITH {picked}
         UPDATE {t} r SET dead_at = NULL, attempts = 0, next_attempt_at = now(),
             lease_owner = NULL, lease_until = NULL, holding = true, retried_at = now(),
             waiting = r.aggregate_id IS NOT NULL AND (
                 EXISTS (SELECT 1 FROM {t} e WHERE e.aggregate_id = r.aggregate_id
                         AND e.holding AND e.seq < r.seq)
                 OR EXISTS (SELECT 1 FROM picked p WHERE p.aggregate_id = r.aggregate_id
                            AND p.seq < r.seq))
         FROM picked WHERE r.id = picked.id
         RETURNING r.aggregate_id::text",
        picked = picked(t)
    )
}

/// Deletes the picked rows; their aggregates.
pub(crate) fn delete_sql(table: &TableName) -> String {
    let t = table.quoted();
    format!(
        "WITH {picked}
         DELETE FROM {t} d USING picked WHERE d.id = picked.id
         RETURNING d.aggregate_id::text",
        picked = picked(t)
    )
}

impl Outbox {
    /// Retries the dead rows `filter` matches (at most its `limit`, oldest first): how many.
    pub async fn retry_dead_matching(&self, filter: &DeadFilter) -> Result<u64, OutboxError> {
        self.within(self.bulk(&retry_sql(&self.config().table), filter))
            .await
    }

    /// Deletes the dead rows `filter` matches (at most its `limit`, oldest first): how many.
    /// Under `on_dead = "block"` their aggregates move on.
    pub async fn delete_dead_matching(&self, filter: &DeadFilter) -> Result<u64, OutboxError> {
        self.within(self.bulk(&delete_sql(&self.config().table), filter))
            .await
    }

    async fn bulk(&self, sql: &str, filter: &DeadFilter) -> Result<u64, OutboxError> {
        let mut client = self.client().await?;
        let transaction = client.transaction().await?;
        let limit = i64::from(filter.limit);
        let params: [&(dyn ToSql + Sync); 4] =
            [&filter.topic, &filter.aggregate_id, &filter.before, &limit];
        let rows = transaction.query(sql, &params).await?;
        let mut aggregates: Vec<String> = rows.iter().filter_map(|r| r.get(0)).collect();
        aggregates.sort();
        aggregates.dedup();
        // In one order, so two operators' calls never wait for each other in a cycle.
        let table = self.config().table.quoted();
        for aggregate in &aggregates {
            transaction
                .execute(WAIT_FOR_AGGREGATE, &[&table, aggregate])
                .await?;
        }
        if !aggregates.is_empty() {
            transaction
                .execute(&self.admin_sql().promote, &[&aggregates])
                .await?;
        }
        transaction.commit().await?;
        Ok(rows.len() as u64)
    }
}
