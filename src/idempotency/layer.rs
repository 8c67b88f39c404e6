//! The public `tower::Layer`: holds the configuration, nothing else.

use std::sync::Arc;

use tokio_util::task::TaskTracker;
use tower::Layer;

use super::cache::ReplayCache;
use super::policy::Policy;
use super::service::{IdempotencyService, Shared};
use crate::store::Store;
use crate::telemetry::RouteMetrics;

/// Makes the wrapped service safe to retry: the first request with an idempotency key runs,
/// its answer is stored, and every retry with that key gets the stored answer.
///
/// ```
/// use std::sync::Arc;
/// use axum::{routing::post, Router};
/// use idempotency_proxy::idempotency::key::RouteName;
/// use idempotency_proxy::store::MemoryStore;
/// use idempotency_proxy::{IdempotencyLayer, Policy};
///
/// let mut policy = Policy::new(RouteName::new("payments").unwrap());
/// policy.require_key = true;
/// let app: Router = Router::new()
///     .route("/v1/charges", post(|| async { "charged once" }))
///     .layer(IdempotencyLayer::new(Arc::new(MemoryStore::new()), policy));
/// # let _ = app;
/// ```
///
/// Metrics are registered with the global `metrics` recorder when the layer is built, so
/// install the recorder first.
///
/// The inner service gets requests with an [`axum::body::Body`]; answers are stored as the
/// [`Policy`] says. An inner error wrapping [`RequestNotSent`](super::RequestNotSent) frees the
/// key; any other error is ambiguous and handled by `on_ambiguous`.
#[derive(Debug, Clone)]
pub struct IdempotencyLayer {
    shared: Shared,
}

impl IdempotencyLayer {
    pub fn new(store: Arc<dyn Store>, policy: Policy) -> Self {
        let shared = Shared {
            store,
            metrics: Arc::new(RouteMetrics::new(&policy.route)),
            policy: Arc::new(policy),
            waiters: Arc::default(),
            tasks: TaskTracker::new(),
            cache: None,
        };
        Self { shared }
    }

    /// Runs first requests in tasks of `tracker`, so the caller can wait for them to finish and
    /// record their outcomes before shutting down (`tracker.close(); tracker.wait().await`).
    pub fn with_task_tracker(mut self, tracker: TaskTracker) -> Self {
        self.shared.tasks = tracker;
        self
    }

    /// Answers replays from `cache` for up to the policy's `replay_cache_ttl`, without a store
    /// round trip. Share one cache between layers; invalidate it where records are dropped.
    pub fn with_replay_cache(mut self, cache: Arc<ReplayCache>) -> Self {
        self.shared.cache = Some(cache);
        self
    }

    pub fn policy(&self) -> &Policy {
        &self.shared.policy
    }
}

impl<S> Layer<S> for IdempotencyLayer {
    type Service = IdempotencyService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        IdempotencyService::new(inner, self.shared.clone())
    }
}
