//! Outbox rows published to JetStream on a private `nats-server -js`: each with `Nats-Msg-Id`
//! and the relay's headers; a duplicate acknowledgement counts as delivered; no stream is a
//! failed attempt, delivered once the stream exists; a payload larger than the server takes is
//! dead at once; a relay killed between publish and mark, or a server killed under load, leaves
//! the stream with one message per row.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, stream};
use async_trait::async_trait;
use common::{event, ordered, Db, HyperTransport, Relays, WAIT};
use idempotency_outbox::destination::nats::JetStreamPublisher;
use idempotency_outbox::{Delivery, Destinations, Message, OutboxConfig, Publisher};
use idempotency_test_support::nats_server::NatsServer;
use idempotency_test_support::poll;

/// A relay config publishing every topic to `server` under `events.`, with quick retries.
fn config(db: &Db, server: &NatsServer) -> OutboxConfig {
    let receiver_free = "http://127.0.0.1:9/unused";
    let mut config = db.config_to(receiver_free);
    config.deliver_to = Some(server.url().parse().unwrap());
    config.nats_subject_prefix = "events.".into();
    config
}

async fn jetstream(server: &NatsServer) -> jetstream::Context {
    let client = async_nats::connect(server.url()).await.unwrap();
    jetstream::new(client)
}

/// The stream `EVENTS` on `events.>`, on disk.
async fn create_stream(js: &jetstream::Context) -> stream::Stream {
    js.get_or_create_stream(stream::Config {
        name: "EVENTS".into(),
        subjects: vec!["events.>".into()],
        storage: stream::StorageType::File,
        ..Default::default()
    })
    .await
    .unwrap()
}

async fn messages(js: &jetstream::Context) -> u64 {
    let mut stream = js.get_stream("EVENTS").await.unwrap();
    stream.info().await.unwrap().state.messages
}

#[tokio::test]
async fn rows_are_published_with_their_id_and_a_duplicate_counts_as_delivered() {
    let Some(db) = Db::fresh().await else { return };
    let Some(server) = NatsServer::start().await else {
        return;
    };
    let js = jetstream(&server).await;
    let stream = create_stream(&js).await;
    // A copy already in the stream: the relay's publish of it is acknowledged as a duplicate.
    let mut earlier = async_nats::HeaderMap::new();
    earlier.insert("Nats-Msg-Id", "evt-dup");
    let ack = js
        .publish_with_headers("events.payment.confirmed", earlier, "{}".into())
        .await
        .unwrap();
    ack.await.unwrap();
    let relay = db
        .outbox(config(&db, &server))
        .start_relay(HyperTransport::shared());
    db.commit(&[
        event("evt-1"),
        ordered("evt-2", "order-7"),
        event("evt-dup"),
    ])
    .await;
    for id in ["evt-1", "evt-2", "evt-dup"] {
        let row = db.until_delivered(id).await;
        assert_eq!((row.attempts, row.last_status), (1, None), "{id}");
    }
    assert_eq!(messages(&js).await, 3, "the duplicate is one message");
    let second = stream.get_raw_message(3).await.unwrap();
    assert_eq!(second.subject.as_str(), "events.payment.confirmed");
    let headers = second.headers;
    let header = |name: &str| headers.get(name).map(|v| v.as_str().to_owned());
    let id = headers
        .get(async_nats::header::NATS_MESSAGE_ID)
        .unwrap()
        .to_string();
    assert!(id == "evt-1" || id == "evt-2", "{id}");
    assert_eq!(header("Outbox-Topic").as_deref(), Some("payment.confirmed"));
    assert_eq!(header("Delivery-Attempt").as_deref(), Some("1"));
    assert_eq!(header("Content-Type").as_deref(), Some("application/json"));
    let seq = db.row(&id).await.unwrap().seq.to_string();
    assert_eq!(header("Outbox-Seq"), Some(seq));
    let aggregate = (id == "evt-2").then(|| "order-7".to_owned());
    assert_eq!(header("Outbox-Aggregate-Id"), aggregate);
    relay.drain(WAIT).await;
}

