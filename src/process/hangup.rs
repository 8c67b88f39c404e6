//! SIGHUP: reloading the config while the proxy runs, as `POST /reload` does.

use crate::proxy::Proxy;

/// Reloads the config on every SIGHUP, one at a time.
#[cfg(unix)]
pub(super) fn reload_on_hangup(proxy: &Proxy) -> tokio::task::JoinHandle<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let proxy = proxy.clone();
    let hangups = signal(SignalKind::hangup());
    tokio::spawn(async move {
        let mut hangups = match hangups {
            Ok(hangups) => hangups,
            Err(e) => {
                return tracing::warn!(error = %e, "SIGHUP cannot be caught; reload with POST /reload")
            }
        };
        while hangups.recv().await.is_some() {
            tracing::info!("SIGHUP: reloading the config");
            // The outcome is logged and counted by the reload itself.
            let _ = proxy.clone().reload_off_the_runtime().await;
        }
    })
}

/// Without SIGHUP, `POST /reload` is the way to reload.
#[cfg(not(unix))]
pub(super) fn reload_on_hangup(_: &Proxy) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async {})
}
