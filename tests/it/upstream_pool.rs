//! Pooled upstream connections (docs/reference.md#upstream-connections) against an upstream
//! that closes idle keep-alive connections: no request is lost to a connection the upstream
//! closed, a request the upstream received is never sent a second time, connections are reused
//! while the upstream keeps them open, and the proxy closes idle ones itself after the route's
//! `upstream_idle_timeout`.
//!
//! The upstream closes when the test says so, and the test sends the next request once the
//! proxy's kernel has the close ([`ClosingUpstream`]): what is checked is what the proxy does
//! with a close that has reached it, on a machine of any speed. (A close still on its way while
//! the proxy writes is a race no proxy can win, which is why `upstream_idle_timeout` belongs
//! below the upstream's own keep-alive time-out.)
//!
//! One thread per test, as each of the binary's workers is: a client connection and the
//! upstream connections it uses stay on the thread that pools them, so an idle connection is
//! always found by the next request (a runtime that moves tasks between threads would find it
//! in another thread's idle list).

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use common::closing_upstream::{Behaviour, ClosingUpstream, Connection, End};
use common::proxy::TestProxy;
use idempotency_proxy::store::MemoryStore;

/// `upstream_idle_timeout` when a route does not set it (docs/reference.md).
const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(1);

const BODY: &str = "{\"amount\":100}";

/// Two routes, each with an upstream of its own: `default` leaves `upstream_idle_timeout` at
/// its default, `long` sets it longer than any test runs, so that its connections stay pooled
/// for as long as the upstream keeps them open.
struct Routes {
    default: ClosingUpstream,
    long: ClosingUpstream,
    proxy: TestProxy,
}

impl Routes {
    async fn start() -> Self {
        Self::with(Behaviour::default()).await
    }

    async fn with(behaviour: Behaviour) -> Self {
        let default = ClosingUpstream::start(behaviour).await;
        let long = ClosingUpstream::start(behaviour).await;
        let toml = format!(
            "[[routes]]\nname = \"default\"\npath_prefix = \"/default/\"\nupstream = \"{}\"\n\
             [[routes]]\nname = \"long\"\npath_prefix = \"/long/\"\nupstream = \"{}\"\n\
             upstream_idle_timeout = \"1h\"\n",
            default.url, long.url
        );
        let proxy = TestProxy::start(&toml, Arc::new(MemoryStore::new())).await;
        Self {
            default,
            long,
            proxy,
        }
    }

    /// A keyed `POST` to the route; it must be answered `201`.
    async fn post(&self, route: &str, key: &str) {
        let path = format!("/{route}/pay");
        let answer = self.proxy.client.post_owned(&path, key, BODY).await;
        assert_eq!(answer.status, StatusCode::CREATED, "{key}: {answer:?}");
    }
}

/// Whether the upstream closes its idle connections before each request of a sequence: a new
/// connection, reused, closed twice in a row, and so on, for both routes.
const CLOSE_BEFORE: [bool; 9] = [false, false, true, true, false, true, false, false, true];

#[tokio::test(flavor = "current_thread")]
async fn no_request_is_lost_to_a_connection_the_upstream_closed_while_idle() {
    let routes = Routes::start().await;
    for (route, upstream) in [("default", &routes.default), ("long", &routes.long)] {
        let mut keys = Vec::new();
        for (n, &close_first) in CLOSE_BEFORE.iter().enumerate() {
            if close_first {
                upstream.close_idle().await;
            }
            let key = format!("{route}-{n}");
            routes.post(route, &key).await;
            keys.push(key);
        }
        let connections = upstream.until_closes_settled().await;
        each_ran_once(upstream, &keys);
        let idle_timeout = match route {
            "default" => DEFAULT_IDLE_TIMEOUT,
            _ => Duration::MAX,
        };
        pooled_as_allowed(route, &connections, idle_timeout);
    }
    // Nothing made the long route give up a connection the upstream kept open: one for the
    // first request and one after each close, each closed one then dropped.
    let long = routes.long.connections();
    let closes = CLOSE_BEFORE.iter().filter(|&&close| close).count();
    assert_eq!(long.len(), 1 + closes, "{long:#?}");
    let closed = long.iter().filter(|c| c.closed_by_upstream).count();
    assert_eq!(closed, closes, "{long:#?}");
}

/// Several connections idle at once, all closed by the upstream: the next request passes over
/// every one of them and goes on a new connection.
#[tokio::test(flavor = "current_thread")]
async fn every_closed_connection_in_the_pool_is_passed_over() {
    const BURST: usize = 4;
    let routes = Routes::with(Behaviour {
        first_answered_together: BURST,
        ..Behaviour::default()
    })
    .await;
    let burst: Vec<_> = (0..BURST)
        .map(|n| {
            let client = routes.proxy.client.clone();
            async move {
                let key = format!("burst-{n}");
                (client.post_owned("/long/pay", &key, BODY).await, key)
            }
        })
        .collect();
    let mut keys = Vec::new();
    for (answer, key) in futures_util::future::join_all(burst).await {
        assert_eq!(answer.status, StatusCode::CREATED, "{key}: {answer:?}");
        keys.push(key);
    }
    assert_eq!(routes.long.close_idle().await, BURST);
    routes.post("long", "after-the-burst").await;
    keys.push("after-the-burst".to_owned());
    let connections = routes.long.until_closes_settled().await;
    assert_eq!(connections.len(), BURST + 1, "{connections:#?}");
    for connection in &connections[..BURST] {
        assert_eq!(
            connection.end,
            Some(End::DroppedAfterClose),
            "{connections:#?}"
        );
    }
    each_ran_once(&routes.long, &keys);
}

