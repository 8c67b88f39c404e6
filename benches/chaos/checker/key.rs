//! One key's history, judged: its runs, its answers, and its reuse with another body.
//!
//! An answer's identity is the upstream run its body names, or, for an answer the proxy made
//! itself (a `504 upstream-timeout` it kept), its bytes. Two answers with one identity but
//! different bytes are a mismatched replay. Two identities for one key are a divergence: a
//! lost answer when the second was asked for after the first was received and does not come
//! from a run that had already happened; otherwise two answers handed out side by side.

use std::collections::HashMap;
use std::fmt::Write;

use super::justify::{Class, Faults};
use super::{Finding, Tally};
use crate::history::{Attempt, Execution, Fault};

/// How far from a key's runs and requests a fault is shown with its history.
const NEAR: u64 = 5_000_000;

pub struct Context<'a> {
    pub faults: &'a Faults,
    pub by_exec: &'a HashMap<u64, &'a Execution>,
    pub all_faults: &'a [Fault],
}

struct Key<'a> {
    context: &'a Context<'a>,
    name: &'a str,
    executions: &'a [&'a Execution],
    attempts: &'a [&'a Attempt],
}

pub fn judge(
    context: &Context,
    name: &str,
    executions: &[&Execution],
    attempts: &[&Attempt],
    tally: &mut Tally,
) {
    let Some(main) = attempts.iter().find(|a| a.main).map(|a| a.body.clone()) else {
        return;
    };
    tally.operations += 1;
    let key = Key {
        context,
        name,
        executions,
        attempts,
    };
    let (own, other): (Vec<&Execution>, Vec<&Execution>) =
        executions.iter().partition(|e| e.body == main);
    key.reruns(&own, &other, tally);
    let kept = key.answered(tally);
    let answers: Vec<&Attempt> = kept
        .iter()
        .copied()
        .filter(|a| a.status != Some(422))
        .collect();
    key.replays(&answers, tally);
    // A 422 after an answer is a divergence too: the key now holds another request's record.
    key.divergence(&kept, &own, tally);
    key.reuse(&answers, tally);
}

