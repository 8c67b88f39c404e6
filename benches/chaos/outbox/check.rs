//! The outbox campaign's checker: "never lost, never twice" from the application's, the
//! table's and the receiver's histories.
//!
//! - *Lost*: an event the application committed whose row is not in the table, or is there
//!   neither delivered nor dead once the relays have had time to finish.
//! - *Rolled back, yet sent*: an event of a transaction that rolled back (or failed before its
//!   commit) reached the receiver, or is in the table. An event whose commit failed (`unknown`)
//!   counts as committed when its row is in the table, as failed otherwise.
//! - *Twice*: the receiver acted on one event more than once (counted by the event its body
//!   names, whatever key it came with).
//! - *Delivered without effect*: a row marked delivered on which the receiver never acted: a
//!   `2xx` that did not come from it.
//! - *Wrong key*: a request whose `Idempotency-Key` is not its event's id.
//! - *Out of order*: two events of one aggregate acted on in the opposite order of their `seq`.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::app::{Outcome, Written};
use super::receiver::Arrival;
use crate::history;

pub const APP: &str = "outbox-app.jsonl";
pub const RECEIVER: &str = "outbox-receiver.jsonl";
pub const ROWS: &str = "outbox-rows.jsonl";
pub const FINDINGS: &str = "findings.txt";

/// A row of the table as the relays left it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FinalRow {
    pub id: String,
    pub seq: i64,
    pub delivered: bool,
    pub dead: bool,
    pub attempts: i32,
    pub last_status: Option<i32>,
}

pub struct Input {
    pub written: Vec<Written>,
    pub arrivals: Vec<Arrival>,
    pub rows: Vec<FinalRow>,
}

impl Input {
    pub fn load(dir: &Path) -> Result<Self, String> {
        Ok(Self {
            written: history::read(&dir.join(APP))?,
            arrivals: history::read(&dir.join(RECEIVER))?,
            rows: history::read(&dir.join(ROWS))?,
        })
    }
}

#[derive(Debug, Default, PartialEq)]
pub struct Tally {
    pub committed: usize,
    pub rolled_back: usize,
    /// Failed before the commit, or a failed commit that did not land.
    pub failed: usize,
    pub delivered: usize,
    pub dead: usize,
    pub requests: usize,
    pub lost: usize,
    pub rolled_back_sent: usize,
    pub twice: usize,
    pub delivered_without_effect: usize,
    pub wrong_key: usize,
    pub out_of_order: usize,
    pub findings: Vec<String>,
}

impl Tally {
    pub fn passed(&self) -> bool {
        self.lost
            + self.rolled_back_sent
            + self.twice
            + self.delivered_without_effect
            + self.wrong_key
            + self.out_of_order
            == 0
            && self.delivered > 0
    }

    /// The campaign's last line.
    pub fn line(&self) -> String {
        format!(
            "chaos outbox: committed={} rolled_back={} failed={} delivered={} dead={} requests={} \
             lost={} rolled_back_sent={} twice={} delivered_without_effect={} wrong_key={} \
             out_of_order={}",
            self.committed,
            self.rolled_back,
            self.failed,
            self.delivered,
            self.dead,
            self.requests,
            self.lost,
            self.rolled_back_sent,
            self.twice,
            self.delivered_without_effect,
            self.wrong_key,
            self.out_of_order
        )
    }

    fn find(&mut self, finding: String) {
        self.findings.push(finding);
    }
}

pub fn check(input: &Input) -> Tally {
    let mut tally = Tally {
        requests: input.arrivals.len(),
        ..Tally::default()
    };
    let rows: HashMap<&str, &FinalRow> = input.rows.iter().map(|r| (r.id.as_str(), r)).collect();
    let mut effects: HashMap<&str, Vec<u64>> = HashMap::new();
    for arrival in &input.arrivals {
        if arrival.key != arrival.event {
            tally.wrong_key += 1;
            tally.find(format!("wrong key: {arrival:?}"));
        }
        if let Some(effect) = arrival.effect {
            effects
                .entry(arrival.event.as_str())
                .or_default()
                .push(effect);
        }
    }
    let sent: HashSet<&str> = input.arrivals.iter().map(|a| a.event.as_str()).collect();
    let mut committed = Vec::new();
    for written in &input.written {
        let row = rows.get(written.id.as_str());
        let landed = match written.outcome {
            Outcome::Committed => true,
            Outcome::RolledBack | Outcome::Failed => false,
            Outcome::Unknown => row.is_some(),
        };
        if landed {
            committed.push(written);
            judge_committed(
                &mut tally,
                written,
                row.copied(),
                effects.get(written.id.as_str()),
            );
        } else {
            tally.rolled_back += usize::from(written.outcome == Outcome::RolledBack);
            tally.failed += usize::from(written.outcome != Outcome::RolledBack);
            if row.is_some() || sent.contains(written.id.as_str()) {
                tally.rolled_back_sent += 1;
                tally.find(format!("rolled back, yet sent or stored: {}", written.id));
            }
        }
    }
    check_order(&mut tally, &committed, &rows, &effects);
    tally
}

fn judge_committed(
    tally: &mut Tally,
    written: &Written,
    row: Option<&FinalRow>,
    effects: Option<&Vec<u64>>,
) {
    tally.committed += 1;
    let acted = effects.map_or(0, Vec::len);
    if acted > 1 {
        tally.twice += 1;
        tally.find(format!("acted on {acted} times: {}", written.id));
    }
    match row {
        Some(row) if row.delivered => {
            tally.delivered += 1;
            if acted == 0 {
                tally.delivered_without_effect += 1;
                tally.find(format!("delivered, never acted on: {row:?}"));
            }
        }
        Some(row) if row.dead => tally.dead += 1,
        _ => {
            tally.lost += 1;
            tally.find(format!(
                "committed, neither delivered nor dead: {} {row:?}",
                written.id
            ));
        }
    }
}

/// Within each aggregate, the first effects of its events in `seq` order.
fn check_order(
    tally: &mut Tally,
    committed: &[&Written],
    rows: &HashMap<&str, &FinalRow>,
    effects: &HashMap<&str, Vec<u64>>,
) {
    let mut aggregates: HashMap<&str, Vec<(i64, u64, &str)>> = HashMap::new();
    for written in committed {
        let (Some(aggregate), Some(row)) = (&written.aggregate, rows.get(written.id.as_str()))
        else {
            continue;
        };
        if let Some(first) = effects
            .get(written.id.as_str())
            .and_then(|e| e.iter().min())
        {
            aggregates
                .entry(aggregate)
                .or_default()
                .push((row.seq, *first, &written.id));
        }
    }
    for (aggregate, mut acted) in aggregates {
        acted.sort_unstable();
        for pair in acted.windows(2) {
            if pair[0].1 > pair[1].1 {
                tally.out_of_order += 1;
                tally.find(format!(
                    "aggregate {aggregate}: {} (seq {}) acted on after {} (seq {})",
                    pair[0].2, pair[0].0, pair[1].2, pair[1].0
                ));
            }
        }
    }
}

/// Writes the findings next to the histories; returns the last line.
pub fn report(tally: &Tally, dir: &Path) -> String {
    let mut text = String::new();
    for finding in &tally.findings {
        let _ = writeln!(text, "{finding}");
    }
    if tally.delivered == 0 {
        let _ = writeln!(text, "nothing was delivered: the campaign proved nothing");
    }
    let _ = std::fs::write(dir.join(FINDINGS), text);
    for finding in tally.findings.iter().take(10) {
        println!("chaos: {finding}");
    }
    tally.line()
}

#[cfg(test)]
#[path = "check_tests.rs"]
mod tests;
