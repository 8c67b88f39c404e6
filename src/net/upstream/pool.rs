//! Idle HTTP/1.1 connections to one upstream, kept for the next request.
//!
//! No task runs per connection: a connection is driven by the task of the request using it
//! (see [`exchange`](super::exchange) and [`UpstreamBody`](super::UpstreamBody)), and while it
//! sits here nothing polls it. So a close by the upstream goes unnoticed until the connection is
//! taken out, which is why [`Pool::checkout`] checks each one with the kernel right before it is
//! written on, and why a connection idle past `idle_timeout` is closed instead of used: app
//! servers close idle keep-alive connections after a few seconds, and a request written as the
//! upstream closes is lost in a way no one can tell from "it ran".
//!
//! The connection returned last is the one taken first, as it is the least likely to have been
//! closed, and the rest age out. One sweeper task per pool closes expired connections when the proxy
//! goes quiet; it runs only while the list holds any.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use axum::body::Body;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;

use super::transport::{self, Address, CloseCheck, UpstreamIo};
use crate::thread_slot::PerThread;
use idempotency_core::BoxError;

/// How a route keeps connections to its upstream (`upstream_idle_timeout`, docs/reference.md#upstream-connections).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PoolSettings {
    /// A connection idle this long is closed, never used: keep it below the upstream's own.
    pub idle_timeout: Duration,
    /// Idle connections kept at most; past that, the one idle longest is closed.
    pub max_idle: usize,
}

impl Default for PoolSettings {
    fn default() -> Self {
        Self {
            idle_timeout: Duration::from_secs(1),
            max_idle: 256,
        }
    }
}

type Connection = http1::Connection<TokioIo<UpstreamIo>, Body>;

/// One HTTP/1.1 connection: the handle requests go in by, and the state machine that reads and
/// writes the socket, polled by whoever holds it.
pub(super) struct PooledConnection {
    sender: http1::SendRequest<Body>,
    /// Boxed: hyper's connection state is some 700 bytes, and a connection rides inside every
    /// future and body that forwards a request, each of them moved at least once per request.
    connection: Box<Connection>,
    close_check: CloseCheck,
}

impl PooledConnection {
    /// Connects to `address`; HTTP/1.1 needs no handshake on the wire.
    pub(super) async fn open(address: &Address) -> Result<Self, BoxError> {
        let (io, close_check) = UpstreamIo::new(transport::connect(address).await?);
        let (sender, connection) = http1::handshake(TokioIo::new(io)).await?;
        Ok(Self {
            sender,
            connection: Box::new(connection),
            close_check,
        })
    }

    pub(super) fn sender(&mut self) -> &mut http1::SendRequest<Body> {
        &mut self.sender
    }

    /// Reads and writes what the exchange in progress needs. `Ready` once the connection has
    /// ended (closed by either side, or failed); it must not be polled after that.
    pub(super) fn poll_connection(&mut self, cx: &mut Context<'_>) -> Poll<hyper::Result<()>> {
        Pin::new(&mut self.connection).poll(cx)
    }

    /// Where the exchange on this connection stands, after one poll.
    fn state(&mut self) -> Exchange {
        let Self {
            sender, connection, ..
        } = self;
        poll_once(|cx| {
            if Pin::new(connection).poll(cx).is_ready() {
                return Exchange::Closed;
            }
            match sender.poll_ready(cx) {
                Poll::Ready(Ok(())) => Exchange::Over,
                Poll::Ready(Err(_)) => Exchange::Closed,
                Poll::Pending => Exchange::Sending,
            }
        })
    }

    /// Drives the connection until the request in progress is sent and answered (`true`), or
    /// the connection ends (`false`).
    fn poll_sent(&mut self, cx: &mut Context<'_>) -> Poll<bool> {
        if Pin::new(&mut self.connection).poll(cx).is_ready() {
            return Poll::Ready(false);
        }
        self.sender.poll_ready(cx).map(|ready| ready.is_ok())
    }

    /// [`is_idle`](Self::is_idle), with the socket's reads asking the kernel, so a close that
    /// has arrived is seen even before the runtime has noticed it.
    fn is_open(&mut self) -> bool {
        let Self {
            sender,
            connection,
            close_check,
        } = self;
        close_check.during(|| is_idle(sender, connection))
    }
}

fn is_idle(sender: &mut http1::SendRequest<Body>, connection: &mut Connection) -> bool {
    poll_once(|cx| {
        Pin::new(connection).poll(cx).is_pending()
            && matches!(sender.poll_ready(cx), Poll::Ready(Ok(())))
    })
}

/// Polls once, with a waker that does nothing: the next poll comes from the task that uses the
/// connection. Outside the runtime's cooperative budget, as a task that has spent its budget
/// sees every socket as not ready, and would take a closed connection for an open one.
fn poll_once<T>(f: impl FnOnce(&mut Context<'_>) -> T) -> T {
    let mut f = Some(f);
    let once = std::future::poll_fn(|cx| Poll::Ready(f.take().map(|f| f(cx))));
    let mut once = pin!(tokio::task::unconstrained(once));
    match once.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(Some(value)) => value,
        Poll::Ready(None) | Poll::Pending => {
            unreachable!("a poll_fn that is ready on its first poll")
        }
    }
}

/// The idle connections to one upstream, kept by the thread that last used each.
///
/// A connection's socket belongs to the runtime that opened it; with one runtime per core, a
/// connection handed to another core's task would be driven, slowly, by a runtime that is not
/// polling it. So each thread takes connections only from its own list (one list per thread,
/// up to [`SLOTS`](crate::thread_slot::SLOTS)), which also keeps threads off each other's lock
/// and cache lines.
pub(super) struct Pool {
    settings: PoolSettings,
    idle: PerThread<Mutex<IdleList>>,
}

