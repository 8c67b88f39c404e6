//! The outbox campaign (`run.sh --scenario outbox`): an application commits events into an
//! outbox table on a private PostgreSQL (and rolls some back); relays (the release binary with
//! `[[outboxes]]`) deliver them through the proxy (the binary again) to a receiver that acts on
//! every request it answers `2xx`. Meanwhile relays are killed and paused, the database is
//! stopped `-m immediate` and started, and the receiver answers `5xx`, `410` or slowly. Then the
//! faults end, the relays finish what is pending, and the checker (`check.rs`) judges the
//! application's, the table's and the receiver's histories.

pub mod app;
pub mod check;
pub mod faults;
pub mod processes;
pub mod receiver;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use idempotency_outbox::{schema_sql, TableName};
use idempotency_postgres::{pool, ConnectOptions, DatabaseUrl, Pool};
use idempotency_test_support::postgres_server::PostgresServer;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::history::{self, Journal};
use app::App;
use check::FinalRow;
use faults::Targets;
use receiver::{Misbehaviour, Receiver};

pub use check::{check, report, Input};

pub struct Settings {
    pub relays: usize,
    pub duration: Duration,
    pub seed: u64,
    pub dir: PathBuf,
    pub binary: PathBuf,
}

/// Application workers, each committing one transaction at a time.
const WORKERS: usize = 4;
/// How long the relays may take to finish what is pending once the faults are over.
const SETTLE_BUDGET: Duration = Duration::from_secs(120);

/// Whether `dir` holds an outbox campaign's histories.
pub fn is_outbox_run(dir: &Path) -> bool {
    dir.join(check::APP).exists()
}

/// Runs the campaign and writes its histories to `settings.dir`.
pub async fn run(settings: &Settings) -> Result<(), String> {
    history::now();
    let dir = &settings.dir;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let Some(database) = PostgresServer::start().await else {
        return Err("no PostgreSQL to run the outbox campaign on".into());
    };
    let url = database.url();
    let app_pool = connect(&url)?;
    let ddl = schema_sql(&TableName::default(), Some("outbox"));
    let client = app_pool.get().await.map_err(|e| format!("postgres: {e}"))?;
    client
        .batch_execute(&ddl)
        .await
        .map_err(|e| format!("the DDL: {e}"))?;
    drop(client);
    let receiver = Receiver::new(settings.seed, journal(dir, check::RECEIVER)?);
    let receiver_port = receiver
        .start()
        .await
        .map_err(|e| format!("receiver: {e}"))?;
    let front = processes::front_proxy(&settings.binary, dir, receiver_port).await?;
    let mut relays = Vec::new();
    for index in 0..settings.relays {
        relays.push(processes::relay(&settings.binary, dir, index, &url, front.port).await?);
    }
    let targets = Arc::new(Targets {
        relays,
        database: Mutex::new(database),
        receiver,
    });
    let app = Arc::new(App {
        pool: app_pool,
        journal: journal(dir, check::APP)?,
    });
    faulty_phase(settings, &targets, &app).await?;
    settle(&app.pool).await;
    // A slow answer still being written acts before it is recorded.
    tokio::time::sleep(Duration::from_secs(4)).await;
    for relay in &targets.relays {
        relay.kill().await;
    }
    front.kill().await;
    dump_rows(&app.pool, &dir.join(check::ROWS)).await?;
    app.journal.flush();
    targets.receiver.flush();
    Ok(())
}

async fn faulty_phase(
    settings: &Settings,
    targets: &Arc<Targets>,
    app: &Arc<App>,
) -> Result<(), String> {
    let chains = faults::plan(settings.seed, settings.relays, settings.duration);
    let planned: usize = chains.iter().map(Vec::len).sum();
    let faults = Arc::new(journal(&settings.dir, history::FAULTS)?);
    let info = serde_json::json!({
        "scenario": "outbox", "seed": settings.seed, "relays": settings.relays,
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
        "chaos: faults over after {:.0}s; {committed} events committed; waiting for the relays",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Waits until no row is pending, or the budget is spent (the checker then counts them lost).
pub async fn settle(pool: &Pool) {
    let deadline = Instant::now() + SETTLE_BUDGET;
    let sql = "SELECT count(*) FROM outbox WHERE delivered_at IS NULL AND dead_at IS NULL";
    while Instant::now() < deadline {
        if let Ok(client) = pool.get().await {
            if let Ok(row) = client.query_one(sql, &[]).await {
                if row.get::<_, i64>(0) == 0 {
                    return;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "chaos: rows still pending after {}s",
        SETTLE_BUDGET.as_secs()
    );
}

pub async fn dump_rows(pool: &Pool, path: &Path) -> Result<(), String> {
    let client = pool.get().await.map_err(|e| format!("postgres: {e}"))?;
    let sql = "SELECT id, seq, delivered_at IS NOT NULL, dead_at IS NOT NULL, attempts, \
               last_status FROM outbox ORDER BY seq";
    let rows = client
        .query(sql, &[])
        .await
        .map_err(|e| format!("postgres: {e}"))?;
    let out: Journal<FinalRow> =
        Journal::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    for row in rows {
        out.write(&FinalRow {
            id: row.get(0),
            seq: row.get(1),
            delivered: row.get(2),
            dead: row.get(3),
            attempts: row.get(4),
            last_status: row.get(5),
        });
    }
    out.flush();
    Ok(())
}

pub fn connect(url: &str) -> Result<Pool, String> {
    let url = DatabaseUrl::resolve(url).map_err(|e| format!("{e}"))?;
    pool(&url, &ConnectOptions::default()).map_err(|e| format!("{e}"))
}

pub fn journal<T: serde::Serialize>(dir: &Path, name: &str) -> Result<Journal<T>, String> {
    Journal::create(&dir.join(name)).map_err(|e| format!("{name}: {e}"))
}
