//! One route's recent activity, written by every request of the route and read by the page.
//!
//! Recording is on the request path, so it costs a few relaxed atomic operations and one copy
//! into a ring under a lock no other route shares; it allocates nothing. Activities are kept
//! by route name for the life of the process, like the metrics registry, so a route rebuilt
//! under the same name (a reload) carries on counting where it was.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use super::decisions::{Decision, DecisionRing};
use super::latency::LatencySamples;
use super::rates::SecondCounts;
use crate::model::{now_millis, RouteName};
use crate::outcome::{RequestOutcome, OUTCOMES};

/// What one route did lately; see the module docs for what recording costs.
#[derive(Debug, Default)]
pub struct RouteActivity {
    totals: [AtomicU64; OUTCOMES.len()],
    per_second: SecondCounts,
    in_flight: AtomicI64,
    decisions: DecisionRing,
    store_latency: LatencySamples,
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
    pub fn request_finished(&self, outcome: RequestOutcome, status: u16, key_id: Option<&str>) {
        let at_ms = now_millis();
        self.totals[outcome as usize].fetch_add(1, Relaxed);
        self.per_second.add(at_ms / 1000, outcome);
        self.decisions
            .push(Decision::new(at_ms, outcome, status, key_id));
    }

    /// Keeps the duration of one store operation made for this route.
    pub(crate) fn store_operation(&self, took: Duration) {
        self.store_latency.record(now_millis() / 1000, took);
    }

    /// A first request started (`1`) or finished (`-1`) running upstream.
    pub(crate) fn in_flight_moved(&self, by: i64) {
        self.in_flight.fetch_add(by, Relaxed);
    }

    pub(crate) fn total(&self, outcome: RequestOutcome) -> u64 {
        self.totals[outcome as usize].load(Relaxed)
    }

    pub(crate) fn in_flight(&self) -> i64 {
        self.in_flight.load(Relaxed)
    }

    pub(crate) fn per_second(&self) -> &SecondCounts {
        &self.per_second
    }

    pub(crate) fn decisions(&self) -> &DecisionRing {
        &self.decisions
    }

    pub(crate) fn store_latency(&self) -> &LatencySamples {
        &self.store_latency
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        activity.request_finished(RequestOutcome::Mismatch, 422, Some("0a1b2c3d4e5f"));
        assert_eq!(activity.total(RequestOutcome::Mismatch), 1);
        assert_eq!(activity.total(RequestOutcome::Forwarded), 0);
        let mut kept = Vec::new();
        activity.decisions().copy_into(&mut kept);
        assert_eq!(kept.len(), 1);
        assert_eq!(
            (kept[0].outcome, kept[0].status),
            (RequestOutcome::Mismatch, 422)
        );
        assert_eq!(kept[0].key_id(), Some("0a1b2c3d4e5f"));
        let now_second = now_millis() / 1000 + 1;
        let series = activity
            .per_second()
            .series(now_second, RequestOutcome::Mismatch);
        assert_eq!(series.iter().sum::<u64>(), 1);
    }
}
