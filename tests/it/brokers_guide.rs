//! The consumer examples of `docs/brokers.md`, run as they are written: the JetStream one's
//! Python (the streams, then a message published) on a private `nats-server`, the RabbitMQ
//! one's `rabbitmqadmin` commands in a vhost of the test's own, each config as the binary's
//! config. The request the service gets must carry the headers the page shows.

use crate::common;

use std::process::Stdio;
use std::time::Duration;

use async_nats::jetstream;
use common::binary::{exit_code, sigterm, start_with_admin};
use common::broker_guide::{
    block, blocks, in_vhost, nats_py, rabbitmqadmin, run, shown_headers, swapped, GUIDE, PAGE_AMQP,
    PAGE_NATS, PAGE_UPSTREAM,
};
use common::client::TestClient;
use common::markdown::read;
use common::poll;
use common::receiver::{Arrival, Receiver};
use common::temp::TempPath;
use idempotency_test_support::nats_server::NatsServer;
use idempotency_test_support::rabbitmq::RabbitVhost;

const WAIT: Duration = Duration::from_secs(30);
const JETSTREAM: &str = "A JetStream consumer";
const RABBITMQ: &str = "A RabbitMQ consumer";
/// The message the page publishes: its id and body.
const KEY: &str = "evt_01J9Z3";
const BODY: &str = r#"{"order": 7}"#;

/// The binary with the config `text`, in front of `receiver`; with its admin listener.
async fn proxy(
    text: &str,
    receiver: &Receiver,
    name: &str,
) -> (tokio::process::Child, TestClient, TempPath) {
    let file = TempPath::new(&format!("{name}.toml"));
    std::fs::write(file.path(), text).unwrap();
    let (child, _, admin) = start_with_admin(&receiver.url(""), file.path(), Stdio::null).await;
    (child, admin, file)
}

/// The page's message, once it reached the service, and once the consumer acknowledged it.
async fn delivered(receiver: &Receiver, admin: &TestClient) -> Arrival {
    let arrived = async || receiver.arrivals(KEY).first().cloned();
    let arrival = poll::until(WAIT, "the message at the service", arrived).await;
    let acknowledged = async || {
        let counts = admin.send("GET", "/consumers/fulfilment", &[], "").await;
        counts.json()["delivered"] == 1
    };
    poll::until(WAIT, "the message acknowledged", acknowledged).await;
    arrival
}

/// `arrival` is the request the page describes, with the headers `shown` (`ce-time`'s value
/// being the message's time, any time).
fn assert_received(arrival: &Arrival, shown: &[(String, String)]) {
    let page = read(GUIDE);
    assert!(page.contains("The service receives `POST /events` with the message's body"));
    assert_eq!(arrival.method, "POST");
    assert_eq!(arrival.uri.path(), "/events");
    assert_eq!(arrival.body, BODY.as_bytes());
    for (name, value) in shown {
        let got = arrival.headers.get(name.to_ascii_lowercase());
        let got = got.unwrap_or_else(|| panic!("{GUIDE} shows {name}, which did not arrive"));
        let got = got.to_str().unwrap();
        if name == "ce-time" {
            assert!(humantime::parse_rfc3339(got).is_ok(), "{got}");
            assert_eq!(got.len(), value.len(), "{got} is written as {value} is");
        } else {
            assert_eq!(got, value, "{name}");
        }
    }
    let broker_own = arrival
        .headers
        .keys()
        .find(|n| n.as_str().starts_with("nats-"));
    assert_eq!(broker_own, None, "JetStream's own headers are left out");
}

#[tokio::test]
async fn the_jetstream_consumer_example_runs_as_written() {
    let Some(nats) = NatsServer::start().await else {
        return;
    };
    let Some(()) = nats_py() else {
        return;
    };
    let url = nats.url();
    let scripts = blocks(JETSTREAM, "sh");
    assert_eq!(scripts.len(), 2, "{GUIDE}: the streams, then a message");
    assert!(scripts[0].lines.contains(&"pip install nats-py".to_owned()));
    run(&scripts[0], &[(PAGE_NATS, &url)]).await;

    let receiver = Receiver::start().await;
    let upstream = receiver.url("");
    let toml = block(JETSTREAM, "toml");
    let text = swapped(&toml, &[(PAGE_NATS, &url), (PAGE_UPSTREAM, &upstream)]);
    let (child, admin, _file) = proxy(&text, &receiver, "brokers-guide-js").await;
    run(&scripts[1], &[(PAGE_NATS, &url)]).await;
    let arrival = delivered(&receiver, &admin).await;
    assert_received(&arrival, &shown_headers(&block(JETSTREAM, "text")));

    // The durable consumer the proxy made, as the config's comment says.
    let js = jetstream::new(async_nats::connect(&url).await.unwrap());
    let payments = js.get_stream("PAYMENTS").await.unwrap();
    let config = &payments.cached_info().config;
    assert_eq!(config.duplicate_window, Duration::from_secs(15 * 60));
    assert_eq!(config.storage, jetstream::stream::StorageType::File);
    let info = payments.consumer_info("fulfilment").await.unwrap();
    assert_eq!(info.config.max_ack_pending, 16, "deliver_concurrency");
    assert_eq!(info.config.filter_subject, "payments.>");
    let dead = js.get_stream("DEAD").await.unwrap();
    assert_eq!(dead.cached_info().config.subjects, ["dead.>"]);
    sigterm(&child);
    assert_eq!(exit_code(child).await, Some(0));
}

#[tokio::test]
async fn the_rabbitmq_consumer_example_runs_as_written() {
    let Some(vhost) = RabbitVhost::create("brokers-guide") else {
        return;
    };
    let Some(()) = rabbitmqadmin() else {
        return;
    };
    let (from, to) = in_vhost(vhost.name());
    let scripts = blocks(RABBITMQ, "sh");
    assert_eq!(
        scripts.len(),
        2,
        "{GUIDE}: the declarations, then a message"
    );
    run(&scripts[0], &[(from, &to)]).await;

    let receiver = Receiver::start().await;
    let upstream = receiver.url("");
    let toml = block(RABBITMQ, "toml");
    let swaps = [(PAGE_AMQP, vhost.url()), (PAGE_UPSTREAM, upstream)];
    let swaps: Vec<(&str, &str)> = swaps.iter().map(|(f, t)| (*f, t.as_str())).collect();
    let (child, admin, _file) =
        proxy(&swapped(&toml, &swaps), &receiver, "brokers-guide-amqp").await;
    run(&scripts[1], &[(from, &to)]).await;
    let arrival = delivered(&receiver, &admin).await;

    // JetStream's headers, but for those the page says differ.
    let prose = read(GUIDE);
    let source = format!("amqp://{}/fulfilment", vhost.name());
    assert!(prose.contains("`ce-source: amqp://<vhost>/fulfilment`"));
    assert!(prose.contains("`ce-type: fulfilment`"));
    let shown: Vec<(String, String)> = shown_headers(&block(JETSTREAM, "text"))
        .into_iter()
        .filter(|(name, _)| name != "ce-time")
        .map(|(name, value)| match name.as_str() {
            "ce-source" => (name, source.clone()),
            "ce-type" => (name, "fulfilment".to_owned()),
            _ => (name, value),
        })
        .collect();
    assert_received(&arrival, &shown);
    assert!(arrival.headers.get("ce-time").is_none(), "no timestamp");
    sigterm(&child);
    assert_eq!(exit_code(child).await, Some(0));
}
