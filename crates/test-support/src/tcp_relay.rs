//! A TCP relay a test puts between a process and a server (a broker, say), to cut the line at
//! a moment the test chooses rather than at a time it guesses.
//!
//! Until the cut, bytes pass both ways. From the cut on, nothing passes either way: what the
//! clients send is kept for the test to look into ([`TcpRelay::held_contains`]) and never delivered, what the
//! server sends is dropped. A test can so see that a process sent something (an
//! acknowledgement) and know the server never got it. Dropping the relay closes every
//! connection it carries, on both sides, as a process's death closes its own.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

/// A relay on a loopback port of its own to one server; every connection ends when it is
/// dropped.
pub struct TcpRelay {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    cut: AtomicBool,
    /// What clients sent after the cut, in the order the relay read it.
    held: Mutex<Vec<u8>>,
    /// The accept loop and every connection's two pipes.
    tasks: Mutex<Vec<AbortHandle>>,
}

impl Shared {
    fn tasks(&self) -> MutexGuard<'_, Vec<AbortHandle>> {
        self.tasks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn held(&self) -> MutexGuard<'_, Vec<u8>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl TcpRelay {
    /// Listens on a free loopback port; each connection to it is carried to `target`.
    pub async fn to(target: SocketAddr) -> TcpRelay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared::default());
        let accepting = tokio::spawn(accept(listener, target, shared.clone()));
        shared.tasks().push(accepting.abort_handle());
        TcpRelay { addr, shared }
    }

    /// Where clients connect instead of the server.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// From now on nothing passes, either way, on any connection, new or open.
    pub fn cut(&self) {
        self.shared.cut.store(true, Ordering::SeqCst);
    }

    /// Whether what clients sent since the cut contains `bytes`.
    pub fn held_contains(&self, bytes: &[u8]) -> bool {
        self.shared
            .held()
            .windows(bytes.len())
            .any(|window| window == bytes)
    }
}

impl Drop for TcpRelay {
    fn drop(&mut self) {
        for task in self.shared.tasks().drain(..) {
            task.abort();
        }
    }
}

async fn accept(listener: TcpListener, target: SocketAddr, shared: Arc<Shared>) {
    while let Ok((client, _)) = listener.accept().await {
        let Ok(server) = TcpStream::connect(target).await else {
            continue;
        };
        let (client_read, client_write) = client.into_split();
        let (server_read, server_write) = server.into_split();
        let up = tokio::spawn(pipe(client_read, server_write, shared.clone(), true));
        let down = tokio::spawn(pipe(server_read, client_write, shared.clone(), false));
        shared
            .tasks()
            .extend([up.abort_handle(), down.abort_handle()]);
    }
}

/// Copies bytes until either side closes; after the cut, what is read is held (`keep`, the
/// clients' side) or dropped.
async fn pipe(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, shared: Arc<Shared>, keep: bool) {
    let mut buf = vec![0u8; 64 * 1024];
    while let Ok(n @ 1..) = from.read(&mut buf).await {
        if shared.cut.load(Ordering::SeqCst) {
            if keep {
                shared.held().extend_from_slice(&buf[..n]);
            }
        } else if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
