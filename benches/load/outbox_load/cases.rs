//! The cases: a backlog drained, and a steady rate with and without NOTIFY.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idempotency_outbox::{enqueue, schema_sql, Event, EventId, TableName};
use idempotency_postgres::{pool, ConnectOptions, DatabaseUrl, Pool};
use idempotency_test_support::postgres_server::PostgresServer;
use tokio::time::Instant;

use crate::receiver::Receiver;
use crate::relay::{self, Relay};
use crate::{consume, cpu, nats, Cli};

/// Connections committing the application's rows.
const APP_CONNECTIONS: usize = 16;
/// How long the relay may take to deliver every row after the last commit.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(120);

#[derive(Debug, serde::Serialize)]
pub struct Outcome {
    pub case: String,
    pub rows: u64,
    /// Rows per second offered (committed by the application), for the rate cases.
    pub committed_per_s: Option<f64>,
    /// Rows per second from the first delivery to the last.
    pub delivered_per_s: f64,
    /// From the relay's start (drain) or the last commit (rate cases) to every row marked.
    pub all_marked_s: f64,
    pub latency_ms: Option<[f64; 3]>,
    /// The relay's, the consumer's (the proxy), or the raw consumer's (this program).
    pub relay_cpu_us_per_row: f64,
    pub postgres_cpu_us_per_row: Option<f64>,
    pub nats_cpu_us_per_row: Option<f64>,
    /// Redis's, behind the consumer with the Redis store.
    pub store_cpu_us_per_row: Option<f64>,
    pub repeated: usize,
}

impl Outcome {
    pub fn line(&self) -> String {
        format!("{self:?}")
    }
}

pub async fn run(case: &str, cli: &Cli, server: &PostgresServer) -> Result<Outcome, String> {
    if let Some(deliverer) = case.strip_prefix("consume-") {
        return consume::run(deliverer, cli).await;
    }
    let url = server.fresh_database();
    let pool = connect(&url)?;
    let notify = case != "poll";
    let ddl = schema_sql(&TableName::default(), notify.then_some("outbox"));
    let client = pool.get().await.map_err(|e| e.to_string())?;
    client
        .batch_execute(&ddl)
        .await
        .map_err(|e| e.to_string())?;
    drop(client);
    let receiver = Receiver::default();
    let port = receiver.start().await.map_err(|e| e.to_string())?;
    let settings = relay::Settings {
        database: &url,
        deliver_to: format!("http://127.0.0.1:{port}/events"),
        notify,
        concurrency: cli.concurrency,
        block: false,
        extra: "",
    };
    match case {
        "drain" => drain(cli, server, &pool, &receiver, &settings).await,
        "drain-nats" => nats::drain(cli, server, &pool, &url).await,
        "blocked" => {
            behind_a_dead_row(cli, &pool).await?;
            let settings = relay::Settings {
                block: true,
                ..settings
            };
            let mut outcome = drain(cli, server, &pool, &receiver, &settings).await?;
            outcome.case = "blocked".into();
            Ok(outcome)
        }
        "notify" | "poll" => steady(case, cli, server, &pool, &receiver, &settings).await,
        other => Err(format!(
            "no case {other:?} (drain, drain-nats, blocked, notify, poll, consume-raw, \
             consume-file, consume-redis)"
        )),
    }
}

async fn drain(
    cli: &Cli,
    server: &PostgresServer,
    pool: &Pool,
    receiver: &Receiver,
    settings: &relay::Settings<'_>,
) -> Result<Outcome, String> {
    insert_backlog(cli, pool).await?;
    let postgres_before = cpu::postgres(server.pid());
    let started = Instant::now();
    let relay = Relay::start(&cli.binary, settings).await?;
    let marked = until_marked(pool, cli.backlog, started + DRAIN_LIMIT).await?;
    let all_marked_s = marked.duration_since(started).as_secs_f64();
    let relay_cpu = cpu::process(relay.pid());
    let postgres_cpu = cpu::postgres(server.pid()).saturating_sub(postgres_before);
    drop(relay);
    let arrivals = receiver.take();
    let times: Vec<Instant> = arrivals.first.values().copied().collect();
    Ok(Outcome {
        case: "drain".into(),
        rows: cli.backlog,
        committed_per_s: None,
        delivered_per_s: per_second(&times),
        all_marked_s,
        latency_ms: None,
        relay_cpu_us_per_row: micros(relay_cpu, cli.backlog),
        postgres_cpu_us_per_row: Some(micros(postgres_cpu, cli.backlog)),
        nats_cpu_us_per_row: None,
        store_cpu_us_per_row: None,
        repeated: arrivals.repeated,
    })
}

