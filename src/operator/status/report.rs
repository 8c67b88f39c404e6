//! The `/status` answer: everything the page draws, read from the [`Status`], the store and
//! the outboxes' tables.

use idempotency_core::proxy::ErrorChain;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::task::JoinSet;
use tokio::time::{timeout, Instant};

use super::activity::RouteActivity;
use super::decisions::{Decision, KEPT_DECISIONS};
use super::latency::{quantile, LATENCY_WINDOW};
use super::{InboxQueues, Reload, Status};
use crate::store::Store;
use idempotency_core::backend::{now_millis, RouteName};
use idempotency_core::observe::{Outcome, OUTCOMES};
use idempotency_outbox::OutboxCounts;

/// How long the page waits for the store's ping, an inbox's queues or an outbox's counts
/// before calling it down.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// The JSON the page polls.
#[derive(Debug, Serialize)]
pub(crate) struct Report {
    version: &'static str,
    now_ms: u64,
    started_ms: u64,
    uptime_seconds: u64,
    store: StoreReport,
    config: ConfigReport,
    outcomes: [&'static str; OUTCOMES.len()],
    routes: Vec<RouteReport>,
    /// Each outbox relay's table, in the config's order.
    outboxes: Vec<OutboxReport>,
    decisions: Vec<DecisionReport>,
}

#[derive(Debug, Serialize)]
struct StoreReport {
    kind: &'static str,
    /// `ok`, `unreachable` or `timed out`; the error itself is in the log, not here, as a
    /// store's error may name its address.
    health: &'static str,
    ping_ms: Option<f64>,
    /// Reserve and complete operations of every route over the last minute.
    latency: LatencyReport,
}

#[derive(Debug, Serialize)]
struct LatencyReport {
    window_seconds: u64,
    samples: usize,
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
}

#[derive(Debug, Serialize)]
struct ConfigReport {
    digest: String,
    last_reload: Option<ReloadReport>,
}

#[derive(Debug, Serialize)]
struct ReloadReport {
    at_ms: u64,
    result: &'static str,
}

#[derive(Debug, Serialize)]
struct RouteReport {
    name: String,
    totals: BTreeMap<&'static str, u64>,
    /// Requests in each of the last 60 whole seconds, oldest first.
    per_second: BTreeMap<&'static str, Vec<u64>>,
    /// replayed / (forwarded + replayed): how many answers for a key were retries'.
    replay_ratio: Option<f64>,
    in_flight: i64,
    /// Present only on inbox routes.
    #[serde(skip_serializing_if = "Option::is_none")]
    inbox: Option<Counted<InboxQueues>>,
}

/// An outbox's name and its table's counts, as `GET /outbox/{name}` gives them.
#[derive(Debug, Serialize)]
struct OutboxReport {
    name: String,
    #[serde(flatten)]
    table: Counted<OutboxCounts>,
}

/// A queue's counts (`"state": "ok"` beside them), or `"state": "unavailable"` when they could
/// not be read within [`PROBE_TIMEOUT`]; why is in the log, as it may name an address.
#[derive(Debug, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
enum Counted<T> {
    Ok(T),
    Unavailable,
}

impl<T> Counted<T> {
    async fn probe<E>(read: impl Future<Output = Result<T, E>>) -> Self {
        match timeout(PROBE_TIMEOUT, read).await {
            Ok(Ok(counts)) => Counted::Ok(counts),
            _ => Counted::Unavailable,
        }
    }
}

#[derive(Debug, Serialize)]
struct DecisionReport {
    at_ms: u64,
    route: String,
    outcome: &'static str,
    status: u16,
    /// A gRPC call's status, shown where an HTTP request shows its status.
    grpc_status: Option<u8>,
    key: Option<String>,
}

impl Status {
    /// Everything the page shows, now; pings the store (at most [`PROBE_TIMEOUT`]).
    pub(crate) async fn report(&self, store: &dyn Store) -> Report {
        let running = self.running().clone();
        let now_ms = now_millis();
        let mut routes = Vec::with_capacity(running.routes.len());
        for (name, activity) in &running.routes {
            routes.push(self.route_report(name, activity, now_ms / 1000).await);
        }
        Report {
            version: env!("CARGO_PKG_VERSION"),
            now_ms,
            started_ms: self.started_ms,
            uptime_seconds: self.started.elapsed().as_secs(),
            store: self
                .store_report(store, &running.routes, now_ms / 1000)
                .await,
            config: ConfigReport {
                digest: running.digest,
                last_reload: running.last_reload.map(reload_report),
            },
            outcomes: OUTCOMES.map(Outcome::as_str),
            routes,
            outboxes: self.outbox_reports().await,
            decisions: last_decisions(&running.routes),
        }
    }

