//! The brokers campaign (`run.sh --scenario brokers`): the outbox campaign's application
//! commits events into an outbox table on a private PostgreSQL (and rolls some back); relays
//! (the release binary with `[[outboxes]]`) publish them to JetStream on a private
//! `nats-server -js`; a consumer (the binary with `[[consumers]]`) delivers the stream to the
//! outbox campaign's receiver, which acts on every request it answers `2xx`. Meanwhile the
//! relays, the consumer and `nats-server` are killed (SIGKILL) and restarted, and the receiver
//! fails a share of its answers. Then the faults end, everything pending is delivered, and the
//! checker (`check.rs`) judges the histories: every committed row acted on once, in `seq` order
//! per aggregate, none rolled back sent.

mod check;
mod faults;
mod processes;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use idempotency_outbox::{schema_sql, TableName};
use idempotency_postgres::Pool;
use idempotency_test_support::postgres_server::PostgresServer;
use tokio::time::Instant;

use crate::history;
use crate::outbox::app::App;
use crate::outbox::receiver::{Misbehaviour, Receiver};
use crate::outbox::{self, check as outbox_check};
use faults::Targets;
use processes::Dedup;

pub use check::{check, load, report};

pub struct Settings {
    pub relays: usize,
    pub duration: Duration,
    pub seed: u64,
    pub dir: PathBuf,
    pub binary: PathBuf,
}

/// Application workers, each committing one transaction at a time.
const WORKERS: usize = 4;
/// How long the consumer may take to act on every delivered row once the faults are over.
const SETTLE_BUDGET: Duration = Duration::from_secs(120);
/// How long the receiver must stay quiet before the run ends: a late redelivery shows.
const QUIET: Duration = Duration::from_secs(3);

/// Whether `dir` holds a brokers campaign's histories.
pub fn is_brokers_run(dir: &Path) -> bool {
    let info = std::fs::read(dir.join(history::RUN)).unwrap_or_default();
    let info: serde_json::Value = serde_json::from_slice(&info).unwrap_or_default();
    info["scenario"] == "brokers"
}

/// Runs the campaign and writes its histories to `settings.dir`.
pub async fn run(settings: &Settings) -> Result<(), String> {
    history::now();
    let dir = &settings.dir;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let dedup = Dedup::from_env();
    if dedup == Dedup::Off {
        println!("chaos: CHAOS_BROKEN=no-dedup: the stream and the consumer forget ids at once");
    }
    let Some(database) = PostgresServer::start().await else {
        return Err("no PostgreSQL to run the brokers campaign on".into());
    };
    let url = database.url();
    let app_pool = outbox::connect(&url)?;
    let ddl = schema_sql(&TableName::default(), Some("outbox"));
    let client = app_pool.get().await.map_err(|e| format!("postgres: {e}"))?;
    client
        .batch_execute(&ddl)
        .await
        .map_err(|e| format!("the DDL: {e}"))?;
    drop(client);
    let broker = processes::broker(dir).await?;
    processes::create_stream(broker.port, dedup).await?;
    let receiver = Receiver::new(settings.seed, outbox::journal(dir, outbox_check::RECEIVER)?);
    let receiver_port = receiver
        .start()
        .await
        .map_err(|e| format!("receiver: {e}"))?;
    let consumer =
        processes::consumer(&settings.binary, dir, broker.port, receiver_port, dedup).await?;
    let mut relays = Vec::new();
    for index in 0..settings.relays {
        relays.push(processes::relay(&settings.binary, dir, index, &url, broker.port).await?);
    }
    let targets = Arc::new(Targets {
        relays,
        consumer,
        broker,
        receiver,
    });
    let app = Arc::new(App {
        pool: app_pool,
        journal: outbox::journal(dir, outbox_check::APP)?,
    });
    faulty_phase(settings, &targets, &app).await?;
    outbox::settle(&app.pool).await;
    settle(&app.pool, &targets.receiver).await;
    for relay in &targets.relays {
        relay.kill().await;
    }
    targets.consumer.kill().await;
    targets.broker.kill().await;
    outbox::dump_rows(&app.pool, &dir.join(outbox_check::ROWS)).await?;
    app.journal.flush();
    targets.receiver.flush();
    drop(database);
    Ok(())
}

async fn faulty_phase(
    settings: &Settings,
    targets: &Arc<Targets>,
    app: &Arc<App>,
) -> Result<(), String> {
    let chains = faults::plan(settings.seed, settings.relays, settings.duration);
    let planned: usize = chains.iter().map(Vec::len).sum();
    let faults = Arc::new(outbox::journal(&settings.dir, history::FAULTS)?);
    let info = serde_json::json!({
        "scenario": "brokers", "seed": settings.seed, "relays": settings.relays,
        "duration_secs": settings.duration.as_secs(), "planned_faults": planned,
    });
    let path = settings.dir.join(history::RUN);
    std::fs::write(&path, info.to_string()).map_err(|e| format!("{}: {e}", path.display()))?;
    println!(
        "chaos: {planned} faults planned over {}s; histories in {}",
        settings.duration.as_secs(),
        settings.dir.display()
    );
    let start = Instant::now();
    let nemesis = tokio::spawn(faults::run(chains, targets.clone(), faults.clone(), start));
    let until = start + settings.duration;
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| tokio::spawn(app.clone().run(w, settings.seed, until)))
        .collect();
    let mut committed = 0;
    for worker in workers {
        committed += worker.await.map_err(|e| format!("a worker failed: {e}"))?;
    }
    nemesis
        .await
        .map_err(|e| format!("the nemesis failed: {e}"))?;
    faults.flush();
    targets.receiver.set(Misbehaviour::None, 0.0);
    println!(
        "chaos: faults over after {:.0}s; {committed} events committed; waiting for the consumer",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Waits until the receiver has had at least one effect per delivered row and then none for
/// [`QUIET`], or the budget is spent (the checker then counts the rows it never acted on).
async fn settle(pool: &Pool, receiver: &Receiver) {
    let deadline = Instant::now() + SETTLE_BUDGET;
    let sql = "SELECT count(*) FROM outbox WHERE delivered_at IS NOT NULL";
    let (mut seen, mut since) = (receiver.effects(), Instant::now());
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let effects = receiver.effects();
        if effects != seen {
            (seen, since) = (effects, Instant::now());
            continue;
        }
        let Ok(client) = pool.get().await else {
            continue;
        };
        let Ok(row) = client.query_one(sql, &[]).await else {
            continue;
        };
        if effects >= row.get::<_, i64>(0) as u64 && since.elapsed() >= QUIET {
            return;
        }
    }
    println!(
        "chaos: the receiver was still busy after {}s",
        SETTLE_BUDGET.as_secs()
    );
}
