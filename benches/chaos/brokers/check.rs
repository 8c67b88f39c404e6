//! The brokers campaign's checker: the outbox campaign's judgement of the application's, the
//! table's and the receiver's histories (`outbox/check.rs`), held to the stricter promise of
//! SPEC 19.3, and a fault log to tell the one second effect the contract allows.
//!
//! - every committed row is delivered (no dead rows: nothing here refuses a message) and acted
//!   on, none rolled back is sent, one aggregate's events are acted on in `seq` order;
//! - each event is acted on once. A second effect is allowed only as the keys campaign allows a
//!   second run: the consumer was killed while the first ran (the receiver acted, and the
//!   consumer died before its record of the answer; the key freed when its lease ran out).
//!   Any other second effect is a forbidden duplicate.

use std::collections::HashMap;
use std::path::Path;

use super::faults::{Fault, Kind};
use crate::history;
use crate::outbox::check::{self as outbox, Input};

/// A consumer kill this close to the first effect (before it: the answer was on its way)
/// explains a second one: timers and signals run late on a loaded machine.
const SLACK: u64 = 500_000;

pub struct Tally {
    pub base: outbox::Tally,
    /// Second effects of a key whose first ran while the consumer was killed.
    pub allowed_twice: usize,
    /// Every other second (or later) effect.
    pub duplicates: usize,
}

impl Tally {
    pub fn passed(&self) -> bool {
        let b = &self.base;
        b.lost
            + b.rolled_back_sent
            + b.delivered_without_effect
            + b.wrong_key
            + b.out_of_order
            + b.dead
            + self.duplicates
            == 0
            && b.delivered > 0
    }

    pub fn line(&self) -> String {
        let b = &self.base;
        format!(
            "chaos brokers: committed={} rolled_back={} failed={} delivered={} dead={} \
             requests={} lost={} rolled_back_sent={} delivered_without_effect={} duplicates={} \
             allowed_twice={} wrong_key={} out_of_order={}",
            b.committed,
            b.rolled_back,
            b.failed,
            b.delivered,
            b.dead,
            b.requests,
            b.lost,
            b.rolled_back_sent,
            b.delivered_without_effect,
            self.duplicates,
            self.allowed_twice,
            b.wrong_key,
            b.out_of_order
        )
    }
}

pub fn load(dir: &Path) -> Result<(Input, Vec<Fault>), String> {
    Ok((
        Input::load(dir)?,
        history::read(&dir.join(history::FAULTS))?,
    ))
}

pub fn check(input: &Input, faults: &[Fault]) -> Tally {
    let mut base = outbox::check(input);
    // The outbox checker names every second effect; here they are judged below.
    base.findings.retain(|f| !f.starts_with("acted on "));
    let kills: Vec<(u64, u64)> = faults
        .iter()
        .filter(|f| f.kind == Kind::ConsumerKill)
        .map(|f| (f.start, f.end))
        .collect();
    // Each event's effects, by when the receiver answered.
    let mut effects: HashMap<&str, Vec<u64>> = HashMap::new();
    for arrival in input.arrivals.iter().filter(|a| a.effect.is_some()) {
        effects.entry(&arrival.event).or_default().push(arrival.t);
    }
    let (mut allowed_twice, mut duplicates) = (0, 0);
    for (event, mut times) in effects {
        times.sort_unstable();
        let Some((&first, again)) = times.split_first() else {
            continue;
        };
        for &then in again {
            let killed = kills
                .iter()
                .any(|&(start, _)| start + SLACK >= first && start <= then.min(first + SLACK));
            if killed {
                allowed_twice += 1;
            } else {
                duplicates += 1;
                base.findings.push(format!(
                    "acted on again at {then}us, first at {first}us, no consumer kill between: \
                     {event}"
                ));
            }
        }
    }
    Tally {
        base,
        allowed_twice,
        duplicates,
    }
}

/// Writes the findings next to the histories; returns the last line.
pub fn report(tally: &Tally, dir: &Path) -> String {
    if tally.base.dead > 0 {
        println!("chaos: {} rows dead: a message refused", tally.base.dead);
    }
    outbox::report(&tally.base, dir);
    tally.line()
}
