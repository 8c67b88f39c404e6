//! The checker's output: one markdown table of counts, the history of a few findings of each
//! serious kind (all of them go to `findings.txt` in the run directory), and a last line
//! scripts can read.

use std::fmt::Write;
use std::path::Path;

use super::{Class, Finding, Input, Tally};

/// How many findings of one kind are printed; the rest are in `findings.txt`.
const SHOWN: usize = 3;

/// Prints the table and the findings; returns the last line.
pub fn print(input: &Input, tally: &Tally, dir: &Path) -> String {
    println!("{}", table(input, tally));
    let mut findings = tally.findings.clone();
    findings.sort_by_key(|(kind, _)| *kind);
    let mut all = String::new();
    let mut shown = std::collections::HashMap::new();
    for (kind, history) in &findings {
        let _ = writeln!(all, "== {kind:?}\n{history}");
        let count = shown.entry(*kind).or_insert(0);
        if *kind <= Finding::ReuseNotRefused && *count < SHOWN {
            println!("finding: {kind:?}\n{history}");
            *count += 1;
        }
    }
    let path = dir.join("findings.txt");
    if let Err(e) = std::fs::write(&path, all) {
        eprintln!("chaos: cannot write {}: {e}", path.display());
    } else if !findings.is_empty() {
        println!("every finding, with its history: {}", path.display());
    }
    format!(
        "chaos: ops={} faults={} forbidden={} mismatched={} lost={}",
        tally.operations,
        input.faults.len(),
        tally.forbidden(),
        tally.mismatched,
        tally.lost
    )
}

fn table(input: &Input, tally: &Tally) -> String {
    let run = &input.run;
    let mut out = format!(
        "store {}, {} replica(s), {} clients, {}s, seed {}, schedule {} ({} faults planned)\n\n",
        run.store,
        run.replicas,
        run.clients,
        run.duration_secs,
        run.seed,
        run.schedule,
        run.planned_faults
    );
    out.push_str("| measure | count |\n|---|---:|\n");
    for (name, count) in rows(input, tally) {
        let _ = writeln!(out, "| {name} | {count} |");
    }
    out
}

/// The table's rows; the three the last line repeats are in bold.
fn rows(input: &Input, tally: &Tally) -> Vec<(String, usize)> {
    let rerun = |class| tally.reruns.get(&class).copied().unwrap_or(0);
    let mut rows: Vec<(String, usize)> = vec![
        ("operations (keys)".into(), tally.operations),
        ("requests".into(), tally.attempts),
        ("faults".into(), input.faults.len()),
    ];
    for (kind, count) in &tally.faults {
        let name = serde_json::to_string(kind).unwrap_or_default();
        rows.push((format!("  {}", name.trim_matches('"')), *count));
    }
    rows.push(("executions".into(), tally.executions));
    for class in [Class::PausedHolder, Class::KilledHolder, Class::StoreOutage] {
        rows.push((format!("re-runs {}", class.name()), rerun(class)));
    }
    rows.extend([
        ("**re-runs forbidden**".into(), rerun(Class::Forbidden)),
        ("**replay mismatches**".into(), tally.mismatched),
        ("**acknowledged answers lost**".into(), tally.lost),
        (
            "answers lost, unsure: store out or holder paused".into(),
            tally.unstored,
        ),
        ("two answers side by side (stale)".into(), tally.stale),
        ("422 on the same body".into(), tally.same_body_422),
        ("keys reused with another body".into(), tally.reused),
        ("  reuses refused with 422".into(), tally.reuse_refused),
        ("  reuses not refused".into(), tally.reuse_not_refused),
        ("unanswered after every retry".into(), tally.unanswered),
    ]);
    for (status, count) in &tally.statuses {
        rows.push((format!("answers: {status}"), *count));
    }
    rows
}
