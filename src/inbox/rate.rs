//! `deliver_rate`: a route's attempts are sent at least `1/deliver_rate` apart, on this replica,
//! so an upstream that counts arrivals never sees more than N in any one second.
//!
//! What a receiver's limiter counts is arrivals, not the moments the proxy began its attempts.
//! A window that lets N attempts start in any second still lets N start at once, and those reach
//! the upstream spread by whatever each took to get there (a new connection, the scheduler), so
//! more than N arrive within a second across the window's edge. Pacing with no burst (GCRA whose
//! only tolerance is the timer's millisecond, [`TIMER_SLACK`]) leaves a whole `1/N` between two
//! sends, which covers any jitter shorter than that. The turn is taken at the last moment, with
//! the request's connection already open (`upstream::Ready`), and an attempt that goes late
//! pushes the next one back by as much rather than bunching up with it; only a lateness within
//! the timer's millisecond is made up, so that rounding every wake-up to a millisecond does not
//! slow a route below its rate.
//!
//! The pace is the route's, not a worker's: a reload starts a new worker while the old one may
//! still be finishing a claim, and both take turns from the same pace, which keeps the last send
//! before the reload (a new rate applies from then on). A worker asks the pace how many attempts
//! it may claim ([`DeliverRate::reserve`]): as many as have turns within [`HORIZON`], so that
//! no claimed delivery waits long for its turn while its claim's lease runs; it gives back what
//! the store had no delivery for, and hands each attempt a [`Turn`] to wait for.

use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// How far ahead a worker claims deliveries for turns to come: long enough that the store call
/// of a claim is made while the previous attempt waits for its turn, short beside any lease.
pub(crate) const HORIZON: Duration = Duration::from_millis(100);
/// How late a send may go and still count as on time: tokio's timers wake on whole
/// milliseconds, so a turn is up to one late as a rule.
const TIMER_SLACK: Duration = Duration::from_millis(1);

/// One route's pace, shared by its workers.
#[derive(Debug, Default)]
pub(crate) struct DeliverRate {
    pace: Mutex<Pace>,
}

#[derive(Debug, Default)]
struct Pace {
    /// The time between two sends, when there is a rate.
    spacing: Option<Duration>,
    /// The moment the last attempt was due: when it was sent, or up to [`TIMER_SLACK`]
    /// before. The next is due one spacing after.
    last_slot: Option<Instant>,
    /// Turns handed out or reserved and not yet taken: each is a send to come.
    waiting: usize,
}

/// Room for attempts to be claimed: each claimed one gets a [`Turn`], the rest is given back
/// when dropped.
#[derive(Debug)]
pub(crate) struct Reservation {
    rate: Arc<DeliverRate>,
    left: usize,
}

/// One attempt's place in the pace: [`wait`](Self::wait) until it may be sent.
#[derive(Debug)]
pub(crate) struct Turn {
    rate: Arc<DeliverRate>,
    sent: bool,
}

impl DeliverRate {
    fn pace(&self) -> MutexGuard<'_, Pace> {
        // Every change is whole under the lock, so a poisoned pace is still consistent.
        self.pace.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The rate from now on (a reload's), or none for no cap.
    pub(crate) fn set_rate(&self, rate: Option<NonZeroU32>) {
        let mut pace = self.pace();
        pace.spacing = rate.map(|rate| Duration::from_secs(1) / rate.get());
        if rate.is_none() {
            pace.last_slot = None;
        }
    }

    /// Reserves room for up to `want` attempts: all of them without a rate, else those whose
    /// turns come within [`HORIZON`].
    pub(crate) fn reserve(self: &Arc<Self>, want: usize) -> Reservation {
        let mut pace = self.pace();
        let left = match pace.spacing {
            Some(spacing) => want.min(pace.turns_within(Instant::now(), spacing)),
            None => want,
        };
        pace.waiting += left;
        Reservation {
            rate: self.clone(),
            left,
        }
    }

    /// When room comes back for another claim, if there is none now.
    pub(crate) fn next_free(&self) -> Option<Instant> {
        let pace = self.pace();
        let spacing = pace.spacing?;
        let now = Instant::now();
        let free = pace.first_free(now, spacing);
        (free > now + HORIZON).then(|| free - HORIZON)
    }
}

impl Pace {
    /// When the next attempt may be sent, if it may not be now.
    fn due(&self) -> Option<Instant> {
        Some(self.last_slot? + self.spacing?)
    }

    /// The first turn no attempt has yet: after the next due, and after every waiting one.
    fn first_free(&self, now: Instant, spacing: Duration) -> Instant {
        let next = self.due().map_or(now, |due| due.max(now));
        let waiting = u32::try_from(self.waiting).unwrap_or(u32::MAX);
        next + spacing.saturating_mul(waiting)
    }

    /// How many free turns come within [`HORIZON`] of `now`.
    fn turns_within(&self, now: Instant, spacing: Duration) -> usize {
        let free = self.first_free(now, spacing);
        let until = now + HORIZON;
        if free > until {
            return 0;
        }
        let ahead = (until - free).as_nanos() / spacing.as_nanos().max(1);
        usize::try_from(ahead)
            .unwrap_or(usize::MAX)
            .saturating_add(1)
    }
}

impl Reservation {
    /// How many attempts it has room for.
    pub(crate) fn len(&self) -> usize {
        self.left
    }

