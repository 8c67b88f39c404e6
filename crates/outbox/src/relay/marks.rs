//! The marker: writes what each attempt came to, for every attempt that ended since the last
//! write, in one statement (one round trip and one commit for all of them). Each row's mark is
//! fenced by its claim (this relay's `lease_owner` and the claim's `attempts`), so a relay whose
//! lease ran out, and whose row another relay claimed since, writes nothing over the newer
//! attempt. Through a database outage the marks are kept and written once it answers. A row
//! delivered (or dead, under `on_dead = "skip"`) releases its aggregate, and the same
//! transaction passes the turn to the aggregate's next row (`turns.rs`).

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use idempotency_postgres::tokio_postgres::types::ToSql;
use idempotency_postgres::Transaction;
use tokio::sync::mpsc;

use super::{turns, Shared, OUTAGE_PAUSE};
use crate::row::ClaimedRow;
use crate::sql::MarkKind;
use crate::verdict::Verdict;
use crate::OutboxError;

/// Most marks written in one statement.
const MARK_BATCH: usize = 512;
/// How soon a turn that could not be passed is passed again.
const TURN_RETRY: Duration = Duration::from_millis(50);

/// One attempt's outcome, as the mark statement writes it.
#[derive(Debug, Clone)]
pub(crate) struct Mark {
    id: String,
    attempt: i32,
    kind: MarkKind,
    wait_ms: i64,
    status: Option<i32>,
    error: Option<String>,
}

impl Mark {
    /// What `verdict` writes of `row`; `sent` is false for a row that could not be sent.
    pub(crate) fn of(row: &ClaimedRow, verdict: Verdict, sent: bool) -> Self {
        let (kind, wait_ms, status, error) = match verdict {
            Verdict::Delivered { status } => (MarkKind::Delivered, 0, status, None),
            Verdict::Retry {
                wait,
                status,
                error,
            } => {
                let wait_ms = i64::try_from(wait.as_millis()).unwrap_or(i64::MAX);
                (MarkKind::Retry, wait_ms, status, Some(error))
            }
            Verdict::Dead { status, error } if sent => (MarkKind::Dead, 0, status, Some(error)),
            Verdict::Dead { status, error } => (MarkKind::Unsendable, 0, status, Some(error)),
        };
        Self {
            id: row.id.clone(),
            attempt: row.attempt,
            kind,
            wait_ms,
            status: status.map(|s| i32::from(s.as_u16())),
            error,
        }
    }
}

/// Writes marks as they come, until every sender is gone and every mark is written. Turns
/// that could not be passed (an insert of the aggregate was under way) are passed again soon.
pub(super) async fn run(shared: Arc<Shared>, mut marks: mpsc::UnboundedReceiver<Mark>) {
    let mut batch = Vec::with_capacity(MARK_BATCH);
    let mut deferred: BTreeSet<String> = BTreeSet::new();
    loop {
        let received = if deferred.is_empty() {
            marks.recv_many(&mut batch, MARK_BATCH).await
        } else {
            match tokio::time::timeout(TURN_RETRY, marks.recv_many(&mut batch, MARK_BATCH)).await {
                Ok(received) => received,
                Err(_) => usize::MAX,
            }
        };
        if received == 0 {
            return;
        }
        loop {
            match shared
                .outbox
                .within(write(&shared, &batch, &deferred))
                .await
            {
                Ok(left) => {
                    deferred = left;
                    break;
                }
                Err(e) => {
                    shared.health.unreachable(&e);
                    tokio::time::sleep(OUTAGE_PAUSE).await;
                }
            }
        }
        batch.clear();
    }
}

/// Writes `marks` in one fenced `UPDATE`: the ids whose claim still held, and the aggregates
/// they released.
async fn update(
    client: &Transaction<'_>,
    shared: &Shared,
    marks: &[&Mark],
) -> Result<Vec<(String, Option<String>)>, OutboxError> {
    let ids: Vec<&str> = marks.iter().map(|m| m.id.as_str()).collect();
    let attempts: Vec<i32> = marks.iter().map(|m| m.attempt).collect();
    let kinds: Vec<i16> = marks.iter().map(|m| m.kind as i16).collect();
    let waits: Vec<i64> = marks.iter().map(|m| m.wait_ms).collect();
    let statuses: Vec<Option<i32>> = marks.iter().map(|m| m.status).collect();
    let errors: Vec<Option<&str>> = marks.iter().map(|m| m.error.as_deref()).collect();
    let params: [&(dyn ToSql + Sync); 7] = [
        &ids,
        &attempts,
        &kinds,
        &waits,
        &statuses,
        &errors,
        &shared.owner,
    ];
    applied(client, &shared.sql.mark, &params).await
}

/// Runs a fenced statement: the ids whose claim still held, each with the aggregate it
/// released.
async fn applied(
    client: &Transaction<'_>,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<(String, Option<String>)>, OutboxError> {
    let statement = client.prepare_cached(sql).await?;
    let rows = client.query(&statement, params).await?;
    Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
}

/// Writes one batch and passes the turn of each aggregate it released (and of those left
/// over from before), in one transaction; the aggregates whose turn is still to pass.
async fn write(
    shared: &Shared,
    batch: &[Mark],
    deferred: &BTreeSet<String>,
) -> Result<BTreeSet<String>, OutboxError> {
    let mut client = shared.outbox.client().await?;
    let transaction = client.transaction().await?;
    let delete_delivered = shared.outbox.config().keep_delivered.is_zero();
    let (deleted, updated): (Vec<&Mark>, Vec<&Mark>) = batch
        .iter()
        .partition(|m| delete_delivered && m.kind == MarkKind::Delivered);
    let mut held: Vec<(String, Option<String>)> = Vec::with_capacity(batch.len());
    if !updated.is_empty() {
        held.extend(update(&transaction, shared, &updated).await?);
    }
    if !deleted.is_empty() {
        let ids: Vec<&str> = deleted.iter().map(|m| m.id.as_str()).collect();
        let attempts: Vec<i32> = deleted.iter().map(|m| m.attempt).collect();
        let params: [&(dyn ToSql + Sync); 3] = [&ids, &attempts, &shared.owner];
        held.extend(applied(&transaction, &shared.sql.delete_delivered, &params).await?);
    }
    let mut released = deferred.clone();
    released.extend(held.iter().filter_map(|(_, aggregate)| aggregate.clone()));
    let (passed, left) = turns::pass(&transaction, shared, &released).await?;
    transaction.commit().await?;
    if passed > 0 {
        // The next rows may be attempted now: this relay claims them at once, and others do
        // on the notification (sent at the commit).
        shared.wake.notify_one();
    }
    let held: HashSet<&str> = held.iter().map(|(id, _)| id.as_str()).collect();
    for lost in batch.iter().filter(|m| !held.contains(m.id.as_str())) {
        shared.metrics.lease_lost();
        tracing::warn!(outbox = %shared.outbox.name(), id = lost.id, attempt = lost.attempt, "outbox: an attempt outlived its lease and another claim took the row over; its outcome is not written");
    }
    Ok(left)
}
