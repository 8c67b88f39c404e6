//! One route's recent activity, written by every request of the route and read by the page.
//!
//! Recording is on the request path, so it costs a few relaxed atomic operations and one copy
//! into a ring under a lock no other route or worker thread shares; it allocates nothing.
//! Activities are kept by route name for the life of the process, like the metrics registry, so
//! a route rebuilt under the same name (a reload) carries on counting where it was.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use super::decisions::{Decision, DecisionRing};
use super::latency::LatencySamples;
use super::rates::{SecondCounts, SHOWN_SECONDS};
use crate::thread_slot::PerThread;
use idempotency_core::backend::{now_millis, RouteName};
use idempotency_core::observe::{Outcome, OUTCOMES};

/// What one route did lately; see the module docs for what recording costs.
///
/// Kept per worker thread and summed when the page reads it: every request of the route writes
/// here, and a count both threads write moves its cache line between cores on each request.
#[derive(Debug)]
pub struct RouteActivity {
    threads: PerThread<ThreadActivity>,
}

/// What the requests one thread served did.
#[derive(Debug, Default)]
struct ThreadActivity {
    totals: [AtomicU64; OUTCOMES.len()],
    per_second: SecondCounts,
    in_flight: AtomicI64,
    decisions: DecisionRing,
    store_latency: LatencySamples,
}

impl Default for RouteActivity {
    fn default() -> Self {
        Self {
            threads: PerThread::new(),
        }
    }
}

impl RouteActivity {
    /// The activity of the route named `route`, shared by every layer built for that name.
    pub fn of(route: &RouteName) -> Arc<Self> {
        static ROUTES: OnceLock<Mutex<HashMap<RouteName, Arc<RouteActivity>>>> = OnceLock::new();
        let routes = ROUTES.get_or_init(Mutex::default);
        let mut routes = routes.lock().unwrap_or_else(PoisonError::into_inner);
        routes.entry(route.clone()).or_default().clone()
    }

    /// Counts one finished request and keeps it among the last decisions.
    /// `grpc_status`: on a gRPC route, the call's status where it is known.
    pub fn request_finished(
        &self,
        outcome: Outcome,
        status: u16,
        grpc_status: Option<u32>,
        key_id: Option<&str>,
    ) {
        let at_ms = now_millis();
        let mine = self.threads.mine();
        mine.totals[outcome as usize].fetch_add(1, Relaxed);
        mine.per_second.add(at_ms / 1000, outcome);
        mine.decisions
            .push(Decision::new(at_ms, outcome, status, key_id).with_grpc_status(grpc_status));
    }

    /// Keeps the duration of one store operation made for this route.
    pub(crate) fn store_operation(&self, took: Duration) {
        let mine = self.threads.mine();
        mine.store_latency.record(now_millis() / 1000, took);
    }

    /// A first request started (`1`) or finished (`-1`) running upstream.
    pub(crate) fn in_flight_moved(&self, by: i64) {
        self.threads.mine().in_flight.fetch_add(by, Relaxed);
    }

    pub(crate) fn total(&self, outcome: Outcome) -> u64 {
        let each = self.threads.all();
        each.map(|t| t.totals[outcome as usize].load(Relaxed)).sum()
    }

    pub(crate) fn in_flight(&self) -> i64 {
        self.threads.all().map(|t| t.in_flight.load(Relaxed)).sum()
    }

    /// The counts of `outcome` for the whole seconds before `now_second`, oldest first (see
    /// [`SecondCounts::series`]).
    pub(crate) fn series(&self, now_second: u64, outcome: Outcome) -> [u64; SHOWN_SECONDS] {
        let mut sum = [0; SHOWN_SECONDS];
        for thread in self.threads.all() {
            let series = thread.per_second.series(now_second, outcome);
            sum.iter_mut().zip(series).for_each(|(sum, n)| *sum += n);
        }
        sum
    }

    /// The kept decisions, in no particular order: the last ones of each thread.
    pub(crate) fn copy_decisions(&self, out: &mut Vec<Decision>) {
        for thread in self.threads.all() {
            thread.decisions.copy_into(out);
        }
    }

    /// The store operations' durations within the page's window, in microseconds (see
    /// [`LatencySamples::recent_micros`]).
    pub(crate) fn recent_store_micros(&self, now_second: u64, out: &mut Vec<u32>) {
        for thread in self.threads.all() {
            thread.store_latency.recent_micros(now_second, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::thread_slot::SLOTS;

    #[test]
    fn one_route_name_is_one_activity() {
        let name = RouteName::new("activity-shared").unwrap();
        let first = RouteActivity::of(&name);
        let again = RouteActivity::of(&name);
        assert!(Arc::ptr_eq(&first, &again));
        let other = RouteActivity::of(&RouteName::new("activity-other").unwrap());
        assert!(!Arc::ptr_eq(&first, &other));
    }

    #[test]
    fn a_finished_request_is_counted_and_kept() {
        let activity = RouteActivity::default();
        activity.request_finished(Outcome::Mismatch, 422, None, Some("0a1b2c3d4e5f"));
        assert_eq!(activity.total(Outcome::Mismatch), 1);
        assert_eq!(activity.total(Outcome::Forwarded), 0);
        let mut kept = Vec::new();
        activity.copy_decisions(&mut kept);
        assert_eq!(kept.len(), 1);
        assert_eq!((kept[0].outcome, kept[0].status), (Outcome::Mismatch, 422));
        assert_eq!(kept[0].key_id(), Some("0a1b2c3d4e5f"));
        let now_second = now_millis() / 1000 + 1;
        let series = activity.series(now_second, Outcome::Mismatch);
        assert_eq!(series.iter().sum::<u64>(), 1);
    }

    #[test]
    fn requests_finished_on_many_threads_are_all_counted_and_kept() {
        let activity = RouteActivity::default();
        std::thread::scope(|scope| {
            for _ in 0..2 * SLOTS {
                scope.spawn(|| {
                    activity.in_flight_moved(2);
                    activity.request_finished(Outcome::Forwarded, 201, None, None);
                    activity.store_operation(Duration::from_millis(3));
                    activity.in_flight_moved(-1);
                });
            }
        });
        let threads = 2 * SLOTS;
        assert_eq!(activity.total(Outcome::Forwarded), threads as u64);
        assert_eq!(activity.in_flight(), threads as i64);
        let mut kept = Vec::new();
        activity.copy_decisions(&mut kept);
        assert_eq!(kept.len(), threads);
        let now_second = now_millis() / 1000 + 1;
        let series = activity.series(now_second, Outcome::Forwarded);
        assert_eq!(series.iter().sum::<u64>(), threads as u64);
        let mut micros = Vec::new();
        activity.recent_store_micros(now_second, &mut micros);
        assert_eq!(micros, vec![3000; threads]);
    }
}
