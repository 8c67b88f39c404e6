//! Each destination's share of the slots (`destination_concurrency`): a receiver that accepts
//! connections and never answers holds at most its share of the relay's attempts, while the
//! rows of another destination, committed after its backlog, are all delivered; the rows it
//! has no room for hold neither a lease nor an attempt; and a claim that leaves a full
//! destination out meets the other destinations' rows before that destination's backlog.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{Db, HyperTransport, Receiver, Relays, WAIT};
use idempotency_outbox::{
    claim_statement, claim_statement_leaving_out, Event, EventId, PayloadKind, TableName,
};
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

/// A receiver that accepts every connection, reads whatever comes, and never answers.
struct Hung {
    url: String,
    /// Connections open now.
    open: Arc<AtomicUsize>,
    /// The most connections ever open at once.
    most: Arc<AtomicUsize>,
    /// Connections accepted in all.
    accepted: Arc<AtomicUsize>,
}

impl Hung {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hooks", listener.local_addr().unwrap());
        let hung = Self {
            url,
            open: Arc::default(),
            most: Arc::default(),
            accepted: Arc::default(),
        };
        let (open, most, accepted) = (hung.open.clone(), hung.most.clone(), hung.accepted.clone());
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                accepted.fetch_add(1, Ordering::SeqCst);
                let now = open.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                let open = open.clone();
                tokio::spawn(async move {
                    let mut buffer = [0u8; 4096];
                    while matches!(socket.read(&mut buffer).await, Ok(n) if n > 0) {}
                    open.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        hung
    }

    fn open(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }
}

fn event(id: &str, topic: &str) -> Event {
    let body = serde_json::json!({ "event": id });
    Event::json(EventId::new(id).unwrap(), topic, &body).unwrap()
}

#[tokio::test]
async fn a_hung_receiver_holds_only_its_share_while_other_topics_flow() {
    let Some(db) = Db::fresh().await else { return };
    let hung = Hung::start().await;
    let receiver = Receiver::start().await;
    let mut config = db.config(&receiver);
    config.deliver_to = None;
    config.topics.insert("a".into(), hung.url.parse().unwrap());
    config
        .topics
        .insert("b".into(), receiver.url("/b").parse().unwrap());
    config.deliver_concurrency = 8;
    config.destination_concurrency = Some(2);
    // Longer than the test: no attempt to the hung receiver ends, and none is made again.
    config.deliver_timeout = Duration::from_secs(120);
    // The hung receiver's backlog first: a claim in commit order meets its rows before b's.
    let backlog: Vec<Event> = (0..20).map(|i| event(&format!("a-{i:02}"), "a")).collect();
    db.commit(&backlog).await;
    let flowing: Vec<Event> = (0..20).map(|i| event(&format!("b-{i:02}"), "b")).collect();
    db.commit(&flowing).await;

    let relay = db.outbox(config).start_relay(HyperTransport::shared());
    for i in 0..20 {
        db.until_delivered(&format!("b-{i:02}")).await;
    }
    common::poll::until(WAIT, "two attempts held by the hung receiver", async || {
        hung.open() == 2
    })
    .await;
    assert_eq!(
        hung.most.load(Ordering::SeqCst),
        2,
        "never more than its share"
    );
    assert_eq!(hung.accepted.load(Ordering::SeqCst), 2);
    // Its other rows were not claimed, or were given back unattempted in their claim.
    let held = db
        .count("SELECT count(*) FROM outbox WHERE topic = 'a' AND lease_owner IS NOT NULL")
        .await;
    let attempted = db
        .count("SELECT count(*) FROM outbox WHERE topic = 'a' AND attempts > 0")
        .await;
    assert_eq!((held, attempted), (2, 2));
    assert_eq!(receiver.all().len(), 20, "each of b's rows sent once");
    drop(relay);
}

/// The buffers a claim of `limit` rows reads (`EXPLAIN (ANALYZE, BUFFERS)`, rolled back) with
/// the topics `left_out` left out, and how many rows it claimed.
async fn claim_buffers(db: &Db, claim: &str, limit: i64, left_out: &str) -> (i64, u64) {
    let claim = claim
        .replace("$1", "'explain'")
        .replace("$2::int8", "30000::int8")
        .replace("$3", &limit.to_string())
        .replace("$4", &format!("'{{{left_out}}}'"))
        .replace("$5", "NULL");
    let mut client = db.pool.get().await.unwrap();
    let transaction = client.transaction().await.unwrap();
    let messages = transaction
        .simple_query(&format!("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {claim}"))
        .await
        .unwrap();
    transaction.rollback().await.unwrap();
    let (top, blocks) = common::explained(&messages);
    (blocks, top["Actual Rows"].as_u64().unwrap_or(0))
}

#[tokio::test]
async fn a_claim_that_leaves_a_full_destination_out_meets_the_others_before_its_backlog() {
    let Some(db) = Db::fresh().await else { return };
    let table = TableName::default();
    let newest_first = claim_statement_leaving_out(&table, PayloadKind::Json);
    let rows = |topic: &str, count: u32| {
        format!(
            "INSERT INTO outbox (id, topic, payload)
                 SELECT '{topic}-' || i, '{topic}', '{{}}' FROM generate_series(1, {count}) i;"
        )
    };
    db.execute(&rows("b", 10)).await;
    db.execute("ANALYZE outbox").await;
    let (clean, claimed) = claim_buffers(&db, &newest_first, 2, "a").await;
    assert_eq!(claimed, 2);

    // The full destination's backlog, due before b's rows: a claim in due order walks it all.
    db.execute("TRUNCATE outbox").await;
    db.execute(&format!(
        "{} {} ANALYZE outbox;",
        rows("a", 20_000),
        rows("b", 10)
    ))
    .await;
    let (behind, claimed) = claim_buffers(&db, &newest_first, 2, "a").await;
    assert_eq!(claimed, 2, "two of b's rows");
    assert!(
        behind <= clean + 40,
        "the claim read {behind} buffers behind a's backlog, {clean} without it"
    );
    let oldest_first = claim_statement(&table, PayloadKind::Json);
    let (walked, _) = claim_buffers(&db, &oldest_first, 2, "a").await;
    assert!(walked > behind * 10, "in due order it reads {walked}");
}
