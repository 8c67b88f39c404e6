//! What the consumer's tests share: an HTTP client to the receiver, consumers started on their
//! own runtime (so a test can kill one as a crash would), and waits on counts.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use axum_core::body::Body;
use http::Request;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use idempotency_consumer::{
    ConsumerSettings, Counts, Delivery, Message, Settle, Source, SourceError, Stats, Upstream,
};
use idempotency_core::BoxError;
use idempotency_test_support::poll;

/// An upstream client that sends every request to `addr`, as the proxy's upstream pool does.
pub(crate) fn upstream(addr: SocketAddr) -> Upstream {
    let client = Client::builder(TokioExecutor::new()).build_http::<Body>();
    let service = tower::service_fn(move |mut request: Request<Body>| {
        let client = client.clone();
        async move {
            let target = format!("http://{addr}{}", request.uri());
            *request.uri_mut() = target.parse()?;
            let response = client.request(request).await?;
            Ok::<_, BoxError>(response.map(Body::new))
        }
    });
    Upstream::new(service)
}

/// Settings for tests: quick retries, a few attempts.
pub(crate) fn settings(name: &str) -> ConsumerSettings {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let mut settings = ConsumerSettings::new(name, "/events");
    settings.backoff.initial = Duration::from_millis(20);
    settings.backoff.max = Duration::from_millis(100);
    settings.max_attempts = 3;
    settings.deliver_concurrency = 4;
    settings.drain_timeout = Duration::from_secs(5);
    settings
}

/// Waits until the consumer's counts satisfy `done`.
pub(crate) async fn counts_until(
    stats: &Arc<Stats>,
    what: &str,
    done: impl Fn(Counts) -> bool,
) -> Counts {
    poll::until(Duration::from_secs(30), what, async || {
        let counts = stats.counts();
        done(counts).then_some(counts)
    })
    .await
}

/// A source whose acknowledgements never reach the broker: the process "dies" right after
/// the upstream's answer is recorded and before the broker hears of it.
pub(crate) struct DiesBeforeAck<S> {
    inner: S,
    reached: tokio::sync::mpsc::UnboundedSender<()>,
}

impl<S> DiesBeforeAck<S> {
    /// `inner`, whose acknowledgements are announced on `reached` and then hang.
    pub(crate) fn new(inner: S, reached: tokio::sync::mpsc::UnboundedSender<()>) -> Self {
        Self { inner, reached }
    }
}

struct HangingAck {
    inner: Box<dyn Settle>,
    reached: tokio::sync::mpsc::UnboundedSender<()>,
}

#[async_trait]
impl<S: Source> Source for DiesBeforeAck<S> {
    async fn next(&self) -> Result<Option<Delivery>, SourceError> {
        let delivery = self.inner.next().await?;
        Ok(delivery.map(|d| Delivery {
            message: d.message,
            settle: Box::new(HangingAck {
                inner: d.settle,
                reached: self.reached.clone(),
            }),
        }))
    }
    async fn dead_letter(&self, to: &str, m: &Message, why: &str) -> Result<(), SourceError> {
        self.inner.dead_letter(to, m, why).await
    }
    async fn lag(&self) -> Result<u64, SourceError> {
        self.inner.lag().await
    }
    fn event_source(&self, subject: &str) -> String {
        self.inner.event_source(subject)
    }
}

#[async_trait]
impl Settle for HangingAck {
    async fn ack(&self) -> Result<(), SourceError> {
        let _ = self.reached.send(());
        std::future::pending().await
    }
    async fn retry_later(&self, delay: Duration, counted: bool) -> Result<(), SourceError> {
        self.inner.retry_later(delay, counted).await
    }
    async fn in_progress(&self) -> Result<(), SourceError> {
        self.inner.in_progress().await
    }
    async fn term(&self) -> Result<(), SourceError> {
        self.inner.term().await
    }
}
