//! Forwarding to upstream services over HTTP/1.1 connections the request's own task drives.
//!
//! The forwarding service is deliberately plain (rewrite the target, drop hop-by-hop headers,
//! add `X-Forwarded-*`): everything about idempotency sits in the layer in front of it. It
//! reports "the request never left" as [`RequestNotSent`], the one error after which a retry
//! is safe, so the layer can free the key.
//!
//! Each route's [`Upstream`] keeps its own [`pool`] of idle connections. A request takes one
//! (or opens one), and its task polls that connection while it waits for the answer
//! ([`exchange`]) and while the answer's body is read ([`UpstreamBody`]); when the body ends the
//! connection goes back to the pool. No task runs per connection. For an `https://` upstream a
//! connection is TCP then the route's TLS handshake ([`transport`]), so a pool never holds a
//! connection made with another route's trust or client certificate. A sender that picks the
//! moment a request goes (an inbox route's paced attempts) makes it [`Ready`] on its connection
//! first, and sends it then.

mod body;
mod exchange;
mod multiplexed;
mod pool;
mod ready;
mod transport;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use http::header::{HeaderName, HeaderValue, HOST};
use http::uri::{PathAndQuery, Scheme, Uri};
use http::{Request, Response, Version};
use rustls::ClientConfig;
use tower::Service;

pub(crate) use body::UpstreamBody;
pub(crate) use pool::PoolSettings;
pub(crate) use ready::Ready;

use idempotency_core::proxy::strip_hop_by_hop;
use idempotency_core::BoxError;
use idempotency_core::RequestNotSent;
use multiplexed::Multiplexed;
use pool::Pool;
use transport::Address;

/// The address of the client that sent a request, put on it by the server: its IP as
/// `X-Forwarded-For` carries it, written once per connection rather than once per request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClientAddr(HeaderValue);

impl ClientAddr {
    pub(crate) fn new(addr: SocketAddr) -> Self {
        let ip = addr.ip().to_string();
        // An IP address in text is plain ASCII, always a valid header value.
        Self(HeaderValue::from_str(&ip).unwrap_or(HeaderValue::from_static("unknown")))
    }
}

/// Put on a request by the server when its client reached the proxy over TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClientTls;

/// Put on a request the proxy makes itself (an outbox relay's attempt): no client is behind
/// it, so no `X-Forwarded-*` header describes one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Originated;

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
static X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// Forwards every request to one upstream base URL. Clones share the connection pool.
///
/// One shared count for the whole: each request clones the upstream for its future and drops
/// it at the end, and every worker thread writes that count, so each write moves a cache line
/// between cores; a count for the target and one for the pool took twice the writes.
#[derive(Debug, Clone)]
pub(crate) struct Upstream {
    target: Arc<Target>,
}

#[derive(Debug)]
struct Target {
    base: Uri,
    /// `None` if the base URL names no host: every request then fails unsent.
    address: Option<Address>,
    pool: Arc<Pool>,
    /// A gRPC route's one HTTP/2 connection; `None` on an HTTP route, which uses the pool.
    multiplexed: Option<Multiplexed>,
}

impl Upstream {
    /// `base` is `http://HOST:PORT` or `https://HOST[:PORT]`, with an optional path that is put
    /// before every request path; `tls` is the route's client config, for `https://`.
    pub(crate) fn new(base: Uri, pool: PoolSettings, tls: Option<Arc<ClientConfig>>) -> Self {
        let address = Address::from_uri(&base, tls);
        Self {
            target: Arc::new(Target {
                base,
                address,
                pool: Pool::new(pool),
                multiplexed: None,
            }),
        }
    }

    /// A gRPC route's upstream: calls go over one HTTP/2 connection, h2c with prior knowledge
    /// for `http://`, TLS with ALPN `h2` (under the route's `tls`) for `https://`.
    pub(crate) fn grpc(base: Uri, tls: Option<Arc<ClientConfig>>) -> Self {
        let https = base.scheme() == Some(&Scheme::HTTPS);
        let tls = https.then(|| multiplexed::h2_only(tls));
        let address = Address::from_uri(&base, tls);
        let multiplexed = address.clone().map(Multiplexed::new);
        Self {
            target: Arc::new(Target {
                base,
                address,
                pool: Pool::new(PoolSettings::default()),
                multiplexed,
            }),
        }
    }

