//! Broker consumers (docs/reference.md#consumers): one per `[[consumers]]` table, run by the
//! `idempotency-consumer` crate over the proxy's store (so records are sealed, leased and
//! fenced as a route's are) and delivering through the proxy's upstream client.
//!
//! A broker that cannot be reached at start or later pauses its consumer, which `/readyz`
//! names, and resumes by itself. Consumers outlive reloads (a reload leaves them as they were
//! started) and are drained with the proxy, within the same `drain_timeout`.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::body::Body;
use http::{Request, Uri};
use idempotency_consumer::source::jetstream::{JetStreamSettings, JetStreamSource};
use idempotency_consumer::source::rabbitmq::RabbitSource;
use idempotency_consumer::{BrokerUrl, Consumer, ConsumerSettings, Source};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::net::upstream::{Originated, PoolSettings, Upstream};
use crate::operator::status::Status;
use crate::store::Store;

/// Where a consumer's messages come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BrokerSource {
    /// A JetStream durable pull consumer on `stream`.
    JetStream {
        /// The stream (`stream`).
        stream: String,
        /// The durable consumer (`durable`, default the consumer's name).
        durable: String,
        /// `filter_subject`.
        filter_subject: Option<String>,
    },
    /// A RabbitMQ queue (`queue`).
    RabbitMq {
        /// The queue.
        queue: String,
    },
}

/// One `[[consumers]]` table.
#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    /// What the consumer does with each message.
    pub settings: ConsumerSettings,
    /// The broker (`source`).
    pub url: BrokerUrl,
    /// The stream or queue on it.
    pub broker: BrokerSource,
    /// Where the requests go (`upstream`).
    pub upstream: Uri,
}

/// How long JetStream waits for an acknowledgement before redelivering: long enough for
/// `deliver_timeout` with room, the consumer telling it "in progress" meanwhile.
const ACK_WAIT: Duration = Duration::from_secs(30);

struct Running {
    consumer: Consumer,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

/// The consumers of one process.
#[derive(Default)]
pub(crate) struct Consumers {
    running: Mutex<Vec<Running>>,
}

impl std::fmt::Debug for Consumers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumers").finish_non_exhaustive()
    }
}

impl Consumers {
    fn running(&self) -> MutexGuard<'_, Vec<Running>> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts every consumer on the current runtime, over `store`, and has the status page
    /// show their counts.
    pub(crate) fn start(
        &self,
        configs: &[ConsumerConfig],
        store: &Arc<dyn Store>,
        status: &Status,
    ) {
        let mut running = self.running();
        for config in configs {
            let source = source(config);
            let upstream = upstream(&config.upstream);
            let built = Consumer::build(config.settings.clone(), source, upstream, store.clone());
            let consumer = match built {
                Ok(consumer) => consumer,
                Err(e) => {
                    tracing::error!(error = %e, "consumer not started");
                    continue;
                }
            };
            tracing::info!(consumer = %config.settings.name, source = %config.url, "consumer starting");
            let stop = CancellationToken::new();
            let task = tokio::spawn(consumer.clone().run(stop.clone()));
            running.push(Running {
                consumer,
                stop,
                task,
            });
        }
        status.set_consumers(running.iter().map(|r| r.consumer.stats().clone()).collect());
    }

    /// The consumer named `name`, if the config has one.
    pub(crate) fn get(&self, name: &str) -> Option<Consumer> {
        let running = self.running();
        running
            .iter()
            .find(|r| r.consumer.settings().name == name)
            .map(|r| r.consumer.clone())
    }

    /// One line for each consumer whose broker cannot be reached.
    pub(crate) fn unready(&self) -> Vec<String> {
        let running = self.running();
        running
            .iter()
            .filter(|r| r.consumer.stats().broker_down())
            .map(|r| {
                let name = &r.consumer.settings().name;
                format!("consumer {name:?} cannot reach its broker")
            })
            .collect()
    }

    /// Stops every consumer at once; each drains within its own `drain_timeout`.
    pub(crate) async fn drain(&self) {
        let running = std::mem::take(&mut *self.running());
        for r in &running {
            r.stop.cancel();
        }
        for r in running {
            let _ = r.task.await;
        }
    }
}

fn source(config: &ConsumerConfig) -> Arc<dyn Source> {
    let concurrency = config.settings.deliver_concurrency;
    match &config.broker {
        BrokerSource::JetStream {
            stream,
            durable,
            filter_subject,
        } => {
            let settings = JetStreamSettings {
                stream: stream.clone(),
                durable: durable.clone(),
                filter_subject: filter_subject.clone(),
                concurrency,
                ack_wait: ACK_WAIT.max(config.settings.deliver_timeout * 2),
            };
            Arc::new(JetStreamSource::new(config.url.expose(), settings))
        }
        BrokerSource::RabbitMq { queue } => {
            Arc::new(RabbitSource::new(config.url.expose(), queue, concurrency))
        }
    }
}

/// The proxy's upstream client for `base`, with no `X-Forwarded-*` (no client is behind a
/// message).
fn upstream(base: &Uri) -> idempotency_consumer::Upstream {
    let client = Upstream::new(base.clone(), PoolSettings::default(), None);
    let service = client
        .map_request(|mut request: Request<Body>| {
            request.extensions_mut().insert(Originated);
            request
        })
        .map_response(|response| response.map(Body::new));
    idempotency_consumer::Upstream::new(service)
}
