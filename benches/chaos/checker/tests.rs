//! The checker against small made-up histories of one key (`k`), each built to show one way
//! the promise can break or hold. Times are in milliseconds here; lease 2s, upstream timeout 3s.

use super::*;
use crate::history::{Attempt, Execution, Fault, FaultKind, RunInfo};

const MAIN: &str = "main-body";

fn run(t_ms: u64, exec: u64, via: usize) -> Execution {
    Execution {
        t: t_ms * 1000,
        exec,
        key: "k".into(),
        body: MAIN.into(),
        via,
        mode: "ok".into(),
    }
}

/// A first-hand answer (`replayed` false) or a replay of run `exec`, whose body is `digest`.
fn answer(span_ms: (u64, u64), exec: u64, replayed: bool, digest: &str) -> Attempt {
    Attempt {
        start: span_ms.0 * 1000,
        end: span_ms.1 * 1000,
        client: 0,
        key: "k".into(),
        body: MAIN.into(),
        main: true,
        replica: 0,
        status: Some(201),
        replayed,
        answer: Some(digest.into()),
        exec: Some(exec),
        error: None,
        phase: "run".into(),
    }
}

fn refused(span_ms: (u64, u64), status: Option<u16>, main: bool) -> Attempt {
    Attempt {
        status,
        exec: None,
        answer: status.map(|s| format!("problem-{s}")),
        error: status.is_none().then(|| "timeout".to_owned()),
        main,
        body: if main {
            MAIN.into()
        } else {
            "other-body".into()
        },
        ..answer(span_ms, 0, false, "")
    }
}

fn fault(kind: FaultKind, target: &str, start_ms: u64, end_ms: u64) -> Fault {
    Fault {
        kind,
        target: target.into(),
        start: start_ms * 1000,
        end: end_ms * 1000,
        detail: String::new(),
    }
}

fn tally(executions: Vec<Execution>, attempts: Vec<Attempt>, faults: Vec<Fault>) -> Tally {
    let run = RunInfo {
        seed: 1,
        store: "redis".into(),
        replicas: 3,
        clients: 1,
        duration_secs: 60,
        lease_ms: 2000,
        upstream_timeout_ms: 3000,
        schedule: String::new(),
        planned_faults: faults.len(),
    };
    check(&Input {
        run,
        executions,
        attempts,
        faults,
    })
}

fn reruns(tally: &Tally, class: Class) -> usize {
    tally.reruns.get(&class).copied().unwrap_or(0)
}

#[test]
fn a_second_run_with_no_fault_is_forbidden_and_loses_the_first_answer() {
    let t = tally(
        vec![run(0, 1, 0), run(5000, 2, 1)],
        vec![
            answer((0, 10), 1, false, "a"),
            answer((4990, 5010), 2, false, "b"),
        ],
        vec![],
    );
    assert_eq!((t.forbidden(), t.lost), (1, 1));
    assert!(!t.passed());
}

#[test]
fn a_holder_paused_past_its_lease_allows_a_second_run_and_its_late_answer_is_stale() {
    let t = tally(
        vec![run(1000, 1, 0), run(3500, 2, 1)],
        vec![
            answer((3400, 3600), 2, false, "b"),
            answer((900, 5100), 1, false, "a"),
            answer((9000, 9001), 2, true, "b"),
        ],
        vec![fault(FaultKind::ProxyPause, "proxy-0", 1100, 5000)],
    );
    assert_eq!(reruns(&t, Class::PausedHolder), 1);
    assert_eq!((t.forbidden(), t.lost, t.mismatched, t.stale), (0, 0, 0, 1));
    assert!(t.passed());
}

#[test]
fn a_pause_far_shorter_than_the_lease_excuses_nothing() {
    let t = tally(
        vec![run(1000, 1, 0), run(3500, 2, 1)],
        vec![answer((3400, 3600), 2, false, "b")],
        vec![fault(FaultKind::ProxyPause, "proxy-0", 1100, 1400)],
    );
    assert_eq!(t.forbidden(), 1);
}

#[test]
fn a_holder_killed_before_anyone_had_its_answer_frees_the_key() {
    let faults = || vec![fault(FaultKind::ProxyKill, "proxy-0", 1200, 2000)];
    let freed = tally(
        vec![run(1000, 1, 0), run(3500, 2, 1)],
        vec![answer((3400, 3600), 2, false, "b")],
        faults(),
    );
    assert_eq!(
        (reruns(&freed, Class::KilledHolder), freed.forbidden()),
        (1, 0)
    );

    // Answered before the kill: the outcome was stored, and must have survived it.
    let kept = tally(
        vec![run(1000, 1, 0), run(3500, 2, 1)],
        vec![
            answer((990, 1100), 1, false, "a"),
            answer((3400, 3600), 2, false, "b"),
        ],
        faults(),
    );
    assert_eq!((kept.forbidden(), kept.lost), (1, 1));
}