    /// A call as it goes to a gRPC upstream: the target in absolute form (HTTP/2 names the
    /// scheme and authority in the request), `te: trailers`, which gRPC servers require.
    fn prepare_call(&self, request: &mut Request<Body>) -> Result<(), http::Error> {
        let path = self.target(request.uri())?;
        let base = &self.target.base;
        let mut uri = Uri::builder().scheme(base.scheme_str().unwrap_or("http"));
        if let Some(authority) = base.authority() {
            uri = uri.authority(authority.clone());
        }
        *request.uri_mut() = uri
            .path_and_query(
                path.path_and_query()
                    .cloned()
                    .unwrap_or_else(|| PathAndQuery::from_static("/")),
            )
            .build()?;
        *request.version_mut() = Version::HTTP_2;
        let headers = request.headers_mut();
        strip_hop_by_hop(headers);
        if let Some(host) = headers.remove(HOST) {
            headers.entry(X_FORWARDED_HOST.clone()).or_insert(host);
        }
        headers.insert(http::header::TE, HeaderValue::from_static("trailers"));
        add_forwarded_headers(request);
        Ok(())
    }

    /// The request target on the upstream, in origin form (`/path?query`), under the base path.
    fn target(&self, uri: &Uri) -> Result<Uri, http::Error> {
        let prefix = self.target.base.path().trim_end_matches('/');
        match uri.path_and_query() {
            Some(path) if prefix.is_empty() => Ok(Uri::from(path.clone())),
            path => {
                let path = path.map_or("/", PathAndQuery::as_str);
                Ok(Uri::try_from(format!("{prefix}{path}"))?)
            }
        }
    }

