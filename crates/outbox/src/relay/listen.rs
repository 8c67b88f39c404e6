//! `LISTEN` on the outbox's `notify_channel`, on a connection of its own: each notification
//! wakes the claim loop. The connection is checked every `LISTEN_CHECK` within the relay's call
//! deadline, since one that died silently would otherwise go unnoticed. While it is down the
//! relay says so (a warning, `idempotency_outbox_listening` at 0), polls, and makes another;
//! once it is back the claim loop is woken, for what was notified meanwhile.

use std::sync::Arc;
use std::time::Duration;

use idempotency_postgres::Listener;
use tokio::sync::watch;

use super::{is_stopped, pause_unless_stopped, Shared, OUTAGE_PAUSE};
use crate::OutboxError;

/// How often the `LISTEN` connection is checked.
const LISTEN_CHECK: Duration = Duration::from_secs(5);

pub(super) async fn run(shared: Arc<Shared>, channel: String, mut stop: watch::Receiver<bool>) {
    let outbox = shared.outbox.clone();
    let mut down_since_logged = false;
    while !is_stopped(&stop) {
        let started = outbox.within(async {
            Listener::start(outbox.database(), outbox.connect_options(), &channel)
                .await
                .map_err(OutboxError::Connect)
        });
        match started.await {
            Ok(mut listener) => {
                if down_since_logged {
                    tracing::info!(outbox = %outbox.name(), "outbox: LISTEN is back; notifications wake the relay again");
                }
                shared.metrics.listening(true);
                shared.wake.notify_one();
                if !listen(&shared, &mut listener, &mut stop).await {
                    return;
                }
                shared.metrics.listening(false);
                tracing::warn!(outbox = %outbox.name(), "outbox: the LISTEN connection was lost; polling every poll_interval until it is back");
                down_since_logged = true;
            }
            Err(e) => {
                shared.metrics.listening(false);
                if !down_since_logged {
                    tracing::warn!(outbox = %outbox.name(), failure = %e.failure(), error = %e, "outbox: LISTEN failed; polling every poll_interval until it works");
                    down_since_logged = true;
                }
            }
        }
        if !pause_unless_stopped(OUTAGE_PAUSE, &mut stop).await {
            return;
        }
    }
}

/// Wakes the claim loop on each notification until the connection fails (or its check does):
/// `false` once the relay stops.
async fn listen(
    shared: &Shared,
    listener: &mut Listener,
    stop: &mut watch::Receiver<bool>,
) -> bool {
    let mut check = tokio::time::interval(LISTEN_CHECK);
    check.tick().await;
    loop {
        tokio::select! {
            notified = listener.notified() => match notified {
                Some(_) => shared.wake.notify_one(),
                None => return true,
            },
            _ = check.tick() => {
                let deadline = shared.outbox.call_deadline();
                if !matches!(tokio::time::timeout(deadline, listener.ping()).await, Ok(Ok(()))) {
                    return true;
                }
            }
            _ = stop.changed() => {
                if is_stopped(stop) {
                    return false;
                }
            }
        }
    }
}
