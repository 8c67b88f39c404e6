//! The public `tower::Layer` and its builder: what a route's requests share, built once,
//! nothing else.

use std::sync::Arc;

use tokio_util::task::TaskTracker;
use tower::Layer;

use super::context::Context;
use super::inbox_hook::InboxHook;
use super::metrics::RouteMetrics;
use super::observer::{NoObserver, RequestObserver};
use super::policy::{Policy, PolicyError, RouteMode};
use super::service::IdempotencyService;
use super::waiters::Waiters;
use crate::problem::ProblemBase;
use crate::store::Store;

/// Makes the wrapped service safe to retry: the first request with an idempotency key runs,
/// its answer is stored, and every retry with that key gets the stored answer.
///
/// ```
/// use std::sync::Arc;
/// use axum::{routing::post, Router};
/// use idempotency_core::{IdempotencyLayer, MemoryStore, Policy};
/// use tower::ServiceExt;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let policy = Policy::builder("payments").with_require_key(true).build().unwrap();
/// let app: Router = Router::new()
///     .route("/v1/charges", post(|| async { "charged once" }))
///     .layer(IdempotencyLayer::new(Arc::new(MemoryStore::new()), policy));
///
/// let charge = || {
///     http::Request::post("/v1/charges")
///         .header("idempotency-key", "order-1")
///         .body(axum_core::body::Body::from("{}"))
///         .unwrap()
/// };
/// let first = app.clone().oneshot(charge()).await.unwrap();
/// let retry = app.clone().oneshot(charge()).await.unwrap();
/// assert!(first.headers().get("idempotent-replayed").is_none());
/// assert_eq!(retry.headers()["idempotent-replayed"], "true");
/// # }
/// ```
///
/// Answers the layer makes itself (`409`, `422`, ...) are [`Problem`](crate::Problem)s, rendered
/// as `application/problem+json` with the layer's [`ProblemBase`] (the default one unless
/// [`LayerBuilder::with_problem_base`] names another), so nothing else need be stacked for a
/// client to read them. Metrics are registered with the global `metrics` recorder when the layer
/// is built, so install the recorder first.
///
/// The inner service gets requests with an [`axum_core::body::Body`] (axum's body); answers are
/// stored as the [`Policy`] says. An inner error wrapping
/// [`RequestNotSent`](crate::RequestNotSent) frees the key; any other error is ambiguous and
/// handled by `on_ambiguous`.
#[derive(Debug, Clone)]
pub struct IdempotencyLayer {
    ctx: Arc<Context>,
}

impl IdempotencyLayer {
    /// A layer keeping its records in `store` and applying `policy` to every request.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use idempotency_core::{IdempotencyLayer, MemoryStore, Policy};
    ///
    /// let policy = Policy::builder("payments").build().unwrap();
    /// let layer = IdempotencyLayer::new(Arc::new(MemoryStore::new()), policy);
    /// assert_eq!(layer.policy().route.as_str(), "payments");
    /// ```
    ///
    /// # Panics
    ///
    /// As [`LayerBuilder::build`]: only for a policy changed after it was built into one no
    /// builder makes.
    pub fn new(store: Arc<dyn Store>, policy: Policy) -> Self {
        Self::builder(store, policy).build()
    }

    /// A builder for a layer with more than a store and a policy: a task tracker to wait on at
    /// shutdown, an observer of every request, a published problem base.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use idempotency_core::{IdempotencyLayer, MemoryStore, Policy};
    /// use tokio_util::task::TaskTracker;
    ///
    /// let policy = Policy::builder("payments").build().unwrap();
    /// let tracker = TaskTracker::new();
    /// let layer = IdempotencyLayer::builder(Arc::new(MemoryStore::new()), policy)
    ///     .with_task_tracker(tracker.clone())
    ///     .build();
    /// assert_eq!(layer.policy().route.as_str(), "payments");
    /// ```
    pub fn builder(store: Arc<dyn Store>, policy: Policy) -> LayerBuilder {
        LayerBuilder {
            store,
            policy,
            tracker: TaskTracker::new(),
            observer: Arc::new(NoObserver),
            problems: Arc::default(),
            inbox: None,
        }
    }

    /// The policy every request is handled under.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use idempotency_core::{IdempotencyLayer, MemoryStore, Policy};
    ///
    /// let policy = Policy::builder("payments").with_require_key(true).build().unwrap();
    /// let layer = IdempotencyLayer::new(Arc::new(MemoryStore::new()), policy);
    /// assert!(layer.policy().require_key);
    /// ```
    pub fn policy(&self) -> &Policy {
        &self.ctx.policy
    }
}

/// Builds an [`IdempotencyLayer`]; [`IdempotencyLayer::builder`] makes one.
#[derive(Debug)]
#[must_use]
pub struct LayerBuilder {
    store: Arc<dyn Store>,
    policy: Policy,
    tracker: TaskTracker,
    observer: Arc<dyn RequestObserver>,
    problems: Arc<ProblemBase>,
    inbox: Option<InboxHook>,
}

impl LayerBuilder {
    /// Runs first requests in tasks of `tracker`, so the caller can wait for them to finish and
    /// record their outcomes before shutting down (`tracker.close(); tracker.wait().await`).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use idempotency_core::{IdempotencyLayer, MemoryStore, Policy};
    /// use tokio_util::task::TaskTracker;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let tracker = TaskTracker::new();
    /// let policy = Policy::builder("payments").build().unwrap();
    /// let layer = IdempotencyLayer::builder(Arc::new(MemoryStore::new()), policy)
    ///     .with_task_tracker(tracker.clone())
    ///     .build();
    /// # let _ = layer;
    /// // At shutdown, once the server stopped taking requests:
    /// tracker.close();
    /// tracker.wait().await;
    /// # }
    /// ```
    pub fn with_task_tracker(mut self, tracker: TaskTracker) -> Self {
        self.tracker = tracker;
        self
    }

