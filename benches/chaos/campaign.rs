//! One campaign, start to end: the store, the upstream and the proxies come up; clients and
//! the nemesis run side by side for the duration; every fault is undone; then, after the
//! leases of dead holders have run out, a sweep asks again for every operation, so that an
//! answer lost to a crash shows. The histories are then checked.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::clients::{Clients, Operation};
use crate::history::{self, Journal, RunInfo};
use crate::nemesis::{self, Targets};
use crate::prefill::{self, Prefill};
use crate::proxies::{self, LEASE, UPSTREAM_TIMEOUT};
use crate::rng::Rng;
use crate::stores::{self, Store, StoreKind};
use crate::upstream::Upstream;

pub struct Settings {
    pub store: StoreKind,
    pub replicas: usize,
    pub duration: Duration,
    pub seed: u64,
    pub clients: usize,
    pub dir: PathBuf,
    pub binary: PathBuf,
}

/// How long the sweep keeps retrying one operation: past the known stretches of `503` after a
/// cluster master restarts.
const SWEEP_BUDGET: Duration = Duration::from_secs(120);

/// Runs the campaign and writes its histories to `settings.dir`; whether the file store kept
/// every record it was prefilled with (`prefill.rs`; always, for the other stores).
pub async fn run(settings: &Settings) -> Result<bool, String> {
    history::now();
    let (targets, clients, prefilled) = start(settings).await?;
    let schedule = nemesis::plan(
        settings.seed,
        settings.store,
        settings.replicas,
        settings.duration,
    );
    write_run_info(settings, &schedule)?;
    let faults = Arc::new(journal(&settings.dir, history::FAULTS)?);
    println!(
        "chaos: {} faults planned over {}s; histories in {}",
        schedule.len(),
        settings.duration.as_secs(),
        settings.dir.display()
    );
    let operations = faulty_phase(settings, schedule, &targets, &clients, &faults).await?;
    // A reservation left by a killed or paused holder frees only when its lease runs out.
    tokio::time::sleep(LEASE * 2).await;
    sweep(&clients, operations, settings).await;
    clients.journal.flush();
    targets.upstream.flush();
    stop(&targets).await;
    let Some(prefilled) = prefilled else {
        return Ok(true);
    };
    match prefill::check(&prefilled).await {
        Ok(summary) => println!("chaos: {summary}"),
        Err(lost) => {
            println!("chaos: {lost}");
            return Ok(false);
        }
    }
    Ok(true)
}

/// Brings up the store (a file store prefilled), the upstream and the proxies, and readies the
/// clients.
async fn start(
    settings: &Settings,
) -> Result<(Arc<Targets>, Arc<Clients>, Option<Prefill>), String> {
    let dir = &settings.dir;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let store = Store::start(settings.store, dir).await?;
    let prefilled = match settings.store {
        StoreKind::File => {
            Some(prefill::write(&stores::file_path(dir, 0), settings.duration).await?)
        }
        _ => None,
    };
    let upstream = Upstream::new(settings.seed, journal(dir, history::EXECUTIONS)?);
    let upstream_ports = upstream
        .start(settings.replicas)
        .await
        .map_err(|e| format!("upstream: {e}"))?;
    let proxies = proxies::start(&settings.binary, &store, &upstream_ports, dir).await?;
    let clients = Arc::new(Clients {
        ports: proxies.iter().map(|p| p.port).collect(),
        journal: journal(dir, history::ATTEMPTS)?,
    });
    let targets = Arc::new(Targets {
        proxies,
        store,
        upstream,
    });
    Ok((targets, clients, prefilled))
}

/// Clients and nemesis side by side for the duration; returns every operation started.
async fn faulty_phase(
    settings: &Settings,
    schedule: Vec<nemesis::Planned>,
    targets: &Arc<Targets>,
    clients: &Arc<Clients>,
    faults: &Arc<Journal<history::Fault>>,
) -> Result<Vec<Operation>, String> {
    let start = Instant::now();
    let nemesis = nemesis::run(schedule, targets.clone(), faults.clone(), start);
    let nemesis = tokio::spawn(nemesis);
    let until = start + settings.duration;
    let workers: Vec<_> = (0..settings.clients)
        .map(|c| tokio::spawn(clients.clone().run(c, settings.seed, until)))
        .collect();
    let progress = tokio::spawn(progress(start, settings.duration));
    let mut operations = Vec::new();
    for worker in workers {
        operations.extend(worker.await.map_err(|e| format!("a client failed: {e}"))?);
    }
    let nemesis = nemesis.await;
    progress.abort();
    faults.flush();
    nemesis.map_err(|e| format!("the nemesis failed: {e}"))?;
    println!(
        "chaos: faults over after {:.0}s; sweeping {} operations",
        start.elapsed().as_secs_f64(),
        operations.len()
    );
    Ok(operations)
}

async fn stop(targets: &Targets) {
    for proxy in &targets.proxies {
        proxy.kill().await;
    }
    for node in 0..targets.store.nodes.len() {
        targets.store.kill(node).await;
    }
}

/// Asks once more for every operation (until it gets a kept answer), spread over the clients.
async fn sweep(clients: &Arc<Clients>, operations: Vec<Operation>, settings: &Settings) {
    let shares = settings.clients.max(1);
    let mut lists: Vec<Vec<Operation>> = vec![Vec::new(); shares];
    for (i, operation) in operations.into_iter().enumerate() {
        lists[i % shares].push(operation);
    }
    let tasks: Vec<_> = lists
        .into_iter()
        .enumerate()
        .map(|(client, list)| {
            let clients = clients.clone();
            let mut rng = Rng::stream(settings.seed, 5000 + client as u64);
            tokio::spawn(async move {
                for operation in list {
                    clients
                        .settle(client, &mut rng, &operation, SWEEP_BUDGET, "sweep")
                        .await;
                }
            })
        })
        .collect();
    for task in tasks {
        let _ = task.await;
    }
}

fn journal<T: serde::Serialize>(dir: &std::path::Path, name: &str) -> Result<Journal<T>, String> {
    Journal::create(&dir.join(name)).map_err(|e| format!("{name}: {e}"))
}

fn write_run_info(settings: &Settings, schedule: &[nemesis::Planned]) -> Result<(), String> {
    let info = RunInfo {
        seed: settings.seed,
        store: format!("{:?}", settings.store).to_lowercase(),
        replicas: settings.replicas,
        clients: settings.clients,
        duration_secs: settings.duration.as_secs(),
        lease_ms: LEASE.as_millis() as u64,
        upstream_timeout_ms: UPSTREAM_TIMEOUT.as_millis() as u64,
        schedule: nemesis::digest(schedule),
        planned_faults: schedule.len(),
    };
    let path = settings.dir.join(history::RUN);
    let text = serde_json::to_vec_pretty(&info).expect("run info serializes");
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// A line every 30 seconds, so a long campaign shows it is alive.
async fn progress(start: Instant, duration: Duration) {
    loop {
        tokio::time::sleep(Duration::from_secs(30)).await;
        println!(
            "chaos: {:.0}s of {}s",
            start.elapsed().as_secs_f64(),
            duration.as_secs()
        );
    }
}