/// The proxy closes an idle connection itself once it has been idle for the route's
/// `upstream_idle_timeout`, never sooner, and so before an upstream that keeps connections
/// longer would; a route that sets a longer one keeps its connection past the default's.
#[tokio::test(flavor = "current_thread")]
async fn idle_connections_are_closed_after_upstream_idle_timeout_and_not_before() {
    let routes = Routes::start().await;
    routes.post("long", "long-0").await;
    routes.post("default", "default-0").await;
    let idle_for = routes.default.until_closed_by_proxy().await;
    assert!(
        idle_for >= DEFAULT_IDLE_TIMEOUT,
        "closed after {idle_for:?} idle"
    );
    // The long route's connection has been idle longer still, and is used.
    routes.post("long", "long-1").await;
    let long = routes.long.connections();
    assert_eq!(long.len(), 1, "{long:#?}");
    assert_eq!((long[0].requests, long[0].end), (2, None), "{long:#?}");
    routes.post("default", "default-1").await;
    assert_eq!(routes.default.connections().len(), 2);
    each_ran_once(&routes.long, &["long-0", "long-1"]);
    each_ran_once(&routes.default, &["default-0", "default-1"]);
    let default = routes.default.connections();
    pooled_as_allowed("default", &default, DEFAULT_IDLE_TIMEOUT);
}

/// The upstream read the request and closed the connection without an answer: the operation
/// may have run, so the client gets `502`, it is kept as the outcome, and nothing is resent,
/// neither on a fresh connection nor on one that had served a request before.
#[tokio::test]
async fn an_upstream_that_hangs_up_after_reading_is_answered_502_and_never_retried() {
    for answers_per_connection in [0, 1] {
        let upstream = ClosingUpstream::start(Behaviour {
            answers_per_connection,
            ..Behaviour::default()
        })
        .await;
        let proxy = TestProxy::in_front_of(&upstream.url, "").await;
        // Where the upstream answers once per connection, a request first puts one in the pool,
        // so the request checked rides a connection that served before.
        let warm_up = |key: &'static str| {
            let client = proxy.client.clone();
            async move {
                if answers_per_connection == 1 {
                    let warm = client.post("/pay", key, "{}").await;
                    assert_eq!(warm.status, StatusCode::CREATED);
                }
            }
        };
        warm_up("warm-up-1").await;
        let first = proxy.client.post("/pay", "hung-up", "{}").await;
        assert_eq!(first.status, StatusCode::BAD_GATEWAY);
        assert_eq!(first.problem_type(), "upstream-unavailable");
        let retry = proxy.client.post("/pay", "hung-up", "{}").await;
        assert_eq!(retry.status, StatusCode::BAD_GATEWAY);
        assert!(retry.replayed(), "{retry:?}");
        warm_up("warm-up-2").await;
        let plain = proxy.client.send("POST", "/plain", &[], "{}").await;
        assert_eq!(plain.status, StatusCode::BAD_GATEWAY);
        let executions = upstream.executions();
        assert_eq!(executions.get("hung-up"), Some(&1), "{executions:?}");
        assert_eq!(executions.get(""), Some(&1), "{executions:?}");
    }
}

/// Every key reached the upstream exactly once, and nothing else did.
fn each_ran_once(upstream: &ClosingUpstream, keys: &[impl AsRef<str>]) {
    let executions = upstream.executions();
    for key in keys {
        let key = key.as_ref();
        assert_eq!(executions.get(key), Some(&1), "{key}: {executions:?}");
    }
    assert_eq!(executions.len(), keys.len(), "{executions:?}");
}

/// What the proxy did with connections to an upstream that closed some when told to, while
/// requests came one after another:
/// - a connection the upstream closed was dropped unused: no request written into a close the
///   proxy's kernel had taken in;
/// - a new connection was opened only when no open one was idle for less than `idle_timeout`
///   (as the upstream counts, which is never less than the proxy's count): the others are
///   reused;
/// - a connection the upstream kept open was closed only after that long idle.
fn pooled_as_allowed(route: &str, connections: &[Connection], idle_timeout: Duration) {
    for connection in connections {
        match connection.end {
            None => {}
            Some(End::DroppedAfterClose) if connection.closed_by_upstream => {}
            Some(End::ClosedByProxy { idle_for }) if !connection.closed_by_upstream => assert!(
                idle_for >= idle_timeout,
                "{route}: closed after {idle_for:?} idle: {connections:#?}"
            ),
            Some(end) => panic!("{route}: {end:?}: {connections:#?}"),
        }
        if let Some(idle) = connection.opened_beside_idle {
            assert!(
                idle >= idle_timeout,
                "{route}: a new connection beside one idle for {idle:?}: {connections:#?}"
            );
        }
    }
}