    /// Tells `observer` of every request the layer answers (by default, no one).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use idempotency_core::observe::{FinishedRequest, RequestObserver};
    /// use idempotency_core::{IdempotencyLayer, MemoryStore, Policy};
    ///
    /// #[derive(Debug)]
    /// struct Log;
    ///
    /// impl RequestObserver for Log {
    ///     fn request_finished(&self, request: &FinishedRequest<'_>) {
    ///         println!("{} {}", request.outcome, request.status);
    ///     }
    /// }
    ///
    /// let policy = Policy::builder("payments").build().unwrap();
    /// let layer = IdempotencyLayer::builder(Arc::new(MemoryStore::new()), policy)
    ///     .with_observer(Arc::new(Log))
    ///     .build();
    /// # let _ = layer;
    /// ```
    pub fn with_observer(mut self, observer: Arc<dyn RequestObserver>) -> Self {
        self.observer = observer;
        self
    }

    /// Renders the layer's problems with `base`, which the service publishes, instead of the
    /// default `urn:problem-type:idempotency-proxy:`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use idempotency_core::{IdempotencyLayer, MemoryStore, Policy, ProblemBase};
    ///
    /// let base = ProblemBase::published("https://api.example.com/problems#").unwrap();
    /// let policy = Policy::builder("payments").build().unwrap();
    /// let layer = IdempotencyLayer::builder(Arc::new(MemoryStore::new()), policy)
    ///     .with_problem_base(Arc::new(base))
    ///     .build();
    /// # let _ = layer;
    /// ```
    pub fn with_problem_base(mut self, base: Arc<ProblemBase>) -> Self {
        self.problems = base;
        self
    }

    /// For the proxy's inbox routes (a policy whose `mode` is [`RouteMode::Inbox`]): each
    /// request the layer queues is counted and wakes the route's delivery worker through
    /// `hook`. Delivering is the proxy's work, not a layer's; see [`crate::proxy`].
    ///
    /// ```
    /// use std::sync::Arc;
    /// use idempotency_core::backend::RouteName;
    /// use idempotency_core::policy::RouteMode;
    /// use idempotency_core::proxy::InboxHook;
    /// use idempotency_core::{IdempotencyLayer, MemoryStore, Policy};
    /// use tokio::sync::Notify;
    ///
    /// let mut policy = Policy::builder("github").build().unwrap();
    /// policy.mode = RouteMode::Inbox; // as the proxy's config loader sets it
    /// let wake = Arc::new(Notify::new()); // the route's delivery worker waits on it
    /// let route = RouteName::new("github").unwrap();
    /// let hook = InboxHook::new(&route, wake, |request| request.headers.clone());
    /// let layer = IdempotencyLayer::builder(Arc::new(MemoryStore::new()), policy)
    ///     .with_inbox(hook)
    ///     .build();
    /// # let _ = layer;
    /// ```
    pub fn with_inbox(mut self, hook: InboxHook) -> Self {
        self.inbox = Some(hook);
        self
    }

    /// The layer.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use idempotency_core::{IdempotencyLayer, MemoryStore, Policy};
    ///
    /// let policy = Policy::builder("payments").build().unwrap();
    /// let layer = IdempotencyLayer::builder(Arc::new(MemoryStore::new()), policy).build();
    /// assert_eq!(layer.policy().route.as_str(), "payments");
    /// ```
    ///
    /// # Panics
    ///
    /// Only for a policy no [`PolicyBuilder`](crate::PolicyBuilder) makes: one whose fields were
    /// changed after it was built into values [`Policy::validate`] refuses, or one in
    /// [`RouteMode::Inbox`] (which the proxy sets) without an inbox hook, or over a store that
    /// keeps no inbox queues.
    pub fn build(self) -> IdempotencyLayer {
        if let Err(refused) = self.policy.validate().and_then(|()| self.check_mode()) {
            panic!("an idempotency layer cannot serve this policy: {refused}");
        }
        let ctx = Context {
            store: self.store,
            metrics: RouteMetrics::new(&self.policy.route, self.observer),
            policy: self.policy,
            waiters: Waiters::default(),
            tasks: self.tracker,
            problems: self.problems,
            inbox: self.inbox,
        };
        IdempotencyLayer { ctx: Arc::new(ctx) }
    }

    fn check_mode(&self) -> Result<(), PolicyError> {
        match (self.policy.mode, &self.inbox) {
            (RouteMode::Inbox, None) => Err(PolicyError::new(
                "mode",
                "an inbox route stores each request and delivers it later, which only the \
                 proxy's delivery workers do; a layer forwards to the service it wraps, so \
                 use mode = proxy (RouteMode::Proxy)",
            )),
            (RouteMode::Inbox, Some(_)) if self.store.inbox().is_none() => Err(PolicyError::new(
                "mode",
                "an inbox route needs a store that keeps inbox queues",
            )),
            _ => Ok(()),
        }
    }
}

impl<S> Layer<S> for IdempotencyLayer {
    type Service = IdempotencyService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        IdempotencyService::new(inner, self.ctx.clone())
    }
}