    /// The turn of one attempt claimed in the room this reservation held.
    pub(crate) fn take(&mut self) -> Turn {
        if self.left == 0 {
            // More claimed than reserved: a turn with no place in the pace would be sent at
            // once, so it takes a place of its own.
            self.rate.pace().waiting += 1;
        } else {
            self.left -= 1;
        }
        Turn {
            rate: self.rate.clone(),
            sent: false,
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.left > 0 {
            self.rate.pace().waiting -= self.left;
        }
    }
}

impl Turn {
    /// Waits until the attempt may be sent, one spacing after the last one was due, and counts
    /// it as sent now.
    pub(crate) async fn wait(mut self) {
        loop {
            let due = {
                let mut pace = self.rate.pace();
                let now = Instant::now();
                match pace.due() {
                    Some(due) if due > now => due,
                    due => {
                        // Late within the timer's slack, the next is due a spacing after this
                        // one's due; later (or idle), a spacing after this send.
                        let on_time = due.filter(|due| now - *due <= TIMER_SLACK);
                        let slot = on_time.unwrap_or(now);
                        pace.last_slot = Some(slot);
                        pace.waiting -= 1;
                        self.sent = true;
                        return;
                    }
                }
            };
            // Several turns may wake for the same moment; the first to look takes it, and the
            // others wait one spacing more.
            tokio::time::sleep_until(due).await;
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        if !self.sent {
            self.rate.pace().waiting -= 1;
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

    /// Sends `n` attempts, each as soon as its turn comes; returns when each was sent.
    async fn send(rate: &Arc<DeliverRate>, n: usize) -> Vec<Instant> {
        let mut room = rate.reserve(n);
        let turns: Vec<Turn> = (0..n).map(|_| room.take()).collect();
        let mut sent = Vec::new();
        for turn in turns {
            turn.wait().await;
            sent.push(Instant::now());
        }
        sent
    }

    #[tokio::test(start_paused = true)]
    async fn sends_are_spaced_by_the_rate_with_no_burst() {
        let pace = rate(5);
        let first = Instant::now();
        let sent = send(&pace, 4).await;
        let spacing = Duration::from_millis(200);
        let want: Vec<Instant> = (0..4).map(|n| first + spacing * n).collect();
        assert_eq!(sent, want);
        // Idle for a while: no credit builds up, the next two are spaced as well.
        tokio::time::advance(Duration::from_secs(3)).await;
        let idle_end = Instant::now();
        assert_eq!(send(&pace, 2).await, [idle_end, idle_end + spacing]);
    }

    #[tokio::test(start_paused = true)]
    async fn claims_reach_no_further_than_the_horizon() {
        let pace = rate(20);
        // 50 ms apart: the turns at 0, 50 and 100 ms are within the horizon.
        let mut room = pace.reserve(10);
        assert_eq!(room.len(), 3);
        assert_eq!(pace.reserve(10).len(), 0, "the turns to come are held");
        let start = Instant::now();
        assert_eq!(pace.next_free(), Some(start + Duration::from_millis(50)));
        let turn = room.take();
        drop(room);
        assert_eq!(pace.next_free(), None, "what was not claimed is given back");
        turn.wait().await;
        let mut next = pace.reserve(10);
        assert_eq!(next.len(), 2, "after the send at 0: turns at 50 and 100 ms");
        let late = next.take();
        drop(next);
        tokio::time::advance(Duration::from_millis(120)).await;
        late.wait().await;
        assert_eq!(Instant::now(), start + Duration::from_millis(120));
        let after_late = pace.reserve(10);
        assert_eq!(
            after_late.len(),
            2,
            "spaced from the late send: 170 and 220 ms"
        );
        let next_free = start + Duration::from_millis(170);
        assert_eq!(
            pace.next_free(),
            Some(next_free),
            "the turn at 270 ms is free"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_send_late_within_the_timers_millisecond_costs_no_rate() {
        let pace = rate(10);
        let spacing = Duration::from_millis(100);
        let start = Instant::now();
        send(&pace, 1).await;
        for (late_by, next_due) in [
            (Duration::from_micros(500), start + spacing * 2),
            (
                Duration::from_micros(1500),
                start + spacing * 3 + Duration::from_micros(1500),
            ),
        ] {
            let mut room = pace.reserve(1);
            let turn = room.take();
            drop(room);
            let due = pace.pace().due().unwrap();
            tokio::time::advance(due + late_by - Instant::now()).await;
            turn.wait().await;
            assert_eq!(pace.pace().due(), Some(next_due), "late by {late_by:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_turn_dropped_unsent_frees_its_place() {
        let pace = rate(1);
        let mut room = pace.reserve(5);
        assert_eq!(room.len(), 1);
        let turn = room.take();
        drop(room);
        assert!(pace.next_free().is_some());
        drop(turn);
        assert_eq!(pace.next_free(), None);
        assert_eq!(pace.reserve(5).len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lowered_rate_spaces_from_the_last_send_before_it() {
        let pace = rate(10);
        send(&pace, 1).await;
        let sent = Instant::now();
        pace.set_rate(NonZeroU32::new(2));
        assert_eq!(send(&pace, 1).await, [sent + Duration::from_millis(500)]);
    }

    #[tokio::test(start_paused = true)]
    async fn no_rate_means_no_cap() {
        let pace = Arc::new(DeliverRate::default());
        let start = Instant::now();
        let sent = send(&pace, 500).await;
        assert!(sent.iter().all(|at| *at == start));
        assert_eq!(pace.next_free(), None);
        assert_eq!(pace.reserve(500).len(), 500);
    }
}
