//! Passing an aggregate's turn: once a row releases its aggregate (delivered, or dead under
//! `on_dead = "skip"`), the aggregate's next row stops waiting and enters the claim's index.
//!
//! The turn is passed under the aggregate's advisory lock, the one the order trigger holds from
//! a row's insert to its commit: while this transaction holds it, no row of the aggregate is
//! being inserted unseen, so a row the trigger marked waiting is seen here, or the trigger sees
//! the release. The lock is only tried, never waited for (an application's transaction may be
//! long): an aggregate whose lock is taken has its turn passed again shortly, and the sweep
//! (`sweep`) passes any turn a crash lost.

use std::collections::BTreeSet;

use idempotency_postgres::Transaction;

use super::Shared;
use crate::sql::LOCK_AGGREGATES;
use crate::OutboxError;

/// Passes the turn of each of `aggregates` whose lock is free: how many rows may now be
/// attempted, and the aggregates whose turn is still to pass.
pub(super) async fn pass(
    transaction: &Transaction<'_>,
    shared: &Shared,
    aggregates: &BTreeSet<String>,
) -> Result<(u64, BTreeSet<String>), OutboxError> {
    if aggregates.is_empty() {
        return Ok((0, BTreeSet::new()));
    }
    let table = shared.outbox.config().table.quoted();
    let wanted: Vec<&str> = aggregates.iter().map(String::as_str).collect();
    let lock = transaction.prepare_cached(LOCK_AGGREGATES).await?;
    let locked: Vec<String> = transaction
        .query(&lock, &[&table, &wanted])
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    let left = aggregates
        .iter()
        .filter(|a| !locked.contains(a))
        .cloned()
        .collect();
    if locked.is_empty() {
        return Ok((0, left));
    }
    let promote = transaction.prepare_cached(&shared.sql.promote).await?;
    let passed = transaction.execute(&promote, &[&locked]).await?;
    if passed > 0 {
        notify(transaction, shared).await?;
    }
    Ok((passed, left))
}

/// Tells the other relays on the table (through the `notify_channel`, when there is one) that
/// rows may be claimed; sent when the transaction commits.
async fn notify(transaction: &Transaction<'_>, shared: &Shared) -> Result<(), OutboxError> {
    if let Some(channel) = &shared.outbox.config().notify_channel {
        transaction
            .execute("SELECT pg_notify($1, '')", &[channel])
            .await?;
    }
    Ok(())
}

/// Passes every turn left waiting though nothing holds its aggregate: how many rows may now be
/// attempted.
pub(super) async fn sweep(shared: &Shared) -> Result<u64, OutboxError> {
    let client = shared.outbox.client().await?;
    let statement = client.prepare_cached(&shared.sql.sweep).await?;
    let passed = client.execute(&statement, &[]).await?;
    if passed > 0 {
        shared.wake.notify_one();
    }
    Ok(passed)
}
