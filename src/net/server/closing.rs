//! When a served connection is asked to close, and when it is dropped.
//!
//! hyper's header read time-out covers HTTP/1 only: an HTTP/2 connection has no time-out of its
//! own, so a client could hold a connection slot for ever by opening one and sending nothing.
//! Here an HTTP/2 connection that has had no request in progress for the header read time-out
//! (since it was accepted, or since its last request ended) is closed the way a drain closes
//! it: hyper's graceful shutdown, which sends a GOAWAY and a PING and closes once the PING is
//! answered and the open streams are done. A peer that never answers that PING (a silent one,
//! or one stalled in the middle of a header block, where no other frame may come) would hold the
//! connection open regardless, so it is dropped once it has had no request in progress for a
//! short grace after the GOAWAY. A request in progress is never cut by either.

use std::future::{pending, Future};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// The target of this module's log lines, kept fixed: `RUST_LOG` directives name it
/// (docs/reference.md#logs), and a move of the file must not change what they select.
const LOG_TARGET: &str = "idempotency_proxy::server::closing";

/// The server's drain: started once by the accept loop, watched by every connection.
#[derive(Debug, Clone, Default)]
pub(super) struct DrainSignal {
    token: CancellationToken,
    /// Set just before the token is cancelled. A connection checks this on each wake-up: the
    /// token's own check takes a lock that every connection on every thread shares, and each
    /// lock moves that lock's cache line between cores.
    started: Arc<AtomicBool>,
}

impl DrainSignal {
    pub(super) fn new() -> Self {
        Self::default()
    }

    /// Asks every connection watching to close.
    pub(super) fn start(&self) {
        self.started.store(true, Ordering::Release);
        self.token.cancel();
    }

    fn started(&self) -> bool {
        self.started.load(Ordering::Acquire)
    }
}

/// What ends a connection besides its client.
pub(super) struct Closing {
    /// Started when the server drains.
    pub draining: DrainSignal,
    /// For HTTP/2 only.
    pub idle: Option<IdleLimit>,
}

/// How long an HTTP/2 connection may have no request in progress.
pub(super) struct IdleLimit {
    /// The connection's requests in progress ([`super::streams::OpenStreams`]).
    pub streams: watch::Receiver<usize>,
    pub timeout: Duration,
    /// When the connection was accepted: the first idle period counts from there.
    pub since: Instant,
}

/// What happened to a connection that was not its end.
enum Event {
    /// The server drains.
    Drain,
    /// An HTTP/2 connection has had no request in progress for the idle time-out.
    Idle,
    /// An HTTP/2 connection asked to close is still open after the grace.
    Unresponsive,
}

/// How long a peer asked to close is given to answer the GOAWAY's PING, counted from the ask
/// and again from the end of each request it still has in progress: a quarter of the idle
/// time-out, at most 1 s (one round trip on any network that still works).
pub(super) fn grace(idle_timeout: Duration) -> Duration {
    (idle_timeout / 4).min(Duration::from_secs(1))
}

/// Drives `connection` to its end, calling `close` (its graceful shutdown) when the server
/// drains or, for HTTP/2, when the connection has been idle too long. Returns what the
/// connection ended with, or `None` when it was dropped because its peer did not close it.
pub(super) async fn drive<C: Future>(
    mut connection: Pin<&mut C>,
    close: impl Fn(Pin<&mut C>),
    closing: Closing,
) -> Option<C::Output> {
    let Closing { draining, mut idle } = closing;
    let mut drain = Drain::new(draining);
    let mut asked = false;
    loop {
        // Biased, the connection first: it is what nearly every wake-up is for.
        let event = tokio::select! {
            biased;
            output = connection.as_mut() => return Some(output),
            () = &mut drain, if !asked => Event::Drain,
            event = next_quiet(idle.as_mut(), asked) => event,
        };
        match event {
            Event::Drain => {}
            Event::Idle => {
                tracing::debug!(target: LOG_TARGET, "closing a connection idle for the header read time-out");
            }
            Event::Unresponsive => {
                tracing::debug!(target: LOG_TARGET, "dropping a connection whose peer did not close it when asked");
                return None;
            }
        }
        close(connection.as_mut());
        asked = true;
    }
}

