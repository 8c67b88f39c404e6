//! An outbox relay run by the binary publishing to JetStream (docs/brokers.md): rows reach the
//! stream once each with `Nats-Msg-Id`, and a stream whose duplicate window is shorter than
//! `lease` plus `retry_max` is named in a warning at start and by `--check`.

mod common;

use std::process::Command;
use std::time::Duration;

use async_nats::jetstream::{self, stream};
use common::binary::BIN;
use common::outbox::{outbox_table, RelayProcess};
use common::postgres_server::shared_postgres;
use idempotency_test_support::nats_server::NatsServer;
use idempotency_test_support::outbox::{event, OutboxDb};
use idempotency_test_support::temp::TempPath;

#[tokio::test]
async fn rows_reach_the_stream_once_and_a_short_duplicate_window_is_named() {
    let Some(server) = shared_postgres() else {
        return;
    };
    let Some(nats) = NatsServer::start().await else {
        return;
    };
    let js = jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    js.get_or_create_stream(stream::Config {
        name: "EVENTS".into(),
        subjects: vec!["events.>".into()],
        storage: stream::StorageType::File,
        duplicate_window: Duration::from_secs(2),
        ..Default::default()
    })
    .await
    .unwrap();
    let db = OutboxDb::on(server.fresh_database()).await;
    let config = outbox_table(&db.url, &nats.url(), "nats_subject_prefix = \"events.\"");

    let file = TempPath::new("outbox-brokers-check.toml");
    std::fs::write(file.path(), &config).unwrap();
    let checked = Command::new(BIN)
        .args(["--config", &file.path().display().to_string(), "--check"])
        .output()
        .unwrap();
    assert!(checked.status.success(), "{checked:?}");
    let warned = String::from_utf8_lossy(&checked.stderr);
    assert!(
        warned.contains("warning: outbox \"payments\": stream EVENTS")
            && warned.contains("drops duplicates for 2s"),
        "{warned}"
    );
    assert!(String::from_utf8_lossy(&checked.stdout).contains("nats_subject_prefix = \"events.\""));

    let relay = RelayProcess::start("outbox-brokers", &config).await;
    relay.until_logged("stream EVENTS").await;
    let ids: Vec<String> = (0..20).map(|n| format!("evt-{n}")).collect();
    db.commit(&ids.iter().map(|id| event(id)).collect::<Vec<_>>())
        .await;
    for id in &ids {
        let row = db.until_delivered(id).await;
        assert_eq!(row.last_status, None, "{id}: no HTTP status");
    }
    let mut events = js.get_stream("EVENTS").await.unwrap();
    assert_eq!(events.info().await.unwrap().state.messages, 20);
    let first = events.get_raw_message(1).await.unwrap();
    assert_eq!(first.subject.as_str(), "events.payment.confirmed");
    let id = first
        .headers
        .get(async_nats::header::NATS_MESSAGE_ID)
        .unwrap();
    assert!(ids.contains(&id.to_string()), "{id}");
}
