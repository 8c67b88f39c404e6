//! `LISTEN` on the outbox's `notify_channel`, on a connection of its own: each notification
//! wakes the claim loop. When the connection is lost it is made again (polling covers the
//! gap), and the claim loop is woken once it is back, for what was notified meanwhile.

use std::sync::Arc;

use idempotency_postgres::Listener;
use tokio::sync::watch;

use super::{is_stopped, pause_unless_stopped, Shared, OUTAGE_PAUSE};

pub(super) async fn run(shared: Arc<Shared>, channel: String, mut stop: watch::Receiver<bool>) {
    let outbox = shared.outbox.clone();
    while !is_stopped(&stop) {
        match Listener::start(outbox.database(), outbox.connect_options(), &channel).await {
            Ok(mut listener) => {
                shared.wake.notify_one();
                loop {
                    tokio::select! {
                        notified = listener.notified() => match notified {
                            Some(_) => shared.wake.notify_one(),
                            None => break,
                        },
                        _ = stop.changed() => {
                            if is_stopped(&stop) {
                                return;
                            }
                        }
                    }
                }
                tracing::debug!(outbox = %outbox.name(), "outbox: the LISTEN connection closed; making another");
            }
            Err(e) => {
                tracing::debug!(outbox = %outbox.name(), error = %e, "outbox: LISTEN failed; polling meanwhile");
            }
        }
        if !pause_unless_stopped(OUTAGE_PAUSE, &mut stop).await {
            return;
        }
    }
}
