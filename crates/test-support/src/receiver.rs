//! A receiver of deliveries (an outbox relay's, or an inbox route's), over a real socket: it
//! records every request by its `Idempotency-Key`, with when it arrived and its
//! `Delivery-Attempt`, counts attempts of one key that overlap, and answers what the test
//! scripts: per key, a list of replies played in order (a status, headers such as
//! `Retry-After`, or a hold until the test lets it go), then the default reply.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, Response, StatusCode, Uri};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::poll;

/// One request as the receiver saw it.
#[derive(Debug, Clone)]
pub struct Arrival {
    /// When it arrived.
    pub at: Instant,
    /// Its method.
    pub method: Method,
    /// Its target.
    pub uri: Uri,
    /// Its headers.
    pub headers: HeaderMap,
    /// Its body.
    pub body: Bytes,
    /// Its `Idempotency-Key` (empty without one).
    pub key: String,
    /// Its `Delivery-Attempt` (0 without one).
    pub attempt: u32,
}

/// What the receiver answers one request.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The status.
    pub status: StatusCode,
    /// Headers of the answer.
    pub headers: Vec<(String, String)>,
    /// Wait for [`Receiver::release`] before answering.
    pub hold: bool,
}

impl Reply {
    /// `status`, at once.
    pub fn status(status: u16) -> Self {
        Self {
            status: StatusCode::from_u16(status).expect("a valid status"),
            headers: Vec::new(),
            hold: false,
        }
    }

    /// With a header.
    pub fn with_header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Held until [`Receiver::release`].
    pub fn held(mut self) -> Self {
        self.hold = true;
        self
    }
}

#[derive(Default)]
struct Record {
    arrivals: Vec<Arrival>,
    scripts: HashMap<String, VecDeque<Reply>>,
    in_flight_by_key: HashMap<String, usize>,
    overlaps: usize,
    held: usize,
}

struct Shared {
    record: Mutex<Record>,
    default: Mutex<Reply>,
    /// Bumped by each release; a held request waits for the next bump.
    released: watch::Sender<u64>,
}

/// A receiver on a loopback port of its own.
pub struct Receiver {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl Receiver {
    /// Listens on a free port, answering `200` to everything.
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            record: Mutex::default(),
            default: Mutex::new(Reply::status(200)),
            released: watch::Sender::new(0),
        });
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(shared.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { addr, shared }
    }

    fn record(&self) -> MutexGuard<'_, Record> {
        self.shared
            .record
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The URL of `path` on it.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// What every request without a script left is answered from now on.
    pub fn answer(&self, reply: Reply) {
        *self.shared.default.lock().unwrap() = reply;
    }

    /// The replies for the next requests with `key`, in order.
    pub fn script(&self, key: &str, replies: impl IntoIterator<Item = Reply>) {
        let mut record = self.record();
        record
            .scripts
            .entry(key.to_owned())
            .or_default()
            .extend(replies);
    }

    /// Lets every held request be answered.
    pub fn release(&self) {
        self.shared
            .released
            .send_modify(|generation| *generation += 1);
    }

    /// How many requests are held now.
    pub fn held(&self) -> usize {
        self.record().held
    }

    /// Every request with `key`, in order of arrival.
    pub fn arrivals(&self, key: &str) -> Vec<Arrival> {
        let record = self.record();
        record
            .arrivals
            .iter()
            .filter(|a| a.key == key)
            .cloned()
            .collect()
    }

    /// Every request, in order of arrival.
    pub fn all(&self) -> Vec<Arrival> {
        self.record().arrivals.clone()
    }

    /// The keys of every request, in order of arrival.
    pub fn keys(&self) -> Vec<String> {
        self.record()
            .arrivals
            .iter()
            .map(|a| a.key.clone())
            .collect()
    }

    /// How many requests arrived while another with the same key was being answered.
    pub fn overlaps(&self) -> usize {
        self.record().overlaps
    }

    /// Waits (at most `limit`) until `done` holds of what arrived.
    pub async fn until(&self, limit: Duration, what: &str, done: impl Fn(&Self) -> bool) {
        poll::until(limit, what, async || done(self)).await;
    }
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response<Body> {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let key = text("idempotency-key").unwrap_or_default();
    let attempt = text("delivery-attempt")
        .and_then(|a| a.parse().ok())
        .unwrap_or(0);
    let mut released = shared.released.subscribe();
    let reply = {
        let mut record = shared.record.lock().unwrap_or_else(PoisonError::into_inner);
        let same_key = record.in_flight_by_key.entry(key.clone()).or_default();
        *same_key += 1;
        if *same_key > 1 {
            record.overlaps += 1;
        }
        let scripted = record.scripts.get_mut(&key).and_then(VecDeque::pop_front);
        let reply = scripted.unwrap_or_else(|| shared.default.lock().unwrap().clone());
        record.held += usize::from(reply.hold);
        let at = Instant::now();
        record.arrivals.push(Arrival {
            at,
            method,
            uri,
            headers: headers.clone(),
            body,
            key: key.clone(),
            attempt,
        });
        reply
    };
    if reply.hold {
        let _ = released.changed().await;
    }
    let mut record = shared.record.lock().unwrap_or_else(PoisonError::into_inner);
    record.held -= usize::from(reply.hold);
    if let Some(same_key) = record.in_flight_by_key.get_mut(&key) {
        *same_key -= 1;
    }
    let mut response = Response::builder().status(reply.status);
    for (name, value) in &reply.headers {
        let name = HeaderName::from_bytes(name.as_bytes()).unwrap();
        response = response.header(name, HeaderValue::from_str(value).unwrap());
    }
    response.body(Body::from("ok")).unwrap()
}
