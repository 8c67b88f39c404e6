//! The marker: writes what each attempt came to, for every attempt that ended since the last
//! write, in one statement (one round trip and one commit for all of them). Each row's mark is
//! fenced by its claim (this relay's `lease_owner` and the claim's `attempts`), so a relay whose
//! lease ran out, and whose row another relay claimed since, writes nothing over the newer
//! attempt. Through a database outage the marks are kept and written once it answers.

use std::collections::HashSet;
use std::sync::Arc;

use idempotency_postgres::tokio_postgres::types::ToSql;
use idempotency_postgres::Object;
use tokio::sync::mpsc;

use super::{Shared, OUTAGE_PAUSE};
use crate::row::ClaimedRow;
use crate::sql::MarkKind;
use crate::verdict::Verdict;
use crate::OutboxError;

/// Most marks written in one statement.
const MARK_BATCH: usize = 512;

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

/// Writes marks as they come, until every sender is gone and every mark is written.
pub(super) async fn run(shared: Arc<Shared>, mut marks: mpsc::UnboundedReceiver<Mark>) {
    let mut batch = Vec::with_capacity(MARK_BATCH);
    while marks.recv_many(&mut batch, MARK_BATCH).await > 0 {
        loop {
            match write(&shared, &batch).await {
                Ok(()) => break,
                Err(e) => {
                    shared.health.unreachable(&e.to_string());
                    tokio::time::sleep(OUTAGE_PAUSE).await;
                }
            }
        }
        batch.clear();
    }
}

/// Writes `marks` in one fenced `UPDATE`: the ids whose claim still held.
async fn update(
    client: &Object,
    shared: &Shared,
    marks: &[&Mark],
) -> Result<Vec<String>, OutboxError> {
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

/// Runs a fenced statement: the ids whose claim still held.
async fn applied(
    client: &Object,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<String>, OutboxError> {
    let statement = client.prepare_cached(sql).await?;
    let rows = client.query(&statement, params).await?;
    Ok(rows.iter().map(|row| row.get(0)).collect())
}

/// Writes one batch; a mark whose claim no longer holds is logged and dropped.
async fn write(shared: &Shared, batch: &[Mark]) -> Result<(), OutboxError> {
    let client = shared.outbox.client().await?;
    let delete_delivered = shared.outbox.config().keep_delivered.is_zero();
    let (deleted, updated): (Vec<&Mark>, Vec<&Mark>) = batch
        .iter()
        .partition(|m| delete_delivered && m.kind == MarkKind::Delivered);
    let mut held: HashSet<String> = HashSet::with_capacity(batch.len());
    if !updated.is_empty() {
        held.extend(update(&client, shared, &updated).await?);
    }
    if !deleted.is_empty() {
        let ids: Vec<&str> = deleted.iter().map(|m| m.id.as_str()).collect();
        let attempts: Vec<i32> = deleted.iter().map(|m| m.attempt).collect();
        let params: [&(dyn ToSql + Sync); 3] = [&ids, &attempts, &shared.owner];
        held.extend(applied(&client, &shared.sql.delete_delivered, &params).await?);
    }
    for lost in batch.iter().filter(|m| !held.contains(&m.id)) {
        tracing::warn!(outbox = %shared.outbox.name(), id = lost.id, attempt = lost.attempt, "outbox: an attempt outlived its lease and another claim took the row over; its outcome is not written");
    }
    Ok(())
}
