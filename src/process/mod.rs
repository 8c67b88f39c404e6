//! The process around a [`Proxy`]: the worker threads that serve clients, the admin
//! listener, the signals (Ctrl-C and SIGTERM drain and stop, SIGHUP reloads), and the order in
//! which a start and a stop happen.

mod hangup;
mod listeners;

use tokio::net::TcpListener;

use crate::config::{Overrides, Settings};
use crate::net::server;
use crate::operator::metric_catalog;
use crate::proxy::{Proxy, StartError};

/// Runs the proxy the settings describe, and its admin listener if set, until Ctrl-C or
/// SIGTERM, then drains. SIGHUP reloads the config (`overrides` are what it was loaded from).
///
/// Clients are served by `workers` threads, each with a single-threaded runtime and a listener
/// socket of its own on the same address (`SO_REUSEPORT`: the kernel spreads new connections
/// over them), so a connection, its requests and their upstream connections are driven by one
/// thread from start to end, and no request's work hops between threads. Measured against one
/// multi-threaded runtime, this cut the CPU time per request by about a sixth. The thread that
/// calls this runs the store's background work, the admin listener and the signals.
pub(crate) fn run(settings: Settings, overrides: Overrides) -> Result<(), StartError> {
    let failed = |source| StartError::Bind {
        addr: settings.listen,
        source,
    };
    let main = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(failed)?;
    main.block_on(serve_on_workers(settings, overrides))
}

async fn serve_on_workers(settings: Settings, overrides: Overrides) -> Result<(), StartError> {
    metric_catalog::describe_metrics();
    let proxy = Proxy::open(&settings).await?.reload_from(overrides);
    // Before the listener is bound: from then on a SIGHUP must reload, never end the process.
    let hangups = hangup::reload_on_hangup(&proxy);
    let relay_only = settings.routes.is_empty();
    // The admin listener first: once the proxy's port accepts a connection, its health and
    // status are there to be asked too.
    let admin = match settings.admin_listen {
        Some(addr) => Some(listeners::spawn_admin(&proxy, addr).await?),
        None => None,
    };
    let listeners = if relay_only {
        Vec::new()
    } else {
        listeners::for_workers(settings.listen, settings.workers)?
    };
    if relay_only {
        tracing::info!(
            outboxes = settings.outboxes.len(),
            "relaying outboxes only: no routes, no listener"
        );
    } else {
        let scheme = if settings.tls.is_some() {
            "https"
        } else {
            "http"
        };
        tracing::info!(listen = %settings.listen, scheme, store = %settings.store, routes = settings.routes.len(), workers = settings.workers, "proxy listening");
    }
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let workers: Vec<_> = listeners
        .into_iter()
        .enumerate()
        .map(|(n, listener)| spawn_worker(n, proxy.clone(), listener, stopped.clone()))
        .collect::<Result<_, _>>()
        .map_err(|source| StartError::Bind {
            addr: settings.listen,
            source,
        })?;
    server::shutdown_signal().await;
    let _ = stop.send(true);
    // The relays drain beside the workers, within the same drain_timeout.
    let drain_timeout = proxy.drain_timeout();
    let workers = async {
        for worker in workers {
            let _ = tokio::task::spawn_blocking(move || worker.join()).await;
        }
    };
    tokio::join!(
        proxy.drain_outboxes(drain_timeout),
        proxy.drain_consumers(),
        workers
    );
    drop(admin);
    hangups.abort();
    tracing::info!("stopped");
    Ok(())
}

/// One worker thread: its runtime serves its listener until told to stop, then drains its
/// connections, and waits for operations still running (on any worker) within what is left of
/// the drain.
fn spawn_worker(
    n: usize,
    proxy: Proxy,
    listener: std::net::TcpListener,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name(format!("worker-{n}"))
        .spawn(move || {
            runtime.block_on(async move {
                let Ok(listener) = TcpListener::from_std(listener) else {
                    return tracing::error!("a worker could not take its listener");
                };
                let shutdown = async move {
                    let _ = stopped.wait_for(|stop| *stop).await;
                };
                proxy.serve(listener, shutdown).await;
            });
        })
}
