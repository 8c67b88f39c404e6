//! The binary's `[[consumers]]` through a SIGKILL between the upstream's `2xx` and the broker's
//! acknowledgement: the proxy reaches the broker through a relay the test cuts while the
//! upstream holds its answer, so the acknowledgement the proxy sends after recording the answer
//! is seen leaving and never arrives. A new process on the same store (the file store's
//! directory, or a Redis) gets the message again and answers it from the record: one request
//! upstream in all, and the broker ends with nothing left to acknowledge. JetStream and
//! RabbitMQ alike.

use crate::common;

use std::process::Stdio;
use std::time::Duration;

use async_nats::jetstream::consumer::{pull, AckPolicy};
use async_nats::jetstream::{self, stream, Context};
use common::binary::{exit_code, sigkill, sigterm, start_with_admin_on};
use common::client::TestClient;
use common::poll;
use common::receiver::{Receiver, Reply};
use common::redis_server::RedisServer;
use common::temp::TempPath;
use idempotency_test_support::nats_server::NatsServer;
use idempotency_test_support::rabbitmq::RabbitVhost;
use idempotency_test_support::tcp_relay::TcpRelay;
use lapin::options::{BasicPublishOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};

const WAIT: Duration = Duration::from_secs(30);
/// The message's id, and so its key.
const KEY: &str = "evt-killed";
/// How long the server waits for an acknowledgement before it delivers the message again: the
/// durable consumer is made by the test with this, so the copy comes seconds after the kill
/// rather than after the proxy's own 30 s.
const ACK_WAIT: Duration = Duration::from_secs(3);

/// A `[[consumers]]` table reading from `source` (`stream` or `queue` in `broker_keys`).
fn config(file: &TempPath, source: &str, broker_keys: &str, upstream: &str) {
    let text = format!(
        "[[consumers]]\nname = \"fulfilment\"\nsource = \"{source}\"\n{broker_keys}\nupstream = \"{upstream}\"\npath = \"/events\"\nretry_initial = \"50ms\"\nretry_max = \"200ms\"\n"
    );
    std::fs::write(file.path(), text).unwrap();
}

/// The proxy on `store` with the consumer of the config at `file`, its log discarded.
async fn proxy(
    receiver: &Receiver,
    file: &TempPath,
    store: &str,
) -> (tokio::process::Child, TestClient) {
    let upstream = receiver.url("");
    let (child, _, admin) =
        start_with_admin_on(&upstream, file.path(), store, Stdio::null, &[]).await;
    (child, admin)
}

/// Runs the first proxy (broker behind `relay`) until the upstream has answered the message
/// and the proxy has sent its acknowledgement, which `acknowledged` recognizes among what the
/// cut relay holds (or in the proxy's counts), then kills it with SIGKILL.
async fn kill_after_the_answer(
    receiver: &Receiver,
    file: &TempPath,
    store: &str,
    relay: TcpRelay,
    acknowledged: impl AsyncFn(&TcpRelay, &TestClient) -> bool,
) {
    // The upstream holds its answer until the line to the broker is cut: the acknowledgement
    // the proxy sends once the answer is recorded cannot get through, however fast it is.
    receiver.script(KEY, [Reply::status(201).held()]);
    let (first, admin) = proxy(receiver, file, store).await;
    receiver
        .until(WAIT, "the message at the upstream", |r| r.held() == 1)
        .await;
    relay.cut();
    receiver.release();
    let sent = async || acknowledged(&relay, &admin).await;
    poll::until(WAIT, "the acknowledgement sent into the cut", sent).await;
    sigkill(&first);
    assert_eq!(exit_code(first).await, None, "killed by a signal");
    // The connections the dead process had end with the relay, as they would with the process.
    drop(relay);
}

/// The second proxy's counts, once its consumer has settled the message's copy.
async fn counts_once_settled(admin: &TestClient) -> serde_json::Value {
    let seen = async || {
        let counts = admin
            .send("GET", "/consumers/fulfilment", &[], "")
            .await
            .json();
        let done = counts["delivered"].as_u64()? + counts["duplicates"].as_u64()?;
        (done >= 1).then_some(counts)
    };
    poll::until(WAIT, "the copy settled", seen).await
}

