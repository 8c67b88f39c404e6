//! The consumer's cases: a private `nats-server -js`, `--backlog` messages published to a stream
//! on disk before anything consumes them, then drained; then `--rate` messages a second for
//! `--seconds`, each timed from its publish to its effect.
//!
//! - `consume-file`, `consume-redis`: the release binary with one `[[consumers]]` table (a
//!   durable pull consumer, the key from `Nats-Msg-Id`) and the file store or a private Redis,
//!   delivering to the local receiver, which answers `200`; the effect is the request's arrival.
//! - `consume-raw`: the ceiling, no proxy and no upstream: a plain pull consumer in this program
//!   (batches of 500, 1,000 unacknowledged) acknowledging each message; the effect is its
//!   acknowledgement.

use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, consumer::AckPolicy};
use futures_util::StreamExt;
use idempotency_test_support::nats_server::NatsServer;
use idempotency_test_support::redis_server::RedisServer;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::cases::{micros, per_second, quantile, Outcome, DRAIN_LIMIT};
use crate::receiver::Receiver;
use crate::relay::{free_port, Relay};
use crate::{cpu, nats, Cli};

/// The subject every message is published on (the stream takes `payments.>`).
const SUBJECT: &str = "payments.confirmed";
/// Publish acknowledgements awaited together while the backlog goes in.
const PUBLISH_BATCH: usize = 1000;

/// What consumes the stream for one case.
enum Deliverer {
    Proxy {
        relay: Box<Relay>,
        redis: Option<RedisServer>,
        _store: Option<TempDir>,
    },
    Raw(JoinHandle<()>),
}

impl Drop for Deliverer {
    fn drop(&mut self) {
        if let Deliverer::Raw(task) = self {
            task.abort();
        }
    }
}

/// A directory removed when dropped.
struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub async fn run(deliverer: &str, cli: &Cli) -> Result<Outcome, String> {
    let server = nats::server().await?;
    let client = async_nats::connect(server.url())
        .await
        .map_err(|e| e.to_string())?;
    let js = jetstream::new(client);
    nats::stream(&js, "PAYMENTS", "payments.>").await?;
    let backlog = usize::try_from(cli.backlog).map_err(|e| e.to_string())?;
    publish_backlog(&js, backlog).await?;
    let receiver = Receiver::default();
    // A fresh proxy and a fresh Redis start from nothing; the raw consumer is this program,
    // which published the backlog.
    let own_before = cpu::process(std::process::id());
    let nats_before = cpu::process(server.pid());
    let started = Instant::now();
    let running = start(deliverer, cli, &server, &js, &receiver).await?;
    let (pid, consumer_before, redis) = match &running {
        Deliverer::Proxy { relay, redis, .. } => (relay.pid(), Duration::ZERO, redis.as_ref()),
        Deliverer::Raw(_) => (std::process::id(), own_before, None),
    };
    until_arrived(&receiver, backlog, started + DRAIN_LIMIT).await?;
    let all_arrived_s = started.elapsed().as_secs_f64();
    let consumer_cpu = cpu::process(pid).saturating_sub(consumer_before);
    let nats_cpu = cpu::process(server.pid()).saturating_sub(nats_before);
    let store_cpu = match redis {
        Some(redis) => Some(redis_cpu(redis).await),
        None => None,
    };
    let drained = receiver.take();
    let times: Vec<Instant> = drained.first.values().copied().collect();
    let (offered, latency, repeated) = steady(cli, &js, &receiver).await?;
    drop(running);
    Ok(Outcome {
        case: format!("consume-{deliverer}"),
        rows: cli.backlog,
        committed_per_s: Some(offered),
        delivered_per_s: per_second(&times),
        all_marked_s: all_arrived_s,
        latency_ms: Some(latency),
        relay_cpu_us_per_row: micros(consumer_cpu, cli.backlog),
        postgres_cpu_us_per_row: None,
        nats_cpu_us_per_row: Some(micros(nats_cpu, cli.backlog)),
        store_cpu_us_per_row: store_cpu.map(|cpu| micros(cpu, cli.backlog)),
        repeated: drained.repeated + repeated,
    })
}

/// Redis's own CPU time (`INFO cpu`: `used_cpu_sys` + `used_cpu_user`).
async fn redis_cpu(redis: &RedisServer) -> Duration {
    let read = async {
        let client = redis::Client::open(redis.url()).ok()?;
        let mut connection = client.get_multiplexed_async_connection().await.ok()?;
        let info: String = redis::cmd("INFO")
            .arg("cpu")
            .query_async(&mut connection)
            .await
            .ok()?;
        let seconds: f64 = info
            .lines()
            .filter_map(|line| {
                let value = line
                    .strip_prefix("used_cpu_sys:")
                    .or_else(|| line.strip_prefix("used_cpu_user:"))?;
                value.trim().parse::<f64>().ok()
            })
            .sum();
        Some(Duration::from_secs_f64(seconds))
    };
    read.await.unwrap_or_default()
}

async fn start(
    deliverer: &str,
    cli: &Cli,
    server: &NatsServer,
    js: &jetstream::Context,
    receiver: &Receiver,
) -> Result<Deliverer, String> {
    match deliverer {
        "raw" => raw(js, receiver.clone()).await.map(Deliverer::Raw),
        "file" => {
            let dir = std::env::temp_dir().join(format!(
                "consumer-load-{}-{}",
                std::process::id(),
                free_port()
            ));
            let store = format!("file:{}", dir.display());
            let relay = proxy(cli, server, &store, receiver).await?;
            Ok(Deliverer::Proxy {
                relay: Box::new(relay),
                redis: None,
                _store: Some(TempDir(dir)),
            })
        }
        "redis" => {
            let redis = RedisServer::start()
                .await
                .ok_or_else(|| "no redis-server".to_owned())?;
            let relay = proxy(cli, server, &format!("{}/0", redis.url()), receiver).await?;
            Ok(Deliverer::Proxy {
                relay: Box::new(relay),
                redis: Some(redis),
                _store: None,
            })
        }
        other => Err(format!(
            "no case consume-{other:?} (consume-raw, consume-file, consume-redis)"
        )),
    }
}