/// `--backlog` rows committed in one statement, the table analyzed.
pub async fn insert_backlog(cli: &Cli, pool: &Pool) -> Result<(), String> {
    let client = pool.get().await.map_err(|e| e.to_string())?;
    let insert = "INSERT INTO outbox (id, topic, payload) SELECT 'b' || g, 'bench', \
                  jsonb_build_object('type', 'payment.confirmed', 'order', g) \
                  FROM generate_series(1, $1::int8) g";
    client
        .execute(insert, &[&(cli.backlog as i64)])
        .await
        .map_err(|e| e.to_string())?;
    client
        .batch_execute("ANALYZE outbox")
        .await
        .map_err(|e| e.to_string())?;
    if cli.no_flush_wait {
        let sql = "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET synchronous_commit = off', \
                   current_database()); END $$";
        client.batch_execute(sql).await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// `blocked`: before the backlog, `--delivered-kept` delivered rows (kept, as `keep_delivered`
/// keeps them) and one aggregate whose first row is dead with `--blocked` rows behind it,
/// inserted through the order trigger as an application's would be.
async fn behind_a_dead_row(cli: &Cli, pool: &Pool) -> Result<(), String> {
    // A connection of its own: its statement timeout is lifted for the long inserts.
    let client = pool.get().await.map_err(|e| e.to_string())?;
    let sql = format!(
        "SET statement_timeout = 0;
         INSERT INTO outbox (id, topic, payload, delivered_at, holding)
             SELECT 'd' || g, 'bench', jsonb_build_object('order', g), now(), false
             FROM generate_series(1, {delivered}) g;
         INSERT INTO outbox (id, topic, aggregate_id, payload) VALUES ('s0', 'bench', 'stuck', '{{}}');
         UPDATE outbox SET dead_at = now(), attempts = 1, last_error = 'bench' WHERE id = 's0';
         INSERT INTO outbox (id, topic, aggregate_id, payload)
             SELECT 's' || g, 'bench', 'stuck', jsonb_build_object('order', g)
             FROM generate_series(1, {blocked}) g;",
        delivered = cli.delivered_kept,
        blocked = cli.blocked,
    );
    client
        .batch_execute(&sql)
        .await
        .map_err(|e| e.to_string())?;
    // On its own: VACUUM cannot run in the batch's implicit transaction.
    client
        .batch_execute("VACUUM ANALYZE outbox")
        .await
        .map_err(|e| e.to_string())
}

async fn steady(
    case: &str,
    cli: &Cli,
    server: &PostgresServer,
    pool: &Pool,
    receiver: &Receiver,
    settings: &relay::Settings<'_>,
) -> Result<Outcome, String> {
    let relay = Relay::start(&cli.binary, settings).await?;
    let relay_before = cpu::process(relay.pid());
    let postgres_before = cpu::postgres(server.pid());
    let rows = cli.rate * cli.seconds;
    let started = Instant::now();
    let commits = commit_at_rate(pool, rows, cli.rate, cli.rows_per_commit).await?;
    let committed_s = started.elapsed().as_secs_f64();
    let last_commit = Instant::now();
    let marked = until_marked(pool, rows, last_commit + DRAIN_LIMIT).await?;
    let relay_cpu = cpu::process(relay.pid()).saturating_sub(relay_before);
    let postgres_cpu = cpu::postgres(server.pid()).saturating_sub(postgres_before);
    drop(relay);
    let arrivals = receiver.take();
    let mut latencies: Vec<f64> = commits
        .iter()
        .filter_map(|(id, committed)| {
            let arrived = arrivals.first.get(id)?;
            Some(arrived.saturating_duration_since(*committed).as_secs_f64() * 1000.0)
        })
        .collect();
    latencies.sort_by(f64::total_cmp);
    let times: Vec<Instant> = arrivals.first.values().copied().collect();
    Ok(Outcome {
        case: case.into(),
        rows,
        committed_per_s: Some(rows as f64 / committed_s),
        delivered_per_s: per_second(&times),
        all_marked_s: marked.duration_since(last_commit).as_secs_f64(),
        latency_ms: Some([
            quantile(&latencies, 0.50),
            quantile(&latencies, 0.99),
            quantile(&latencies, 1.0),
        ]),
        relay_cpu_us_per_row: micros(relay_cpu, rows),
        postgres_cpu_us_per_row: Some(micros(postgres_cpu, rows)),
        nats_cpu_us_per_row: None,
        store_cpu_us_per_row: None,
        repeated: arrivals.repeated,
    })
}

/// The application: `rows` rows in transactions of `per_commit` rows, the one holding row `i`
/// begun no earlier than `i / rate` seconds after the start, on `APP_CONNECTIONS` connections;
/// when each row's commit returned.
async fn commit_at_rate(
    pool: &Pool,
    rows: u64,
    rate: u64,
    per_commit: u64,
) -> Result<Vec<(String, Instant)>, String> {
    let per_commit = per_commit.max(1);
    let transactions = rows.div_ceil(per_commit);
    let next = Arc::new(AtomicU64::new(0));
    let commits = Arc::new(Mutex::new(Vec::with_capacity(rows as usize)));
    let start = Instant::now();
    let tasks: Vec<_> = (0..APP_CONNECTIONS)
        .map(|_| {
            let (pool, next, commits) = (pool.clone(), next.clone(), commits.clone());
            tokio::spawn(async move {
                let mut client = pool.get().await.map_err(|e| e.to_string())?;
                loop {
                    let t = next.fetch_add(1, Ordering::Relaxed);
                    if t >= transactions {
                        return Ok::<_, String>(());
                    }
                    let first = t * per_commit;
                    let due = Duration::from_secs_f64(first as f64 / rate as f64);
                    tokio::time::sleep_until(start + due).await;
                    let ids: Vec<String> = (first..rows.min(first + per_commit))
                        .map(|i| format!("r{i}"))
                        .collect();
                    let transaction = client.transaction().await.map_err(|e| e.to_string())?;
                    for id in &ids {
                        enqueue(&transaction, &TableName::default(), &event(id))
                            .await
                            .map_err(|e| e.to_string())?;
                    }
                    transaction.commit().await.map_err(|e| e.to_string())?;
                    let committed = Instant::now();
                    let mut commits = commits.lock().unwrap();
                    commits.extend(ids.into_iter().map(|id| (id, committed)));
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.map_err(|e| e.to_string())??;
    }
    let commits = std::mem::take(&mut *commits.lock().unwrap());
    Ok(commits)
}

/// A payment's event, about the size of a real one.
fn event(id: &str) -> Event {
    let body = serde_json::json!({ "type": "payment.confirmed", "order": id });
    Event::json(EventId::new(id).expect("an id"), "bench", &body).expect("JSON")
}

/// Waits until `rows` rows are marked delivered; when they were.
pub async fn until_marked(pool: &Pool, rows: u64, deadline: Instant) -> Result<Instant, String> {
    let client = pool.get().await.map_err(|e| e.to_string())?;
    // The rows still to mark, counted through the claim's own index: rows waiting behind a
    // dead row (the blocked case) are not among them, nor are delivered rows kept.
    let sql = "SELECT count(*) FROM outbox WHERE delivered_at IS NULL AND dead_at IS NULL \
               AND NOT waiting";
    let _ = rows;
    while Instant::now() < deadline {
        let left: i64 = client
            .query_one(sql, &[])
            .await
            .map_err(|e| e.to_string())?
            .get(0);
        if left == 0 {
            return Ok(Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(format!(
        "not every row was delivered within {DRAIN_LIMIT:?}"
    ))
}

pub fn per_second(times: &[Instant]) -> f64 {
    let (Some(first), Some(last)) = (times.iter().min(), times.iter().max()) else {
        return 0.0;
    };
    let span = last.duration_since(*first).as_secs_f64();
    if span > 0.0 {
        (times.len() - 1) as f64 / span
    } else {
        0.0
    }
}

pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let index = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[index]
}

pub fn micros(cpu: Duration, rows: u64) -> f64 {
    cpu.as_secs_f64() * 1e6 / rows.max(1) as f64
}

fn connect(url: &str) -> Result<Pool, String> {
    let url = DatabaseUrl::resolve(url).map_err(|e| e.to_string())?;
    let options = ConnectOptions {
        pool_size: APP_CONNECTIONS + 2,
        ..ConnectOptions::default()
    };
    pool(&url, &options).map_err(|e| e.to_string())
}

/// The table of every case, then one JSON line.
pub fn print(cli: &Cli, results: &[Outcome]) {
    let cpus = std::thread::available_parallelism().map_or(0, usize::from);
    println!(
        "\nOne relay, deliver_concurrency {}, PostgreSQL on the same machine with its durable \
         defaults, {cpus} CPUs\n",
        cli.concurrency
            .map_or("default (16)".into(), |c| c.to_string()),
    );
    println!("| case | rows | committed/s | delivered/s | all marked after | p50 | p99 | max | relay (consumer) CPU/row | Postgres CPU/row | nats-server CPU/row | Redis CPU/row | sent twice |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let cpu = |v: Option<f64>| v.map_or("—".into(), |v| format!("{v:.0} µs"));
    for r in results {
        let offered = r.committed_per_s.map_or("—".into(), |c| format!("{c:.0}"));
        let [p50, p99, max] = r
            .latency_ms
            .map_or(["—".into(), "—".into(), "—".into()], |l| {
                l.map(|v| format!("{v:.1} ms"))
            });
        println!(
            "| {} | {} | {offered} | {:.0} | {:.2} s | {p50} | {p99} | {max} | {:.0} µs | {} | {} | {} | {} |",
            r.case,
            r.rows,
            r.delivered_per_s,
            r.all_marked_s,
            r.relay_cpu_us_per_row,
            cpu(r.postgres_cpu_us_per_row),
            cpu(r.nats_cpu_us_per_row),
            cpu(r.store_cpu_us_per_row),
            r.repeated
        );
    }
    println!("\n{}", serde_json::json!({ "results": results }));
}
