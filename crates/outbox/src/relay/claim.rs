//! The claim loop: claims due rows, never more than there are free slots (the relay's, and
//! those of the rows' destinations: `rooms.rs`), and starts an attempt for each at once.
//!
//! It claims again straight away while claims come back full (a backlog), and otherwise waits
//! for a reason: a `NOTIFY` (when a slot is free), a freed slot (when none is), a full
//! destination with room again, the poll interval, or the stop.
//!
//! While a destination is full its rows are left out of the claim, but they are still due,
//! and the claim's index has them in its path. So such a claim walks the due rows newest
//! first: the rows of the destinations with room (they have room, so they have few rows due,
//! and those came due lately) are met before the full destination's backlog, which is older.
//! And when such a claim found nothing, the same claim is not asked again before
//! `poll_interval` has passed (a `NOTIFY` does not say which topic it is for), unless a
//! destination's room changed: a full destination's backlog is walked at most once per poll
//! while the others are idle. A database outage pauses it
//! (`OUTAGE_PAUSE` between tries) and marks the relay unready; the first claim that succeeds
//! resumes it. On the stop, rows it had just claimed and not started are given back.

use std::sync::Arc;

use idempotency_postgres::tokio_postgres::types::ToSql;
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit};
use tokio::time::Instant;

use super::marks::Mark;
use super::rooms::{ClaimFilter, Room, Slot};
use super::{attempt, is_stopped, pause_unless_stopped, Shared, OUTAGE_PAUSE};
use crate::row::ClaimedRow;
use crate::sql::{self, ClaimOrder};
use crate::table::{PayloadKind, TableLayout};
use crate::OutboxError;

/// Most rows claimed in one statement.
const CLAIM_BATCH: usize = 256;
/// How long a relay whose table is refused waits before it looks at the table again.
const TABLE_PAUSE: std::time::Duration = std::time::Duration::from_secs(10);

/// Claims and starts attempts until the relay stops.
pub(super) async fn run(
    shared: Arc<Shared>,
    marks: mpsc::UnboundedSender<Mark>,
    mut stop: watch::Receiver<bool>,
) {
    let Some(layout) = usable_table(&shared, &mut stop).await else {
        return;
    };
    let config = shared.outbox.config();
    let statements = [ClaimOrder::OldestFirst, ClaimOrder::NewestFirst]
        .map(|order| sql::claim(&config.table, layout.payload, order));
    let mut pace = Pace::default();
    while !is_stopped(&stop) {
        let Some((limit, filter)) = pace.next(&shared) else {
            pause(&shared, pace.backlog, &mut stop).await;
            continue;
        };
        let started = Instant::now();
        let statement = &statements[usize::from(filter.narrowed())];
        let claim = claim(&shared, statement, limit, &filter);
        let claimed = match shared.outbox.within(claim).await {
            Ok(claimed) => claimed,
            Err(e) => {
                shared.health.unreachable(&e);
                pause_unless_stopped(OUTAGE_PAUSE, &mut stop).await;
                continue;
            }
        };
        shared.metrics.claimed(started.elapsed());
        shared.health.ready();
        if is_stopped(&stop) {
            return release(&shared, &claimed.taken).await;
        }
        pace.claimed(filter, limit, claimed.returned);
        start(&shared, &marks, claimed.taken, layout.payload).await;
        if pace.backlog && shared.permits.available_permits() >= batch(&shared, true) {
            continue;
        }
        pause(&shared, pace.backlog, &mut stop).await;
    }
}

/// What the claim loop keeps from one claim to the next.
#[derive(Debug, Default)]
struct Pace {
    /// The last claim came back full: more rows may be due.
    backlog: bool,
    /// The last claim left full destinations out (as this filter says) and found nothing, then.
    fruitless: Option<(ClaimFilter, Instant)>,
}

impl Pace {
    /// How many rows the next claim may take, and what it leaves out; `None` when no claim is
    /// worth its transaction now: every destination is full, or those with room had nothing a
    /// moment ago (a freed slot, a wake-up or the poll brings the next claim).
    fn next(&mut self, shared: &Shared) -> Option<(usize, ClaimFilter)> {
        let free = shared.permits.available_permits().min(CLAIM_BATCH);
        let filter = shared.rooms.filter();
        let limit = free.min(filter.room);
        let poll = shared.outbox.config().poll_interval;
        let in_vain = self
            .fruitless
            .as_ref()
            .is_some_and(|(f, at)| *f == filter && at.elapsed() < poll);
        if limit > 0 && !in_vain {
            return Some((limit, filter));
        }
        if free > 0 {
            self.backlog = false;
        }
        None
    }

    /// What a claim of at most `limit` rows that returned `returned` says of the next.
    fn claimed(&mut self, filter: ClaimFilter, limit: usize, returned: usize) {
        self.backlog = returned == limit;
        self.fruitless = (filter.narrowed() && returned == 0).then(|| (filter, Instant::now()));
    }
}

/// Starts an attempt for each claimed row, each holding one of the relay's slots and one of
/// its destination's.
async fn start(
    shared: &Arc<Shared>,
    marks: &mpsc::UnboundedSender<Mark>,
    taken: Vec<(ClaimedRow, Room)>,
    payload: PayloadKind,
) {
    for (row, room) in taken {
        let slot = Slot {
            relay: slot(shared).await,
            room,
        };
        let (shared, marks) = (shared.clone(), marks.clone());
        shared
            .attempts
            .clone()
            .spawn(attempt::run(shared, row, slot, marks, payload));
    }
}

