//! A plain HTTP client for tests, speaking to the proxy over a real socket.

use std::net::SocketAddr;

use axum::body::{Body, Bytes};
use axum::http::{Method, Request, StatusCode};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;

pub use crate::answer::Answer;

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
        Answer::read(response).await
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
