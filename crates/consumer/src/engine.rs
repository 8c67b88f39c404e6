//! The consumer's loop: fetch up to `deliver_concurrency` messages at a time, put each through
//! the idempotency layer as a request, and answer the broker only after the layer has recorded
//! the outcome. Broker outages pause the loop; a drain stops fetching and hands back what is
//! still running at `drain_timeout`.

use std::sync::Arc;
use std::time::Duration;

use axum_core::body::Body;
use http::{Request, Response};
use http_body_util::BodyExt;
use idempotency_core::backend::{IdempotencyKey, Removal, RouteName, ScopedKey};
use idempotency_core::{BoxError, IdempotencyService, ResponseFuture, Store};
use idempotency_delivery::backoff::{random_sample, Backoff};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::request::request_for;
use crate::settings::ConsumerSettings;
use crate::source::{Delivery, Message, Settle, Source, SourceError};
use crate::stats::Stats;
use crate::verdict::{judge, Answer, Verdict};

/// The HTTP client a consumer delivers through (the proxy's upstream client, or any other).
pub type Upstream = tower::util::BoxCloneSyncService<Request<Body>, Response<Body>, BoxError>;

/// One consumer: a source, the layer over an upstream client, and its counts.
#[derive(Clone)]
pub struct Consumer {
    inner: Arc<Inner>,
}

struct Inner {
    settings: ConsumerSettings,
    source: Arc<dyn Source>,
    service: IdempotencyService<Upstream>,
    store: Arc<dyn Store>,
    stats: Arc<Stats>,
    /// Cancelled when a drain gives up on what is still running: those are handed back.
    hand_back: CancellationToken,
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("settings", &self.inner.settings)
            .finish_non_exhaustive()
    }
}

impl Consumer {
    pub(crate) fn new(
        settings: ConsumerSettings,
        source: Arc<dyn Source>,
        service: IdempotencyService<Upstream>,
        store: Arc<dyn Store>,
    ) -> Self {
        let stats = Arc::new(Stats::new(&settings.name));
        let inner = Inner {
            settings,
            source,
            service,
            store,
            stats,
            hand_back: CancellationToken::new(),
        };
        Self {
            inner: Arc::new(inner),
        }
    }

    /// The consumer's counts and dead messages.
    pub fn stats(&self) -> &Arc<Stats> {
        &self.inner.stats
    }

    /// The consumer's settings.
    pub fn settings(&self) -> &ConsumerSettings {
        &self.inner.settings
    }

    /// Runs until `stop` is cancelled, then drains: nothing more is fetched, what is in flight
    /// gets `drain_timeout` to finish, and what is still running then is handed back.
    pub async fn run(self, stop: CancellationToken) {
        let tasks = TaskTracker::new();
        let lag = tokio::spawn(self.clone().watch_lag(stop.clone()));
        self.fetch_until(&stop, &tasks).await;
        self.inner.source.close();
        tasks.close();
        let drain_timeout = self.inner.settings.drain_timeout;
        if tokio::time::timeout(drain_timeout, tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!(consumer = %self.inner.settings.name, "drain timed out; handing back what is still running");
            self.inner.hand_back.cancel();
            tasks.wait().await;
        }
        lag.abort();
    }

    async fn fetch_until(&self, stop: &CancellationToken, tasks: &TaskTracker) {
        let permits = Arc::new(Semaphore::new(
            self.inner.settings.deliver_concurrency.max(1),
        ));
        let mut outage = 0u32;
        loop {
            let permit = tokio::select! {
                () = stop.cancelled() => return,
                permit = permits.clone().acquire_owned() => permit.expect("never closed"),
            };
            let next = tokio::select! {
                () = stop.cancelled() => return,
                next = self.inner.source.next() => next,
            };
            match next {
                Ok(Some(delivery)) => {
                    outage = self.recovered(outage);
                    let consumer = self.clone();
                    tasks.spawn(async move {
                        consumer.handle(delivery).await;
                        drop(permit);
                    });
                }
                Ok(None) => return,
                Err(e) => {
                    outage += 1;
                    self.inner.stats.set_broker_down(true);
                    tracing::warn!(consumer = %self.inner.settings.name, error = %e, "the broker cannot be reached; paused");
                    let pause = pause_after(outage);
                    tokio::select! {
                        () = stop.cancelled() => return,
                        () = tokio::time::sleep(pause) => {}
                    }
                }
            }
        }
    }

