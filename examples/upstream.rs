//! A service to put the proxy in front of, for the README's tour: `cargo run --example upstream`
//! listens on 127.0.0.1:9000 (or the address given as its argument) and answers every request
//! `201` with a JSON body that numbers the runs it has made, so a replay shows which run it
//! repeats. A request with `X-Delay-Ms: N` is answered N milliseconds later, which keeps a first
//! request in flight while its duplicate arrives.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::IntoResponse;
use tokio::net::TcpListener;

/// Where it listens unless told otherwise: where the README's proxy sends what it takes.
pub(crate) const DEFAULT_ADDR: &str = "127.0.0.1:9000";

#[tokio::main]
async fn main() {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| DEFAULT_ADDR.to_owned());
    let listener = TcpListener::bind(&addr)
        .await
        .unwrap_or_else(|e| panic!("cannot listen on {addr}: {e}"));
    println!("upstream: answering on http://{addr}");
    tokio::select! {
        () = serve(listener) => {}
        () = stopped() => {}
    }
}

/// Ctrl-C or SIGTERM. In a container the demo is process 1, which gets no signal it does not
/// handle: without this, `docker stop` would wait out its grace period and then kill it.
async fn stopped() {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM can be handled");
    tokio::select! {
        _ = terminate.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// Answers on `listener` until the process ends.
pub(crate) async fn serve(listener: TcpListener) {
    let runs = Arc::new(AtomicU64::new(0));
    let app = axum::Router::new().fallback(answer).with_state(runs);
    axum::serve(listener, app)
        .await
        .expect("the upstream serves");
}

async fn answer(
    State(runs): State<Arc<AtomicU64>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> impl IntoResponse {
    let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
    let delay = headers
        .get("x-delay-ms")
        .and_then(|value| value.to_str().ok()?.parse().ok())
        .unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(delay)).await;
    let body = format!(
        "{{\"run\":{run},\"method\":\"{method}\",\"path\":\"{}\"}}",
        uri.path()
    );
    (
        StatusCode::CREATED,
        [("content-type", "application/json")],
        body,
    )
}