#[test]
fn a_store_outage_while_the_key_is_held_is_counted_apart() {
    let t = tally(
        vec![run(1000, 1, 0), run(4000, 2, 1)],
        vec![
            answer((900, 3500), 1, false, "a"),
            answer((3900, 4100), 2, false, "b"),
        ],
        vec![fault(FaultKind::StoreKill, "redis-0", 1100, 3000)],
    );
    assert_eq!((reruns(&t, Class::StoreOutage), t.forbidden()), (1, 0));
    assert_eq!((t.unstored, t.lost), (1, 0));
    assert!(t.passed());
}

#[test]
fn a_replay_with_other_bytes_or_another_keys_run_is_a_mismatch() {
    let t = tally(
        vec![run(0, 1, 0)],
        vec![
            answer((0, 10), 1, false, "a"),
            answer((20, 30), 1, true, "b"),
        ],
        vec![],
    );
    assert_eq!(t.mismatched, 1);

    let foreign = Execution {
        key: "elsewhere".into(),
        ..run(0, 7, 0)
    };
    let t = tally(
        vec![run(0, 1, 0), foreign],
        vec![
            answer((0, 10), 1, false, "a"),
            answer((20, 30), 7, true, "a"),
        ],
        vec![],
    );
    assert!(t.mismatched >= 1);
}

#[test]
fn a_reused_key_must_be_refused_and_never_run() {
    let other_run = Execution {
        body: "other-body".into(),
        ..run(50, 2, 0)
    };
    let mut ran = refused((40, 60), Some(201), false);
    ran.exec = Some(2);
    let t = tally(
        vec![run(0, 1, 0), other_run],
        vec![
            answer((0, 10), 1, false, "a"),
            ran,
            refused((70, 80), Some(422), false),
        ],
        vec![],
    );
    assert_eq!((t.reused, t.reuse_refused, t.reuse_not_refused), (1, 1, 1));
    assert_eq!(t.forbidden(), 1);
}

#[test]
fn a_422_for_the_same_body_and_an_operation_never_answered_are_counted() {
    let t = tally(
        vec![run(0, 1, 0)],
        vec![refused((0, 10), Some(422), true)],
        vec![],
    );
    assert_eq!((t.same_body_422, t.unanswered), (1, 0));

    let t = tally(
        vec![],
        vec![
            refused((0, 10), None, true),
            refused((20, 30), Some(503), true),
        ],
        vec![],
    );
    assert_eq!((t.unanswered, t.executions), (1, 0));
}

#[test]
fn a_422_for_the_same_body_after_its_answer_means_the_answer_was_lost() {
    let t = tally(
        vec![run(0, 1, 0)],
        vec![
            answer((0, 10), 1, false, "a"),
            refused((20, 30), Some(422), true),
        ],
        vec![],
    );
    assert_eq!((t.same_body_422, t.lost), (1, 1));
}

#[test]
fn a_proxy_paused_between_reserving_and_forwarding_is_a_paused_holder_only_if_it_held_the_request()
{
    let pause = || vec![fault(FaultKind::ProxyPause, "proxy-0", 1000, 4990)];
    // The request was in the proxy when it was stopped; it went upstream as the proxy woke,
    // and its answer was never kept: the key ran again later.
    let held = tally(
        vec![run(4995, 1, 0), run(20000, 2, 0)],
        vec![
            answer((900, 5010), 1, false, "a"),
            answer((19990, 20010), 2, false, "b"),
        ],
        pause(),
    );
    assert_eq!(
        (reruns(&held, Class::PausedHolder), held.forbidden()),
        (1, 0)
    );
    assert_eq!((held.unstored, held.lost), (1, 0));

    // The request came after the proxy woke: the pause excuses nothing.
    let after = tally(
        vec![run(4995, 1, 0), run(20000, 2, 0)],
        vec![
            answer((4992, 5010), 1, false, "a"),
            answer((19990, 20010), 2, false, "b"),
        ],
        pause(),
    );
    assert_eq!((after.forbidden(), after.lost), (1, 1));
}
