//! The rooms alone: what a claim may take as destinations fill and empty.

use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::names::OutboxName;

fn config(deliver_to: Option<&str>) -> OutboxConfig {
    let mut config = OutboxConfig::new(OutboxName::new("o").unwrap());
    config.deliver_to = deliver_to.map(|u| u.parse().unwrap());
    config.deliver_concurrency = 8;
    config.destination_concurrency = Some(2);
    let topics = [("a", "http://hung:1/"), ("b", "http://well:1/")];
    for (topic, url) in topics {
        config.topics.insert(topic.into(), url.parse().unwrap());
    }
    config
}

fn row(id: &str, topic: &str) -> ClaimedRow {
    ClaimedRow {
        id: id.into(),
        topic: topic.into(),
        aggregate_id: None,
        payload: Some(b"{}".to_vec()),
        headers: None,
        attempt: 1,
        seq: 1,
        age: Duration::ZERO,
        budget_age: Duration::ZERO,
        claimed: Instant::now(),
    }
}

fn ids(rows: &[ClaimedRow]) -> Vec<&str> {
    rows.iter().map(|r| r.id.as_str()).collect()
}

#[tokio::test]
async fn a_full_destination_is_left_out_of_the_claim_and_its_extra_rows_given_back() {
    let config = config(Some("http://rest:1/"));
    let rooms = Rooms::new(&config);
    let open = rooms.filter();
    assert!(!open.narrowed());
    assert_eq!((open.excluded.len(), open.only, open.room), (0, None, 6));

    let claimed = vec![
        row("a1", "a"),
        row("a2", "a"),
        row("a3", "a"),
        row("b1", "b"),
    ];
    let (taken, over) = rooms.share(&config, claimed);
    assert_eq!(ids(&over), ["a3"], "a has room for two");
    assert_eq!(taken.len(), 3);
    let filter = rooms.filter();
    assert_eq!(filter.excluded, ["a"]);
    assert_eq!((filter.only, filter.room), (None, 3));

    let notify = Notify::new();
    let mut taken = taken.into_iter();
    let (a1, room) = taken.next().unwrap();
    assert_eq!(a1.id, "a1");
    room.free(&notify);
    assert!(rooms.filter().excluded.is_empty(), "a has room again");
    let woken = tokio::select! {
        biased;
        () = notify.notified() => true,
        () = std::future::ready(()) => false,
    };
    assert!(
        woken,
        "the claim loop is woken when a full destination gets room"
    );
}

#[test]
fn a_full_deliver_to_leaves_only_the_listed_topics_with_room() {
    let config = config(Some("http://rest:1/"));
    let rooms = Rooms::new(&config);
    let (_held, over) = rooms.share(&config, vec![row("x1", "x"), row("x2", "y")]);
    assert!(over.is_empty());
    let filter = rooms.filter();
    assert_eq!(filter.only, Some(vec!["a".to_owned(), "b".to_owned()]));
    assert_eq!(filter.room, 4);
}

#[test]
fn rows_without_a_destination_take_no_room() {
    let config = config(None);
    let rooms = Rooms::new(&config);
    let claimed = vec![row("a1", "a"), row("a2", "a"), row("n1", "nowhere")];
    let (taken, over) = rooms.share(&config, claimed);
    assert_eq!((taken.len(), over.len()), (3, 0));
    let filter = rooms.filter();
    assert_eq!(filter.excluded, ["a"]);
    assert!(filter.narrowed());
    assert_eq!((filter.only, filter.room), (None, 2), "b's room");
}

#[test]
fn with_every_slot_to_share_no_claimed_row_is_ever_given_back() {
    let mut config = config(Some("http://rest:1/"));
    config.destination_concurrency = None;
    let rooms = Rooms::new(&config);
    let claimed: Vec<ClaimedRow> = (0..8).map(|i| row(&format!("a{i}"), "a")).collect();
    let (taken, over) = rooms.share(&config, claimed);
    assert_eq!((taken.len(), over.len()), (8, 0));
}
