//! The nemesis: a schedule of faults drawn from the seed before the campaign starts, then
//! carried out on time, overlapping freely across targets.
//!
//! Faults on one target never overlap (a process is not paused while it is down); faults on
//! different targets do, as real outages do: a proxy may be paused while Redis restarts and the
//! upstream resets connections. Every fault is logged with when it really began and when its
//! target was back (a restarted process listening again).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::time::Instant;

use crate::history::{self, Fault, FaultKind, Journal};
use crate::proxies::{Proxy, LEASE};
use crate::relay::Link;
use crate::rng::Rng;
use crate::stores::{Store, StoreKind};
use crate::upstream::{Misbehaviour, Upstream};

/// The mean time between two faults' starts.
const MEAN_GAP: Duration = Duration::from_secs(3);

/// One fault of the schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    pub at: Duration,
    pub kind: FaultKind,
    pub target: usize,
    pub length: Duration,
    /// The relay's delay, or the upstream's longest delay.
    pub delay: Duration,
    /// The share of upstream requests that misbehave.
    pub share: f64,
}

/// What the nemesis acts on.
pub struct Targets {
    pub proxies: Vec<Proxy>,
    pub store: Store,
    pub upstream: Arc<Upstream>,
}

/// The schedule for a campaign of `duration`: same seed and settings, same schedule.
pub fn plan(seed: u64, store: StoreKind, replicas: usize, duration: Duration) -> Vec<Planned> {
    let mut rng = Rng::stream(seed, 7);
    let kinds = kinds(store);
    let nodes = if store == StoreKind::Cluster { 3 } else { 1 };
    let mut busy_until: HashMap<String, Duration> = HashMap::new();
    let mut schedule = Vec::new();
    let mut at = rng.exponential(MEAN_GAP);
    while at < duration {
        let kind = *rng.pick(&kinds);
        let mut fault = draw(&mut rng, kind, replicas, nodes);
        let free = busy_until
            .entry(target_name(fault.kind, fault.target))
            .or_default();
        fault.at = at.max(*free + Duration::from_millis(200));
        *free = fault.at + fault.length;
        if fault.at < duration {
            schedule.push(fault);
        }
        at += rng.exponential(MEAN_GAP);
    }
    schedule.sort_by_key(|f| f.at);
    schedule
}

/// The faults a store can suffer: proxy kills and pauses twice as often as the rest.
fn kinds(store: StoreKind) -> Vec<FaultKind> {
    use FaultKind::*;
    let mut kinds = vec![ProxyKill, ProxyKill, ProxyPause, ProxyPause];
    kinds.extend([UpstreamSlow, UpstreamReset, Upstream500, Upstream503]);
    if store != StoreKind::File {
        kinds.extend([StoreKill, StorePause, RelayDelay, RelayStall, RelayCut]);
    }
    kinds
}

/// A fault's target, length and strength. Proxy pauses are mostly longer than the lease (the
/// holder's keys free while it sleeps), sometimes far shorter (they must free nothing).
fn draw(rng: &mut Rng, kind: FaultKind, replicas: usize, nodes: u64) -> Planned {
    use FaultKind::*;
    let ms = Duration::from_millis;
    let target = match kind {
        ProxyKill | ProxyPause => rng.below(replicas as u64) as usize,
        StoreKill | StorePause | RelayDelay | RelayStall | RelayCut => rng.below(nodes) as usize,
        _ => 0,
    };
    let (length, delay) = match kind {
        ProxyKill => (rng.between(ms(200), ms(4000)), Duration::ZERO),
        ProxyPause if rng.chance(0.25) => (rng.between(ms(100), ms(500)), Duration::ZERO),
        ProxyPause => (rng.between(LEASE + ms(500), LEASE * 3), Duration::ZERO),
        StoreKill | StorePause | RelayStall => (rng.between(ms(300), ms(5000)), Duration::ZERO),
        RelayCut => (rng.between(ms(200), ms(3000)), Duration::ZERO),
        RelayDelay => (
            rng.between(ms(2000), ms(8000)),
            rng.between(ms(20), ms(300)),
        ),
        UpstreamSlow => (rng.between(ms(2000), ms(8000)), ms(5000)),
        UpstreamReset | Upstream500 | Upstream503 => {
            (rng.between(ms(2000), ms(8000)), Duration::ZERO)
        }
    };
    let share = match kind {
        UpstreamSlow | UpstreamReset | Upstream500 | Upstream503 => 0.3 + 0.5 * rng.unit(),
        _ => 0.0,
    };
    Planned {
        at: Duration::ZERO,
        kind,
        target,
        length,
        delay,
        share,
    }
}

pub fn target_name(kind: FaultKind, target: usize) -> String {
    use FaultKind::*;
    match kind {
        ProxyKill | ProxyPause => format!("proxy-{target}"),
        StoreKill | StorePause => format!("redis-{target}"),
        RelayDelay | RelayStall | RelayCut => format!("relay-{target}"),
        _ => "upstream".to_owned(),
    }
}

