//! Picking the route for a request: longest `path_prefix`, and `host` where a route sets it;
//! a request no route takes is refused here ([`refusal`]), in gRPC's terms for a gRPC call.
//!
//! Each route owns its own stack (idempotency layer over the upstream), built once at start-up,
//! so the per-request work here is a scan of a short list; the stack is called in place, not
//! cloned.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use http::{header::HOST, Request, Response};
use hyper::body::Incoming;
use tower::Service;

use crate::net::upstream::Upstream;
use idempotency_core::proxy::grpc::{self, GrpcCall};
use idempotency_core::Problem;
use idempotency_core::{IdempotencyService, ResponseFuture};

/// The stack a route runs: the idempotency layer in front of the forwarding client.
pub(crate) type RouteService = IdempotencyService<Upstream>;

/// One route: where it applies and what runs it.
#[derive(Debug, Clone)]
pub(crate) struct Route {
    pub(crate) path_prefix: String,
    /// Lower-case host name without port; `None` matches any host.
    pub(crate) host: Option<String>,
    pub(crate) service: RouteService,
}

/// All routes, most specific first.
#[derive(Debug, Clone)]
pub(crate) struct Router {
    routes: Arc<[Route]>,
}

impl Router {
    pub(crate) fn new(mut routes: Vec<Route>) -> Self {
        // Longest prefix first; at equal length a route bound to a host beats one that is not.
        routes.sort_by_key(|r| (std::cmp::Reverse(r.path_prefix.len()), r.host.is_none()));
        Self {
            routes: routes.into(),
        }
    }

    /// The route for a request, if any.
    pub(crate) fn select<B>(&self, request: &Request<B>) -> Option<&Route> {
        let path = request.uri().path();
        let host = request_host(request);
        // Route hosts are lowercase (the config makes them so); a request's may be in any case.
        self.routes.iter().find(|route| {
            path.starts_with(route.path_prefix.as_str())
                && route
                    .host
                    .as_deref()
                    .is_none_or(|h| host.is_some_and(|host| host.eq_ignore_ascii_case(h)))
        })
    }
}

impl Service<Request<Incoming>> for Router {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = RouterFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Incoming>) -> RouterFuture {
        self.route(request)
    }
}

impl Router {
    /// What `call` does, through a shared reference, so the server routes with the app in
    /// force without cloning its router per request.
    pub(crate) fn route(&self, request: Request<Incoming>) -> RouterFuture {
        match self.select(&request) {
            Some(route) => {
                RouterFuture::Routed(idempotency_core::proxy::serve(&route.service, request))
            }
            None => RouterFuture::answered(refusal(&request, Problem::NoRoute)),
        }
    }
}

/// The proxy's refusal of a request before any route's stack has it (no route, ambiguous
/// framing). A gRPC call gets it as a gRPC error (docs/grpc.md#statuses), the status its client
/// reads, as no route's layer is there to say the route speaks gRPC; anything else gets a
/// problem document.
pub(crate) fn refusal<B>(request: &Request<B>, error: Problem) -> Response<Body> {
    let mut response = error.into_response();
    if grpc::is_call(request.headers()) {
        response.extensions_mut().insert(GrpcCall);
    }
    response
}

/// The answer of [`Router`]: the route's, or one made without a route.
pub(crate) enum RouterFuture {
    Routed(ResponseFuture),
    Answered(Option<Response<Body>>),
}

impl RouterFuture {
    /// A future that is ready with `response`.
    pub(crate) fn answered(response: Response<Body>) -> Self {
        Self::Answered(Some(response))
    }
}

impl Future for RouterFuture {
    type Output = Result<Response<Body>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Self::Routed(future) => Pin::new(future).poll(cx),
            Self::Answered(response) => {
                Poll::Ready(Ok(response.take().expect("polled after completion")))
            }
        }
    }
}

/// The host a request was sent to, as sent: `Host`, or the URI authority (HTTP/2), without
/// the port.
fn request_host<B>(request: &Request<B>) -> Option<&str> {
    let raw = match request.headers().get(HOST).and_then(|h| h.to_str().ok()) {
        Some(host) => host,
        None => request.uri().host()?,
    };
    let without_port = match raw.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => raw,
    };
    Some(without_port)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_is_taken_from_header_or_authority_without_port() {
        let with_header = Request::builder()
            .uri("/x")
            .header(HOST, "API.Example.com:8080")
            .body(())
            .unwrap();
        assert_eq!(request_host(&with_header), Some("API.Example.com"));
        let h2 = Request::builder()
            .uri("http://hooks.example.com/x")
            .body(())
            .unwrap();
        assert_eq!(request_host(&h2), Some("hooks.example.com"));
        let ipv6 = Request::builder()
            .uri("/x")
            .header(HOST, "[::1]:8080")
            .body(())
            .unwrap();
        assert_eq!(request_host(&ipv6), Some("[::1]"));
    }
}
