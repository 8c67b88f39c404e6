//! Consumers of a JetStream durable consumer against a private `nats-server -js` and a real
//! upstream over loopback: duplicates make one request, a consumer killed between the
//! upstream's answer and its acknowledgement makes no second one, a poison message gets exactly
//! `max_attempts` requests and one dead letter while the rest flow, a keyless one dies at once.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, stream, Context};
use idempotency_consumer::source::jetstream::{JetStreamSettings, JetStreamSource};
use idempotency_consumer::{Consumer, ConsumerSettings, KeyFrom};
use idempotency_core::{MemoryStore, Store};
use idempotency_test_support::nats_server::NatsServer;
use idempotency_test_support::poll;
use idempotency_test_support::receiver::{Receiver, Reply};
use tokio_util::sync::CancellationToken;

/// A server with a stream `PAYMENTS` on `payments.>` and one `DEAD` on `dead.>`.
async fn broker() -> Option<(NatsServer, Context)> {
    let server = NatsServer::start().await?;
    let client = async_nats::connect(server.url()).await.unwrap();
    let js = jetstream::new(client);
    for (name, subject) in [("PAYMENTS", "payments.>"), ("DEAD", "dead.>")] {
        js.create_stream(stream::Config {
            name: name.to_owned(),
            subjects: vec![subject.to_owned()],
            ..stream::Config::default()
        })
        .await
        .unwrap();
    }
    Some((server, js))
}

fn js_settings(durable: &str) -> JetStreamSettings {
    JetStreamSettings {
        stream: "PAYMENTS".to_owned(),
        durable: durable.to_owned(),
        filter_subject: Some("payments.>".to_owned()),
        concurrency: 4,
        ack_wait: Duration::from_secs(1),
    }
}

async fn publish(js: &Context, id: Option<&str>, headers: &[(&str, &str)], body: &str) {
    let mut map = async_nats::HeaderMap::new();
    if let Some(id) = id {
        map.insert("Nats-Msg-Id", id);
    }
    for (name, value) in headers {
        map.insert(*name, *value);
    }
    let ack = js
        .publish_with_headers("payments.confirmed", map, body.to_owned().into())
        .await
        .unwrap();
    ack.await.unwrap();
}

/// Starts a consumer on the test's runtime; returns it and its stop token.
async fn start(
    url: &str,
    settings: ConsumerSettings,
    receiver: &Receiver,
    store: Arc<dyn Store>,
) -> (Consumer, CancellationToken, tokio::task::JoinHandle<()>) {
    let source = JetStreamSource::connect(url, js_settings(&settings.name))
        .await
        .unwrap();
    let consumer = Consumer::build(
        settings,
        Arc::new(source),
        common::upstream(receiver.addr()),
        store,
    )
    .unwrap();
    let stop = CancellationToken::new();
    let running = tokio::spawn(consumer.clone().run(stop.clone()));
    (consumer, stop, running)
}

