//! The outbox examples of `docs/brokers.md`, run as they are written: the JetStream stream made
//! by the page's Python on a private `nats-server`, the RabbitMQ exchange and queue by its
//! `rabbitmqadmin` commands in a vhost of the test's own, each `[[outboxes]]` table as a relay's
//! config on a private PostgreSQL, and the page's transaction committed. The message the broker
//! then holds must be what the page says.

use crate::common;

use std::process::Stdio;

use async_nats::jetstream;
use common::binary::BIN;
use common::broker_guide::{
    block, in_vhost, nats_py, rabbitmqadmin, run, shown_headers, swapped, GUIDE, PAGE_NATS,
};
use common::markdown::read;
use common::postgres_server::{shared_postgres, PostgresServer};
use common::temp::TempPath;
use idempotency_test_support::nats_server::NatsServer;
use idempotency_test_support::outbox::OutboxDb;
use idempotency_test_support::rabbitmq::RabbitVhost;
use lapin::options::BasicGetOptions;
use lapin::types::AMQPValue;
use lapin::{Connection, ConnectionProperties};

const WORKED: &str = "A worked example: JetStream";
const RABBITMQ: &str = "RabbitMQ";
/// The row the page's transaction commits.
const ID: &str = "evt_01J9Z3";

/// A fresh database with the outbox table and the application's `orders`, whose row 7 the
/// page's transaction updates.
async fn application_database(server: &PostgresServer) -> OutboxDb {
    let db = OutboxDb::on(server.fresh_database()).await;
    let orders = "CREATE TABLE orders (id bigint PRIMARY KEY, status text NOT NULL);
        INSERT INTO orders VALUES (7, 'new');";
    db.execute(orders).await;
    db
}

/// The binary as a relay with the config `text`, its database and broker URLs in `env` as the
/// config's `env:` values name them; stopped when dropped.
fn relay(text: &str, env: &[(&str, &str)], name: &str) -> (tokio::process::Child, [TempPath; 2]) {
    let (file, log) = (
        TempPath::new(&format!("{name}.toml")),
        TempPath::new(&format!("{name}.log")),
    );
    std::fs::write(file.path(), text).unwrap();
    let admin = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let config = file.path().display().to_string();
    let child = tokio::process::Command::new(BIN)
        .args([
            "--config",
            &config,
            "--store",
            "memory",
            "--admin-listen",
            &admin,
        ])
        .envs(env.iter().copied())
        .stderr(Stdio::from(std::fs::File::create(log.path()).unwrap()))
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    (child, [file, log])
}

/// The page's transaction, committed.
async fn commit_the_transaction(db: &OutboxDb) {
    let transaction = block(WORKED, "sql").lines.join("\n");
    assert!(transaction.contains(ID));
    db.execute(&transaction).await;
}

#[tokio::test]
async fn the_jetstream_outbox_example_runs_as_written() {
    let Some(server) = shared_postgres() else {
        return;
    };
    let Some(nats) = NatsServer::start().await else {
        return;
    };
    let Some(()) = nats_py() else {
        return;
    };
    let url = nats.url();
    run(&block(WORKED, "sh"), &[(PAGE_NATS, &url)]).await;
    let db = application_database(server).await;
    let text = swapped(&block(WORKED, "toml"), &[(PAGE_NATS, &url)]);
    let env = [("OUTBOX_DATABASE_URL", db.url.as_str())];
    let _relay = relay(&text, &env, "brokers-guide-outbox-js");
    commit_the_transaction(&db).await;
    db.until_delivered(ID).await;

    let js = jetstream::new(async_nats::connect(&url).await.unwrap());
    let mut events = js.get_stream("EVENTS").await.unwrap();
    assert_eq!(events.info().await.unwrap().state.messages, 1);
    let message = events.get_raw_message(1).await.unwrap();
    assert!(read(GUIDE).contains("one message on `events.payment.confirmed`"));
    assert_eq!(message.subject.as_str(), "events.payment.confirmed");
    // By name as written: the client keeps `Nats-Msg-Id` as a name of its own, which a lookup by
    // text misses.
    let headers: Vec<(String, String)> = message
        .headers
        .iter()
        .flat_map(|(name, values)| {
            values
                .iter()
                .map(move |v| (name.to_string(), v.to_string()))
        })
        .collect();
    for (name, value) in shown_headers(&block(WORKED, "text")) {
        let got = headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(&name));
        let got = got.unwrap_or_else(|| panic!("{GUIDE} shows {name}, not in {headers:?}"));
        assert_eq!(got.1, value, "{name}");
    }
    assert_eq!(message.payload.as_ref(), br#"{"order": 7}"#);
}

#[tokio::test]
async fn the_rabbitmq_outbox_example_runs_as_written() {
    let Some(server) = shared_postgres() else {
        return;
    };
    let Some(vhost) = RabbitVhost::create("brokers-guide-outbox") else {
        return;
    };
    let Some(()) = rabbitmqadmin() else {
        return;
    };
    let (from, to) = in_vhost(vhost.name());
    run(&block(RABBITMQ, "sh"), &[(from, &to)]).await;
    let db = application_database(server).await;
    let text = block(RABBITMQ, "toml").lines.join("\n");
    let amqp = vhost.url();
    let env = [
        ("OUTBOX_DATABASE_URL", db.url.as_str()),
        ("PAYMENTS_AMQP_URL", amqp.as_str()),
    ];
    let _relay = relay(&text, &env, "brokers-guide-outbox-amqp");
    commit_the_transaction(&db).await;
    db.until_delivered(ID).await;

    // "One message in the queue `payments`", as the page says, with what it says it carries.
    assert!(read(GUIDE).contains("one message in the queue `payments`"));
    let properties = ConnectionProperties::default()
        .with_executor(tokio_executor_trait::Tokio::current())
        .with_reactor(tokio_reactor_trait::Tokio::current());
    let connection = Connection::connect(&amqp, properties).await.unwrap();
    let channel = connection.create_channel().await.unwrap();
    let got = channel.basic_get("payments", BasicGetOptions::default());
    let message = got.await.unwrap().expect("a message in the queue");
    assert_eq!(message.message_count, 0, "and only one");
    let properties = &message.delivery.properties;
    assert_eq!(properties.message_id().as_ref().unwrap().as_str(), ID);
    assert_eq!(
        properties.content_type().as_ref().unwrap().as_str(),
        "application/json"
    );
    assert_eq!(*properties.delivery_mode(), Some(2), "persistent");
    let headers = properties.headers().as_ref().unwrap().inner();
    let text = |name: &str| match headers.get(name) {
        Some(AMQPValue::LongString(s)) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
        other => panic!("{name}: {other:?}"),
    };
    assert_eq!(text("Outbox-Topic"), "payment.confirmed");
    assert_eq!(text("Outbox-Aggregate-Id"), "order-7");
    let integer = |name: &str| match headers.get(name) {
        Some(AMQPValue::LongLongInt(n)) => *n,
        Some(AMQPValue::LongInt(n)) => i64::from(*n),
        Some(AMQPValue::LongUInt(n)) => i64::from(*n),
        other => panic!("{name} is not an integer: {other:?}"),
    };
    let shown = shown_headers(&block(WORKED, "text"));
    let seq = shown.iter().find(|(name, _)| name == "Outbox-Seq").unwrap();
    assert_eq!(integer("Outbox-Seq").to_string(), seq.1, "as for JetStream");
    assert_eq!(integer("Delivery-Attempt"), 1);
    assert_eq!(message.delivery.exchange.as_str(), "events");
    assert_eq!(message.delivery.routing_key.as_str(), "payment.confirmed");
}
