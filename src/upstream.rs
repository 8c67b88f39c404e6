//! Forwarding to upstream services over pooled HTTP/1.1 clients: one shared by the plain
//! `http://` upstreams, one per `https://` route (its pool holds connections made with that
//! route's trust and client certificate, which no other route may borrow).
//!
//! The forwarding service is deliberately plain (rewrite the target, drop hop-by-hop headers,
//! add `X-Forwarded-*`): everything about idempotency sits in the layer in front of it. It
//! reports "the request never left" as [`RequestNotSent`], the one error after which a retry
//! is safe, so the layer can free the key.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use http::header::{HeaderName, HeaderValue, HOST};
use http::uri::{PathAndQuery, Scheme, Uri};
use http::{Request, Response, Version};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rustls::ClientConfig;
use tower::Service;

use crate::error::RequestNotSent;
use crate::headers::strip_hop_by_hop;
use crate::tls::{self, HttpsConnector};
use crate::BoxError;

/// A pooled client, for plain upstreams or for one `https://` route.
pub(crate) type UpstreamClient = Client<HttpsConnector, Body>;

/// The address of the client that sent a request, put on it by the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClientAddr(pub SocketAddr);

/// Put on a request by the server when its client reached the proxy over TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClientTls;

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
static X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// A client with keep-alive pooling; connect failures surface fast so they can be retried.
/// `tls` is the client config of an `https://` route; without one the client speaks plain HTTP.
pub(crate) fn client(tls: Option<Arc<ClientConfig>>) -> UpstreamClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(Duration::from_secs(5)));
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_max_idle_per_host(1024)
        .build(HttpsConnector::new(connector, tls))
}

/// Forwards every request to one upstream base URL.
#[derive(Debug, Clone)]
pub(crate) struct Upstream {
    client: UpstreamClient,
    base: Uri,
}

impl Upstream {
    /// `base` is `http://HOST:PORT` with an optional path that is put before every request path.
    pub(crate) fn new(client: UpstreamClient, base: Uri) -> Self {
        Self { client, base }
    }

    fn target(&self, uri: &Uri) -> Result<Uri, http::Error> {
        let prefix = self.base.path().trim_end_matches('/');
        let path = uri.path_and_query().map_or("/", PathAndQuery::as_str);
        let mut parts = self.base.clone().into_parts();
        parts.path_and_query = Some(format!("{prefix}{path}").parse()?);
        Ok(Uri::from_parts(parts)?)
    }

    fn prepare(&self, request: &mut Request<Body>) -> Result<(), http::Error> {
        // HTTP/2 clients name the host in the URI; the upstream speaks HTTP/1.1 and needs `Host`.
        if !request.headers().contains_key(HOST) {
            if let Some(host) = request
                .uri()
                .authority()
                .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
            {
                request.headers_mut().insert(HOST, host);
            }
        }
        if self.base.scheme() == Some(&Scheme::HTTPS) {
            self.name_the_upstream(request);
        }
        *request.uri_mut() = self.target(request.uri())?;
        *request.version_mut() = Version::HTTP_11;
        strip_hop_by_hop(request.headers_mut());
        add_forwarded_headers(request);
        Ok(())
    }
}

impl Upstream {
    /// An `https://` upstream is addressed by its own name, the one its certificate and the
    /// handshake's SNI carry: a server behind a shared front (a payment processor's API) refuses
    /// or misroutes a `Host` that names the proxy. The client's `Host` goes in
    /// `X-Forwarded-Host`, unless an earlier proxy put one there.
    fn name_the_upstream(&self, request: &mut Request<Body>) {
        let Some(upstream) = self
            .base
            .authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
        else {
            return;
        };
        let headers = request.headers_mut();
        if let Some(client) = headers.insert(HOST, upstream) {
            headers.entry(X_FORWARDED_HOST.clone()).or_insert(client);
        }
    }
}

