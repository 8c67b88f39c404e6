//! Relays under faults: two relays on one table share the work and send each row once; a
//! database that stops under a relay pauses it (it says so, and which outbox) and it resumes by
//! itself when the database is back, losing nothing; a drain lets the attempt in flight finish
//! and write its outcome.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use common::{event, Db, HyperTransport, Receiver, Relays, Reply, WAIT};
use http::{Request, Response};
use idempotency_outbox::{Health, Transport};
use idempotency_test_support::postgres_server::{PostgresServer, Shutdown};

/// The tests' client, counting what it sends.
#[derive(Debug)]
struct Counting(Arc<AtomicUsize>, Arc<dyn Transport>);

impl Counting {
    fn shared(sent: Arc<AtomicUsize>) -> Arc<dyn Transport> {
        Arc::new(Self(sent, HyperTransport::shared()))
    }
}

#[async_trait::async_trait]
impl Transport for Counting {
    async fn send(
        &self,
        request: Request<Bytes>,
    ) -> Result<Response<()>, idempotency_core::BoxError> {
        self.0.fetch_add(1, Ordering::Relaxed);
        self.1.send(request).await
    }
}

#[tokio::test]
async fn two_relays_on_one_table_send_each_row_once() {
    let Some(db) = Db::fresh().await else { return };
    let receiver = Receiver::start().await;
    let mut config = db.config(&receiver);
    config.deliver_concurrency = 4;
    let (sent_one, sent_two) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let one = db
        .outbox(config.clone())
        .start_relay(Counting::shared(sent_one.clone()));
    let two = db
        .outbox(config)
        .start_relay(Counting::shared(sent_two.clone()));
    let ids: Vec<String> = (0..400).map(|n| format!("evt-{n}")).collect();
    for chunk in ids.chunks(20) {
        let events: Vec<_> = chunk.iter().map(|id| event(id)).collect();
        db.commit(&events).await;
    }
    receiver
        .until(WAIT, "every row sent", |r| r.all().len() >= ids.len())
        .await;
    for id in &ids {
        db.until_delivered(id).await;
    }
    let mut keys = receiver.keys();
    assert_eq!(keys.len(), ids.len(), "no row twice");
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), ids.len());
    let (by_one, by_two) = (
        sent_one.load(Ordering::Relaxed),
        sent_two.load(Ordering::Relaxed),
    );
    assert!(
        by_one > 0 && by_two > 0,
        "both relays took part: {by_one} and {by_two}"
    );
    one.drain(WAIT).await;
    two.drain(WAIT).await;
}

#[tokio::test]
async fn a_database_stopped_under_the_relay_pauses_it_and_it_resumes_by_itself() {
    let Some(mut server) = PostgresServer::start().await else {
        return;
    };
    let db = Db::on(server.fresh_database()).await;
    let receiver = Receiver::start().await;
    let relay = db
        .outbox(db.config(&receiver))
        .start_relay(HyperTransport::shared());
    db.commit(&[event("before")]).await;
    db.until_delivered("before").await;
    // A row in flight when the database goes: its answer comes while the database is down.
    receiver.script("in-flight", [Reply::status(200).held()]);
    db.commit(&[event("in-flight")]).await;
    receiver
        .until(WAIT, "in-flight sent", |r| r.held() == 1)
        .await;

    server.stop(Shutdown::Immediate);
    common::poll::until(
        WAIT,
        "the relay says the database is unreachable",
        async || matches!(relay.health(), Health::Unreachable(_)),
    )
    .await;
    receiver.release();
    let Health::Unreachable(why) = relay.health() else {
        unreachable!()
    };
    assert!(why.starts_with("database"), "{why}");

    server.restart().await;
    common::poll::until(WAIT, "the relay ready again", async || {
        relay.health().is_ready()
    })
    .await;
    db.commit(&[event("after")]).await;
    db.until_delivered("after").await;
    // The mark made while the database was down was kept, and written once it was back.
    let row = db.until_delivered("in-flight").await;
    assert_eq!(row.attempts, 1);
    assert_eq!(receiver.arrivals("in-flight").len(), 1);
    relay.drain(WAIT).await;
}

#[tokio::test]
async fn a_drain_lets_the_attempt_in_flight_finish_and_starts_no_other() {
    let Some(db) = Db::fresh().await else { return };
    let receiver = Receiver::start().await;
    receiver.script("slow", [Reply::status(200).held()]);
    let mut config = db.config(&receiver);
    config.deliver_concurrency = 1;
    let relay = db.outbox(config).start_relay(HyperTransport::shared());
    db.commit(&[event("slow")]).await;
    receiver.until(WAIT, "slow sent", |r| r.held() == 1).await;
    db.commit(&[event("waiting")]).await;
    let outbox = relay.outbox().clone();
    let drained = tokio::spawn(relay.drain(WAIT));
    // On this test's single-threaded runtime the drain's first step (the stop) runs before
    // this task goes on; then the attempt may finish.
    tokio::task::yield_now().await;
    receiver.release();
    let drained = drained.await.unwrap();
    assert_eq!((drained.attempts_left, drained.marks_written), (0, true));
    assert!(db.row("slow").await.unwrap().delivered);
    let waiting = db.row("waiting").await.unwrap();
    assert_eq!(
        (waiting.attempts, waiting.lease_owner),
        (0, None),
        "never claimed"
    );
    assert!(receiver.arrivals("waiting").is_empty());
    assert_eq!(outbox.counts().await.unwrap().pending, 1);
}

#[tokio::test]
async fn rows_claimed_when_the_drain_began_are_given_back_unattempted() {
    let Some(db) = Db::fresh().await else { return };
    let receiver = Receiver::start().await;
    db.commit(&[event("claimed-1"), event("claimed-2")]).await;
    // The table locked: the relay's claim waits behind the lock.
    let mut holder = db.pool.get().await.unwrap();
    let lock = holder.transaction().await.unwrap();
    lock.batch_execute("LOCK TABLE outbox IN EXCLUSIVE MODE")
        .await
        .unwrap();
    let relay = db
        .outbox(db.config(&receiver))
        .start_relay(HyperTransport::shared());
    let waiting = "SELECT count(*) FROM pg_stat_activity \
                   WHERE wait_event_type = 'Lock' AND query LIKE 'WITH due AS%'";
    common::poll::until(WAIT, "the claim waits for the table", async || {
        db.count(waiting).await > 0
    })
    .await;
    let drained = tokio::spawn(relay.drain(WAIT));
    // On this test's single-threaded runtime the drain's stop is sent before this task goes on.
    tokio::task::yield_now().await;
    lock.commit().await.unwrap();
    let drained = drained.await.unwrap();
    assert_eq!((drained.attempts_left, drained.marks_written), (0, true));
    for id in ["claimed-1", "claimed-2"] {
        let row = db.row(id).await.unwrap();
        assert_eq!(
            (row.attempts, row.lease_owner, row.delivered),
            (0, None, false),
            "{id}"
        );
    }
    assert!(receiver.all().is_empty(), "nothing was sent");
}
