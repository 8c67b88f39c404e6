//! The binary's `[[consumers]]`: a JetStream consumer (and a RabbitMQ one, whose poison message
//! gets `max_attempts` requests and dies) delivers each message to the upstream once
//! (its copies acknowledged from the record), the admin listener counts them, `/readyz` is ready
//! while the broker answers, SIGTERM stops it with exit 0; a table that misses a key it needs is
//! refused with its line, and `--check` shows a broker URL's password as `***`.

use crate::common;

use std::process::Stdio;
use std::time::Duration;

use async_nats::jetstream::{self, stream};
use common::binary::{exit_code, sigterm, start_with_admin, BIN};
use common::poll;
use common::receiver::{Receiver, Reply};
use common::temp::TempPath;
use idempotency_test_support::nats_server::NatsServer;
use idempotency_test_support::rabbitmq::RabbitVhost;

fn config(nats: &str, upstream: &str) -> String {
    format!(
        "[[consumers]]\nname = \"fulfilment\"\nsource = \"{nats}\"\nstream = \"PAYMENTS\"\nfilter_subject = \"payments.>\"\nupstream = \"{upstream}\"\npath = \"/events\"\nkey_from = \"header:Event-Id\"\nretry_initial = \"50ms\"\nretry_max = \"200ms\"\n"
    )
}