impl Key<'_> {
    /// The answers the proxy kept for the key's own body, counting a `422` among them and an
    /// operation with none.
    fn answered(&self, tally: &mut Tally) -> Vec<&Attempt> {
        let kept: Vec<&Attempt> = self
            .attempts
            .iter()
            .copied()
            .filter(|a| a.main && a.definite())
            .collect();
        let refused = kept.iter().filter(|a| a.status == Some(422)).count();
        if refused > 0 {
            tally.same_body_422 += refused;
            tally.findings.push((Finding::SameBody422, self.history()));
        }
        if kept.is_empty() {
            tally.unanswered += 1;
            tally.findings.push((Finding::Unanswered, self.history()));
        }
        kept
    }

    /// Every run after the first: allowed, unsure or forbidden.
    fn reruns(&self, own: &[&Execution], other: &[&Execution], tally: &mut Tally) {
        let mut judged = Vec::new();
        for (i, later) in own.iter().enumerate().skip(1) {
            judged.push(self.best_reason(&own[..i], later));
        }
        for later in other {
            // The other body is sent only once the first has an answer; if the first never
            // ran, its answer was a release (nothing kept) and the key was free.
            let before: Vec<&Execution> = own.iter().copied().filter(|e| e.t < later.t).collect();
            if !before.is_empty() {
                judged.push(self.best_reason(&before, later));
            }
        }
        for class in judged {
            *tally.reruns.entry(class).or_default() += 1;
            match class {
                Class::Forbidden => tally.findings.push((Finding::Forbidden, self.history())),
                Class::StoreOutage => tally.findings.push((Finding::Outage, self.history())),
                _ => {}
            }
        }
    }

    fn best_reason(&self, earlier: &[&Execution], later: &Execution) -> Class {
        earlier
            .iter()
            .map(|e| {
                let answered = self.first_answer_of(e.exec, later.t);
                self.context.faults.rerun(e, later, answered, self.attempts)
            })
            .min()
            .unwrap_or(Class::Forbidden)
    }

    /// When a client first received run `exec`'s answer, if before `before`.
    fn first_answer_of(&self, exec: u64, before: u64) -> Option<u64> {
        self.attempts
            .iter()
            .filter(|a| a.exec == Some(exec) && a.definite() && a.end < before)
            .map(|a| a.end)
            .min()
    }

    /// Replays must equal the original answer of the same run, byte for byte, and name a run
    /// of this key.
    fn replays(&self, answers: &[&Attempt], tally: &mut Tally) {
        let mut originals: HashMap<Option<u64>, &Attempt> = HashMap::new();
        let mut mismatched = 0;
        for answer in answers {
            let foreign = answer
                .exec
                .and_then(|x| self.context.by_exec.get(&x))
                .is_some_and(|e| e.key != self.name);
            let original = originals.entry(answer.exec).or_insert(answer);
            let differs = (original.status, &original.answer) != (answer.status, &answer.answer);
            // Proxy-made answers of different runs share the identity "no run": only compare
            // them when the key ran at most once.
            let comparable = answer.exec.is_some() || self.executions.len() <= 1;
            if foreign || (answer.replayed && differs && comparable) {
                mismatched += 1;
            }
        }
        if mismatched > 0 {
            tally.mismatched += mismatched;
            tally.findings.push((Finding::Mismatched, self.history()));
        }
    }

    /// Whether the key gave out two different answers, and what that means.
    fn divergence(&self, answers: &[&Attempt], own: &[&Execution], tally: &mut Tally) {
        // A proxy-made answer before any run was a release: nothing was kept to be lost.
        let ran_before = |t: u64| own.iter().any(|e| e.t < t);
        let Some(first) = answers
            .iter()
            .find(|a| a.exec.is_some() || ran_before(a.end))
        else {
            return;
        };
        let same = |a: &Attempt| match (a.exec, first.exec) {
            (Some(run), Some(first_run)) => run == first_run,
            _ => (a.status, &a.answer) == (first.status, &first.answer),
        };
        let Some(other) = answers.iter().find(|a| a.end > first.end && !same(a)) else {
            return;
        };
        let other_ran = other
            .exec
            .and_then(|x| self.context.by_exec.get(&x))
            .map(|e| e.t);
        let asked_after = other.start > first.end && other_ran.is_none_or(|t| t > first.end);
        let finding = if !asked_after {
            tally.stale += 1;
            Finding::Stale
        } else if self.unstored(first) {
            tally.unstored += 1;
            Finding::Unstored
        } else {
            tally.lost += 1;
            Finding::Lost
        };
        tally.findings.push((finding, self.history()));
    }

    /// Whether the first answer may never have been stored: the store was out, or its proxy
    /// paused past the lease, between its run and its arrival.
    fn unstored(&self, first: &Attempt) -> bool {
        let run = first
            .exec
            .and_then(|x| self.context.by_exec.get(&x).copied());
        let run = run.or_else(|| self.executions.iter().copied().rfind(|e| e.t < first.end));
        run.is_some_and(|run| {
            self.context.faults.outage_while_held(run, first.end)
                || self
                    .context
                    .faults
                    .paused_before_answer(run, first.end, self.attempts)
        })
    }

    /// The key reused with another body: `422`, and never a replay of the first answer.
    fn reuse(&self, answers: &[&Attempt], tally: &mut Tally) {
        let reuses: Vec<&Attempt> = self.attempts.iter().copied().filter(|a| !a.main).collect();
        if reuses.is_empty() {
            return;
        }
        tally.reused += 1;
        for attempt in reuses.iter().filter(|a| a.definite()) {
            if attempt.status == Some(422) {
                tally.reuse_refused += 1;
            } else if attempt.replayed && answers.iter().any(|a| a.answer == attempt.answer) {
                tally.mismatched += 1;
                tally.findings.push((Finding::Mismatched, self.history()));
            } else {
                tally.reuse_not_refused += 1;
                tally
                    .findings
                    .push((Finding::ReuseNotRefused, self.history()));
            }
        }
    }

    /// The key's runs, attempts and the faults around them, as history lines.
    fn history(&self) -> String {
        let mut out = format!("key {}\n", self.name);
        for e in self.executions {
            let _ = writeln!(
                out,
                "  run     {}",
                serde_json::to_string(e).unwrap_or_default()
            );
        }
        for a in self.attempts {
            let _ = writeln!(
                out,
                "  attempt {}",
                serde_json::to_string(a).unwrap_or_default()
            );
        }
        // The faults near the key's runs and its requests during the campaign.
        let mut moments: Vec<u64> = self.executions.iter().map(|e| e.t).collect();
        let during = self.attempts.iter().filter(|a| a.phase == "run");
        moments.extend(during.flat_map(|a| [a.start, a.end]));
        let near = |f: &&Fault| {
            let from = f.start.saturating_sub(NEAR);
            moments.iter().any(|m| (from..=f.end + NEAR).contains(m))
        };
        for f in self.context.all_faults.iter().filter(near) {
            let _ = writeln!(
                out,
                "  fault   {}",
                serde_json::to_string(f).unwrap_or_default()
            );
        }
        out
    }
}