    fn recovered(&self, outage: u32) -> u32 {
        if outage > 0 {
            self.inner.stats.set_broker_down(false);
            tracing::info!(consumer = %self.inner.settings.name, "the broker is back; resumed");
        }
        0
    }

    async fn watch_lag(self, stop: CancellationToken) {
        loop {
            match self.inner.source.lag().await {
                Ok(lag) => self.inner.stats.set_lag(lag),
                Err(e) => tracing::debug!(error = %e, "reading the consumer's lag failed"),
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(Duration::from_secs(2)) => {}
            }
        }
    }

    /// One message, from its key to the broker's answer.
    async fn handle(&self, delivery: Delivery) {
        let stats = &self.inner.stats;
        stats.started();
        let Delivery { message, settle } = delivery;
        let key = self.inner.settings.key_from.key_of(&message);
        let verdict = match &key {
            Ok(key) => self.deliver(&message, key, &*settle).await,
            Err(no_key) => Some(Verdict::Dead(no_key.to_string())),
        };
        match verdict {
            Some(verdict) => {
                let key = key.as_ref().ok().map(IdempotencyKey::as_str);
                self.settle(&message, key, &*settle, verdict).await;
            }
            None => hand_back(&*settle).await,
        }
        stats.finished();
    }

    /// The layer's answer to one delivery, telling the broker the message is in progress
    /// while it runs; `None` when a drain handed it back first.
    async fn deliver(
        &self,
        message: &Message,
        key: &IdempotencyKey,
        settle: &dyn Settle,
    ) -> Option<Verdict> {
        let inner = &self.inner;
        let ce_source = inner.source.event_source(&message.subject);
        let request = request_for(&inner.settings, message, key, &ce_source);
        let started = Instant::now();
        let call = read(idempotency_core::proxy::serve(&inner.service, request));
        tokio::pin!(call);
        let every = inner.source.progress_every();
        loop {
            tokio::select! {
                answer = &mut call => {
                    inner.stats.took(started.elapsed());
                    return Some(judge(&inner.settings, &answer, message.attempt));
                }
                () = inner.hand_back.cancelled() => return None,
                () = tokio::time::sleep(every) => {
                    if let Err(e) = settle.in_progress().await {
                        tracing::debug!(error = %e, "telling the broker the message is in progress failed");
                    }
                }
            }
        }
    }

    /// Answers the broker as the verdict says, counting it.
    async fn settle(
        &self,
        message: &Message,
        key: Option<&str>,
        settle: &dyn Settle,
        verdict: Verdict,
    ) {
        let stats = &self.inner.stats;
        let name = &self.inner.settings.name;
        let answered = match verdict {
            Verdict::Delivered => settle.ack().await.map(|()| stats.count("delivered")),
            Verdict::Duplicate => settle.ack().await.map(|()| stats.count("duplicate")),
            Verdict::Retry { delay, counted } => {
                if counted {
                    stats.count("retried");
                }
                settle.retry_later(delay, counted).await
            }
            Verdict::Dead(reason) => return self.bury(message, key, settle, &reason).await,
        };
        if let Err(e) = answered {
            // Not acknowledged: the broker sends it again, and the record answers it.
            tracing::warn!(consumer = %name, error = %e, "answering the broker failed");
        }
    }

