//! The idempotency layer in front of an axum handler: the handler runs once per key, and every
//! retry gets its answer replayed.
//!
//! `cargo run -p idempotency-core --example axum`, then send the same POST twice:
//! `curl -i -X POST localhost:3000/v1/charges -H 'Idempotency-Key: k1' -d '{"amount":100}'`

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::{routing::post, Router};
use idempotency_core::MemoryStore;
use idempotency_core::{IdempotencyLayer, Policy};

/// The service: charges are numbered, so a replay shows the number of the first run.
pub fn app() -> Router {
    let charges = Arc::new(AtomicU64::new(0));
    let charge =
        move || async move { format!("charge {}", charges.fetch_add(1, Ordering::SeqCst) + 1) };
    let policy = Policy::builder("charges")
        .with_require_key(true)
        .build()
        .expect("a valid policy");
    Router::new()
        .route("/v1/charges", post(charge))
        .layer(IdempotencyLayer::new(Arc::new(MemoryStore::new()), policy))
}

#[tokio::main]
async fn main() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000")
        .await
        .unwrap();
    axum::serve(listener, app()).await.unwrap();
}
