//! Outbox rows published to RabbitMQ, each test in a vhost of its own on the shared broker:
//! delivered with `message_id`, persistent, with the relay's headers, to a bound queue; a
//! publish no queue takes (returned under `mandatory`) is never marked delivered; connections
//! cut under load lose nothing.

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{event, ordered, Db, HyperTransport, Relays, WAIT};
use idempotency_outbox::OutboxConfig;
use idempotency_test_support::amqp::declare_durable_queues;
use idempotency_test_support::rabbitmq::RabbitVhost;
use lapin::options::{BasicGetOptions, ExchangeDeclareOptions, QueueBindOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, ExchangeKind};

/// A relay config publishing every topic to the exchange `events` in `vhost`.
fn config(db: &Db, vhost: &RabbitVhost) -> OutboxConfig {
    let mut config = db.config_to(&vhost.url());
    config.amqp_exchange = "events".into();
    config
}

/// A channel of the test's own in `vhost`, with the exchange `events` declared and, when
/// `bound`, the durable queue `fulfilment` bound to it for `payment.confirmed`.
async fn declare(vhost: &RabbitVhost, bound: bool) -> Channel {
    let channel = vhost.channel().await;
    let durable = ExchangeDeclareOptions {
        durable: true,
        ..Default::default()
    };
    channel
        .exchange_declare(
            "events",
            ExchangeKind::Direct,
            durable,
            FieldTable::default(),
        )
        .await
        .unwrap();
    if bound {
        declare_durable_queues(&channel, &["fulfilment"]).await;
        channel
            .queue_bind(
                "fulfilment",
                "events",
                "payment.confirmed",
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
    }
    channel
}

/// Takes every message from the queue `fulfilment`: its properties and body.
async fn drain_queue(channel: &Channel) -> Vec<(BasicProperties, Vec<u8>)> {
    let mut taken = Vec::new();
    let options = BasicGetOptions { no_ack: true };
    while let Some(message) = channel.basic_get("fulfilment", options).await.unwrap() {
        let delivery = message.delivery;
        taken.push((delivery.properties, delivery.data));
    }
    taken
}

fn header(properties: &BasicProperties, name: &str) -> Option<String> {
    let headers = properties.headers().as_ref()?;
    match headers.inner().get(name)? {
        AMQPValue::LongString(text) => Some(text.to_string()),
        AMQPValue::LongLongInt(n) => Some(n.to_string()),
        AMQPValue::LongUInt(n) => Some(n.to_string()),
        other => Some(format!("{other:?}")),
    }
}

#[tokio::test]
async fn rows_reach_a_bound_queue_with_their_id_and_headers() {
    let Some(db) = Db::fresh().await else { return };
    let Some(vhost) = RabbitVhost::create("delivered") else {
        return;
    };
    let channel = declare(&vhost, true).await;
    let relay = db
        .outbox(config(&db, &vhost))
        .start_relay(HyperTransport::shared());
    db.commit(&[event("evt-1"), ordered("evt-2", "order-7")])
        .await;
    for id in ["evt-1", "evt-2"] {
        db.until_delivered(id).await;
    }
    let taken = drain_queue(&channel).await;
    assert_eq!(taken.len(), 2);
    for (properties, body) in &taken {
        let id = properties.message_id().as_ref().unwrap().to_string();
        assert_eq!(body, format!(r#"{{"event": "{id}"}}"#).as_bytes());
        assert_eq!(*properties.delivery_mode(), Some(2), "persistent");
        let content_type = properties.content_type().as_ref().unwrap().to_string();
        assert_eq!(content_type, "application/json");
        assert_eq!(
            header(properties, "Outbox-Topic").as_deref(),
            Some("payment.confirmed")
        );
        assert_eq!(header(properties, "Delivery-Attempt").as_deref(), Some("1"));
        let seq = db.row(&id).await.unwrap().seq.to_string();
        assert_eq!(header(properties, "Outbox-Seq"), Some(seq));
        let aggregate = (id == "evt-2").then(|| "order-7".to_owned());
        assert_eq!(header(properties, "Outbox-Aggregate-Id"), aggregate);
    }
    relay.drain(WAIT).await;
}

#[tokio::test]
async fn a_publish_no_queue_takes_is_never_marked_delivered() {
    let Some(db) = Db::fresh().await else { return };
    let Some(vhost) = RabbitVhost::create("unroutable") else {
        return;
    };
    let _channel = declare(&vhost, false).await;
    let mut config = config(&db, &vhost);
    config.max_attempts = 3;
    let relay = db.outbox(config).start_relay(HyperTransport::shared());
    db.commit(&[event("evt-lost")]).await;
    let row = db.until_dead("evt-lost").await;
    assert!(!row.delivered, "{row:?}");
    assert_eq!(row.attempts, 3);
    let error = row.last_error.unwrap_or_default();
    assert!(
        error.contains("the broker returned it") && error.contains("NO_ROUTE"),
        "{error}"
    );
    relay.drain(WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_cut_under_load_lose_nothing() {
    let Some(db) = Db::fresh().await else { return };
    let Some(vhost) = RabbitVhost::create("cut") else {
        return;
    };
    let _channel = declare(&vhost, true).await;
    let mut config = config(&db, &vhost);
    config.deliver_timeout = Duration::from_secs(2);
    let relay = db.outbox(config).start_relay(HyperTransport::shared());
    let ids: Vec<String> = (0..200).map(|n| format!("evt-{n}")).collect();
    for (n, chunk) in ids.chunks(20).enumerate() {
        db.commit(&chunk.iter().map(|id| event(id)).collect::<Vec<_>>())
            .await;
        if n == 3 || n == 6 {
            // The test's own connection goes too; what the relay confirmed stays in the queue.
            vhost.close_connections();
        }
    }
    for id in &ids {
        db.until_delivered(id).await;
    }
    // The test's own channel went with the cut connections: read through a fresh one.
    let channel = declare(&vhost, true).await;
    // Every row is confirmed, so every message is in the queue already.
    let taken: BTreeSet<String> = drain_queue(&channel)
        .await
        .iter()
        .filter_map(|(p, _)| p.message_id().as_ref().map(ToString::to_string))
        .collect();
    let expected: BTreeSet<String> = ids.iter().cloned().collect();
    assert_eq!(taken, expected, "every row's message is in the queue");
    relay.drain(WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_of_one_aggregate_reach_the_queue_in_seq_order() {
    let Some(db) = Db::fresh().await else { return };
    let Some(vhost) = RabbitVhost::create("order") else {
        return;
    };
    let channel = declare(&vhost, true).await;
    let relay = db
        .outbox(config(&db, &vhost))
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
    let taken = drain_queue(&channel).await;
    assert_eq!(taken.len(), 40);
    let mut seen = std::collections::BTreeMap::<String, Vec<i64>>::new();
    for (properties, _) in &taken {
        let aggregate = header(properties, "Outbox-Aggregate-Id").unwrap();
        let seq = header(properties, "Outbox-Seq").unwrap().parse().unwrap();
        seen.entry(aggregate).or_default().push(seq);
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
