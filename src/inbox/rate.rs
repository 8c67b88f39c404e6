//! `deliver_rate`: at most N attempts of a route start in any one-second window, on this
//! replica.
//!
//! The window slides: the start times of the last N attempts are kept, and another may start
//! only once the oldest of them is a second old. Fixed windows would let 2N start within one
//! second across a window's edge, and so would a token bucket holding N (a full bucket, then
//! its refill). The window is the route's, not a worker's: a reload starts a new worker while
//! the old one may still be finishing a claim, and both count in the same window, which keeps
//! the starts before the reload (a new rate applies to them from then on).
//!
//! A worker reserves room before it asks the store for deliveries and records each start as it
//! happens, giving back what the store had no delivery for; room held by a reservation counts
//! as taken, so two workers never together start more than the rate.

use std::collections::VecDeque;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

const WINDOW: Duration = Duration::from_secs(1);
/// How soon to look again when the window's room is held by another worker's claim, which
/// gives back what it does not use within a store call.
const HELD_RECHECK: Duration = Duration::from_millis(50);

/// One route's window of recent attempt starts, shared by its workers.
#[derive(Debug, Default)]
pub(crate) struct DeliverRate {
    window: Mutex<Window>,
}

#[derive(Debug, Default)]
struct Window {
    rate: Option<NonZeroU32>,
    starts: VecDeque<Instant>,
    /// Room reserved and not yet started or given back.
    reserved: usize,
}

/// Room for attempts to start: recorded one by one, the rest given back when dropped.
#[derive(Debug)]
pub(crate) struct Reservation {
    rate: Arc<DeliverRate>,
    left: usize,
}

impl DeliverRate {
    fn window(&self) -> MutexGuard<'_, Window> {
        // Every change is whole under the lock, so a poisoned window is still consistent.
        self.window.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The rate from now on (a reload's), or none for no cap.
    pub(crate) fn set_rate(&self, rate: Option<NonZeroU32>) {
        let mut window = self.window();
        window.rate = rate;
        if rate.is_none() {
            window.starts.clear();
        }
    }

    /// Reserves room for up to `want` attempts to start now.
    pub(crate) fn reserve(self: &Arc<Self>, want: usize) -> Reservation {
        let mut window = self.window();
        let left = match window.rate {
            Some(rate) => {
                window.forget_before(Instant::now());
                want.min((rate.get() as usize).saturating_sub(window.counted()))
            }
            None => want,
        };
        window.reserved += left;
        Reservation {
            rate: self.clone(),
            left,
        }
    }

    /// When another attempt may start, if none may now.
    pub(crate) fn next_free(&self) -> Option<Instant> {
        let mut window = self.window();
        let rate = window.rate?.get() as usize;
        let now = Instant::now();
        window.forget_before(now);
        let over = window.counted().checked_sub(rate)?;
        let leaves = window.starts.get(over).map(|at| *at + WINDOW);
        let given_back = (window.reserved > 0).then(|| now + HELD_RECHECK);
        leaves.into_iter().chain(given_back).min()
    }
}

impl Window {
    /// Starts and reservations, as the window counts them.
    fn counted(&self) -> usize {
        self.starts.len() + self.reserved
    }

    /// Drops the starts a second old at `now`.
    fn forget_before(&mut self, now: Instant) {
        while self
            .starts
            .front()
            .is_some_and(|at| now.duration_since(*at) >= WINDOW)
        {
            self.starts.pop_front();
        }
    }
}

impl Reservation {
    /// How many attempts it has room for.
    pub(crate) fn len(&self) -> usize {
        self.left
    }

    /// One attempt starts now, in room this reservation held.
    pub(crate) fn start(&mut self) {
        if self.left == 0 {
            return;
        }
        self.left -= 1;
        let mut window = self.rate.window();
        window.reserved -= 1;
        if window.rate.is_some() {
            window.starts.push_back(Instant::now());
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.left > 0 {
            self.rate.window().reserved -= self.left;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(n: u32) -> Arc<DeliverRate> {
        let rate = Arc::new(DeliverRate::default());
        rate.set_rate(NonZeroU32::new(n));
        rate
    }

    fn start(rate: &Arc<DeliverRate>, n: usize) {
        let mut reservation = rate.reserve(n);
        assert_eq!(reservation.len(), n);
        (0..n).for_each(|_| reservation.start());
    }

    #[tokio::test(start_paused = true)]
    async fn no_more_than_the_rate_start_in_any_second() {
        let window = rate(3);
        let first = Instant::now();
        assert_eq!(window.reserve(10).len(), 3, "given back when dropped");
        start(&window, 2);
        tokio::time::advance(Duration::from_millis(600)).await;
        assert_eq!(window.reserve(10).len(), 1);
        start(&window, 1);
        assert_eq!(window.reserve(10).len(), 0);
        assert_eq!(window.next_free(), Some(first + WINDOW));
        tokio::time::advance(Duration::from_millis(400)).await;
        assert_eq!(
            window.reserve(10).len(),
            2,
            "the first two are a second old"
        );
        tokio::time::advance(Duration::from_millis(600)).await;
        assert_eq!(window.reserve(10).len(), 3);
        assert_eq!(window.next_free(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn room_reserved_by_one_worker_is_not_given_to_another() {
        let window = rate(4);
        let mut old_worker = window.reserve(3);
        let new_worker = window.reserve(3);
        assert_eq!(new_worker.len(), 1);
        assert_eq!(
            window.next_free(),
            Some(Instant::now() + HELD_RECHECK),
            "held room comes back within a store call"
        );
        drop(new_worker);
        old_worker.start();
        drop(old_worker);
        assert_eq!(window.reserve(10).len(), 3, "what was not started is free");
    }

    #[tokio::test(start_paused = true)]
    async fn a_lowered_rate_counts_the_starts_before_it() {
        let window = rate(5);
        let first = Instant::now();
        start(&window, 5);
        window.set_rate(NonZeroU32::new(2));
        tokio::time::advance(Duration::from_millis(100)).await;
        assert_eq!(window.reserve(10).len(), 0);
        assert_eq!(window.next_free(), Some(first + WINDOW));
    }

    #[test]
    fn no_rate_means_no_cap() {
        let window = Arc::new(DeliverRate::default());
        let mut reservation = window.reserve(500);
        assert_eq!(reservation.len(), 500);
        (0..500).for_each(|_| reservation.start());
        assert_eq!(window.next_free(), None);
        assert_eq!(window.reserve(500).len(), 500);
    }
}
