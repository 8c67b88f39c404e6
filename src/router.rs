//! Picking the route for a request: longest `path_prefix`, and `host` where a route sets it.
//!
//! Each route owns its own stack (idempotency layer over the upstream), built once at start-up,
//! so the per-request work here is a scan of a short list and a cheap clone of that stack.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Body;
use http::{header::HOST, Request, Response};
use hyper::body::Incoming;
use tower::ServiceExt;

use crate::error::{ProblemBase, ProxyError};
use crate::idempotency::key::RouteName;
use crate::idempotency::IdempotencyService;
use crate::upstream::Upstream;

/// The stack a route runs: the idempotency layer in front of the forwarding client.
pub type RouteService = IdempotencyService<Upstream>;

/// One route: where it applies and what runs it.
#[derive(Debug, Clone)]
pub struct Route {
    pub name: RouteName,
    pub path_prefix: String,
    /// Lower-case host name without port; `None` matches any host.
    pub host: Option<String>,
    pub service: RouteService,
}

/// All routes, most specific first.
#[derive(Debug, Clone)]
pub struct Router {
    routes: Arc<[Route]>,
    problem_base: Arc<ProblemBase>,
}

impl Router {
    pub fn new(mut routes: Vec<Route>, problem_base: Arc<ProblemBase>) -> Self {
        // Longest prefix first; at equal length a route bound to a host beats one that is not.
        routes.sort_by_key(|r| (std::cmp::Reverse(r.path_prefix.len()), r.host.is_none()));
        Self {
            routes: routes.into(),
            problem_base,
        }
    }

    /// The route for a request, if any.
    pub fn select(&self, request: &Request<Incoming>) -> Option<&Route> {
        let path = request.uri().path();
        let host = request_host(request);
        self.routes.iter().find(|route| {
            path.starts_with(route.path_prefix.as_str())
                && route
                    .host
                    .as_deref()
                    .is_none_or(|h| host.as_deref() == Some(h))
        })
    }

    /// The problem response for an error the proxy makes itself.
    pub fn problem(&self, error: &ProxyError) -> Response<Body> {
        error.to_response(&self.problem_base)
    }

    /// Routes the request and answers it; upstream failures become problem responses.
    pub async fn handle(&self, request: Request<Incoming>) -> Result<Response<Body>, Infallible> {
        let Some(route) = self.select(&request) else {
            return Ok(ProxyError::NoRoute.to_response(&self.problem_base));
        };
        let name = route.name.clone();
        let service = route.service.clone();
        Ok(service.oneshot(request).await.unwrap_or_else(|error| {
            if client_body_failed(error.as_ref()) {
                tracing::info!(route = %name, error = %error, "the client's request body broke off");
                return ProxyError::UnreadableBody.to_response(&self.problem_base);
            }
            tracing::warn!(route = %name, error = %error, "upstream unavailable");
            ProxyError::UpstreamUnavailable.to_response(&self.problem_base)
        }))
    }
}

/// Whether forwarding failed on the client's side: a streamed body that was malformed (a bad
/// chunk size) or cut short. hyper's client reports the body it was given failing as a user
/// error; the upstream is not to blame, and never received a whole request.
fn client_body_failed(error: &(dyn std::error::Error + 'static)) -> bool {
    std::iter::successors(Some(error), |e| e.source())
        .filter_map(|e| e.downcast_ref::<hyper::Error>())
        .any(hyper::Error::is_user)
}

/// The host a request was sent to: `Host`, or the URI authority (HTTP/2), without the port.
fn request_host<B>(request: &Request<B>) -> Option<String> {
    let raw = match request.headers().get(HOST).and_then(|h| h.to_str().ok()) {
        Some(host) => host,
        None => request.uri().host()?,
    };
    let without_port = match raw.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => raw,
    };
    Some(without_port.to_ascii_lowercase())
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
        assert_eq!(
            request_host(&with_header).as_deref(),
            Some("api.example.com")
        );
        let h2 = Request::builder()
            .uri("http://hooks.example.com/x")
            .body(())
            .unwrap();
        assert_eq!(request_host(&h2).as_deref(), Some("hooks.example.com"));
        let ipv6 = Request::builder()
            .uri("/x")
            .header(HOST, "[::1]:8080")
            .body(())
            .unwrap();
        assert_eq!(request_host(&ipv6).as_deref(), Some("[::1]"));
    }
}
