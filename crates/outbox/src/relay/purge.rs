//! `keep_delivered`: delivered rows older than it are deleted, a batch at a time (each batch
//! its own short statement, skipping rows another relay is deleting), so a large backlog of
//! old rows never holds a long lock. Dead rows are deleted only with `keep_dead`, once dead
//! that long, and their aggregates move on. The same task sweeps up
//! turns a crash left unpassed (`turns.rs`).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::{is_stopped, pause_unless_stopped, turns, Shared};
use crate::OutboxError;

/// How often delivered rows are looked for, at most: a shorter `keep_delivered` is looked for
/// that often (but no more than every `PURGE_MIN`).
const PURGE_EVERY: Duration = Duration::from_secs(10);
const PURGE_MIN: Duration = Duration::from_millis(100);
/// Rows deleted in one statement.
const PURGE_BATCH: i64 = 1000;

pub(super) async fn run(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let config = shared.outbox.config();
    let shortest = config.keep_dead.map_or(config.keep_delivered, |dead| {
        dead.min(config.keep_delivered)
    });
    let every = shortest.clamp(PURGE_MIN, PURGE_EVERY);
    while pause_unless_stopped(every, &mut stop).await {
        let swept = shared.outbox.within(turns::sweep(&shared)).await;
        if let Ok(passed @ 1..) = swept {
            tracing::info!(outbox = %shared.outbox.name(), rows = passed, "outbox: rows left waiting behind released aggregates may be attempted again");
        }
        if let Err(e) = shared.outbox.within(purge(&shared, &stop)).await {
            // A database outage is the claim loop's to report.
            tracing::debug!(outbox = %shared.outbox.name(), error = %e, "outbox: deleting delivered rows failed");
        }
        if let Some(keep) = shared.outbox.config().keep_dead {
            if let Err(e) = shared.outbox.within(purge_dead(&shared, keep)).await {
                tracing::debug!(outbox = %shared.outbox.name(), error = %e, "outbox: deleting dead rows failed");
            }
        }
    }
}

async fn purge(shared: &Shared, stop: &watch::Receiver<bool>) -> Result<(), OutboxError> {
    let keep = i64::try_from(shared.outbox.config().keep_delivered.as_millis()).unwrap_or(i64::MAX);
    loop {
        let client = shared.outbox.client().await?;
        let deleted = client
            .execute(&shared.sql.purge, &[&keep, &PURGE_BATCH])
            .await?;
        drop(client);
        if deleted < PURGE_BATCH as u64 || is_stopped(stop) {
            return Ok(());
        }
        tokio::task::yield_now().await;
    }
}

/// Deletes one batch of rows dead longer than `keep`, and passes their aggregates' turns
/// (under `on_dead = "block"` a dead row held them), waiting for each aggregate's lock in one
/// order.
async fn purge_dead(shared: &Shared, keep: Duration) -> Result<(), OutboxError> {
    let keep = i64::try_from(keep.as_millis()).unwrap_or(i64::MAX);
    let mut client = shared.outbox.client().await?;
    let transaction = client.transaction().await?;
    let rows = transaction
        .query(&shared.sql.purge_dead, &[&keep, &PURGE_BATCH])
        .await?;
    let mut aggregates: Vec<String> = rows.iter().filter_map(|r| r.get(0)).collect();
    aggregates.sort();
    aggregates.dedup();
    let table = shared.outbox.config().table.quoted();
    for aggregate in &aggregates {
        transaction
            .execute(crate::sql::WAIT_FOR_AGGREGATE, &[&table, aggregate])
            .await?;
    }
    let passed = if aggregates.is_empty() {
        0
    } else {
        transaction
            .execute(&shared.sql.promote, &[&aggregates])
            .await?
    };
    transaction.commit().await?;
    if !rows.is_empty() {
        tracing::info!(outbox = %shared.outbox.name(), rows = rows.len(), "outbox: dead rows older than keep_dead deleted");
    }
    if passed > 0 {
        shared.wake.notify_one();
    }
    Ok(())
}