/// A JetStream server with the stream `PAYMENTS` on `payments.>`, the durable consumer
/// `fulfilment` (the proxy's, with a short `ack_wait`), and the message `KEY` published.
async fn jetstream_with_a_message() -> Option<(NatsServer, Context)> {
    let nats = NatsServer::start().await?;
    let js = jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    let payments = js
        .create_stream(stream::Config {
            name: "PAYMENTS".to_owned(),
            subjects: vec!["payments.>".to_owned()],
            ..stream::Config::default()
        })
        .await
        .unwrap();
    payments
        .create_consumer(pull::Config {
            durable_name: Some("fulfilment".to_owned()),
            ack_policy: AckPolicy::Explicit,
            ack_wait: ACK_WAIT,
            max_ack_pending: 16,
            ..pull::Config::default()
        })
        .await
        .unwrap();
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nats-Msg-Id", KEY);
    let published = js
        .publish_with_headers("payments.confirmed", headers, r#"{"order":7}"#.into())
        .await
        .unwrap();
    published.await.unwrap();
    Some((nats, js))
}

/// What the durable consumer has not settled: messages not yet delivered, and delivered ones
/// not yet acknowledged.
async fn unsettled(js: &Context) -> (u64, usize) {
    let payments = js.get_stream("PAYMENTS").await.unwrap();
    let info = payments.consumer_info("fulfilment").await.unwrap();
    (info.num_pending, info.num_ack_pending)
}

/// The JetStream case on the store `store`.
async fn jetstream_case(nats: &NatsServer, js: &Context, store: &str, name: &str) {
    let receiver = Receiver::start().await;
    let file = TempPath::new(&format!("{name}.toml"));
    let nats_addr = format!("127.0.0.1:{}", nats.port()).parse().unwrap();
    let relay = TcpRelay::to(nats_addr).await;
    let keys = "stream = \"PAYMENTS\"";
    let through_relay = format!("nats://{}", relay.addr());
    config(&file, &through_relay, keys, &receiver.url(""));
    // A JetStream acknowledgement is a message whose payload is `+ACK` (`+WPI` says "in
    // progress", `-NAK` "again later").
    let acked = async |relay: &TcpRelay, _: &TestClient| relay.held_contains(b"+ACK");
    kill_after_the_answer(&receiver, &file, store, relay, acked).await;
    assert_eq!(
        unsettled(js).await,
        (0, 1),
        "the server never got the acknowledgement"
    );

    config(&file, &nats.url(), keys, &receiver.url(""));
    let (second, admin) = proxy(&receiver, &file, store).await;
    let counts = counts_once_settled(&admin).await;
    let settled = async || unsettled(js).await == (0, 0);
    poll::until(WAIT, "nothing left to acknowledge", settled).await;
    assert_eq!(receiver.arrivals(KEY).len(), 1, "one request upstream");
    assert_eq!(counts["delivered"], 0, "answered from the record: {counts}");
    sigterm(&second);
    assert_eq!(exit_code(second).await, Some(0));
}

#[tokio::test]
async fn a_jetstream_message_answered_before_a_sigkill_is_not_sent_again_file_store() {
    let Some((nats, js)) = jetstream_with_a_message().await else {
        return;
    };
    let store = TempPath::new("consumer-kill-js.db");
    jetstream_case(&nats, &js, &store.store_spec(), "consumer-kill-js").await;
}

#[tokio::test]
async fn a_jetstream_message_answered_before_a_sigkill_is_not_sent_again_redis() {
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    let Some((nats, js)) = jetstream_with_a_message().await else {
        return;
    };
    jetstream_case(&nats, &js, &redis.url(), "consumer-kill-js-redis").await;
}

/// How many messages the queue `fulfilment` holds, ready or delivered and not acknowledged, as
/// the broker counts them.
async fn queued(vhost: &RabbitVhost) -> u64 {
    let args = ["list_queues", "-q", "-p", vhost.name(), "name", "messages"];
    let listed = tokio::process::Command::new("rabbitmqctl")
        .args(args)
        .output()
        .await
        .unwrap();
    assert!(listed.status.success(), "rabbitmqctl: {listed:?}");
    let listed = String::from_utf8(listed.stdout).unwrap();
    let count = listed
        .lines()
        .find_map(|line| line.strip_prefix("fulfilment"))
        .unwrap_or_else(|| panic!("no queue fulfilment in {listed:?}"));
    count.trim().parse().unwrap()
}

/// A vhost with the durable queue `fulfilment` holding the message `KEY`.
async fn rabbitmq_with_a_message() -> Option<RabbitVhost> {
    let vhost = RabbitVhost::create("consumer-kill")?;
    let properties = ConnectionProperties::default()
        .with_executor(tokio_executor_trait::Tokio::current())
        .with_reactor(tokio_reactor_trait::Tokio::current());
    let connection = Connection::connect(&vhost.url(), properties).await.unwrap();
    let channel = connection.create_channel().await.unwrap();
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    let queue = channel.queue_declare("fulfilment", durable, FieldTable::default());
    queue.await.unwrap();
    let properties = BasicProperties::default()
        .with_message_id(KEY.into())
        .with_delivery_mode(2);
    let options = BasicPublishOptions::default();
    let body = br#"{"order":7}"#;
    let confirm = channel.basic_publish("", "fulfilment", options, body, properties);
    confirm.await.unwrap().await.unwrap();
    let _ = connection.close(200, "published").await;
    Some(vhost)
}

/// The RabbitMQ case on the store `store`.
async fn rabbitmq_case(store: &str, name: &str) {
    let Some(vhost) = rabbitmq_with_a_message().await else {
        return;
    };
    let receiver = Receiver::start().await;
    let file = TempPath::new(&format!("{name}.toml"));
    let relay = TcpRelay::to(vhost.address().parse().unwrap()).await;
    let through_relay = vhost
        .url()
        .replacen(vhost.address(), &relay.addr().to_string(), 1);
    let keys = "queue = \"fulfilment\"";
    config(&file, &through_relay, keys, &receiver.url(""));
    // AMQP's `basic.ack` has no answer: the proxy counts the message delivered once the frame
    // is written, which is into the cut.
    let acked = async |_: &TcpRelay, admin: &TestClient| {
        let counts = admin.send("GET", "/consumers/fulfilment", &[], "").await;
        counts.json()["delivered"] == 1
    };
    kill_after_the_answer(&receiver, &file, store, relay, acked).await;
    assert_eq!(
        queued(&vhost).await,
        1,
        "the broker never got the acknowledgement"
    );

    config(&file, &vhost.url(), keys, &receiver.url(""));
    let (second, admin) = proxy(&receiver, &file, store).await;
    let counts = counts_once_settled(&admin).await;
    let empty = async || queued(&vhost).await == 0;
    poll::until(WAIT, "the queue empty", empty).await;
    assert_eq!(receiver.arrivals(KEY).len(), 1, "one request upstream");
    assert_eq!(counts["delivered"], 0, "answered from the record: {counts}");
    sigterm(&second);
    assert_eq!(exit_code(second).await, Some(0));
}

#[tokio::test]
async fn a_rabbitmq_message_answered_before_a_sigkill_is_not_sent_again_file_store() {
    let store = TempPath::new("consumer-kill-amqp.db");
    rabbitmq_case(&store.store_spec(), "consumer-kill-amqp").await;
}

#[tokio::test]
async fn a_rabbitmq_message_answered_before_a_sigkill_is_not_sent_again_redis() {
    let Some(redis) = RedisServer::start().await else {
        return;
    };
    rabbitmq_case(&redis.url(), "consumer-kill-amqp-redis").await;
}
