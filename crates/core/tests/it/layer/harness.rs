//! Building a layer over a store and an inner service, and sending it requests.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::body::Body;
use http::{Request, Response, StatusCode};
use idempotency_core::backend::RouteName;
use idempotency_core::{IdempotencyLayer, Policy, ProblemLayer};
use idempotency_core::{MemoryStore, Store};
use tower::{Layer, Service, ServiceExt};

use idempotency_test_support::answer::Answer;

/// The layer under test with the problem renderer outside it, as the proxy stacks them.
pub(crate) fn stack<S>(
    store: Arc<dyn Store>,
    policy: Policy,
    inner: S,
) -> impl Service<Request<Body>, Response = Response<Body>, Error = Infallible, Future: Send> + Clone
where
    S: Service<Request<Body>, Response = Response<Body>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<idempotency_core::BoxError> + Send + 'static,
{
    let layer = IdempotencyLayer::new(store, policy);
    let layered = layer.layer(inner);
    ProblemLayer::default().layer(layered)
}

pub(crate) fn policy() -> Policy {
    Policy::new(RouteName::new("payments").unwrap())
}

pub(crate) fn memory() -> Arc<dyn Store> {
    Arc::new(MemoryStore::new())
}

/// A POST with a key (if given) and a body.
pub(crate) fn post(key: Option<&str>, body: &'static str) -> Request<Body> {
    let builder = Request::post("/v1/charges");
    let builder = match key {
        Some(key) => builder.header("idempotency-key", key),
        None => builder,
    };
    builder.body(Body::from(body)).unwrap()
}

/// An upstream that answers `201` with its execution number, counting executions.
#[derive(Clone, Default)]
pub(crate) struct Counting(pub Arc<AtomicUsize>);

impl Counting {
    pub(crate) fn executions(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }

    pub(crate) fn service(
        &self,
    ) -> impl Service<
        Request<Body>,
        Response = Response<Body>,
        Error = Infallible,
        Future: Send + 'static,
    >
           + Clone
           + Send
           + 'static
           + use<> {
        let count = self.0.clone();
        tower::service_fn(move |_request: Request<Body>| {
            let n = count.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                let mut response = Response::new(Body::from(format!("{{\"execution\":{n}}}")));
                *response.status_mut() = StatusCode::CREATED;
                Ok::<_, Infallible>(response)
            }
        })
    }
}

/// Sends `request` through `service` and reads the answer.
pub(crate) async fn send<S>(service: &S, request: Request<Body>) -> Answer
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone,
{
    let response = service.clone().oneshot(request).await.unwrap();
    read(response).await
}

pub(crate) async fn read(response: Response<Body>) -> Answer {
    Answer::read(response).await
}