/// Appends the client to `X-Forwarded-For` and states the scheme the proxy was reached by.
fn add_forwarded_headers(request: &mut Request<Body>) {
    let client = request.extensions().get::<ClientAddr>().map(|c| c.0.ip());
    let scheme = match request.extensions().get::<ClientTls>() {
        Some(ClientTls) => "https",
        None => "http",
    };
    let headers = request.headers_mut();
    if let Some(ip) = client {
        let chain = match headers.get(&X_FORWARDED_FOR).and_then(|v| v.to_str().ok()) {
            Some(earlier) => format!("{earlier}, {ip}"),
            None => ip.to_string(),
        };
        if let Ok(value) = HeaderValue::from_str(&chain) {
            headers.insert(X_FORWARDED_FOR.clone(), value);
        }
    }
    headers.insert(X_FORWARDED_PROTO.clone(), HeaderValue::from_static(scheme));
}

impl Service<Request<Body>> for Upstream {
    type Response = Response<Incoming>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Incoming>, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: Request<Body>) -> Self::Future {
        if let Err(e) = self.prepare(&mut request) {
            return Box::pin(async move { Err(Box::new(RequestNotSent(e.into())) as BoxError) });
        }
        let sent = self.client.request(request);
        Box::pin(async move {
            match sent.await {
                Ok(mut response) => {
                    strip_hop_by_hop(response.headers_mut());
                    Ok(response)
                }
                // A connect error includes a failed TLS handshake: nothing was written yet.
                Err(e) if e.is_connect() || tls::refused_handshake(&e) => {
                    Err(Box::new(RequestNotSent(e.into())) as BoxError)
                }
                Err(e) => Err(e.into()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_keeps_path_and_query_under_the_base_path() {
        let upstream = Upstream::new(
            client_for_tests(),
            "http://10.0.0.1:9000/api/".parse().unwrap(),
        );
        let target = upstream
            .target(&"/v1/charges?x=1".parse().unwrap())
            .unwrap();
        assert_eq!(target, "http://10.0.0.1:9000/api/v1/charges?x=1");
        let plain = Upstream::new(client_for_tests(), "http://h:1".parse().unwrap());
        assert_eq!(
            plain
                .target(&"http://proxy:8080/a?b".parse().unwrap())
                .unwrap(),
            "http://h:1/a?b"
        );
    }

    #[test]
    fn forwarded_headers_append_the_client() {
        let mut request = Request::new(Body::empty());
        request
            .extensions_mut()
            .insert(ClientAddr("192.0.2.7:5000".parse().unwrap()));
        request
            .headers_mut()
            .insert("x-forwarded-for", HeaderValue::from_static("198.51.100.1"));
        request
            .headers_mut()
            .insert("x-forwarded-proto", HeaderValue::from_static("https"));
        add_forwarded_headers(&mut request);
        assert_eq!(
            request.headers()["x-forwarded-for"],
            "198.51.100.1, 192.0.2.7"
        );
        assert_eq!(request.headers()["x-forwarded-proto"], "http");
        request.extensions_mut().insert(ClientTls);
        add_forwarded_headers(&mut request);
        assert_eq!(request.headers()["x-forwarded-proto"], "https");
    }

    #[test]
    fn an_https_upstream_gets_its_own_name_as_host() {
        let base = "https://api.example.com/v1".parse().unwrap();
        let upstream = Upstream::new(client_for_tests(), base);
        let mut request = Request::new(Body::empty());
        *request.uri_mut() = "/charges".parse().unwrap();
        request
            .headers_mut()
            .insert(HOST, HeaderValue::from_static("proxy.internal:8443"));
        upstream.prepare(&mut request).unwrap();
        assert_eq!(request.headers()[HOST], "api.example.com");
        assert_eq!(request.headers()["x-forwarded-host"], "proxy.internal:8443");
        assert_eq!(request.uri(), "https://api.example.com/v1/charges");
        let plain = Upstream::new(client_for_tests(), "http://10.0.0.1:9000".parse().unwrap());
        let mut request = Request::new(Body::empty());
        request
            .headers_mut()
            .insert(HOST, HeaderValue::from_static("proxy.internal"));
        plain.prepare(&mut request).unwrap();
        assert_eq!(request.headers()[HOST], "proxy.internal");
        assert!(request.headers().get("x-forwarded-host").is_none());
    }

    fn client_for_tests() -> UpstreamClient {
        client(None)
    }
}
