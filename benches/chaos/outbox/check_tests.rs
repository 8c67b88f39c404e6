//! The outbox checker against small made-up histories, each built to show one way the promise
//! can break or hold.

use super::*;

fn written(id: &str, aggregate: Option<&str>, outcome: Outcome) -> Written {
    Written {
        id: id.into(),
        aggregate: aggregate.map(str::to_owned),
        outcome,
    }
}

fn row(id: &str, seq: i64, delivered: bool) -> FinalRow {
    FinalRow {
        id: id.into(),
        seq,
        delivered,
        dead: !delivered,
        attempts: 1,
        last_status: Some(if delivered { 200 } else { 410 }),
    }
}

fn arrival(key: &str, event: &str, effect: Option<u64>) -> Arrival {
    Arrival {
        t: 0,
        key: key.into(),
        event: event.into(),
        attempt: 1,
        status: if effect.is_some() { 200 } else { 500 },
        effect,
    }
}

/// Two committed events, delivered once each; one rolled back and never sent.
fn clean() -> Input {
    Input {
        written: vec![
            written("a", Some("g"), Outcome::Committed),
            written("b", Some("g"), Outcome::Committed),
            written("c", None, Outcome::RolledBack),
        ],
        arrivals: vec![
            arrival("a", "a", None),
            arrival("a", "a", Some(1)),
            arrival("b", "b", Some(2)),
        ],
        rows: vec![row("a", 1, true), row("b", 2, true)],
    }
}

#[test]
fn a_clean_history_passes() {
    let tally = check(&clean());
    assert!(tally.passed(), "{:?}", tally.findings);
    assert_eq!(
        (tally.committed, tally.rolled_back, tally.delivered),
        (2, 1, 2)
    );
}

#[test]
fn a_committed_row_missing_or_still_pending_is_lost() {
    let mut input = clean();
    input.rows.remove(1);
    assert_eq!(check(&input).lost, 1);
    let mut input = clean();
    input.rows[1].dead = false;
    input.rows[1].delivered = false;
    assert_eq!(check(&input).lost, 1);
}

#[test]
fn a_rolled_back_event_that_reached_the_receiver_fails() {
    let mut input = clean();
    input.arrivals.push(arrival("c", "c", None));
    let tally = check(&input);
    assert_eq!(tally.rolled_back_sent, 1);
    assert!(!tally.passed());
}

#[test]
fn an_unknown_commit_is_judged_by_the_table() {
    let mut input = clean();
    input.written.push(written("d", None, Outcome::Unknown));
    input.written.push(written("e", None, Outcome::Unknown));
    input.rows.push(row("d", 3, true));
    input.arrivals.push(arrival("d", "d", Some(3)));
    let tally = check(&input);
    assert!(tally.passed(), "{:?}", tally.findings);
    assert_eq!(
        (tally.committed, tally.rolled_back, tally.failed),
        (3, 1, 1)
    );
}

#[test]
fn an_event_acted_on_twice_fails_whatever_its_keys() {
    let mut input = clean();
    input.arrivals.push(arrival("b#2", "b", Some(3)));
    let tally = check(&input);
    assert_eq!((tally.twice, tally.wrong_key), (1, 1));
    assert!(!tally.passed());
}

#[test]
fn a_delivered_row_the_receiver_never_acted_on_fails() {
    let mut input = clean();
    input.arrivals.pop();
    assert_eq!(check(&input).delivered_without_effect, 1);
}

#[test]
fn a_dead_row_may_have_been_acted_on_once() {
    let mut input = clean();
    input.rows[1].delivered = false;
    input.rows[1].dead = true;
    let tally = check(&input);
    assert!(tally.passed(), "{:?}", tally.findings);
    assert_eq!(tally.dead, 1);
}

#[test]
fn effects_of_one_aggregate_out_of_seq_order_fail() {
    let mut input = clean();
    input.arrivals[1].effect = Some(5);
    let tally = check(&input);
    assert_eq!(tally.out_of_order, 1);
    assert!(!tally.passed());
}

#[test]
fn a_campaign_that_delivered_nothing_fails() {
    let input = Input {
        written: Vec::new(),
        arrivals: Vec::new(),
        rows: Vec::new(),
    };
    assert!(!check(&input).passed());
}