    /// Each outbox's counts, read at once (so a database that does not answer costs one
    /// [`PROBE_TIMEOUT`], however many outboxes it holds), in the config's order.
    async fn outbox_reports(&self) -> Vec<OutboxReport> {
        let mut reads = JoinSet::new();
        for (n, (name, stats)) in self.outboxes().into_iter().enumerate() {
            reads.spawn(async move {
                let table = Counted::probe(stats.counts()).await;
                let name = name.as_str().to_owned();
                (n, OutboxReport { name, table })
            });
        }
        let mut reports = reads.join_all().await;
        reports.sort_unstable_by_key(|(n, _)| *n);
        reports.into_iter().map(|(_, report)| report).collect()
    }

    async fn store_report(
        &self,
        store: &dyn Store,
        routes: &[(RouteName, Arc<RouteActivity>)],
        now_second: u64,
    ) -> StoreReport {
        let started = Instant::now();
        let (health, ping_ms) = match timeout(PROBE_TIMEOUT, store.ping()).await {
            Ok(Ok(())) => ("ok", Some(started.elapsed().as_secs_f64() * 1000.0)),
            Ok(Err(e)) => {
                tracing::warn!(error = %ErrorChain(&e), "status page: store unreachable");
                ("unreachable", None)
            }
            Err(_) => ("timed out", None),
        };
        let mut micros = Vec::new();
        for (_, activity) in routes {
            activity.recent_store_micros(now_second, &mut micros);
        }
        micros.sort_unstable();
        let ms = |q| quantile(&micros, q).map(|us| f64::from(us) / 1000.0);
        StoreReport {
            kind: self.store_kind,
            health,
            ping_ms,
            latency: LatencyReport {
                window_seconds: LATENCY_WINDOW.as_secs(),
                samples: micros.len(),
                p50_ms: ms(0.5),
                p99_ms: ms(0.99),
            },
        }
    }

    async fn route_report(
        &self,
        name: &RouteName,
        activity: &RouteActivity,
        now_second: u64,
    ) -> RouteReport {
        let totals: BTreeMap<_, _> = OUTCOMES
            .iter()
            .map(|&o| (o.as_str(), activity.total(o)))
            .collect();
        let per_second = OUTCOMES
            .iter()
            .map(|&o| (o.as_str(), activity.series(now_second, o).to_vec()));
        let (forwarded, replayed) = (
            activity.total(Outcome::Forwarded),
            activity.total(Outcome::Replayed),
        );
        #[allow(clippy::cast_precision_loss)]
        let replay_ratio =
            (forwarded + replayed > 0).then(|| replayed as f64 / (forwarded + replayed) as f64);
        let inbox = match self.inbox(name) {
            Some(stats) => Some(Counted::probe(stats.queues()).await),
            None => None,
        };
        RouteReport {
            name: name.as_str().to_owned(),
            totals,
            per_second: per_second.collect(),
            replay_ratio,
            in_flight: activity.in_flight(),
            inbox,
        }
    }
}

fn reload_report(reload: Reload) -> ReloadReport {
    ReloadReport {
        at_ms: reload.at_ms,
        result: if reload.applied { "ok" } else { "error" },
    }
}

/// The newest [`KEPT_DECISIONS`] decisions across all routes, newest first.
fn last_decisions(routes: &[(RouteName, Arc<RouteActivity>)]) -> Vec<DecisionReport> {
    let mut all: Vec<(Decision, &RouteName)> = Vec::new();
    let mut one_route = Vec::with_capacity(KEPT_DECISIONS);
    for (name, activity) in routes {
        one_route.clear();
        activity.copy_decisions(&mut one_route);
        all.extend(one_route.iter().map(|d| (*d, name)));
    }
    all.sort_unstable_by_key(|(d, _)| std::cmp::Reverse(d.at_ms));
    all.truncate(KEPT_DECISIONS);
    let report = |(d, route): (Decision, &RouteName)| DecisionReport {
        at_ms: d.at_ms,
        route: route.as_str().to_owned(),
        outcome: d.outcome.as_str(),
        status: d.status,
        grpc_status: d.grpc_status,
        key: d.key_id().map(str::to_owned),
    };
    all.into_iter().map(report).collect()
}