/// The release binary as a consumer only, with `store`, delivering to `receiver`.
async fn proxy(
    cli: &Cli,
    server: &NatsServer,
    store: &str,
    receiver: &Receiver,
) -> Result<Relay, String> {
    let port = receiver.start().await.map_err(|e| e.to_string())?;
    let admin = free_port();
    let mut config = format!(
        "admin_listen = \"127.0.0.1:{admin}\"\nlisten = \"127.0.0.1:{listen}\"\n\
         store = \"{store}\"\n\n[[consumers]]\nname = \"bench\"\nsource = \"{nats}\"\n\
         stream = \"PAYMENTS\"\nfilter_subject = \"payments.>\"\n\
         upstream = \"http://127.0.0.1:{port}\"\npath = \"/events\"\n",
        listen = free_port(),
        nats = server.url(),
    );
    if let Some(concurrency) = cli.concurrency {
        config.push_str(&format!("deliver_concurrency = {concurrency}\n"));
    }
    Relay::run(&cli.binary, admin, config).await
}

/// The ceiling: a plain durable pull consumer acknowledging each message, noting its key.
async fn raw(js: &jetstream::Context, receiver: Receiver) -> Result<JoinHandle<()>, String> {
    let stream = js.get_stream("PAYMENTS").await.map_err(|e| e.to_string())?;
    let consumer = stream
        .create_consumer(pull::Config {
            durable_name: Some("raw".into()),
            ack_policy: AckPolicy::Explicit,
            max_ack_pending: 1000,
            ..Default::default()
        })
        .await
        .map_err(|e| e.to_string())?;
    let mut messages = consumer
        .stream()
        .max_messages_per_batch(500)
        .messages()
        .await
        .map_err(|e| e.to_string())?;
    Ok(tokio::spawn(async move {
        while let Some(Ok(message)) = messages.next().await {
            let key = message
                .headers
                .as_ref()
                .and_then(|h| h.get(async_nats::header::NATS_MESSAGE_ID))
                .map(|v| v.as_str().to_owned())
                .unwrap_or_default();
            if message.ack().await.is_ok() {
                receiver.note(key);
            }
        }
    }))
}

/// A payment's event with its id as `Nats-Msg-Id`.
async fn publish(
    js: &jetstream::Context,
    id: &str,
) -> Result<jetstream::context::PublishAckFuture, String> {
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(async_nats::header::NATS_MESSAGE_ID, id);
    let body = serde_json::json!({ "type": "payment.confirmed", "order": id }).to_string();
    js.publish_with_headers(SUBJECT, headers, body.into())
        .await
        .map_err(|e| e.to_string())
}

/// `count` messages `b0`, `b1`, ..., each acknowledged by the stream.
async fn publish_backlog(js: &jetstream::Context, count: usize) -> Result<(), String> {
    let mut pending = Vec::with_capacity(PUBLISH_BATCH);
    for i in 0..count {
        pending.push(publish(js, &format!("b{i}")).await?);
        if pending.len() == PUBLISH_BATCH || i + 1 == count {
            for ack in pending.drain(..) {
                ack.await.map_err(|e| e.to_string())?;
            }
        }
    }
    Ok(())
}

/// `--rate` messages a second for `--seconds`, `r0`, `r1`, ...: the rate achieved, the
/// latency from each publish to its effect (p50, p99 and the largest, in milliseconds), and
/// how many effects were repeated.
async fn steady(
    cli: &Cli,
    js: &jetstream::Context,
    receiver: &Receiver,
) -> Result<(f64, [f64; 3], usize), String> {
    let count = usize::try_from(cli.rate * cli.seconds).map_err(|e| e.to_string())?;
    let mut published = Vec::with_capacity(count);
    let mut acks = Vec::with_capacity(count);
    let started = Instant::now();
    for i in 0..count {
        let due = Duration::from_secs_f64(i as f64 / cli.rate as f64);
        tokio::time::sleep_until(started + due).await;
        let id = format!("r{i}");
        published.push((id.clone(), Instant::now()));
        let ack = publish(js, &id).await?;
        acks.push(tokio::spawn(async move { ack.await }));
    }
    let offered = count as f64 / started.elapsed().as_secs_f64();
    for ack in acks {
        ack.await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
    }
    until_arrived(receiver, count, Instant::now() + DRAIN_LIMIT).await?;
    let arrivals = receiver.take();
    let mut latencies: Vec<f64> = published
        .iter()
        .filter_map(|(id, sent)| {
            let arrived = arrivals.first.get(id)?;
            Some(arrived.saturating_duration_since(*sent).as_secs_f64() * 1000.0)
        })
        .collect();
    latencies.sort_by(f64::total_cmp);
    let latency = [
        quantile(&latencies, 0.50),
        quantile(&latencies, 0.99),
        quantile(&latencies, 1.0),
    ];
    Ok((offered, latency, arrivals.repeated))
}

/// Waits until `count` distinct keys have arrived.
async fn until_arrived(receiver: &Receiver, count: usize, deadline: Instant) -> Result<(), String> {
    while Instant::now() < deadline {
        if receiver.distinct() >= count {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Err(format!(
        "{} of {count} messages arrived within {DRAIN_LIMIT:?}",
        receiver.distinct()
    ))
}
