//! The proxy, started in-process on a loopback port with a given config and store.

use std::net::SocketAddr;
use std::sync::Arc;

use idempotency_proxy::config::{self, Overrides, Settings};
use idempotency_proxy::store::{MemoryStore, Store};
use idempotency_proxy::Proxy;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use super::client::TestClient;

pub(crate) struct TestProxy {
    pub(crate) addr: SocketAddr,
    /// The admin listener, served like `--admin-listen` would.
    pub(crate) admin: TestClient,
    pub(crate) admin_addr: SocketAddr,
    pub(crate) client: TestClient,
    stop: Option<oneshot::Sender<()>>,
    stopped: Option<tokio::task::JoinHandle<()>>,
}

/// Parses a config as the binary would, with no flags.
pub(crate) fn settings(toml: &str) -> Settings {
    config::load_str("test.toml", toml, &Overrides::default())
        .unwrap_or_else(|e| panic!("test config refused: {e}"))
}

impl TestProxy {
    /// A proxy in front of `upstream` with the memory store and the given `[defaults]` lines.
    pub(crate) async fn in_front_of(upstream: &str, defaults: &str) -> Self {
        let toml = format!("upstream = \"{upstream}\"\n[defaults]\n{defaults}\n");
        Self::start(&toml, Arc::new(MemoryStore::new())).await
    }

    pub(crate) async fn start(toml: &str, store: Arc<dyn Store>) -> Self {
        let settings = settings(toml);
        let proxy = Proxy::with_store(&settings, store.clone());
        Self::serve(proxy).await
    }

    /// Like [`start`](Self::start), with the outbox relays of the config started too.
    pub(crate) async fn with_outboxes(toml: &str, store: Arc<dyn Store>) -> Self {
        let settings = settings(toml);
        let proxy = Proxy::with_store(&settings, store.clone());
        proxy
            .start_outboxes(&settings)
            .await
            .unwrap_or_else(|e| panic!("the outboxes did not start: {e}"));
        Self::serve(proxy).await
    }

    /// A proxy whose config is the file at `path`, as `--config` gives it, so that it reloads
    /// from there; with the proxy itself, to reload it directly.
    pub(crate) async fn from_file(path: &std::path::Path, store: Arc<dyn Store>) -> (Self, Proxy) {
        let overrides = Overrides {
            config: Some(path.to_owned()),
            ..Overrides::default()
        };
        let settings = config::load(&overrides).unwrap_or_else(|e| panic!("refused: {e}"));
        let proxy = Proxy::with_store(&settings, store.clone()).reload_from(overrides);
        (Self::serve(proxy.clone()).await, proxy)
    }

    async fn serve(proxy: Proxy) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let shutdown = async move {
            let _ = stopped.await;
        };
        let admin_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let admin_addr = admin_listener.local_addr().unwrap();
        let admin = TestClient::new(admin_addr);
        let admin_router = proxy.admin();
        tokio::spawn(async move { axum::serve(admin_listener, admin_router).await });
        let stopped = tokio::spawn(async move { proxy.serve(listener, shutdown).await });
        Self {
            addr,
            admin,
            admin_addr,
            client: TestClient::new(addr),
            stop: Some(stop),
            stopped: Some(stopped),
        }
    }

    /// Stops accepting and waits for open connections to finish.
    pub(crate) async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(stopped) = self.stopped.take() {
            stopped.await.unwrap();
        }
    }
}
