//! The checker: reads a run's three histories and counts every way the promise was broken.
//!
//! The promise: each operation runs once; no acknowledged answer is lost; every replay equals
//! the original. Each key is judged on its own (`key.rs`), against the fault log
//! (`justify.rs`); the counts and the findings behind them are printed (`report.rs`).

mod justify;
mod key;
mod report;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use crate::history::{self, Attempt, Execution, Fault, FaultKind, RunInfo};
pub use justify::Class;
use justify::Faults;

pub struct Input {
    pub run: RunInfo,
    pub executions: Vec<Execution>,
    pub attempts: Vec<Attempt>,
    pub faults: Vec<Fault>,
}

impl Input {
    pub fn load(dir: &Path) -> Result<Input, String> {
        let run = std::fs::read(dir.join(history::RUN))
            .map_err(|e| format!("{}: {e}", dir.join(history::RUN).display()))?;
        Ok(Input {
            run: serde_json::from_slice(&run).map_err(|e| format!("run.json: {e}"))?,
            executions: history::read(&dir.join(history::EXECUTIONS))?,
            attempts: history::read(&dir.join(history::ATTEMPTS))?,
            faults: history::read(&dir.join(history::FAULTS))?,
        })
    }
}

/// What a finding is about, most serious first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Finding {
    Forbidden,
    Mismatched,
    Lost,
    SameBody422,
    ReuseNotRefused,
    Unstored,
    Outage,
    Stale,
    Unanswered,
}

/// The counts, and for each count above zero the keys and history lines behind it.
#[derive(Default)]
pub struct Tally {
    pub operations: usize,
    pub attempts: usize,
    pub faults: BTreeMap<FaultKind, usize>,
    pub executions: usize,
    pub reruns: BTreeMap<Class, usize>,
    pub mismatched: usize,
    pub lost: usize,
    /// An answer given, then lost, while the store was out or its holder paused (unsure).
    pub unstored: usize,
    /// Two different answers handed out for one key at about the same time.
    pub stale: usize,
    pub same_body_422: usize,
    pub reused: usize,
    pub reuse_refused: usize,
    pub reuse_not_refused: usize,
    pub unanswered: usize,
    pub statuses: BTreeMap<String, usize>,
    pub findings: Vec<(Finding, String)>,
}

impl Tally {
    pub fn forbidden(&self) -> usize {
        self.reruns.get(&Class::Forbidden).copied().unwrap_or(0)
    }

    /// Whether the promise held: no forbidden run, no mismatched replay, no lost answer.
    pub fn passed(&self) -> bool {
        self.forbidden() == 0 && self.mismatched == 0 && self.lost == 0
    }
}

/// Judges every key of a run.
pub fn check(input: &Input) -> Tally {
    let run = &input.run;
    let faults = Faults::new(
        &input.faults,
        run.replicas,
        run.lease_ms * 1000,
        run.upstream_timeout_ms * 1000,
    );
    let mut tally = totals(input);
    let by_exec: HashMap<u64, &Execution> = input.executions.iter().map(|e| (e.exec, e)).collect();
    let context = key::Context {
        faults: &faults,
        by_exec: &by_exec,
        all_faults: &input.faults,
    };
    for (name, (executions, attempts)) in by_key(input) {
        key::judge(&context, name, &executions, &attempts, &mut tally);
    }
    tally
}

/// The counts that need no judgement: requests, runs, faults by kind, answers by status.
fn totals(input: &Input) -> Tally {
    let mut tally = Tally {
        attempts: input.attempts.len(),
        executions: input.executions.len(),
        ..Tally::default()
    };
    for fault in &input.faults {
        *tally.faults.entry(fault.kind).or_default() += 1;
    }
    for attempt in &input.attempts {
        let status = match (attempt.status, &attempt.error) {
            (Some(status), _) => status.to_string(),
            (None, Some(error)) => error.clone(),
            (None, None) => "none".to_owned(),
        };
        *tally.statuses.entry(status).or_default() += 1;
    }
    tally
}

/// Each key's runs in the order they ran, and its requests in the order they ended.
type KeyHistory<'a> = (Vec<&'a Execution>, Vec<&'a Attempt>);

fn by_key(input: &Input) -> BTreeMap<&str, KeyHistory<'_>> {
    let mut keys: BTreeMap<&str, KeyHistory> = BTreeMap::new();
    for execution in &input.executions {
        keys.entry(&execution.key).or_default().0.push(execution);
    }
    for attempt in &input.attempts {
        keys.entry(&attempt.key).or_default().1.push(attempt);
    }
    for (executions, attempts) in keys.values_mut() {
        executions.sort_by_key(|e| e.t);
        attempts.sort_by_key(|a| a.end);
    }
    keys
}

pub use report::print;
