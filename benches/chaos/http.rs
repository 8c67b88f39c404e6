//! One client request to one replica, on a connection of its own, bounded by a client-side
//! time-out: an answer, or what went wrong instead.
//!
//! A fresh connection per attempt makes "which replica answered" exact, and a refused
//! connection (a killed proxy) distinguishable from one that broke mid-request.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

pub struct Answer {
    pub status: u16,
    pub replayed: bool,
    pub body: Bytes,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// No answer within the client's time-out.
    Timeout,
    /// The connection was refused: nothing was sent.
    Connect,
    /// The connection broke after the request may have been sent.
    Io,
}

impl Failure {
    pub fn name(self) -> &'static str {
        match self {
            Failure::Timeout => "timeout",
            Failure::Connect => "connect",
            Failure::Io => "io",
        }
    }
}

pub async fn post(port: u16, key: &str, body: Bytes, limit: Duration) -> Result<Answer, Failure> {
    tokio::time::timeout(limit, exchange(port, key, body))
        .await
        .unwrap_or(Err(Failure::Timeout))
}

async fn exchange(port: u16, key: &str, body: Bytes) -> Result<Answer, Failure> {
    let stream = TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|_| Failure::Connect)?;
    let _ = stream.set_nodelay(true);
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|_| Failure::Io)?;
    // The connection ends with the exchange, also when the client's time-out drops it.
    let _driver = AbortOnDrop(tokio::spawn(connection));
    let request = Request::post("/v1/charges")
        .header("host", format!("127.0.0.1:{port}"))
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(Full::new(body))
        .expect("a well-formed request");
    let response = sender
        .send_request(request)
        .await
        .map_err(|_| Failure::Io)?;
    let status = response.status().as_u16();
    let replayed = response
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true");
    let body = response.into_body().collect().await;
    Ok(Answer {
        status,
        replayed,
        body: body.map_err(|_| Failure::Io)?.to_bytes(),
    })
}

struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