/// The server's drain as one connection watches it.
///
/// `select!` polls every branch each time the connection's task wakes, several times per
/// request, and the token's own future locks its list of waiters on every poll (about 165
/// instructions each, 650 per forwarded request). This one hands its task's waker to the token
/// once, and while it is polled for that same task only reads the signal's flag.
struct Drain {
    signal: DrainSignal,
    cancelled: Pin<Box<WaitForCancellationFutureOwned>>,
    /// The waker the token will wake, once it has one.
    registered: Option<Waker>,
}

impl Drain {
    fn new(signal: DrainSignal) -> Self {
        Self {
            cancelled: Box::pin(signal.token.clone().cancelled_owned()),
            signal,
            registered: None,
        }
    }
}

impl Future for Drain {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let known = this.registered.as_ref();
        if known.is_some_and(|waker| waker.will_wake(cx.waker())) {
            return if this.signal.started() {
                Poll::Ready(())
            } else {
                Poll::Pending
            };
        }
        let polled = this.cancelled.as_mut().poll(cx);
        this.registered = polled.is_pending().then(|| cx.waker().clone());
        polled
    }
}

/// What the count of requests in progress tells next, for HTTP/2: that the connection has been
/// idle too long or, once it was asked to close, that its peer is not closing it.
async fn next_quiet(idle: Option<&mut IdleLimit>, asked: bool) -> Event {
    let Some(idle) = idle else {
        return pending().await;
    };
    if asked {
        let grace = grace(idle.timeout);
        quiet_for(&mut idle.streams, grace, Instant::now()).await;
        Event::Unresponsive
    } else {
        quiet_for(&mut idle.streams, idle.timeout, idle.since).await;
        Event::Idle
    }
}

/// Resolves once no request has been in progress for `timeout`, counted from `since` or from the
/// end of the last request, whichever is later.
async fn quiet_for(streams: &mut watch::Receiver<usize>, timeout: Duration, mut since: Instant) {
    loop {
        let open = *streams.borrow_and_update();
        let changed = if open == 0 {
            match tokio::time::timeout_at(since + timeout, streams.changed()).await {
                Err(_elapsed) => return,
                Ok(changed) => changed,
            }
        } else {
            streams.changed().await
        };
        // The count is gone with the connection's service, so the connection is ending anyway.
        if changed.is_err() {
            return pending().await;
        }
        since = Instant::now();
    }
}

#[cfg(test)]
mod tests {
    use super::super::streams::OpenStreams;
    use super::*;

    const TIMEOUT: Duration = Duration::from_secs(1);

    /// A connection that records when it was asked to close and, if its peer cooperates, ends
    /// then.
    struct Connection {
        asked_at: Option<Instant>,
        cooperates: bool,
    }

    impl Future for Connection {
        type Output = ();

        fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
            if self.cooperates && self.asked_at.is_some() {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        }
    }

