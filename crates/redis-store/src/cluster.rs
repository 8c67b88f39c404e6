//! The Redis store on Redis Cluster (`redis+cluster://HOST:PORT[,HOST:PORT...]`).
//!
//! Only the connection differs from a single Redis: the operations and scripts are the same
//! (`store.rs`, `scripts.rs`). Every record is one key, so every operation touches one slot
//! and runs on the master that owns it. The cluster client learns the slot map from any seed
//! node, keeps one multiplexed connection per master, follows `MOVED` and `ASK` redirections and
//! refreshes the map when the cluster changes, so a resharded or failed-over key is found again.
//!
//! Inbox queues are the exception to one key per operation: a script over a queue names
//! several keys, which share a hash tag so they are one slot. Each route's queue is split into
//! 16 shards, each its own tag and so its own slot, spread over the masters by Redis as any
//! slot is: one slot lives on one master, and a route kept in one would put every
//! acknowledgement and claim of that route on one machine however many the cluster has. An
//! inbox route's acknowledgement record is named with its delivery's shard tag, so `accept`
//! writes both in one script; proxy-mode records keep their names, and `get` and `remove` look
//! under both names (`inbox/keys.rs`). Claims walk the shards round-robin and pass over, for
//! a moment, a shard whose master does not answer.
//!
//! While a master is down, only the keys in its slots fail (`store-unavailable`, or a fail-open
//! forward); the other masters keep answering. `ping` asks every master, so a health check says
//! whether the whole cluster answers.
//!
//! The cluster client can wedge itself for good. Its slot-map refresh needs its node table to
//! itself, and while the refresh runs the client polls nothing else; a request that already
//! holds a share of the table, but was parked before using it, is then never polled to give it
//! back. Since tokio 1.54 a lock acquisition that exhausts the task's scheduling budget parks
//! while holding what it acquired, so this happens when the client refreshes its slot map under
//! load (a master failing, say): from then on every operation, on every master, waits out its
//! time-out. `ClusterLink` is the remedy: when operations have done nothing but fail for a while
//! (`FailureStreak`), it builds a fresh connection from the seeds and swaps it in. A wedged
//! connection goes away with its last operation; one that was merely waiting for a master to
//! come back costs little to replace.

use idempotency_core::proxy::ErrorChain;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Client, Cmd, Pipeline, RedisFuture, RedisResult, Value};

use crate::per_thread::{Connect, PerThread};
use crate::store::{redact, RedisStore, CONNECTION_TIMEOUT, CONNECT_TIMEOUT, RESPONSE_TIMEOUT};
use idempotency_core::StoreError;

/// A store on a Redis Cluster.
pub type RedisClusterStore = RedisStore<PerThread<ClusterLink>>;

/// Failures in a row (no success between them) that can mean the connection is wedged, when they
/// also span `STUCK_AFTER`. Several, so one unlucky request does not replace a connection.
const STUCK_FAILURES: u32 = 3;
/// How long operations must have failed, without one success, before the connection is
/// replaced. Short, because a wedged connection never recovers and a replacement is cheap.
const STUCK_AFTER: Duration = Duration::from_secs(1);
/// The longest wait between replacements while replacing does not help (the cluster is down, or
/// only a failed master's keys are in use), doubling from `STUCK_AFTER`.
const STUCK_AFTER_MAX: Duration = Duration::from_secs(30);

impl RedisStore<PerThread<ClusterLink>> {
    /// Connects to the cluster that `nodes` (`redis://HOST:PORT` seed URLs; one reachable node is
    /// enough) belong to; every key the store writes starts with `prefix`. Fails with
    /// `Unavailable` or `Timeout` when no seed answers with a slot map within a few seconds, and
    /// with `Open` when the URLs are not valid (or disagree on credentials).
    pub async fn connect_cluster(nodes: &[String], prefix: &str) -> Result<Self, StoreError> {
        let client = ClusterClient::builder(nodes.iter().map(String::as_str))
            .connection_timeout(CONNECTION_TIMEOUT)
            .response_timeout(RESPONSE_TIMEOUT)
            .build()
            .map_err(|e| {
                // The client's error may quote a node's URL, password and all: only its
                // redacted words are kept, not the error itself.
                let message = format!("invalid Redis Cluster nodes: {e}");
                StoreError::open(redact_all(nodes, message))
            })?;
        let conn = connect(&client, nodes).await?;
        let link = ClusterLink::new(client.clone(), nodes.to_vec(), conn);
        let nodes = nodes.to_vec();
        let another: Connect<ClusterLink> = Arc::new(move || {
            let (client, nodes) = (client.clone(), nodes.clone());
            Box::pin(async move {
                let conn = client.get_async_connection().await?;
                Ok(ClusterLink::new(client, nodes, conn))
            })
        });
        Ok(Self::with_connection(
            PerThread::new(link, another),
            prefix,
            "cluster",
        ))
    }
}

