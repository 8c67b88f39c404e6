//! The outbox relay's benchmark (`benches/load/outbox.sh`; docs/performance.md, "Outbox
//! relay"): one relay (the release binary, relay only) delivering to a local receiver from a
//! PostgreSQL on the same machine with its durable defaults (`fsync`, `synchronous_commit`).
//!
//! - `drain`: a backlog of `--backlog` rows committed before the relay starts; rows per second
//!   from its first delivery to its last, and the time until every row is marked delivered.
//! - `blocked`: the drain of `--backlog` independent rows, with `--blocked` rows waiting
//!   behind one aggregate's dead first row (`on_dead = "block"`) and `--delivered-kept`
//!   delivered rows in the table: what a claim must not walk.
//! - `notify` / `poll`: the application commits `--rows-per-commit` rows per transaction (1)
//!   at `--rate` rows per second for `--seconds`, with the DDL's NOTIFY trigger and `notify_channel` (`notify`), or
//!   without either (`poll`, the default `poll_interval`); the latency of each row from its
//!   commit returning to the application to its first delivery, p50, p99 and the largest.
//!
//! - `drain-nats`: the drain of `drain`, published to JetStream on a private `nats-server -js`.
//! - `consume-raw`, `consume-file`, `consume-redis`: JetStream to the proxy's consumer (file
//!   store, Redis) to the receiver, and a plain pull consumer as the ceiling: a backlog drained,
//!   then latency from publish to effect at `--rate` (see `consume.rs`).
//!
//! Each case has a database (or broker) of its own and a relay of its own; the relay's,
//! PostgreSQL's and `nats-server`'s CPU time over the case (`/proc`) give CPU per row.

// The modules of this program name what they share `pub`; none of it leaves the program.
#![allow(unreachable_pub)]

mod cases;
mod consume;
mod cpu;
mod nats;
mod receiver;
mod relay;

use std::path::PathBuf;

use clap::Parser;
use idempotency_test_support::postgres_server::PostgresServer;

#[derive(Parser)]
#[command(
    name = "outbox-load",
    about = "The outbox relay's throughput and latency"
)]
struct Cli {
    /// The proxy binary, run as a relay.
    #[arg(long, default_value = "target/release/idempotency-proxy")]
    pub binary: PathBuf,
    /// The cases, in order: drain, drain-nats, blocked, notify, poll, consume-raw,
    /// consume-file, consume-redis.
    #[arg(long, value_delimiter = ',', default_value = "drain,notify,poll")]
    pub cases: Vec<String>,
    /// Rows committed before the relay starts (`drain`, `drain-nats`), or messages published
    /// before the consumer starts (`consume-*`).
    #[arg(long, default_value_t = 50_000)]
    pub backlog: u64,
    /// Rows waiting behind one aggregate's dead first row (`blocked`, under `on_dead =
    /// "block"`).
    #[arg(long, default_value_t = 200_000)]
    pub blocked: u64,
    /// Delivered rows kept in the table (`blocked`).
    #[arg(long, default_value_t = 1_000_000)]
    pub delivered_kept: u64,
    /// Rows per second the application commits (`notify`, `poll`), or messages per second
    /// published once the backlog is drained (`consume-*`).
    #[arg(long, default_value_t = 1000)]
    pub rate: u64,
    /// Rows in each of the application's transactions (`notify`, `poll`).
    #[arg(long, default_value_t = 1)]
    pub rows_per_commit: u64,
    /// Seconds the application commits (`notify`, `poll`) or publishes (`consume-*`) for.
    #[arg(long, default_value_t = 20)]
    pub seconds: u64,
    /// An experiment: the case's database with `synchronous_commit = off` once the backlog is
    /// in, so the relay's commits do not wait for their WAL flush (what the flushes cost).
    #[arg(long)]
    pub no_flush_wait: bool,
    /// The relay's or the consumer's `deliver_concurrency` (its default when not given).
    #[arg(long)]
    pub concurrency: Option<usize>,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    runtime.block_on(async {
        let Some(server) = PostgresServer::start_durable().await else {
            eprintln!("outbox-load: no PostgreSQL");
            return std::process::ExitCode::from(2);
        };
        let mut results = Vec::new();
        for case in &cli.cases {
            match cases::run(case, &cli, &server).await {
                Ok(result) => {
                    eprintln!("outbox-load: {}", result.line());
                    results.push(result);
                }
                Err(e) => {
                    eprintln!("outbox-load: {case}: {e}");
                    return std::process::ExitCode::FAILURE;
                }
            }
        }
        cases::print(&cli, &results);
        std::process::ExitCode::SUCCESS
    })
}
