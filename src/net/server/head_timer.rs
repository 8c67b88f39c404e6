//! The timer behind `header_read_timeout` on HTTP/1 connections: a table of deadlines per
//! worker thread, checked every [`TICK`], instead of an entry in tokio's timer wheel per request.
//!
//! hyper makes a new sleep each time it starts waiting for a request head, and drops it as soon
//! as the head is in, nearly always long before it would fire. With tokio's timer each of those
//! was an allocation, an entry put in the wheel under its lock when first polled and taken out
//! again when dropped: about 1,000 instructions per request, 2% of a forwarded one. Here a sleep
//! takes a slot in a small table (one per connection waiting for a head) and gives it back; one
//! task per worker wakes the sleeps that are due. A sleep fires up to one tick late, which for a
//! time-out of seconds against a silent client changes nothing.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use hyper::rt::{Sleep, Timer};

/// How often a worker looks for sleeps that are due: how late one may fire.
const TICK: Duration = Duration::from_millis(100);

/// hyper's timer for HTTP/1 connections: sleeps that share their worker thread's table.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct HeadTimer;

impl Timer for HeadTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn Sleep>> {
        self.sleep_until(Instant::now() + duration)
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn Sleep>> {
        Box::pin(HeadSleep {
            deadline,
            table: Table::of_this_thread(),
            slot: None,
        })
    }
}

/// A deadline, holding a slot in its thread's table while it waits to be woken.
struct HeadSleep {
    deadline: Instant,
    table: Arc<Table>,
    slot: Option<usize>,
}

impl Sleep for HeadSleep {}

impl Future for HeadSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if Instant::now() >= this.deadline {
            return Poll::Ready(());
        }
        let mut slots = this.table.slots();
        match this.slot {
            Some(slot) => slots.rearm(slot, cx.waker()),
            None => this.slot = Some(slots.take(this.deadline, cx.waker())),
        }
        Poll::Pending
    }
}

impl Drop for HeadSleep {
    fn drop(&mut self) {
        if let Some(slot) = self.slot {
            self.table.slots().give_back(slot);
        }
    }
}

/// The deadlines waited on by one worker thread's connections.
#[derive(Default)]
struct Table {
    slots: Mutex<Slots>,
    /// False once the task that checks the table is gone with its runtime: a thread that runs
    /// another runtime later (a test's) then makes a table of its own.
    checked: AtomicBool,
}

thread_local! {
    static TABLE: RefCell<Option<Arc<Table>>> = const { RefCell::new(None) };
}

impl Table {
    /// This thread's table, made with the task that checks it the first time a sleep is made
    /// here (on a worker, inside its runtime, as hyper makes them).
    fn of_this_thread() -> Arc<Table> {
        TABLE.with_borrow_mut(|table| match table {
            Some(table) if table.checked.load(Ordering::Relaxed) => Arc::clone(table),
            _ => {
                let fresh = Arc::new(Table::default());
                fresh.checked.store(true, Ordering::Relaxed);
                tokio::spawn(wake_when_due(Checking(Arc::clone(&fresh))));
                *table = Some(Arc::clone(&fresh));
                fresh
            }
        })
    }

    fn slots(&self) -> MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Every tick, wakes the tasks whose deadline has passed; their sleeps then see it and resolve.
async fn wake_when_due(checking: Checking) {
    let mut ticks = tokio::time::interval(TICK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let due = checking.0.slots().due(Instant::now());
        due.into_iter().for_each(Waker::wake);
    }
}

/// Marks its table unchecked when the task checking it is dropped, polled or not.
struct Checking(Arc<Table>);

impl Drop for Checking {
    fn drop(&mut self) {
        self.0.checked.store(false, Ordering::Relaxed);
    }
}

/// Slots by index; a freed one is reused, so the table stays as large as the most connections
/// that were ever waiting for a head at once.
#[derive(Default)]
struct Slots {
    slots: Vec<Option<(Instant, Option<Waker>)>>,
    free: Vec<usize>,
}

impl Slots {
    fn take(&mut self, deadline: Instant, waker: &Waker) -> usize {
        let entry = Some((deadline, Some(waker.clone())));
        if let Some(slot) = self.free.pop() {
            self.slots[slot] = entry;
            return slot;
        }
        self.slots.push(entry);
        self.slots.len() - 1
    }

    /// Polled again: wake this task, which may not be the one that polled it before.
    fn rearm(&mut self, slot: usize, waker: &Waker) {
        if let Some((_, kept)) = &mut self.slots[slot] {
            if !kept.as_ref().is_some_and(|kept| kept.will_wake(waker)) {
                *kept = Some(waker.clone());
            }
        }
    }

    fn give_back(&mut self, slot: usize) {
        self.slots[slot] = None;
        self.free.push(slot);
    }

    /// The wakers of the deadlines passed by `now`, each taken once.
    fn due(&mut self, now: Instant) -> Vec<Waker> {
        self.slots
            .iter_mut()
            .flatten()
            .filter(|(deadline, _)| *deadline <= now)
            .filter_map(|(_, waker)| waker.take())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Slots {
        fn waiting(&self) -> usize {
            self.slots.iter().flatten().count()
        }
    }

    #[tokio::test]
    async fn a_sleep_fires_at_its_deadline_not_before() {
        let started = Instant::now();
        let fired = tokio::time::timeout(
            Duration::from_secs(30),
            HeadTimer.sleep(Duration::from_millis(150)),
        )
        .await;
        assert!(fired.is_ok(), "nothing woke the sleep");
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(150), "{waited:?}");
    }

    #[tokio::test]
    async fn a_sleep_past_its_deadline_is_ready_at_once() {
        let timer = HeadTimer;
        let past = Instant::now().checked_sub(Duration::from_secs(1)).unwrap();
        let fired = tokio::time::timeout(Duration::from_millis(50), timer.sleep_until(past)).await;
        assert!(fired.is_ok());
    }

    #[tokio::test]
    async fn dropped_sleeps_give_their_slots_back() {
        let table = Table::of_this_thread();
        let before = table.slots().waiting();
        let mut sleeps: Vec<_> = (0..10)
            .map(|_| HeadTimer.sleep(Duration::from_secs(60)))
            .collect();
        for sleep in &mut sleeps {
            let polled = tokio::time::timeout(Duration::from_millis(1), sleep.as_mut()).await;
            assert!(polled.is_err(), "a sleep of a minute fired");
        }
        assert_eq!(table.slots().waiting(), before + 10);
        let size = table.slots().slots.len();
        drop(sleeps);
        assert_eq!(table.slots().waiting(), before);
        let again = HeadTimer.sleep(Duration::from_secs(60));
        let mut again = std::pin::pin!(again);
        let polled = tokio::time::timeout(Duration::from_millis(1), again.as_mut()).await;
        assert!(polled.is_err());
        assert_eq!(table.slots().slots.len(), size, "a freed slot is reused");
    }

    #[test]
    fn only_passed_deadlines_are_woken_and_each_once() {
        let now = Instant::now();
        let mut slots = Slots::default();
        let waker = Waker::noop();
        slots.take(now.checked_sub(Duration::from_millis(1)).unwrap(), waker);
        slots.take(now + Duration::from_secs(1), waker);
        assert_eq!(slots.due(now).len(), 1);
        assert_eq!(slots.due(now).len(), 0, "woken twice");
        assert_eq!(slots.due(now + Duration::from_secs(2)).len(), 1);
    }
}