#[tokio::test]
async fn no_stream_fails_the_attempt_until_the_stream_exists() {
    let Some(db) = Db::fresh().await else { return };
    let Some(server) = NatsServer::start().await else {
        return;
    };
    let relay = db
        .outbox(config(&db, &server))
        .start_relay(HyperTransport::shared());
    db.commit(&[event("evt-early")]).await;
    let failed = poll::until(WAIT, "two failed attempts", async || {
        db.row("evt-early").await.filter(|r| r.attempts >= 2)
    })
    .await;
    assert!(!failed.delivered && !failed.dead, "{failed:?}");
    let error = failed.last_error.unwrap_or_default();
    assert!(
        error.contains("no stream takes subject events.payment.confirmed"),
        "{error}"
    );
    let js = jetstream(&server).await;
    create_stream(&js).await;
    db.until_delivered("evt-early").await;
    assert_eq!(messages(&js).await, 1);
    relay.drain(WAIT).await;
}

#[tokio::test]
async fn a_payload_larger_than_the_server_takes_is_dead_at_once() {
    let Some(db) = Db::fresh().await else { return };
    let Some(server) = NatsServer::start().await else {
        return;
    };
    create_stream(&jetstream(&server).await).await;
    let relay = db
        .outbox(config(&db, &server))
        .start_relay(HyperTransport::shared());
    let big = serde_json::json!({ "filler": "x".repeat(2 * 1024 * 1024) });
    let id = idempotency_outbox::EventId::new("evt-big").unwrap();
    let event = idempotency_outbox::Event::json(id, "payment.confirmed", &big).unwrap();
    db.commit(&[event]).await;
    let row = db.until_dead("evt-big").await;
    assert_eq!(row.attempts, 1);
    let error = row.last_error.unwrap_or_default();
    assert!(error.contains("the NATS server takes at most"), "{error}");
    relay.drain(WAIT).await;
}

/// Publishes for real, counts, then never answers: a relay that dies before its mark.
#[derive(Debug)]
struct DiesAfterPublish(JetStreamPublisher, Arc<AtomicUsize>);

