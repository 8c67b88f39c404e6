//! The receiver behind the proxy: a naive service that acts on every request it answers `2xx`
//! (it relies on the proxy in front for "once"), and misbehaves while the nemesis says so.
//!
//! It records every request it gets: the `Idempotency-Key`, the event the body names (the
//! application writes the event's id into its payload, so a relay that changed the key would
//! still be caught), the `Delivery-Attempt`, the answer, and whether it acted. An answer that
//! is not `2xx` acts on nothing, as a receiver whose transaction rolled back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde::{Deserialize, Serialize};

use crate::history::{self, Journal};
use crate::rng::Rng;

/// One request as the receiver saw it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Arrival {
    /// Microseconds since the campaign began, when it answered.
    pub t: u64,
    /// Its `Idempotency-Key` (empty without one).
    pub key: String,
    /// The event its body names (empty when the body names none).
    pub event: String,
    /// Its `Delivery-Attempt`.
    pub attempt: u32,
    pub status: u16,
    /// Acted on: the receiver's effect happened. Numbered in the order effects happened.
    pub effect: Option<u64>,
}

/// What the receiver does, for a share of the requests, while a fault lasts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Misbehaviour {
    None,
    /// `500` or `503`, nothing done.
    Fail,
    /// `410 Gone`, nothing done: the relay gives the row up.
    Gone,
    /// Acts and answers `200` after a delay up to this, some past the relay's `deliver_timeout`.
    Slow(Duration),
}

pub struct Receiver {
    now: Mutex<(Misbehaviour, f64)>,
    rng: Mutex<Rng>,
    effects: AtomicU64,
    journal: Journal<Arrival>,
}

impl Receiver {
    pub fn new(seed: u64, journal: Journal<Arrival>) -> Arc<Self> {
        Arc::new(Self {
            now: Mutex::new((Misbehaviour::None, 0.0)),
            rng: Mutex::new(Rng::stream(seed, 0x0EC3_1FE5)),
            effects: AtomicU64::new(0),
            journal,
        })
    }

    /// From now on, `share` of the requests get `misbehaviour`.
    pub fn set(&self, misbehaviour: Misbehaviour, share: f64) {
        *self.now.lock().unwrap() = (misbehaviour, share);
    }

    pub fn flush(&self) {
        self.journal.flush();
    }

    /// How many effects it has had so far (a second effect of one event counts again).
    pub fn effects(&self) -> u64 {
        self.effects.load(Ordering::SeqCst)
    }

    /// Listens on a free loopback port; returns it.
    pub async fn start(self: &Arc<Self>) -> std::io::Result<u16> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let app = axum::Router::new()
            .fallback(receive)
            .with_state(self.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(port)
    }

    /// What to do with the next request: drawn under the lock, acted on outside it.
    fn draw(&self) -> (Misbehaviour, u16, Duration) {
        let (misbehaviour, share) = *self.now.lock().unwrap();
        let mut rng = self.rng.lock().unwrap();
        if misbehaviour == Misbehaviour::None || !rng.chance(share) {
            return (Misbehaviour::None, 200, Duration::ZERO);
        }
        match misbehaviour {
            Misbehaviour::Fail => (misbehaviour, *rng.pick(&[500, 503]), Duration::ZERO),
            Misbehaviour::Gone => (misbehaviour, 410, Duration::ZERO),
            Misbehaviour::Slow(longest) => {
                (misbehaviour, 200, rng.between(Duration::ZERO, longest))
            }
            Misbehaviour::None => unreachable!("returned above"),
        }
    }
}

async fn receive(
    State(receiver): State<Arc<Receiver>>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let (_, status, delay) = receiver.draw();
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let effect = (status == 200).then(|| receiver.effects.fetch_add(1, Ordering::SeqCst) + 1);
    receiver.journal.write(&Arrival {
        t: history::now(),
        key: header("idempotency-key"),
        event: event_of(&body),
        attempt: header("delivery-attempt").parse().unwrap_or(0),
        status,
        effect,
    });
    StatusCode::from_u16(status).expect("a valid status")
}

/// The `event` field of the JSON body the application wrote.
fn event_of(body: &[u8]) -> String {
    let value: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    value["event"].as_str().unwrap_or_default().to_owned()
}