/// A digest of the schedule, printed so two runs can be seen to share one.
pub fn digest(schedule: &[Planned]) -> String {
    let text: String = schedule.iter().map(|f| format!("{f:?}\n")).collect();
    hex::encode(&Sha256::digest(text.as_bytes())[..6])
}

/// Carries out the schedule from `start`; returns when every fault has ended.
pub async fn run(
    schedule: Vec<Planned>,
    targets: Arc<Targets>,
    journal: Arc<Journal<Fault>>,
    start: Instant,
) {
    let mut tasks = Vec::new();
    for fault in schedule {
        let (targets, journal) = (targets.clone(), journal.clone());
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep_until(start + fault.at).await;
            let begun = history::now();
            let detail = inflict(&targets, &fault).await;
            journal.write(&Fault {
                kind: fault.kind,
                target: target_name(fault.kind, fault.target),
                start: begun,
                end: history::now(),
                detail,
            });
        }));
    }
    for task in tasks {
        task.await.expect("a fault task does not panic");
    }
}

/// Applies one fault, waits out its length, and undoes it; says what it did.
async fn inflict(targets: &Targets, fault: &Planned) -> String {
    use FaultKind::*;
    match fault.kind {
        ProxyKill | ProxyPause => on_proxy(&targets.proxies[fault.target], fault).await,
        StoreKill | StorePause => on_store(&targets.store, fault).await,
        RelayDelay | RelayStall | RelayCut => on_relay(&targets.store, fault).await,
        UpstreamSlow | UpstreamReset | Upstream500 | Upstream503 => {
            on_upstream(&targets.upstream, fault).await
        }
    }
}

fn secs(duration: Duration) -> String {
    format!("{:.2}s", duration.as_secs_f64())
}

async fn on_proxy(proxy: &Proxy, fault: &Planned) -> String {
    if fault.kind == FaultKind::ProxyPause {
        proxy.pause().await;
        tokio::time::sleep(fault.length).await;
        proxy.resume().await;
        return format!("paused {}", secs(fault.length));
    }
    proxy.kill().await;
    tokio::time::sleep(fault.length).await;
    let back = proxy.start().await;
    let failed = if back { "" } else { ", NOT restarted" };
    format!("down {}{failed}", secs(fault.length))
}

async fn on_store(store: &Store, fault: &Planned) -> String {
    if fault.kind == FaultKind::StorePause {
        let process = store.nodes[fault.target].process.lock().await;
        process.pause();
        tokio::time::sleep(fault.length).await;
        process.resume();
        return format!("paused {}", secs(fault.length));
    }
    store.kill(fault.target).await;
    tokio::time::sleep(fault.length).await;
    let back = store.restart(fault.target).await;
    let failed = if back { "" } else { ", NOT restarted" };
    format!("down {}{failed}", secs(fault.length))
}

async fn on_relay(store: &Store, fault: &Planned) -> String {
    let relay = &store.nodes[fault.target].relay;
    let link = match fault.kind {
        FaultKind::RelayDelay => Link::Delay(fault.delay),
        FaultKind::RelayStall => Link::Stall,
        _ => Link::Cut,
    };
    relay.set(link);
    tokio::time::sleep(fault.length).await;
    relay.set(Link::Pass);
    format!("{link:?} for {}", secs(fault.length))
}

async fn on_upstream(upstream: &Upstream, fault: &Planned) -> String {
    let misbehaviour = match fault.kind {
        FaultKind::UpstreamSlow => Misbehaviour::Slow(Duration::from_millis(500), fault.delay),
        FaultKind::UpstreamReset => Misbehaviour::Reset,
        FaultKind::Upstream500 => Misbehaviour::Fail500,
        _ => Misbehaviour::Refuse503,
    };
    upstream.set(misbehaviour, fault.share);
    tokio::time::sleep(fault.length).await;
    upstream.set(Misbehaviour::None, 0.0);
    let share = fault.share * 100.0;
    format!("{share:.0}% of requests for {}", secs(fault.length))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_seed_plans_one_schedule_and_targets_never_overlap() {
        let plan_of = |seed| plan(seed, StoreKind::Cluster, 3, Duration::from_secs(600));
        let schedule = plan_of(11);
        assert_eq!(schedule, plan_of(11));
        assert_ne!(schedule, plan_of(12));
        let mut last_end: HashMap<String, Duration> = HashMap::new();
        for fault in &schedule {
            let end = last_end
                .entry(target_name(fault.kind, fault.target))
                .or_default();
            assert!(
                fault.at >= *end,
                "{fault:?} overlaps the fault before it on its target"
            );
            *end = fault.at + fault.length;
        }
        assert!(schedule.len() > 100, "about one fault every 3s");
    }
}
