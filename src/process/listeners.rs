//! The sockets the process listens on: one per worker on the proxy's address, shared by
//! `SO_REUSEPORT`, and the admin listener's.

use std::net::SocketAddr;

use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::proxy::{Proxy, StartError};

async fn bind(addr: SocketAddr) -> Result<TcpListener, StartError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind { addr, source })
}

/// One listener per worker, all on `addr`, sharing it by `SO_REUSEPORT`.
///
/// The address is first bound for a moment without `SO_REUSEPORT`: that fails when anything
/// already listens there, so a second proxy started on a running one's address stops with
/// "address in use" instead of joining its group and taking a share of its connections (the
/// kernel lets any process of the same user join). It also turns a port of 0 into the one
/// port every worker then shares.
pub(super) fn for_workers(
    addr: SocketAddr,
    workers: usize,
) -> Result<Vec<std::net::TcpListener>, StartError> {
    let probe =
        std::net::TcpListener::bind(addr).map_err(|source| StartError::Bind { addr, source })?;
    let addr = probe
        .local_addr()
        .map_err(|source| StartError::Bind { addr, source })?;
    drop(probe);
    (0..workers).map(|_| reuse_port_listener(addr)).collect()
}

/// A listener on `addr` that other sockets may share (`SO_REUSEPORT`), one per worker.
fn reuse_port_listener(addr: SocketAddr) -> Result<std::net::TcpListener, StartError> {
    let bind = || {
        let socket = socket2::Socket::new(
            socket2::Domain::for_address(addr),
            socket2::Type::STREAM,
            None,
        )?;
        socket.set_reuse_address(true)?;
        socket.set_reuse_port(true)?;
        socket.set_nonblocking(true)?;
        socket.bind(&addr.into())?;
        socket.listen(1024)?;
        Ok(socket.into())
    };
    bind().map_err(|source| StartError::Bind { addr, source })
}

/// Serves the admin endpoints on `addr` until the returned sender is dropped. They stay up
/// through the drain, so probes and metrics can watch it.
pub(super) async fn spawn_admin(
    proxy: &Proxy,
    addr: SocketAddr,
) -> Result<oneshot::Sender<()>, StartError> {
    let listener = bind(addr).await?;
    let (stop, stopped) = oneshot::channel::<()>();
    let admin = axum::serve(listener, proxy.admin()).with_graceful_shutdown(async move {
        let _ = stopped.await;
    });
    tokio::spawn(async move { admin.await });
    tracing::info!(%addr, "admin listening");
    Ok(stop)
}