    fn prepare(&self, request: &mut Request<Body>) -> Result<(), http::Error> {
        // HTTP/2 clients name the host in the URI; the upstream speaks HTTP/1.1 and needs `Host`.
        if !request.headers().contains_key(HOST) {
            let authority = request
                .uri()
                .authority()
                .or(self.target.base.authority())
                .and_then(|a| HeaderValue::from_str(a.as_str()).ok());
            if let Some(host) = authority {
                request.headers_mut().insert(HOST, host);
            }
        }
        if self.target.base.scheme() == Some(&Scheme::HTTPS) {
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
            .target
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

/// A request's headers as an inbox keeps them for later delivery: end to end only, with the
/// client already in `X-Forwarded-For` and the scheme in `X-Forwarded-Proto`, as the client
/// that sent it is not there when it is delivered.
pub(crate) fn stored_headers(parts: &http::request::Parts) -> http::HeaderMap {
    let mut headers = parts.headers.clone();
    strip_hop_by_hop(&mut headers);
    let (client, scheme) = client_of(&parts.extensions);
    forward(&mut headers, client, scheme);
    headers
}

/// Appends the client to `X-Forwarded-For` and states the scheme the proxy was reached by.
fn add_forwarded_headers(request: &mut Request<Body>) {
    if request.extensions().get::<Originated>().is_some() {
        return;
    }
    let (client, scheme) = client_of(request.extensions());
    forward(request.headers_mut(), client, scheme);
}

/// The client's address and the scheme it reached the proxy by, as the server noted them.
fn client_of(extensions: &http::Extensions) -> (Option<HeaderValue>, &'static str) {
    let client = extensions.get::<ClientAddr>().map(|c| c.0.clone());
    let scheme = match extensions.get::<ClientTls>() {
        Some(ClientTls) => "https",
        None => "http",
    };
    (client, scheme)
}

fn forward(headers: &mut http::HeaderMap, client: Option<HeaderValue>, scheme: &'static str) {
    if let Some(ip) = client {
        let chain = match headers.get(&X_FORWARDED_FOR) {
            Some(earlier) => chained(earlier, &ip),
            None => Some(ip),
        };
        if let Some(value) = chain {
            headers.insert(X_FORWARDED_FOR.clone(), value);
        }
    }
    headers.insert(X_FORWARDED_PROTO.clone(), HeaderValue::from_static(scheme));
}

/// `earlier, ip`: the client appended to the chain earlier proxies wrote.
fn chained(earlier: &HeaderValue, ip: &HeaderValue) -> Option<HeaderValue> {
    let mut chain = Vec::with_capacity(earlier.len() + 2 + ip.len());
    chain.extend_from_slice(earlier.as_bytes());
    chain.extend_from_slice(b", ");
    chain.extend_from_slice(ip.as_bytes());
    HeaderValue::from_bytes(&chain).ok()
}

impl Service<Request<Body>> for Upstream {
    type Response = Response<UpstreamBody>;
    type Error = BoxError;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: Request<Body>) -> Self::Future {
        if self.target.multiplexed.is_some() {
            return self.call_grpc(request);
        }
        if let Err(e) = self.prepare(&mut request) {
            return Box::pin(async move { Err(Box::new(RequestNotSent(e.into())) as BoxError) });
        }
        let target = self.target.clone();
        Box::pin(async move {
            let pool = &target.pool;
            let Some(address) = &target.address else {
                return Err(
                    Box::new(RequestNotSent("the upstream URL names no host".into())) as BoxError,
                );
            };
            let mut response = exchange::send(pool, address, pool.checkout(), request).await?;
            strip_hop_by_hop(response.headers_mut());
            Ok(response)
        })
    }
}

impl Upstream {
    /// A gRPC call, sent as a stream of the route's one HTTP/2 connection.
    fn call_grpc(&self, mut request: Request<Body>) -> ResponseFuture {
        let target = self.target.clone();
        let prepared = self.prepare_call(&mut request);
        Box::pin(async move {
            prepared.map_err(|e| Box::new(RequestNotSent(e.into())) as BoxError)?;
            let Some(multiplexed) = &target.multiplexed else {
                return Err(
                    Box::new(RequestNotSent("the upstream URL names no host".into())) as BoxError,
                );
            };
            let mut response = multiplexed.send(request).await?;
            strip_hop_by_hop(response.headers_mut());
            Ok(response)
        })
    }
}

type ResponseFuture =
    Pin<Box<dyn Future<Output = Result<Response<UpstreamBody>, BoxError>> + Send>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_keeps_path_and_query_under_the_base_path() {
        let upstream = Upstream::new(
            "http://10.0.0.1:9000/api/".parse().unwrap(),
            PoolSettings::default(),
            None,
        );
        let target = upstream
            .target(&"/v1/charges?x=1".parse().unwrap())
            .unwrap();
        assert_eq!(target, "/api/v1/charges?x=1");
        let plain = Upstream::new("http://h:1".parse().unwrap(), PoolSettings::default(), None);
        assert_eq!(
            plain
                .target(&"http://proxy:8080/a?b".parse().unwrap())
                .unwrap(),
            "/a?b"
        );
        assert_eq!(plain.target(&"*".parse().unwrap()).unwrap(), "*");
    }

    #[test]
    fn host_comes_from_the_client_uri_then_the_upstream() {
        let upstream = Upstream::new(
            "http://10.0.0.1:9000".parse().unwrap(),
            PoolSettings::default(),
            None,
        );
        let mut http2 = Request::new(Body::empty());
        *http2.uri_mut() = "https://api.example.com/pay".parse().unwrap();
        *http2.version_mut() = Version::HTTP_2;
        upstream.prepare(&mut http2).unwrap();
        assert_eq!(http2.headers()[HOST], "api.example.com");
        assert_eq!(http2.version(), Version::HTTP_11);
        assert_eq!(http2.uri(), "/pay");
        let mut http10 = Request::new(Body::empty());
        *http10.uri_mut() = "/pay".parse().unwrap();
        upstream.prepare(&mut http10).unwrap();
        assert_eq!(http10.headers()[HOST], "10.0.0.1:9000");
    }

    #[test]
    fn a_grpc_call_goes_in_absolute_form_with_te_trailers() {
        let base = "http://10.0.0.1:50051".parse().unwrap();
        let upstream = Upstream::grpc(base, None);
        let mut call = Request::new(Body::empty());
        *call.uri_mut() = "/payments.Payments/CreatePayment".parse().unwrap();
        *call.version_mut() = Version::HTTP_2;
        let headers = call.headers_mut();
        headers.insert(HOST, HeaderValue::from_static("proxy.internal:8080"));
        headers.insert("te", HeaderValue::from_static("trailers"));
        headers.insert("connection", HeaderValue::from_static("keep-alive"));
        upstream.prepare_call(&mut call).unwrap();
        assert_eq!(
            call.uri(),
            "http://10.0.0.1:50051/payments.Payments/CreatePayment"
        );
        assert_eq!(call.version(), Version::HTTP_2);
        assert_eq!(call.headers()["te"], "trailers");
        assert!(call.headers().get(HOST).is_none() && call.headers().get("connection").is_none());
        assert_eq!(call.headers()["x-forwarded-host"], "proxy.internal:8080");
    }

    #[test]
    fn forwarded_headers_append_the_client() {
        let mut request = Request::new(Body::empty());
        request
            .extensions_mut()
            .insert(ClientAddr::new("192.0.2.7:5000".parse().unwrap()));
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
        let upstream = Upstream::new(base, PoolSettings::default(), None);
        let mut request = Request::new(Body::empty());
        *request.uri_mut() = "/charges".parse().unwrap();
        request
            .headers_mut()
            .insert(HOST, HeaderValue::from_static("proxy.internal:8443"));
        upstream.prepare(&mut request).unwrap();
        assert_eq!(request.headers()[HOST], "api.example.com");
        assert_eq!(request.headers()["x-forwarded-host"], "proxy.internal:8443");
        assert_eq!(request.uri(), "/v1/charges");
        let base = "http://10.0.0.1:9000".parse().unwrap();
        let plain = Upstream::new(base, PoolSettings::default(), None);
        let mut request = Request::new(Body::empty());
        request
            .headers_mut()
            .insert(HOST, HeaderValue::from_static("proxy.internal"));
        plain.prepare(&mut request).unwrap();
        assert_eq!(request.headers()[HOST], "proxy.internal");
        assert!(request.headers().get("x-forwarded-host").is_none());
    }
}