    /// A dead message: to the dead letter (confirmed), into the admin view, then terminated.
    /// A dead letter that cannot be published leaves the message to come again.
    async fn bury(&self, message: &Message, key: Option<&str>, settle: &dyn Settle, reason: &str) {
        let inner = &self.inner;
        let name = &inner.settings.name;
        if let Some(dead_letter) = &inner.settings.dead_letter {
            if let Err(e) = inner.source.dead_letter(dead_letter, message, reason).await {
                tracing::warn!(consumer = %name, error = %e, "publishing a dead letter failed; the message comes again");
                let delay = inner
                    .settings
                    .backoff
                    .wait(message.attempt.max(1), random_sample());
                let _ = settle.retry_later(delay, false).await;
                return;
            }
        }
        tracing::warn!(consumer = %name, reason, attempts = message.attempt, "message dead");
        inner.stats.keep_dead(key, message, reason);
        inner.stats.count("dead");
        if let Err(e) = settle.term().await {
            tracing::warn!(consumer = %name, error = %e, "terminating a dead message failed");
        }
    }

    /// Delivers a dead message again, outside the broker (`POST /consumers/{name}/dead/{key}/retry`):
    /// its record is dropped first, so the upstream is asked again. `false` when there is no
    /// such dead message.
    pub async fn retry_dead(&self, key: &str) -> bool {
        let Some(dead) = self.inner.stats.take_dead(key) else {
            return false;
        };
        if let Ok(key) = IdempotencyKey::new(key) {
            if let Ok(route) = RouteName::new(self.inner.settings.scope()) {
                let scoped = ScopedKey::new(route, None, key);
                if let Err(e) = self
                    .inner
                    .store
                    .remove(&scoped, Removal::CompletedOnly)
                    .await
                {
                    tracing::warn!(error = %e, "dropping a dead message's record failed");
                }
            }
        }
        let mut message = dead.message;
        message.attempt = 1;
        let consumer = self.clone();
        tokio::spawn(async move { consumer.handle_detached(message).await });
        true
    }

    /// A message with no broker behind it: retried in this task until it settles.
    async fn handle_detached(&self, mut message: Message) {
        loop {
            let retry = Arc::new(std::sync::Mutex::new(None));
            let settle = Box::new(Detached {
                retry: retry.clone(),
            });
            let delivery = Delivery {
                message: message.clone(),
                settle,
            };
            self.handle(delivery).await;
            let again = *retry
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match again {
                Some(delay) => tokio::time::sleep(delay).await,
                None => return,
            }
            message.attempt += 1;
        }
    }
}

/// Reads the layer's answer whole.
async fn read(answer: ResponseFuture) -> Answer {
    let Ok(response) = answer.await;
    let (parts, body) = response.into_parts();
    // A body the layer could not finish reads as the upstream's broken answer: try again.
    let (status, body) = match body.collect().await {
        Ok(collected) => (parts.status, collected.to_bytes()),
        Err(_) => (http::StatusCode::BAD_GATEWAY, bytes::Bytes::new()),
    };
    Answer {
        status,
        headers: parts.headers,
        body,
    }
}

/// Gives a message back to the broker at once (a drain's end).
async fn hand_back(settle: &dyn Settle) {
    if let Err(e) = settle.retry_later(Duration::ZERO, false).await {
        tracing::debug!(error = %e, "handing a message back failed; the broker redelivers it");
    }
}

/// The pause after `outages` failed tries to reach the broker: 100 ms doubling to 5 s.
fn pause_after(outages: u32) -> Duration {
    Backoff {
        initial: Duration::from_millis(100),
        max: Duration::from_secs(5),
    }
    .ceiling(outages)
}

/// The settle handle of a message delivered outside the broker: it remembers a retry.
struct Detached {
    retry: Arc<std::sync::Mutex<Option<Duration>>>,
}

#[async_trait::async_trait]
impl Settle for Detached {
    async fn ack(&self) -> Result<(), SourceError> {
        Ok(())
    }

    async fn retry_later(&self, delay: Duration, _counted: bool) -> Result<(), SourceError> {
        *self
            .retry
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(delay);
        Ok(())
    }

    async fn in_progress(&self) -> Result<(), SourceError> {
        Ok(())
    }

    async fn term(&self) -> Result<(), SourceError> {
        Ok(())
    }
}
