//! A randomized fault campaign against the real proxy binary, and a checker that reads every
//! history it writes. `benches/chaos/run.sh` builds both and runs it; see
//! docs/testing.md, "Fault campaign".
//!
//! `chaos run` starts the store, an upstream that records every operation it runs, and the
//! proxies, then lets clients and a nemesis loose on them at once; `chaos check DIR` judges the
//! histories of a run again (a campaign checks its own at the end).
// The modules of this program name what they share `pub`; none of it leaves the program.
#![allow(unreachable_pub)]

mod brokers;
mod campaign;
mod checker;
mod clients;
mod history;
mod http;
mod nemesis;
mod outbox;
mod postgres;
mod prefill;
mod process;
mod proxies;
mod relay;
mod rng;
mod stores;
mod upstream;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

use stores::StoreKind;

#[derive(Parser)]
#[command(name = "chaos", about = "A fault campaign against idempotency-proxy")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs a campaign, then checks its histories.
    Run {
        /// Keyed requests through proxies (`keys`), an outbox relay's deliveries (`outbox`), or
        /// outbox rows through JetStream to a consumer (`brokers`).
        #[arg(long, value_enum, default_value = "keys")]
        scenario: Scenario,
        #[arg(long, value_enum, default_value = "file")]
        store: StoreKind,
        /// Proxy processes (the file store takes one only); relays, for `outbox` and `brokers`.
        #[arg(long, default_value_t = 1)]
        replicas: usize,
        /// Seconds of faults (the sweep after them takes longer).
        #[arg(long, default_value_t = 60)]
        duration: u64,
        /// Draws the fault schedule and the clients' operations [default: from the clock].
        #[arg(long)]
        seed: Option<u64>,
        #[arg(long, default_value_t = 8)]
        clients: usize,
        /// Where the histories go.
        #[arg(long)]
        dir: PathBuf,
        /// The proxy binary.
        #[arg(long, default_value = "target/release/idempotency-proxy")]
        binary: PathBuf,
    },
    /// Checks the histories of an earlier run.
    Check { dir: PathBuf },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Scenario {
    Keys,
    Outbox,
    Brokers,
}

fn main() -> ExitCode {
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    match Cli::parse().command {
        Command::Check { dir } => check(&dir),
        Command::Run {
            scenario: Scenario::Outbox,
            replicas,
            duration,
            seed,
            dir,
            binary,
            ..
        } => {
            let seed = seed.unwrap_or_else(clock_seed);
            println!("chaos: seed {seed} (rerun with --scenario outbox --seed {seed})");
            let settings = outbox::Settings {
                relays: replicas.max(1),
                duration: Duration::from_secs(duration),
                seed,
                dir: dir.clone(),
                binary,
            };
            if let Err(e) = runtime.block_on(outbox::run(&settings)) {
                eprintln!("chaos: {e}");
                return ExitCode::from(2);
            }
            drop(runtime);
            check(&dir)
        }
        Command::Run {
            scenario: Scenario::Brokers,
            replicas,
            duration,
            seed,
            dir,
            binary,
            ..
        } => {
            let seed = seed.unwrap_or_else(clock_seed);
            println!("chaos: seed {seed} (rerun with --scenario brokers --seed {seed})");
            let settings = brokers::Settings {
                relays: replicas.max(1),
                duration: Duration::from_secs(duration),
                seed,
                dir: dir.clone(),
                binary,
            };
            if let Err(e) = runtime.block_on(brokers::run(&settings)) {
                eprintln!("chaos: {e}");
                return ExitCode::from(2);
            }
            drop(runtime);
            check(&dir)
        }
        Command::Run {
            store,
            replicas,
            duration,
            seed,
            clients,
            dir,
            binary,
            scenario: Scenario::Keys,
        } => {
            if store == StoreKind::File && replicas != 1 {
                eprintln!("chaos: the file store serves one proxy only (--replicas 1)");
                return ExitCode::from(2);
            }
            let seed = seed.unwrap_or_else(clock_seed);
            let settings = campaign::Settings {
                store,
                replicas: replicas.max(1),
                duration: Duration::from_secs(duration),
                seed,
                clients: clients.max(1),
                dir: dir.clone(),
                binary,
            };
            println!("chaos: seed {seed} (rerun with --seed {seed})");
            let kept = match runtime.block_on(campaign::run(&settings)) {
                Ok(kept) => kept,
                Err(e) => {
                    eprintln!("chaos: {e}");
                    return ExitCode::from(2);
                }
            };
            drop(runtime);
            match (check(&dir), kept) {
                (_, false) => ExitCode::FAILURE,
                (checked, true) => checked,
            }
        }
    }
}

fn check(dir: &Path) -> ExitCode {
    if brokers::is_brokers_run(dir) {
        return check_brokers(dir);
    }
    if outbox::is_outbox_run(dir) {
        return check_outbox(dir);
    }
    let input = match checker::Input::load(dir) {
        Ok(input) => input,
        Err(e) => {
            eprintln!("chaos: {e}");
            return ExitCode::from(2);
        }
    };
    let tally = checker::check(&input);
    let last = checker::print(&input, &tally, dir);
    println!("{last}");
    if tally.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn check_outbox(dir: &Path) -> ExitCode {
    let input = match outbox::Input::load(dir) {
        Ok(input) => input,
        Err(e) => {
            eprintln!("chaos: {e}");
            return ExitCode::from(2);
        }
    };
    let tally = outbox::check(&input);
    println!("{}", outbox::report(&tally, dir));
    if tally.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn check_brokers(dir: &Path) -> ExitCode {
    let (input, faults) = match brokers::load(dir) {
        Ok(loaded) => loaded,
        Err(e) => {
            eprintln!("chaos: {e}");
            return ExitCode::from(2);
        }
    };
    let tally = brokers::check(&input, &faults);
    println!("{}", brokers::report(&tally, dir));
    if tally.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn clock_seed() -> u64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    now.map_or(1, |d| d.as_secs())
}
