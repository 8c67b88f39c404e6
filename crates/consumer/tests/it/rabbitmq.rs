//! Consumers of a RabbitMQ queue, in a private vhost on the shared broker, with a real
//! upstream over loopback: duplicates make one request, a consumer killed between the
//! upstream's answer and its acknowledgement makes no second one, a poison message gets exactly
//! `max_attempts` requests (counted in the message it is republished as) and one dead letter
//! while the rest flow, a keyless one dies at once.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use idempotency_consumer::source::rabbitmq::RabbitSource;
use idempotency_consumer::{Consumer, ConsumerSettings};
use idempotency_core::{MemoryStore, Store};
use idempotency_test_support::amqp::declare_durable_queues;
use idempotency_test_support::poll;
use idempotency_test_support::rabbitmq::RabbitVhost;
use idempotency_test_support::receiver::{Receiver, Reply};
use lapin::options::{
    BasicConsumeOptions, BasicPublishOptions, ExchangeDeclareOptions, QueueBindOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, ExchangeKind};
use tokio_util::sync::CancellationToken;

/// A vhost with a durable queue `fulfilment`, and an exchange `dead` bound to `dead-letters`.
async fn broker(test: &str) -> Option<(RabbitVhost, Channel)> {
    let vhost = RabbitVhost::create(test)?;
    let channel = vhost.channel().await;
    declare_durable_queues(&channel, &["fulfilment", "dead-letters"]).await;
    channel
        .exchange_declare(
            "dead",
            ExchangeKind::Fanout,
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    channel
        .queue_bind(
            "dead-letters",
            "dead",
            "",
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    Some((vhost, channel))
}

async fn publish(channel: &Channel, id: Option<&str>, body: &str) {
    let mut properties = BasicProperties::default().with_delivery_mode(2);
    if let Some(id) = id {
        properties = properties.with_message_id(id.into());
    }
    channel
        .basic_publish(
            "",
            "fulfilment",
            BasicPublishOptions::default(),
            body.as_bytes(),
            properties,
        )
        .await
        .unwrap()
        .await
        .unwrap();
}

fn start(
    url: &str,
    settings: ConsumerSettings,
    receiver: &Receiver,
    store: Arc<dyn Store>,
) -> (Consumer, CancellationToken, tokio::task::JoinHandle<()>) {
    let source = RabbitSource::new(url, "fulfilment", settings.deliver_concurrency);
    let upstream = common::upstream(receiver.addr());
    let consumer = Consumer::build(settings, Arc::new(source), upstream, store).unwrap();
    let stop = CancellationToken::new();
    let running = tokio::spawn(consumer.clone().run(stop.clone()));
    (consumer, stop, running)
}

/// The dead letters, read off their queue.
async fn dead_letters(channel: &Channel, expected: usize) -> Vec<lapin::message::Delivery> {
    let mut consumer = channel
        .basic_consume(
            "dead-letters",
            "",
            BasicConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    let mut letters = Vec::new();
    while letters.len() < expected {
        let next = tokio::time::timeout(Duration::from_secs(10), consumer.next()).await;
        letters.push(next.expect("a dead letter").unwrap().unwrap());
    }
    letters
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_of_a_message_make_one_request() {
    let Some((vhost, channel)) = broker("consumer-duplicates").await else {
        return;
    };
    let receiver = Receiver::start().await;
    for _copy in 0..3 {
        for event in ["evt-1", "evt-2", "evt-3"] {
            publish(&channel, Some(event), &format!(r#"{{"event":"{event}"}}"#)).await;
        }
    }
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (consumer, stop, running) = start(
        &vhost.url(),
        common::settings("fulfilment"),
        &receiver,
        store,
    );
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
        let source = format!("amqp://{}/fulfilment", vhost.name());
        assert_eq!(headers["ce-source"], source.as_str());
        assert_eq!(headers["ce-type"], "fulfilment");
        assert_eq!(headers["ce-id"], event);
    }
    stop.cancel();
    running.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_killed_between_the_answer_and_the_ack_makes_no_second_request() {
    let Some((vhost, channel)) = broker("consumer-killed").await else {
        return;
    };
    let receiver = Receiver::start().await;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    publish(&channel, Some("pay-7"), r#"{"amount":7}"#).await;

    // Its own runtime, its broker connection too: dropping it ends the consumer as a kill does.
    let doomed = tokio::runtime::Runtime::new().unwrap();
    let (reached, mut at_ack) = tokio::sync::mpsc::unbounded_channel();
    let (url, upstream, first_store) = (
        vhost.url(),
        common::upstream(receiver.addr()),
        store.clone(),
    );
    doomed.spawn(async move {
        let inner = RabbitSource::new(&url, "fulfilment", 4);
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

    let (consumer, stop, running) = start(
        &vhost.url(),
        common::settings("fulfilment"),
        &receiver,
        store,
    );
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
    stop.cancel();
    running.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_message_gets_max_attempts_requests_and_one_dead_letter() {
    let Some((vhost, channel)) = broker("consumer-poison").await else {
        return;
    };
    let receiver = Receiver::start().await;
    receiver.script("poison", (0..10).map(|_| Reply::status(503)));
    let mut settings = common::settings("fulfilment");
    settings.dead_letter = Some("dead".to_owned());
    publish(&channel, Some("poison"), r#"{"bad":true}"#).await;
    for n in 0..5 {
        publish(&channel, Some(&format!("good-{n}")), "{}").await;
    }
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (consumer, stop, running) = start(&vhost.url(), settings, &receiver, store);
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
    let letters = dead_letters(&channel, 1).await;
    let id = letters[0]
        .properties
        .message_id()
        .as_ref()
        .map(ToString::to_string);
    assert_eq!(id.as_deref(), Some("poison"));
    poll::until(Duration::from_secs(10), "the queue is empty", async || {
        consumer.stats().counts().lag == 0 && consumer.stats().counts().in_flight == 0
    })
    .await;
    assert_eq!(receiver.arrivals("poison").len(), 3);
    stop.cancel();
    running.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyless_message_is_dead_at_once() {
    let Some((vhost, channel)) = broker("consumer-keyless").await else {
        return;
    };
    let receiver = Receiver::start().await;
    let mut settings = common::settings("fulfilment");
    settings.dead_letter = Some("dead".to_owned());
    publish(&channel, None, r#"{"no":"id"}"#).await;
    publish(&channel, Some("has-key"), "{}").await;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (consumer, stop, running) = start(&vhost.url(), settings, &receiver, store);
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
    let letters = dead_letters(&channel, 1).await;
    let reason = letters[0]
        .properties
        .headers()
        .as_ref()
        .and_then(|h| h.inner().get("Dead-Reason").cloned());
    let Some(lapin::types::AMQPValue::LongString(reason)) = reason else {
        panic!("no Dead-Reason: {reason:?}");
    };
    let reason = String::from_utf8_lossy(reason.as_bytes()).into_owned();
    assert!(reason.contains("no key"), "{reason}");
    stop.cancel();
    running.await.unwrap();
}