/// A fresh cluster connection: a slot map from a seed that answers, a connection to each master.
async fn connect(
    client: &ClusterClient,
    nodes: &[String],
) -> Result<ClusterConnection, StoreError> {
    match tokio::time::timeout(CONNECT_TIMEOUT, client.get_async_connection()).await {
        Ok(Ok(conn)) => Ok(conn),
        Ok(Err(e)) => {
            let message = format!("cannot connect to Redis Cluster: {e}");
            Err(StoreError::unavailable(redact_all(nodes, message)))
        }
        Err(_) => Err(StoreError::Timeout(CONNECT_TIMEOUT)),
    }
}

/// The store's connection to a Redis Cluster: the cluster client's connection, replaced by a
/// fresh one when operations have only failed for a while. Clones share it.
#[derive(Clone)]
pub struct ClusterLink {
    shared: Arc<Shared>,
}

struct Shared {
    client: ClusterClient,
    /// The seed URLs as given, to take their passwords out of error messages.
    nodes: Vec<String>,
    current: RwLock<ClusterConnection>,
    /// How many times `current` was replaced; changes only under its write lock.
    generation: AtomicU64,
    /// Whether `streak` holds failures, so that a success need not take its lock.
    failing: AtomicBool,
    streak: Mutex<FailureStreak>,
    replacing: AtomicBool,
}

impl ClusterLink {
    fn new(client: ClusterClient, nodes: Vec<String>, conn: ClusterConnection) -> Self {
        let shared = Shared {
            client,
            nodes,
            current: RwLock::new(conn),
            generation: AtomicU64::new(0),
            failing: AtomicBool::new(false),
            streak: Mutex::new(FailureStreak::default()),
            replacing: AtomicBool::new(false),
        };
        Self {
            shared: Arc::new(shared),
        }
    }

    /// The connection to send one call on, and the watch that reports how the call ended.
    fn begin(&self) -> (ClusterConnection, Attempt) {
        let current = self
            .shared
            .current
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        let attempt = Attempt {
            shared: Arc::clone(&self.shared),
            generation: self.shared.generation.load(Ordering::Acquire),
            settled: false,
        };
        (current.clone(), attempt)
    }
}

impl ConnectionLike for ClusterLink {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let (mut conn, attempt) = self.begin();
        Box::pin(async move { attempt.settle(conn.req_packed_command(cmd).await) })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let (mut conn, attempt) = self.begin();
        let answer = async move { conn.req_packed_commands(pipeline, offset, count).await };
        Box::pin(async move { attempt.settle(answer.await) })
    }

    fn get_db(&self) -> i64 {
        0
    }
}

/// One call in progress. A call dropped before it ended counts as a failure: that is how a call
/// the store's operation time-out gave up on ends, and a wedged connection's calls all end so.
struct Attempt {
    shared: Arc<Shared>,
    generation: u64,
    settled: bool,
}

impl Attempt {
    /// Any reply, even an error reply such as `NOSCRIPT`, shows the connection works. Failures
    /// are the errors the client makes itself or that outlive its retries: broken connections,
    /// time-outs, no node for a slot, a cluster that stays down.
    fn settle<T>(mut self, answer: RedisResult<T>) -> RedisResult<T> {
        self.settled = true;
        self.shared.record(self.generation, answer.is_ok());
        answer
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        if !self.settled {
            self.shared.record(self.generation, false);
        }
    }
}

impl Shared {
    fn record(self: &Arc<Self>, generation: u64, succeeded: bool) {
        // Calls still ending on a replaced connection say nothing about the one in use.
        if self.generation.load(Ordering::Acquire) != generation {
            return;
        }
        if succeeded {
            if self.failing.swap(false, Ordering::AcqRel) {
                self.streak().succeeded();
            }
            return;
        }
        self.failing.store(true, Ordering::Release);
        let stuck = self.streak().failed(Instant::now());
        if stuck {
            self.replace_in_background();
        }
    }

    fn streak(&self) -> MutexGuard<'_, FailureStreak> {
        self.streak.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts replacing the connection, unless a replacement is already under way.
    fn replace_in_background(self: &Arc<Self>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.replacing.swap(true, Ordering::AcqRel) {
            return;
        }
        let shared = Arc::clone(self);
        runtime.spawn(async move {
            shared.replace().await;
            shared.replacing.store(false, Ordering::Release);
        });
    }

    /// Builds a fresh connection and swaps it in; calls already running keep the old one, which
    /// closes when the last of them ends.
    async fn replace(&self) {
        match connect(&self.client, &self.nodes).await {
            Ok(conn) => {
                let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
                *current = conn;
                let generation = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
                drop(current);
                tracing::warn!(
                    generation,
                    "Redis Cluster operations kept failing; replaced the cluster connection with a fresh one from the seed nodes"
                );
            }
            Err(e) => tracing::warn!(
                error = %ErrorChain(&e),
                "Redis Cluster operations kept failing and no fresh cluster connection could be made; keeping the old one"
            ),
        }
        self.streak().replaced();
    }
}

