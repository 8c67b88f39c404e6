//! Each destination's share of the slots (`destination_concurrency`): a receiver that accepts
//! connections and never answers holds at most its share of the relay's attempts, while the
//! rows of another destination, committed after its backlog, are all delivered; the rows it
//! has no room for hold neither a lease nor an attempt.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{Db, HyperTransport, Receiver, Relays, WAIT};
use idempotency_outbox::{Event, EventId};
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