#[tokio::test]
async fn a_jetstream_consumer_delivers_each_message_once_and_drains_on_sigterm() {
    let Some(nats) = NatsServer::start().await else {
        return;
    };
    let js = jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    js.create_stream(stream::Config {
        name: "PAYMENTS".to_owned(),
        subjects: vec!["payments.>".to_owned()],
        ..stream::Config::default()
    })
    .await
    .unwrap();
    for _copy in 0..3 {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Event-Id", "evt-1");
        let ack = js
            .publish_with_headers("payments.confirmed", headers, r#"{"order":7}"#.into())
            .await
            .unwrap();
        ack.await.unwrap();
    }
    let receiver = Receiver::start().await;
    let file = TempPath::new("consumers-e2e.toml");
    std::fs::write(file.path(), config(&nats.url(), &receiver.url(""))).unwrap();
    let (proxy, _client, admin) =
        start_with_admin(&receiver.url(""), file.path(), Stdio::null).await;

    let counts = poll::until(
        Duration::from_secs(30),
        "three messages settled",
        async || {
            let answer = admin.send("GET", "/consumers/fulfilment", &[], "").await;
            let counts = answer.json();
            let settled = counts["delivered"].as_u64()? + counts["duplicates"].as_u64()?;
            (settled == 3).then_some(counts)
        },
    )
    .await;
    assert_eq!(counts["delivered"], 1, "{counts}");
    assert_eq!(counts["duplicates"], 2, "{counts}");
    assert_eq!(receiver.arrivals("evt-1").len(), 1);
    assert_eq!(receiver.arrivals("evt-1")[0].uri.path(), "/events");
    let status = admin.send("GET", "/status", &[], "").await.json();
    let shown = &status["consumers"][0];
    assert_eq!(shown["name"], "fulfilment", "{status}");
    assert_eq!(shown["broker"], "ok", "{status}");
    assert_eq!(shown["delivered"], 1, "{status}");
    let ready = admin.send("GET", "/readyz", &[], "").await;
    assert_eq!(ready.status, 200);
    let unknown = admin.send("GET", "/consumers/nope", &[], "").await;
    assert_eq!(unknown.status, 404);
    assert!(unknown.problem_type().ends_with("no-consumer"));
    let metrics = admin.send("GET", "/metrics", &[], "").await;
    let text = String::from_utf8_lossy(&metrics.body);
    assert!(
        text.contains(
            "idempotency_consumer_messages_total{consumer=\"fulfilment\",result=\"duplicate\"} 2"
        ),
        "{text}"
    );
    // Exported at 0 before any message dies, so the dead-message alert sees the first one.
    assert!(
        text.contains(
            "idempotency_consumer_messages_total{consumer=\"fulfilment\",result=\"dead\"} 0"
        ),
        "{text}"
    );

    sigterm(&proxy);
    assert_eq!(exit_code(proxy).await, Some(0));
}

#[tokio::test]
async fn a_rabbitmq_consumer_delivers_each_message_once_and_kills_a_poison_one() {
    use idempotency_test_support::amqp::declare_durable_queues;
    use lapin::options::BasicPublishOptions;
    use lapin::BasicProperties;
    let Some(vhost) = RabbitVhost::create("consumers-e2e") else {
        return;
    };
    let channel = vhost.channel().await;
    declare_durable_queues(&channel, &["fulfilment"]).await;
    for id in ["pay-1", "pay-1", "poison"] {
        let properties = BasicProperties::default().with_message_id(id.into());
        let options = BasicPublishOptions::default();
        let confirm = channel.basic_publish("", "fulfilment", options, b"{}", properties);
        confirm.await.unwrap().await.unwrap();
    }
    let receiver = Receiver::start().await;
    receiver.script("poison", (0..10).map(|_| Reply::status(503)));
    let text = format!(
        "[[consumers]]\nname = \"fulfilment\"\nsource = \"{}\"\nqueue = \"fulfilment\"\nupstream = \"{}\"\npath = \"/events\"\nmax_attempts = 3\nretry_initial = \"20ms\"\nretry_max = \"100ms\"\n",
        vhost.url(),
        receiver.url("")
    );
    let file = TempPath::new("consumers-rabbit.toml");
    std::fs::write(file.path(), text).unwrap();
    let (proxy, _client, admin) =
        start_with_admin(&receiver.url(""), file.path(), Stdio::null).await;
    let counts = poll::until(
        Duration::from_secs(30),
        "two settled and one dead",
        async || {
            let counts = admin
                .send("GET", "/consumers/fulfilment", &[], "")
                .await
                .json();
            let done = counts["delivered"] == 1 && counts["duplicates"] == 1 && counts["dead"] == 1;
            done.then_some(counts)
        },
    )
    .await;
    assert_eq!(counts["retried"], 2, "{counts}");
    assert_eq!(receiver.arrivals("pay-1").len(), 1);
    let attempts: Vec<u32> = receiver
        .arrivals("poison")
        .iter()
        .map(|a| a.attempt)
        .collect();
    assert_eq!(attempts, [1, 2, 3]);
    let dead = admin
        .send("GET", "/consumers/fulfilment/dead", &[], "")
        .await
        .json();
    assert_eq!(dead[0]["key"], "poison", "{dead}");
    assert_eq!(dead[0]["attempts"], 3, "{dead}");
    sigterm(&proxy);
    assert_eq!(exit_code(proxy).await, Some(0));
}

fn check(text: &str) -> std::process::Output {
    let file = TempPath::new("consumers-check.toml");
    std::fs::write(file.path(), text).unwrap();
    std::process::Command::new(BIN)
        .args(["--config", &file.path().display().to_string(), "--check"])
        .output()
        .unwrap()
}

#[test]
fn a_consumer_without_its_stream_is_refused_with_its_line() {
    let text = "upstream = \"http://127.0.0.1:9\"\n\n[[consumers]]\nname = \"fulfilment\"\nsource = \"nats://127.0.0.1:4222\"\nupstream = \"http://127.0.0.1:9\"\npath = \"/events\"\n";
    let output = check(text);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(":3:") && stderr.contains("\"stream\""),
        "{stderr}"
    );
    let bad_key = "upstream = \"http://127.0.0.1:9\"\n[[consumers]]\nname = \"f\"\nsource = \"amqp://u:p@h:5672/v\"\nqueue = \"q\"\nupstream = \"http://127.0.0.1:9\"\npath = \"/e\"\nkey_from = \"id\"\n";
    let output = check(bad_key);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(":8:") && stderr.contains("key_from"),
        "{stderr}"
    );
}

#[test]
fn check_shows_a_broker_password_as_stars() {
    let text = "upstream = \"http://127.0.0.1:9\"\n[[consumers]]\nname = \"fulfilment\"\nsource = \"amqp://fulfil:s3cret@127.0.0.1:5672/orders\"\nqueue = \"fulfilment\"\nupstream = \"http://127.0.0.1:9\"\npath = \"/events\"\n";
    let output = check(text);
    assert!(output.status.success(), "{output:?}");
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(
        printed.contains("amqp://fulfil:***@127.0.0.1:5672/orders"),
        "{printed}"
    );
    assert!(!printed.contains("s3cret"), "{printed}");
    assert!(!String::from_utf8_lossy(&output.stderr).contains("s3cret"));
}
