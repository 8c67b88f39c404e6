//! An upstream for inbox deliveries: it records every delivery by its `Idempotency-Key`, with
//! when it arrived and its `Delivery-Attempt`, measures how many overlap (in all, and for one
//! key: two attempts of one delivery at once), and answers a status
//! a test can change while it runs, or holds its answers until the test lets them go. It may
//! start on a port chosen before it listens, so a proxy can be pointed at an upstream that is
//! down.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, Response, StatusCode, Uri};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::poll;

/// One delivery as the upstream saw it.
#[derive(Debug, Clone)]
pub(crate) struct Arrival {
    pub(crate) at: Instant,
    pub(crate) method: Method,
    pub(crate) uri: Uri,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
    pub(crate) attempt: u32,
}

#[derive(Default)]
struct Record {
    by_key: HashMap<String, Vec<Arrival>>,
    in_flight: usize,
    most_in_flight: usize,
    /// Attempts in progress, by key.
    in_flight_by_key: HashMap<String, usize>,
    /// Attempts that arrived while another of the same key was in progress.
    overlaps: usize,
}

#[derive(Clone)]
struct Shared {
    record: Arc<Mutex<Record>>,
    status: Arc<Mutex<StatusCode>>,
    delay: Arc<Mutex<Duration>>,
    /// While set, each answer waits for a permit of its own.
    held: Arc<Mutex<Option<Arc<Semaphore>>>>,
}

/// How far a delivery's arrival may stray from the moment the proxy sent it, either way, on a
/// loaded machine: the loopback, and the scheduler running the proxy and this upstream, which
/// on two busy cores can hold a task back for tens of milliseconds. At a rate of 5 (200 ms
/// apart) a pace twice too fast still fails.
pub(crate) const ARRIVAL_TOLERANCE: Duration = Duration::from_millis(100);

pub(crate) struct InboxUpstream {
    pub(crate) addr: SocketAddr,
    shared: Shared,
}

/// A free loopback port, for an upstream that will start there later.
pub(crate) fn free_addr() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

impl InboxUpstream {
    /// Listens on `addr` (from [`free_addr`]), answering `200` at once.
    pub(crate) async fn start_at(addr: SocketAddr) -> Self {
        let shared = Shared {
            record: Arc::default(),
            status: Arc::new(Mutex::new(StatusCode::OK)),
            delay: Arc::default(),
            held: Arc::default(),
        };
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { addr, shared }
    }

    pub(crate) async fn start() -> Self {
        Self::start_at(free_addr()).await
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// What it answers from now on.
    pub(crate) fn answer(&self, status: u16) {
        *self.shared.status.lock().unwrap() = StatusCode::from_u16(status).unwrap();
    }

    /// How long it takes to answer from now on.
    pub(crate) fn take(&self, delay: Duration) {
        *self.shared.delay.lock().unwrap() = delay;
    }

    /// From now on each answer waits until [`release`](Self::release) lets it go.
    pub(crate) fn hold(&self) {
        *self.shared.held.lock().unwrap() = Some(Arc::new(Semaphore::new(0)));
    }

    /// Lets `n` held answers go (those waiting first, then those to come).
    pub(crate) fn release(&self, n: usize) {
        let held = self.shared.held.lock().unwrap().clone();
        held.expect("hold() first").add_permits(n);
    }

    /// Every delivery of `key`, in order of arrival.
    pub(crate) fn arrivals(&self, key: &str) -> Vec<Arrival> {
        let record = self.shared.record.lock().unwrap();
        record.by_key.get(key).cloned().unwrap_or_default()
    }

    /// Every delivery, in order of arrival.
    pub(crate) fn all(&self) -> Vec<Arrival> {
        let record = self.shared.record.lock().unwrap();
        let mut all: Vec<Arrival> = record.by_key.values().flatten().cloned().collect();
        all.sort_by_key(|a| a.at);
        all
    }

    /// How many distinct keys have arrived.
    pub(crate) fn keys(&self) -> usize {
        self.shared.record.lock().unwrap().by_key.len()
    }

    /// The most deliveries it was answering at once.
    pub(crate) fn most_in_flight(&self) -> usize {
        self.shared.record.lock().unwrap().most_in_flight
    }

    /// How many attempts arrived while another attempt of the same key was in progress.
    pub(crate) fn overlaps(&self) -> usize {
        self.shared.record.lock().unwrap().overlaps
    }

    /// Asserts what `deliver_rate = rate` promises an upstream that counts arrivals: they
    /// come at least `1/rate` apart, so never more than `rate` in any one second, give or take
    /// [`ARRIVAL_TOLERANCE`].
    pub(crate) fn assert_paced(&self, rate: u32) {
        let arrivals: Vec<Instant> = self.all().iter().map(|a| a.at).collect();
        let spacing = Duration::from_secs(1) / rate;
        for (n, pair) in arrivals.windows(2).enumerate() {
            let gap = pair[1] - pair[0];
            assert!(
                gap + ARRIVAL_TOLERANCE >= spacing,
                "arrivals {n} and {} came {gap:?} apart, under {spacing:?}: {:?}",
                n + 1,
                gaps(&arrivals)
            );
        }
        let rate = rate as usize;
        for (n, over) in arrivals.windows(rate + 1).enumerate() {
            let span = over[rate] - over[0];
            assert!(
                span + ARRIVAL_TOLERANCE >= Duration::from_secs(1),
                "arrivals {n}..={} came within {span:?}: {:?}",
                n + rate,
                gaps(&arrivals)
            );
        }
    }

    /// Waits (at most `limit`) until `done` holds of what arrived.
    pub(crate) async fn until(&self, limit: Duration, what: &str, done: impl Fn(&Self) -> bool) {
        poll::until(limit, what, async || done(self)).await;
    }
}

/// The time from each arrival to the next, to the millisecond, for a failure's message.
fn gaps(arrivals: &[Instant]) -> Vec<u128> {
    let gap = |pair: &[Instant]| (pair[1] - pair[0]).as_millis();
    arrivals.windows(2).map(gap).collect()
}

async fn handle(
    State(shared): State<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response<Body> {
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let attempt = headers
        .get("delivery-attempt")
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .unwrap_or(0);
    let arrival = Arrival {
        at: Instant::now(),
        method,
        uri,
        headers,
        body,
        attempt,
    };
    {
        let mut record = shared.record.lock().unwrap();
        let same_key = record.in_flight_by_key.entry(key.clone()).or_default();
        *same_key += 1;
        if *same_key > 1 {
            record.overlaps += 1;
        }
        record.by_key.entry(key.clone()).or_default().push(arrival);
        record.in_flight += 1;
        record.most_in_flight = record.most_in_flight.max(record.in_flight);
    }
    let held = shared.held.lock().unwrap().clone();
    if let Some(held) = held {
        held.acquire().await.unwrap().forget();
    }
    let delay = *shared.delay.lock().unwrap();
    tokio::time::sleep(delay).await;
    let status = *shared.status.lock().unwrap();
    {
        let mut record = shared.record.lock().unwrap();
        record.in_flight -= 1;
        if let Some(same_key) = record.in_flight_by_key.get_mut(&key) {
            *same_key -= 1;
        }
    }
    Response::builder()
        .status(status)
        .body(Body::from("ok"))
        .unwrap()
}