/// How long a connection may take to finish sending a request body the upstream answered
/// before reading.
const FINISH_SENDING_TIMEOUT: Duration = Duration::from_secs(30);

/// Where an exchange stands once its answer has been read.
enum Exchange {
    /// Sent and answered: the connection takes the next request.
    Over,
    /// The request's body is still being sent.
    Sending,
    /// The connection has ended or cannot take another request.
    Closed,
}

#[derive(Default)]
struct IdleList {
    /// Oldest first.
    connections: VecDeque<Idle>,
    /// Whether a sweeper task is running for this pool.
    sweeping: bool,
}

struct Idle {
    since: Instant,
    connection: PooledConnection,
}

impl Pool {
    pub(super) fn new(settings: PoolSettings) -> Arc<Self> {
        Arc::new(Self {
            settings,
            idle: PerThread::new(),
        })
    }

    /// The most recently used connection that is still open, if any. Those found closed are
    /// dropped on the way.
    ///
    /// Each is checked with the kernel however recently it came back: an upstream shutting down
    /// closes its idle connections at once, moments after their last answer, and this thread's
    /// runtime may not have seen that close yet. A request written on such a connection would be
    /// lost (answered `502`), where the check sends it on a new one, for one `recv(2)`.
    pub(super) fn checkout(&self) -> Option<PooledConnection> {
        loop {
            let mut connection = self.pop_newest()?;
            if connection.is_open() {
                return Some(connection);
            }
        }
    }

    /// The connection most recently checked in, unless it has been idle too long.
    fn pop_newest(&self) -> Option<PooledConnection> {
        let now = Instant::now();
        let mut list = self.lock(self.idle.mine_at());
        let newest = list.connections.pop_back()?;
        if now.saturating_duration_since(newest.since) < self.settings.idle_timeout {
            return Some(newest.connection);
        }
        // The newest is past its time, so every older one is too.
        let expired = std::mem::take(&mut list.connections);
        drop(list);
        drop((newest, expired));
        None
    }

    /// Keeps a connection whose answer has been read, if it is open; else closes it. One still
    /// sending its request's body (the upstream answered before reading all of it, as nginx's
    /// `return` and many early errors do) first finishes sending in a task of its own: dropping
    /// it would cut that body off, and the client connection it comes from could not be used
    /// again.
    pub(super) fn checkin(self: &Arc<Self>, mut connection: PooledConnection) {
        match connection.state() {
            Exchange::Over => self.keep(connection),
            Exchange::Sending => self.finish_sending(connection),
            Exchange::Closed => {}
        }
    }

    fn finish_sending(self: &Arc<Self>, mut connection: PooledConnection) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let pool = self.clone();
        let timeout = FINISH_SENDING_TIMEOUT;
        runtime.spawn(async move {
            let sent = std::future::poll_fn(|cx| connection.poll_sent(cx));
            if let Ok(true) = tokio::time::timeout(timeout, sent).await {
                pool.keep(connection);
            }
        });
    }

    fn keep(self: &Arc<Self>, connection: PooledConnection) {
        if self.settings.max_idle == 0 {
            return;
        }
        let mine = self.idle.mine_at();
        let mut list = self.lock(mine);
        let evicted = (list.connections.len() >= self.settings.max_idle)
            .then(|| list.connections.pop_front());
        list.connections.push_back(Idle {
            since: Instant::now(),
            connection,
        });
        let start_sweeping = !std::mem::replace(&mut list.sweeping, true);
        drop(list);
        drop(evicted);
        if start_sweeping {
            self.start_sweeper(mine);
        }
    }

    /// How many connections are idle here now, expired ones included.
    pub(super) fn idle_count(&self) -> usize {
        self.idle
            .all()
            .map(|list| locked(list).connections.len())
            .sum()
    }

    fn lock(&self, list: usize) -> MutexGuard<'_, IdleList> {
        locked(self.idle.slot(list))
    }

    fn start_sweeper(self: &Arc<Self>, list: usize) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.lock(list).sweeping = false;
            return;
        };
        let pool = Arc::downgrade(self);
        runtime.spawn(sweep_until_empty(pool, list, self.settings.idle_timeout));
    }

    /// Closes the connections of one list past their idle time; returns how long until the
    /// oldest one left expires, or `None`, and stops sweeping it, when none is left.
    fn sweep(&self, list: usize) -> Option<Duration> {
        let now = Instant::now();
        let timeout = self.settings.idle_timeout;
        let mut list = self.lock(list);
        let expired = list
            .connections
            .iter()
            .take_while(|idle| now.saturating_duration_since(idle.since) >= timeout)
            .count();
        let expired: Vec<Idle> = list.connections.drain(..expired).collect();
        let next = list
            .connections
            .front()
            .map(|oldest| (oldest.since + timeout).saturating_duration_since(now));
        list.sweeping = next.is_some();
        drop(list);
        drop(expired);
        next
    }
}

fn locked(list: &Mutex<IdleList>) -> MutexGuard<'_, IdleList> {
    // Nothing panics while the list is held, so a poisoned one is still whole.
    list.lock().unwrap_or_else(PoisonError::into_inner)
}

async fn sweep_until_empty(pool: Weak<Pool>, list: usize, first_wait: Duration) {
    let mut wait = first_wait;
    loop {
        tokio::time::sleep(wait).await;
        let Some(pool) = pool.upgrade() else { return };
        match pool.sweep(list) {
            Some(next) => wait = next,
            None => return,
        }
    }
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("settings", &self.settings)
            .field("idle", &self.idle_count())
            .finish()
    }
}

#[cfg(test)]
#[path = "pool_tests.rs"]
mod tests;