/// The failures since the last success, which tell a wedged cluster connection (nothing
/// succeeds) from a cluster with a master down (its other masters' keys still succeed).
#[derive(Debug, Clone, PartialEq, Eq)]
struct FailureStreak {
    since: Option<Instant>,
    failures: u32,
    /// How long the streak must last; it grows while replacing the connection does not help.
    patience: Duration,
}

impl Default for FailureStreak {
    fn default() -> Self {
        Self {
            since: None,
            failures: 0,
            patience: STUCK_AFTER,
        }
    }
}

impl FailureStreak {
    fn succeeded(&mut self) {
        *self = Self::default();
    }

    /// Counts a failure at `now`, and says whether the connection should be replaced: at least
    /// `STUCK_FAILURES` failures, spread over the current patience, and no success among them.
    fn failed(&mut self, now: Instant) -> bool {
        let since = *self.since.get_or_insert(now);
        self.failures = self.failures.saturating_add(1);
        self.failures >= STUCK_FAILURES && now.saturating_duration_since(since) >= self.patience
    }

    /// A replacement was tried: the next one needs a streak of its own, twice as long, unless an
    /// operation succeeds first.
    fn replaced(&mut self) {
        self.since = None;
        self.failures = 0;
        self.patience = (self.patience * 2).min(STUCK_AFTER_MAX);
    }
}

/// Removes every node URL's password, as written and as decoded, from a message.
fn redact_all(nodes: &[String], message: String) -> String {
    nodes.iter().fold(message, |message, url| {
        let decoded = Client::open(url.as_str()).ok().and_then(|client| {
            let settings = client.get_connection_info().redis_settings();
            settings.password().map(str::to_owned)
        });
        redact(url, decoded.as_deref(), message)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_node_password_is_redacted() {
        let nodes = ["redis://:first%21pw@a:1", "redis://u:second@b:2"].map(String::from);
        let message = "auth failed for first%21pw, first!pw and second".to_owned();
        let redacted = redact_all(&nodes, message);
        assert_eq!(redacted, "auth failed for ***, *** and ***");
    }

    #[tokio::test]
    async fn an_unreachable_cluster_fails_without_the_password() {
        let nodes = ["redis://:s3cret-pw@127.0.0.1:1".to_owned()];
        match RedisStore::connect_cluster(&nodes, "x:").await {
            Err(e @ StoreError::Unavailable { .. }) => {
                let message = idempotency_core::proxy::ErrorChain(&e).to_string();
                assert!(!message.contains("s3cret-pw"), "{message}");
            }
            other => panic!("expected Unavailable, got {other:?}"),
        }
    }

    /// Records `count` failures, `gap` apart from `start`; says whether the last one asked for
    /// a replacement.
    fn fail(streak: &mut FailureStreak, start: Instant, gap: Duration, count: u32) -> bool {
        (0..count).fold(false, |_, i| streak.failed(start + gap * i))
    }

    #[test]
    fn a_long_enough_streak_of_failures_asks_for_a_replacement() {
        let mut streak = FailureStreak::default();
        let start = Instant::now();
        assert!(!fail(&mut streak, start, Duration::from_millis(100), 3));
        assert!(streak.failed(start + STUCK_AFTER));
    }

    #[test]
    fn a_burst_of_failures_is_not_enough() {
        let mut streak = FailureStreak::default();
        assert!(!fail(&mut streak, Instant::now(), Duration::ZERO, 1_000));
    }

    #[test]
    fn failures_far_apart_need_several() {
        let mut streak = FailureStreak::default();
        let start = Instant::now();
        assert!(!fail(
            &mut streak,
            start,
            STUCK_AFTER * 10,
            STUCK_FAILURES - 1
        ));
        assert!(streak.failed(start + STUCK_AFTER * 30));
    }

    #[test]
    fn a_success_ends_the_streak() {
        let mut streak = FailureStreak::default();
        let start = Instant::now();
        assert!(!fail(&mut streak, start, Duration::from_millis(400), 2));
        streak.succeeded();
        assert!(!fail(
            &mut streak,
            start + STUCK_AFTER,
            Duration::from_millis(400),
            3
        ));
        assert!(streak.failed(start + STUCK_AFTER * 2));
    }

    #[test]
    fn replacing_asks_for_a_longer_streak_until_something_succeeds() {
        let mut streak = FailureStreak::default();
        let start = Instant::now();
        assert!(fail(&mut streak, start, STUCK_AFTER, 3));
        streak.replaced();
        assert!(!fail(&mut streak, start, STUCK_AFTER / 2, 3));
        assert!(streak.failed(start + STUCK_AFTER * 2));
        for _ in 0..10 {
            streak.replaced();
        }
        assert_eq!(streak.patience, STUCK_AFTER_MAX);
        streak.succeeded();
        assert_eq!(streak, FailureStreak::default());
    }
}