/// A slot for a claimed row: one is free, as no more rows were claimed than were free.
async fn slot(shared: &Shared) -> OwnedSemaphorePermit {
    match shared.permits.clone().try_acquire_owned() {
        Ok(permit) => permit,
        Err(_) => shared
            .permits
            .clone()
            .acquire_owned()
            .await
            .expect("the relay never closes its slots"),
    }
}

/// How many free slots make a claim worth its transaction: one, or with a backlog a quarter of
/// them (claiming row by row as each attempt ends would cost a transaction per row).
fn batch(shared: &Shared, backlog: bool) -> usize {
    if backlog {
        shared
            .outbox
            .config()
            .deliver_concurrency
            .div_ceil(4)
            .min(CLAIM_BATCH)
    } else {
        1
    }
}

/// Waits for a reason to claim again: enough free slots for a batch, a wake-up (a `NOTIFY`, a
/// passed turn, a full destination with room again; heard while a slot is free and there is
/// no backlog to claim anyway), the poll interval, or the stop.
async fn pause(shared: &Shared, backlog: bool, stop: &mut watch::Receiver<bool>) {
    let batch = batch(shared, backlog);
    let free = shared.permits.available_permits();
    let enough = async {
        let wanted = u32::try_from(batch).unwrap_or(1);
        let _ = shared.permits.acquire_many(wanted).await;
    };
    tokio::select! {
        _ = stop.changed() => {}
        () = shared.wake.notified(), if free > 0 && !backlog => {}
        () = enough, if free < batch => {}
        () = tokio::time::sleep(shared.outbox.config().poll_interval) => {}
    }
}

/// What one claim came to.
struct Claimed {
    /// The rows to attempt, each with its destination's slot.
    taken: Vec<(ClaimedRow, Room)>,
    /// How many rows the claim statement returned, those given back included: as many as it
    /// was asked for means more may be due.
    returned: usize,
}

/// Claims at most `limit` due rows that `filter` lets through, in one short transaction; rows
/// whose destination has no room left are given back in it before it commits.
async fn claim(
    shared: &Shared,
    claim_sql: &str,
    limit: usize,
    filter: &ClaimFilter,
) -> Result<Claimed, OutboxError> {
    let mut client = shared.outbox.client().await?;
    let lease =
        i64::try_from(shared.outbox.config().effective_lease().as_millis()).unwrap_or(i64::MAX);
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let transaction = client.transaction().await?;
    let statement = transaction.prepare_cached(claim_sql).await?;
    let params: [&(dyn ToSql + Sync); 5] = [
        &shared.owner,
        &lease,
        &limit,
        &filter.excluded,
        &filter.only,
    ];
    let rows = transaction.query(&statement, &params).await?;
    let claimed = Instant::now();
    let rows = rows
        .iter()
        .map(|row| ClaimedRow::decode(row, claimed))
        .collect::<Result<Vec<_>, _>>()?;
    let returned = rows.len();
    let (taken, over) = shared.rooms.share(shared.outbox.config(), rows);
    if !over.is_empty() {
        let statement = transaction.prepare_cached(&shared.sql.release).await?;
        let (ids, attempts) = fences(over.iter());
        transaction
            .execute(&statement, &[&ids, &attempts, &shared.owner])
            .await?;
    }
    transaction.commit().await?;
    Ok(Claimed { taken, returned })
}

/// The ids and claims' attempts of `rows`: what a release is fenced by.
fn fences<'a>(rows: impl Iterator<Item = &'a ClaimedRow>) -> (Vec<&'a str>, Vec<i32>) {
    rows.map(|r| (r.id.as_str(), r.attempt)).unzip()
}

/// Gives back rows claimed but never attempted: their lease and their claim's attempt undone.
async fn release(shared: &Shared, rows: &[(ClaimedRow, Room)]) {
    if rows.is_empty() {
        return;
    }
    let (ids, attempts) = fences(rows.iter().map(|(row, _)| row));
    let released = async {
        let client = shared.outbox.client().await?;
        let params: [&(dyn ToSql + Sync); 3] = [&ids, &attempts, &shared.owner];
        client.execute(&shared.sql.release, &params).await?;
        Ok::<_, OutboxError>(())
    };
    if let Err(e) = shared.outbox.within(released).await {
        tracing::warn!(outbox = %shared.outbox.name(), error = %e, rows = rows.len(), "outbox: claimed rows could not be given back; they are attempted after their lease");
    }
}

/// Waits until the table is usable: checked once the database answers, and again every
/// `TABLE_PAUSE` while it is refused. `None` if the relay stops first.
async fn usable_table(shared: &Shared, stop: &mut watch::Receiver<bool>) -> Option<TableLayout> {
    loop {
        let pause = match shared.outbox.prepare_table().await {
            Ok(layout) => {
                if !layout.ordered {
                    tracing::warn!(outbox = %shared.outbox.name(), table = %shared.outbox.config().table, "outbox: the table has no order trigger: two transactions of one aggregate that commit out of seq order may be delivered out of order (outbox-schema prints the trigger)");
                }
                return Some(layout);
            }
            Err(OutboxError::Table(problems)) => {
                shared.health.table_refused(&problems.to_string());
                TABLE_PAUSE
            }
            Err(e) => {
                shared.health.unreachable(&e);
                OUTAGE_PAUSE
            }
        };
        if !pause_unless_stopped(pause, stop).await {
            return None;
        }
    }
}