#[async_trait]
impl Publisher for DiesAfterPublish {
    async fn publish(&self, message: &Message) -> Delivery {
        let delivery = self.0.publish(message).await;
        assert_eq!(delivery, Delivery::Delivered { status: None });
        self.1.fetch_add(1, Ordering::SeqCst);
        std::future::pending().await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_killed_between_publish_and_mark_leaves_one_message_per_row() {
    let Some(db) = Db::fresh().await else { return };
    let Some(server) = NatsServer::start().await else {
        return;
    };
    let js = jetstream(&server).await;
    create_stream(&js).await;
    let mut config = config(&db, &server);
    config.deliver_timeout = Duration::from_secs(1);
    config.lease = Duration::from_secs(1);
    let ids: Vec<String> = (0..5).map(|n| format!("evt-{n}")).collect();
    db.commit(&ids.iter().map(|id| event(id)).collect::<Vec<_>>())
        .await;
    // The first relay runs on a runtime of its own, shut down (every task gone, as in a
    // SIGKILL) once each row is published and before any is marked.
    let published = Arc::new(AtomicUsize::new(0));
    let (outbox, url, count) = (db.outbox(config.clone()), server.url(), published.clone());
    let doomed = std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async move {
            let publisher =
                JetStreamPublisher::new(&url.parse().unwrap(), "events.", Duration::from_secs(5));
            let mut destinations = Destinations::new();
            let dies = DiesAfterPublish(publisher, count.clone());
            destinations.insert(&url.parse().unwrap(), Arc::new(dies));
            let _relay = outbox.start_relay_with(destinations);
            while count.load(Ordering::SeqCst) < 5 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        runtime.shutdown_background();
    });
    doomed.join().unwrap();
    assert_eq!(messages(&js).await, 5);
    for id in &ids {
        assert!(!db.row(id).await.unwrap().delivered, "{id} not marked");
    }
    let relay = db.outbox(config).start_relay(HyperTransport::shared());
    for id in &ids {
        let row = db.until_delivered(id).await;
        assert_eq!(row.attempts, 2, "{id}: published again after the lease");
    }
    assert_eq!(
        messages(&js).await,
        5,
        "the second publishes were duplicates"
    );
    relay.drain(WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_under_load_loses_nothing_and_adds_nothing() {
    let Some(db) = Db::fresh().await else { return };
    let Some(mut server) = NatsServer::start().await else {
        return;
    };
    create_stream(&jetstream(&server).await).await;
    let mut config = config(&db, &server);
    config.deliver_timeout = Duration::from_secs(2);
    let relay = db.outbox(config).start_relay(HyperTransport::shared());
    let ids: Vec<String> = (0..300).map(|n| format!("evt-{n}")).collect();
    for (n, chunk) in ids.chunks(30).enumerate() {
        db.commit(&chunk.iter().map(|id| event(id)).collect::<Vec<_>>())
            .await;
        if n == 4 {
            server.kill();
            server.restart().await;
        }
    }
    for id in &ids {
        db.until_delivered(id).await;
    }
    let js = jetstream(&server).await;
    assert_eq!(messages(&js).await, 300, "one message per row");
    relay.drain(WAIT).await;
}

#[tokio::test]
async fn a_stream_whose_duplicate_window_is_too_short_is_named() {
    let Some(db) = Db::fresh().await else { return };
    let Some(server) = NatsServer::start().await else {
        return;
    };
    let js = jetstream(&server).await;
    let mut config = config(&db, &server);
    let timeout = Duration::from_secs(5);
    create_stream(&js).await;
    // The default window, two minutes, outlasts the tests' lease and retry_max.
    let warnings = idempotency_outbox::duplicate_window_warnings(&config, timeout).await;
    assert!(warnings.is_empty(), "{warnings:?}");
    config.retry.max = Duration::from_secs(600);
    let warnings = idempotency_outbox::duplicate_window_warnings(&config, timeout).await;
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("stream EVENTS") && warnings[0].contains("drops duplicates for 2m"),
        "{}",
        warnings[0]
    );
    drop(server);
    let unreachable = idempotency_outbox::duplicate_window_warnings(&config, timeout).await;
    assert!(
        unreachable[0].contains("cannot be checked"),
        "{unreachable:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_of_one_aggregate_reach_the_stream_in_seq_order() {
    let Some(db) = Db::fresh().await else { return };
    let Some(server) = NatsServer::start().await else {
        return;
    };
    let js = jetstream(&server).await;
    let stream = create_stream(&js).await;
    let relay = db
        .outbox(config(&db, &server))
        .start_relay(HyperTransport::shared());
    let mut ids = Vec::new();
    for batch in 0..5 {
        let events: Vec<_> = (0..8)
            .map(|n| {
                let id = format!("evt-{batch}-{n}");
                ids.push(id.clone());
                ordered(&id, if n % 2 == 0 { "order-7" } else { "order-8" })
            })
            .collect();
        db.commit(&events).await;
    }
    for id in &ids {
        db.until_delivered(id).await;
    }
    let total = messages(&js).await;
    assert_eq!(total, 40);
    let mut seen = std::collections::BTreeMap::<String, Vec<i64>>::new();
    for sequence in 1..=total {
        let message = stream.get_raw_message(sequence).await.unwrap();
        let header = |name: &str| message.headers.get(name).unwrap().to_string();
        let seq: i64 = header("Outbox-Seq").parse().unwrap();
        seen.entry(header("Outbox-Aggregate-Id"))
            .or_default()
            .push(seq);
    }
    for (aggregate, seqs) in &seen {
        assert_eq!(seqs.len(), 20, "{aggregate}");
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1]),
            "{aggregate}: {seqs:?}"
        );
    }
    relay.drain(WAIT).await;
}
