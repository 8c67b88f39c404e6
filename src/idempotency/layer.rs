//! The public `tower::Layer`: what a route's requests share, built once, nothing else.

use std::sync::Arc;

use tokio_util::task::TaskTracker;
use tower::Layer;

use super::context::Context;
use super::inbox_hook::InboxHook;
use super::policy::Policy;
use super::service::IdempotencyService;
use super::waiters::Waiters;
use crate::store::Store;
use crate::telemetry::RouteMetrics;

/// Makes the wrapped service safe to retry: the first request with an idempotency key runs,
/// its answer is stored, and every retry with that key gets the stored answer.
///
/// ```
/// use std::sync::Arc;
/// use axum::{routing::post, Router};
/// use idempotency_proxy::model::RouteName;
/// use idempotency_proxy::store::MemoryStore;
/// use idempotency_proxy::{IdempotencyLayer, Policy, ProblemLayer};
/// use tower::ServiceExt;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let mut policy = Policy::new(RouteName::new("payments").unwrap());
/// policy.require_key = true;
/// let app: Router = Router::new()
///     .route("/v1/charges", post(|| async { "charged once" }))
///     .layer(IdempotencyLayer::new(Arc::new(MemoryStore::new()), policy))
///     .layer(ProblemLayer::default());
///
/// let charge = || {
///     http::Request::post("/v1/charges")
///         .header("idempotency-key", "order-1")
///         .body(axum::body::Body::from("{}"))
///         .unwrap()
/// };
/// let first = app.clone().oneshot(charge()).await.unwrap();
/// let retry = app.clone().oneshot(charge()).await.unwrap();
/// assert!(first.headers().get("idempotent-replayed").is_none());
/// assert_eq!(retry.headers()["idempotent-replayed"], "true");
/// # }
/// ```
///
/// Answers the layer makes itself (`409`, `422`, ...) carry their [`ProxyError`](crate::ProxyError)
/// and are rendered as `application/problem+json` by [`ProblemLayer`](crate::ProblemLayer): put
/// it outside this one. Metrics are registered with the global `metrics` recorder when the layer
/// is built, so install the recorder first.
///
/// The inner service gets requests with an [`axum::body::Body`]; answers are stored as the
/// [`Policy`] says. An inner error wrapping [`RequestNotSent`](crate::error::RequestNotSent)
/// frees the key; any other error is ambiguous and handled by `on_ambiguous`.
#[derive(Debug, Clone)]
pub struct IdempotencyLayer {
    ctx: Arc<Context>,
}

impl IdempotencyLayer {
    /// A layer keeping its records in `store` and applying `policy` to every request.
    pub fn new(store: Arc<dyn Store>, policy: Policy) -> Self {
        Self::with_task_tracker(store, policy, TaskTracker::new())
    }

    /// Like [`new`](Self::new), running first requests in tasks of `tracker`, so the caller can
    /// wait for them to finish and record their outcomes before shutting down
    /// (`tracker.close(); tracker.wait().await`).
    pub fn with_task_tracker(store: Arc<dyn Store>, policy: Policy, tracker: TaskTracker) -> Self {
        Self::build(store, policy, tracker, None)
    }

    /// Like [`with_task_tracker`](Self::with_task_tracker), for a route whose policy is in
    /// inbox mode: each request it queues is counted and wakes the route's delivery worker
    /// through `hook`. The store must keep inbox queues ([`Store::inbox`]).
    pub fn for_inbox(
        store: Arc<dyn Store>,
        policy: Policy,
        tracker: TaskTracker,
        hook: InboxHook,
    ) -> Self {
        Self::build(store, policy, tracker, Some(hook))
    }

    fn build(
        store: Arc<dyn Store>,
        policy: Policy,
        tracker: TaskTracker,
        inbox: Option<InboxHook>,
    ) -> Self {
        let ctx = Context {
            store,
            metrics: RouteMetrics::new(&policy.route),
            policy,
            waiters: Waiters::default(),
            tasks: tracker,
            inbox,
        };
        Self { ctx: Arc::new(ctx) }
    }

    /// The policy every request is handled under.
    pub fn policy(&self) -> &Policy {
        &self.ctx.policy
    }
}

impl<S> Layer<S> for IdempotencyLayer {
    type Service = IdempotencyService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        IdempotencyService::new(inner, self.ctx.clone())
    }
}
