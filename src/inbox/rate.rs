//! `deliver_rate`: at most N attempts start in any one-second window.
//!
//! The window slides: the start times of the last N attempts are kept, and another may start
//! only once the oldest of them is a second old. Fixed windows would let 2N start within one
//! second across a window's edge.

use std::collections::VecDeque;
use std::num::NonZeroU32;
use std::time::Duration;

use tokio::time::Instant;

const WINDOW: Duration = Duration::from_secs(1);

/// The start times of recent attempts of one route.
#[derive(Debug)]
pub(crate) struct RateWindow {
    rate: Option<NonZeroU32>,
    starts: VecDeque<Instant>,
}

impl RateWindow {
    pub(crate) fn new(rate: Option<NonZeroU32>) -> Self {
        Self {
            rate,
            starts: VecDeque::new(),
        }
    }

    /// How many attempts may start at `now`, at most `want`.
    pub(crate) fn allowed(&mut self, now: Instant, want: usize) -> usize {
        let Some(rate) = self.rate else {
            return want;
        };
        while self
            .starts
            .front()
            .is_some_and(|at| now.duration_since(*at) >= WINDOW)
        {
            self.starts.pop_front();
        }
        want.min((rate.get() as usize).saturating_sub(self.starts.len()))
    }

    /// Notes that `n` attempts started at `now`.
    pub(crate) fn started(&mut self, now: Instant, n: usize) {
        if self.rate.is_some() {
            self.starts.extend(std::iter::repeat_n(now, n));
        }
    }

    /// When another attempt may start, if none may now.
    pub(crate) fn next_free(&self) -> Option<Instant> {
        let rate = self.rate?.get() as usize;
        (self.starts.len() >= rate).then(|| self.starts.front().map(|at| *at + WINDOW))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn no_more_than_the_rate_start_in_any_second() {
        let mut window = RateWindow::new(NonZeroU32::new(3));
        let start = Instant::now();
        assert_eq!(window.allowed(start, 10), 3);
        window.started(start, 2);
        tokio::time::advance(Duration::from_millis(600)).await;
        let later = Instant::now();
        assert_eq!(window.allowed(later, 10), 1);
        window.started(later, 1);
        assert_eq!(window.allowed(later, 10), 0);
        assert_eq!(window.next_free(), Some(start + WINDOW));
        tokio::time::advance(Duration::from_millis(400)).await;
        assert_eq!(
            window.allowed(Instant::now(), 10),
            2,
            "the first two are a second old"
        );
        tokio::time::advance(Duration::from_millis(600)).await;
        assert_eq!(window.allowed(Instant::now(), 10), 3);
    }

    #[test]
    fn no_rate_means_no_cap() {
        let mut window = RateWindow::new(None);
        assert_eq!(window.allowed(Instant::now(), 500), 500);
        window.started(Instant::now(), 500);
        assert_eq!(window.next_free(), None);
    }
}