async fn messages_in(js: &Context, stream: &str) -> u64 {
    js.get_stream(stream)
        .await
        .unwrap()
        .info()
        .await
        .unwrap()
        .state
        .messages
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_of_a_message_make_one_request() {
    let Some((server, js)) = broker().await else {
        return;
    };
    let receiver = Receiver::start().await;
    let mut settings = common::settings("fulfilment");
    settings.key_from = KeyFrom::Header("Event-Id".to_owned());
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    // The stream keeps every copy: they carry no Nats-Msg-Id, as a careless publisher's.
    for _copy in 0..3 {
        for event in ["evt-1", "evt-2", "evt-3"] {
            let body = format!(r#"{{"event":"{event}"}}"#);
            publish(&js, None, &[("Event-Id", event)], &body).await;
        }
    }
    let (consumer, stop, running) = start(&server.url(), settings, &receiver, store).await;
    let counts = common::counts_until(consumer.stats(), "nine messages settled", |c| {
        c.delivered + c.duplicates == 9
    })
    .await;
    assert_eq!((counts.delivered, counts.duplicates), (3, 6));
    for event in ["evt-1", "evt-2", "evt-3"] {
        let arrivals = receiver.arrivals(event);
        assert_eq!(
            arrivals.len(),
            1,
            "{event} reached the upstream {} times",
            arrivals.len()
        );
        let headers = &arrivals[0].headers;
        assert_eq!(headers["ce-id"], event);
        assert_eq!(headers["ce-specversion"], "1.0");
        assert_eq!(headers["ce-source"], "nats://PAYMENTS/payments.confirmed");
        assert_eq!(headers["ce-type"], "payments.confirmed");
        assert!(headers.contains_key("ce-time"));
        assert_eq!(headers["content-type"], "application/json");
        assert_eq!(headers["delivery-attempt"], "1");
        assert_eq!(headers["event-id"], event);
    }
    poll::until(
        Duration::from_secs(10),
        "the broker counts nothing unacknowledged",
        async || consumer.stats().counts().lag == 0,
    )
    .await;
    stop.cancel();
    running.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_killed_between_the_answer_and_the_ack_makes_no_second_request() {
    let Some((server, js)) = broker().await else {
        return;
    };
    let receiver = Receiver::start().await;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    publish(&js, Some("pay-7"), &[], r#"{"amount":7}"#).await;

    // The first consumer runs on a runtime of its own, its broker connection too, so dropping
    // that runtime ends every task of it at once, as a kill -9 ends a process.
    let doomed = tokio::runtime::Runtime::new().unwrap();
    let (reached, mut at_ack) = tokio::sync::mpsc::unbounded_channel();
    let (url, upstream, first_store) = (
        server.url(),
        common::upstream(receiver.addr()),
        store.clone(),
    );
    doomed.spawn(async move {
        let inner = JetStreamSource::connect(&url, js_settings("fulfilment"))
            .await
            .unwrap();
        let source = Arc::new(common::DiesBeforeAck::new(inner, reached));
        let consumer = Consumer::build(
            common::settings("fulfilment"),
            source,
            upstream,
            first_store,
        )
        .unwrap();
        consumer.run(CancellationToken::new()).await;
    });
    tokio::time::timeout(Duration::from_secs(30), at_ack.recv())
        .await
        .expect("the first consumer reached its acknowledgement");
    doomed.shutdown_background();
    assert_eq!(receiver.arrivals("pay-7").len(), 1);

    // The broker sends the message again after ack_wait; the record answers it.
    let (consumer, stop, running) = start(
        &server.url(),
        common::settings("fulfilment"),
        &receiver,
        store,
    )
    .await;
    let counts = common::counts_until(consumer.stats(), "the redelivery acknowledged", |c| {
        c.duplicates == 1
    })
    .await;
    assert_eq!(counts.delivered, 0);
    assert_eq!(
        receiver.arrivals("pay-7").len(),
        1,
        "one request upstream in all"
    );
    poll::until(
        Duration::from_secs(10),
        "nothing left unacknowledged",
        async || consumer.stats().counts().lag == 0,
    )
    .await;
    stop.cancel();
    running.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_message_gets_max_attempts_requests_and_one_dead_letter() {
    let Some((server, js)) = broker().await else {
        return;
    };
    let receiver = Receiver::start().await;
    receiver.script("poison", (0..10).map(|_| Reply::status(500)));
    let mut settings = common::settings("fulfilment");
    settings.dead_letter = Some("dead.payments".to_owned());
    publish(&js, Some("poison"), &[], r#"{"bad":true}"#).await;
    for n in 0..5 {
        publish(&js, Some(&format!("good-{n}")), &[], "{}").await;
    }
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (consumer, stop, running) = start(&server.url(), settings, &receiver, store).await;
    let counts = common::counts_until(consumer.stats(), "five delivered and one dead", |c| {
        c.delivered == 5 && c.dead == 1
    })
    .await;
    assert_eq!(counts.retried, 2);
    let attempts: Vec<u32> = receiver
        .arrivals("poison")
        .iter()
        .map(|a| a.attempt)
        .collect();
    assert_eq!(attempts, [1, 2, 3]);
    for n in 0..5 {
        assert_eq!(receiver.arrivals(&format!("good-{n}")).len(), 1);
    }
    assert_eq!(messages_in(&js, "DEAD").await, 1);
    let dead = consumer.stats().dead(10, None);
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].key, "poison");
    assert_eq!(dead[0].attempts, 3);
    poll::until(
        Duration::from_secs(10),
        "nothing left unacknowledged",
        async || consumer.stats().counts().lag == 0,
    )
    .await;
    // Terminated: the poison message never comes back.
    assert_eq!(receiver.arrivals("poison").len(), 3);
    stop.cancel();
    running.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyless_message_is_dead_at_once() {
    let Some((server, js)) = broker().await else {
        return;
    };
    let receiver = Receiver::start().await;
    let mut settings = common::settings("fulfilment");
    settings.dead_letter = Some("dead.payments".to_owned());
    publish(&js, None, &[], r#"{"no":"id"}"#).await;
    publish(&js, Some("has-key"), &[], "{}").await;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (consumer, stop, running) = start(&server.url(), settings, &receiver, store).await;
    let counts = common::counts_until(consumer.stats(), "one delivered and one dead", |c| {
        c.delivered == 1 && c.dead == 1
    })
    .await;
    assert_eq!(counts.retried, 0);
    assert_eq!(
        receiver.all().len(),
        1,
        "only the keyed message went upstream"
    );
    let dead_stream = js.get_stream("DEAD").await.unwrap();
    let letter = dead_stream
        .get_last_raw_message_by_subject("dead.payments")
        .await
        .unwrap();
    let reason = letter
        .headers
        .get("Dead-Reason")
        .unwrap()
        .as_str()
        .to_owned();
    assert!(reason.contains("no key"), "{reason}");
    assert_eq!(consumer.stats().dead(10, None)[0].attempts, 1);
    stop.cancel();
    running.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_outage_pauses_the_consumer_and_it_resumes_by_itself() {
    let Some((mut server, js)) = broker().await else {
        return;
    };
    let receiver = Receiver::start().await;
    publish(&js, Some("before"), &[], "{}").await;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (consumer, stop, running) = start(
        &server.url(),
        common::settings("fulfilment"),
        &receiver,
        store,
    )
    .await;
    common::counts_until(consumer.stats(), "the first delivered", |c| {
        c.delivered == 1
    })
    .await;

    server.kill();
    poll::until(
        Duration::from_secs(60),
        "the consumer sees the outage",
        async || consumer.stats().broker_down(),
    )
    .await;
    server.restart().await;
    let client = async_nats::connect(server.url()).await.unwrap();
    publish(&jetstream::new(client), Some("after"), &[], "{}").await;
    common::counts_until(consumer.stats(), "the second delivered", |c| {
        c.delivered == 2
    })
    .await;
    poll::until(
        Duration::from_secs(30),
        "the consumer says the broker is back",
        async || !consumer.stats().broker_down(),
    )
    .await;
    assert_eq!(receiver.arrivals("after").len(), 1);
    stop.cancel();
    running.await.unwrap();
}