    /// Drives a connection with the given peer, HTTP/2 if `http2`; returns when it was
    /// asked to close, and whether it ended (rather than being dropped) and when.
    async fn run(
        cooperates: bool,
        streams: &OpenStreams,
        draining: DrainSignal,
        http2: bool,
    ) -> (Option<Instant>, Option<()>, Instant) {
        let mut connection = Connection {
            asked_at: None,
            cooperates,
        };
        let idle = IdleLimit {
            streams: streams.watch(),
            timeout: TIMEOUT,
            since: Instant::now(),
        };
        let closing = Closing {
            draining,
            idle: http2.then_some(idle),
        };
        let close = |c: Pin<&mut Connection>| c.get_mut().asked_at = Some(Instant::now());
        let ended = drive(Pin::new(&mut connection), close, closing).await;
        (connection.asked_at, ended, Instant::now())
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_http2_connection_is_asked_to_close_after_the_timeout() {
        let start = Instant::now();
        let streams = OpenStreams::new();
        let (asked, ended, _) = run(true, &streams, DrainSignal::new(), true).await;
        assert_eq!(asked, Some(start + TIMEOUT));
        assert_eq!(ended, Some(()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_peer_that_does_not_close_is_dropped_after_the_grace() {
        let start = Instant::now();
        let streams = OpenStreams::new();
        let (asked, ended, at) = run(false, &streams, DrainSignal::new(), true).await;
        assert_eq!(asked, Some(start + TIMEOUT));
        assert_eq!(ended, None);
        assert_eq!(at, start + TIMEOUT + grace(TIMEOUT));
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_in_progress_is_never_cut_and_restarts_the_clock() {
        let start = Instant::now();
        let streams = OpenStreams::new();
        let request = streams.open();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            drop(request);
        });
        let (asked, ended, at) = run(false, &streams, DrainSignal::new(), true).await;
        let ended_at = start + Duration::from_secs(5);
        assert_eq!(asked, Some(ended_at + TIMEOUT));
        assert_eq!(ended, None);
        assert_eq!(at, ended_at + TIMEOUT + grace(TIMEOUT));
    }

    #[tokio::test(start_paused = true)]
    async fn a_drain_waits_for_the_requests_in_progress_then_the_grace() {
        let start = Instant::now();
        let streams = OpenStreams::new();
        let request = streams.open();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(3)).await;
            drop(request);
        });
        let draining = DrainSignal::new();
        draining.start();
        let (asked, ended, at) = run(false, &streams, draining, true).await;
        assert_eq!(asked, Some(start));
        assert_eq!(ended, None);
        assert_eq!(at, start + Duration::from_secs(3) + grace(TIMEOUT));
    }

    #[tokio::test(start_paused = true)]
    async fn http1_is_asked_on_a_drain_only_and_never_dropped() {
        let streams = OpenStreams::new();
        let never = run(false, &streams, DrainSignal::new(), false);
        assert!(tokio::time::timeout(Duration::from_secs(3600), never)
            .await
            .is_err());
        let start = Instant::now();
        let draining = DrainSignal::new();
        draining.start();
        let (asked, ended, _) = run(true, &streams, draining.clone(), false).await;
        assert_eq!((asked, ended), (Some(start), Some(())));
        let held = run(false, &streams, draining, false);
        assert!(tokio::time::timeout(Duration::from_secs(3600), held)
            .await
            .is_err());
    }

    #[tokio::test]
    async fn a_drain_is_seen_by_whichever_task_polls_last() {
        let signal = DrainSignal::new();
        let mut drain = Drain::new(signal.clone());
        // Polled first for no task at all, then awaited by a task of its own: the signal must
        // wake the task, not the first waker.
        let mut first = Context::from_waker(Waker::noop());
        assert!(Pin::new(&mut drain).poll(&mut first).is_pending());
        let watching = tokio::spawn(drain);
        tokio::task::yield_now().await;
        signal.start();
        let seen = tokio::time::timeout(Duration::from_secs(5), watching).await;
        assert!(
            matches!(seen, Ok(Ok(()))),
            "the drain was never seen: {seen:?}"
        );
    }

    #[test]
    fn a_drain_is_seen_on_the_next_poll_by_the_same_task() {
        let signal = DrainSignal::new();
        let mut drain = Drain::new(signal.clone());
        let mut cx = Context::from_waker(Waker::noop());
        assert!(Pin::new(&mut drain).poll(&mut cx).is_pending());
        assert!(Pin::new(&mut drain).poll(&mut cx).is_pending());
        signal.start();
        assert!(Pin::new(&mut drain).poll(&mut cx).is_ready());
    }

    #[test]
    fn the_grace_is_a_quarter_of_the_timeout_at_most_a_second() {
        assert_eq!(
            grace(Duration::from_millis(400)),
            Duration::from_millis(100)
        );
        assert_eq!(grace(Duration::from_secs(10)), Duration::from_secs(1));
    }
}
