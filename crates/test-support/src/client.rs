//! A plain HTTP client for tests, speaking to the proxy over a real socket.

use std::net::SocketAddr;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::BodyExt;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;

/// A response, fully read.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The status line's code.
    pub status: StatusCode,
    /// Every header, as sent.
    pub headers: HeaderMap,
    /// The whole body.
    pub body: Bytes,
}

impl Answer {
    /// A header's value, if it is there and is text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The body as JSON; panics with the body when it is not.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }

    /// The problem type of a problem+json answer, without the base.
    pub fn problem_type(&self) -> String {
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json"),
            "{self:?}"
        );
        let kind = self.json()["type"].as_str().unwrap().to_owned();
        kind.rsplit(':')
            .next()
            .unwrap()
            .rsplit('#')
            .next()
            .unwrap()
            .to_owned()
    }

    /// Whether the proxy marked the answer as a replay (`Idempotent-Replayed: true`).
    pub fn replayed(&self) -> bool {
        self.header("idempotent-replayed") == Some("true")
    }
}

/// An HTTP/1.1 client for one server address, pooling its connections.
#[derive(Clone)]
pub struct TestClient {
    addr: SocketAddr,
    base: String,
    client: Client<HttpConnector, Body>,
}

impl TestClient {
    /// A client of the server at `addr`.
    pub fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            base: format!("http://{addr}"),
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    /// Where it connects.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sends a request with the given headers and body and reads the whole answer.
    pub async fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> Answer {
        let mut request = Request::builder()
            .method(Method::from_bytes(method.as_bytes()).unwrap())
            .uri(format!("{}{path}", self.base));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(Body::from(body.into())).unwrap();
        let response = self
            .client
            .request(request)
            .await
            .expect("the proxy answers");
        let (parts, body) = response.into_parts();
        let body = body
            .collect()
            .await
            .expect("the body arrives whole")
            .to_bytes();
        Answer {
            status: parts.status,
            headers: parts.headers,
            body,
        }
    }

    /// A keyed POST, the common case.
    pub async fn post(&self, path: &str, key: &str, body: &'static str) -> Answer {
        self.send("POST", path, &[("idempotency-key", key)], body)
            .await
    }
}

impl TestClient {
    /// Like [`TestClient::send`], but a connection that breaks is an `Err`, not a panic.
    pub async fn send_raw(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> Result<StatusCode, hyper_util::client::legacy::Error> {
        let mut request = Request::builder()
            .method(Method::from_bytes(method.as_bytes()).unwrap())
            .uri(format!("{}{path}", self.base));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = self
            .client
            .request(request.body(Body::from(body.into())).unwrap())
            .await?;
        Ok(response.status())
    }
}

impl TestClient {
    /// A keyed POST whose key is not `'static`.
    pub async fn post_owned(&self, path: &str, key: &str, body: &'static str) -> Answer {
        self.send("POST", path, &[("idempotency-key", key)], body)
            .await
    }
}
