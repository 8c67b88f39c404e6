//! `drain-nats`: the drain of `drain`, to a private `nats-server -js` instead of an HTTP
//! receiver: a stream on disk takes `events.>` with a duplicate window longer than the run, the
//! relay publishes each row with `Nats-Msg-Id` and marks it on the stream's acknowledgement.
//! Rows per second are the stream's, from its first message's timestamp to its last.

use std::time::Duration;

use async_nats::jetstream::{self, stream};
use idempotency_postgres::Pool;
use idempotency_test_support::nats_server::NatsServer;
use idempotency_test_support::postgres_server::PostgresServer;
use tokio::time::Instant;

use crate::cases::{insert_backlog, micros, until_marked, Outcome, DRAIN_LIMIT};
use crate::relay::{self, Relay};
use crate::{cpu, Cli};

/// Longer than any run: no row sent twice may become a second message.
const DUPLICATE_WINDOW: Duration = Duration::from_secs(15 * 60);

/// A private server with JetStream (its own port and store directory).
pub async fn server() -> Result<NatsServer, String> {
    NatsServer::start()
        .await
        .ok_or_else(|| "no nats-server".to_owned())
}

/// A file-backed stream `name` taking `subjects`.
pub async fn stream(
    js: &jetstream::Context,
    name: &str,
    subjects: &str,
) -> Result<stream::Stream, String> {
    js.create_stream(stream::Config {
        name: name.into(),
        subjects: vec![subjects.into()],
        storage: stream::StorageType::File,
        duplicate_window: DUPLICATE_WINDOW,
        ..Default::default()
    })
    .await
    .map_err(|e| format!("creating the stream {name}: {e}"))
}

pub async fn drain(
    cli: &Cli,
    server: &PostgresServer,
    pool: &Pool,
    database: &str,
) -> Result<Outcome, String> {
    let nats = self::server().await?;
    let client = async_nats::connect(nats.url())
        .await
        .map_err(|e| e.to_string())?;
    let js = jetstream::new(client);
    let mut events = stream(&js, "EVENTS", "events.>").await?;
    insert_backlog(cli, pool).await?;
    let settings = relay::Settings {
        database,
        deliver_to: nats.url(),
        notify: true,
        concurrency: cli.concurrency,
        block: false,
        extra: "nats_subject_prefix = \"events.\"\n",
    };
    let nats_before = cpu::process(nats.pid());
    let postgres_before = cpu::postgres(server.pid());
    let started = Instant::now();
    let relay = Relay::start(&cli.binary, &settings).await?;
    let marked = until_marked(pool, cli.backlog, started + DRAIN_LIMIT).await?;
    let relay_cpu = cpu::process(relay.pid());
    let postgres_cpu = cpu::postgres(server.pid()).saturating_sub(postgres_before);
    let nats_cpu = cpu::process(nats.pid()).saturating_sub(nats_before);
    drop(relay);
    let state = &events.info().await.map_err(|e| e.to_string())?.state;
    let span = (state.last_timestamp - state.first_timestamp).as_seconds_f64();
    let delivered_per_s = if span > 0.0 {
        state.messages.saturating_sub(1) as f64 / span
    } else {
        0.0
    };
    Ok(Outcome {
        case: "drain-nats".into(),
        rows: cli.backlog,
        committed_per_s: None,
        delivered_per_s,
        all_marked_s: marked.duration_since(started).as_secs_f64(),
        latency_ms: None,
        relay_cpu_us_per_row: micros(relay_cpu, cli.backlog),
        postgres_cpu_us_per_row: Some(micros(postgres_cpu, cli.backlog)),
        nats_cpu_us_per_row: Some(micros(nats_cpu, cli.backlog)),
        store_cpu_us_per_row: None,
        // Messages beyond one a row: the stream's duplicate window drops a row sent again.
        repeated: usize::try_from(state.messages.saturating_sub(cli.backlog)).unwrap_or(0),
    })
}
