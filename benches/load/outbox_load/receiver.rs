//! The local receiver: answers every delivery `200` at once and notes when each event's first
//! attempt arrived, by its `Idempotency-Key`, and how many arrived more than once (the raw
//! consumer notes its messages here too).

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use tokio::time::Instant;

#[derive(Default)]
pub struct Arrivals {
    pub first: HashMap<String, Instant>,
    pub repeated: usize,
}

#[derive(Clone, Default)]
pub struct Receiver {
    arrivals: Arc<Mutex<Arrivals>>,
}

impl Receiver {
    /// Listens on a free loopback port; returns it.
    pub async fn start(&self) -> std::io::Result<u16> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let app = axum::Router::new()
            .fallback(receive)
            .with_state(self.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(port)
    }

    /// Every arrival so far, taken out.
    pub fn take(&self) -> Arrivals {
        std::mem::take(&mut *self.arrivals.lock().unwrap())
    }

    /// How many distinct keys have arrived so far.
    pub fn distinct(&self) -> usize {
        self.arrivals.lock().unwrap().first.len()
    }

    /// Notes an arrival of `key` now (the raw consumer's effect, without HTTP).
    pub fn note(&self, key: String) {
        let now = Instant::now();
        let mut arrivals = self.arrivals.lock().unwrap();
        match arrivals.first.entry(key) {
            Entry::Occupied(_) => arrivals.repeated += 1,
            Entry::Vacant(vacant) => {
                vacant.insert(now);
            }
        }
    }
}

async fn receive(State(receiver): State<Receiver>, headers: HeaderMap) -> StatusCode {
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    receiver.note(key);
    StatusCode::OK
}
