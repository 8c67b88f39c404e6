//! A gRPC route's upstream connection (docs/grpc.md): one HTTP/2 connection, h2c with prior
//! knowledge for `http://` or TLS with ALPN `h2` for `https://`, that every call of the route
//! shares as a stream of its own.
//!
//! Unlike the HTTP/1.1 pool, the connection is driven by a task of its own: calls from many
//! request tasks are multiplexed on it, and none of them owns it. When it closes (the upstream
//! went away, sent `GOAWAY`, or an idle timeout of its own), the next call opens a new one.

use std::sync::Arc;

use axum::body::Body;
use http::{Request, Response};
use hyper::client::conn::http2::{self, SendRequest};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::ClientConfig;
use tokio::sync::Mutex;

use super::body::UpstreamBody;
use super::transport::{self, Address, UpstreamIo};
use crate::tls;
use idempotency_core::{BoxError, RequestNotSent};

/// The one connection of a gRPC route, opened on first use and again after it closes.
#[derive(Debug)]
pub(super) struct Multiplexed {
    address: Address,
    /// The handle calls are sent by; `None` until the first call, or after a failed open.
    sender: Mutex<Option<SendRequest<Body>>>,
}

impl Multiplexed {
    pub(super) fn new(address: Address) -> Self {
        Self {
            address,
            sender: Mutex::new(None),
        }
    }

    /// Sends one call as a stream of the route's connection. A failure to open the
    /// connection, or a connection that will take no more streams, means the call never left.
    /// A call the connection gave back unsent (it was closing as the call arrived) goes on a
    /// fresh connection, once.
    pub(super) async fn send(
        &self,
        request: Request<Body>,
    ) -> Result<Response<UpstreamBody>, BoxError> {
        let answer = match self.try_send(request).await? {
            Ok(answer) => answer,
            Err(unsent) => match self.try_send(unsent).await? {
                Ok(answer) => answer,
                Err(_) => return Err(not_sent("the upstream connection closed twice".into())),
            },
        };
        Ok(answer.map(|incoming| UpstreamBody::new(incoming, None)))
    }

    /// The answer, or the call given back unsent.
    async fn try_send(&self, request: Request<Body>) -> Result<Sent, BoxError> {
        let mut sender = self.sender().await.map_err(not_sent)?;
        sender.ready().await.map_err(|e| not_sent(e.into()))?;
        match sender.try_send_request(request).await {
            Ok(answer) => Ok(Ok(answer)),
            Err(mut e) => match e.take_message() {
                Some(unsent) => Ok(Err(unsent)),
                None => Err(e.into_error().into()),
            },
        }
    }

    /// The open connection's handle, opening one if there is none or it has closed. Calls
    /// arriving while it opens wait for it rather than opening one each.
    async fn sender(&self) -> Result<SendRequest<Body>, BoxError> {
        let mut slot = self.sender.lock().await;
        if let Some(sender) = slot.as_ref().filter(|s| !s.is_closed()) {
            return Ok(sender.clone());
        }
        *slot = None;
        let sender = self.open().await?;
        *slot = Some(sender.clone());
        Ok(sender)
    }

    async fn open(&self) -> Result<SendRequest<Body>, BoxError> {
        let (io, _) = UpstreamIo::new(transport::connect(&self.address).await?);
        let (sender, connection) = http2::handshake(TokioExecutor::new(), TokioIo::new(io)).await?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "gRPC upstream connection ended");
            }
        });
        Ok(sender)
    }
}

type Sent = Result<Response<hyper::body::Incoming>, Request<Body>>;

fn not_sent(e: BoxError) -> BoxError {
    Box::new(RequestNotSent(e))
}

/// The route's TLS config (or the platform's) offering only `h2`: a gRPC upstream that
/// cannot speak HTTP/2 cannot answer a call.
pub(super) fn h2_only(config: Option<Arc<ClientConfig>>) -> Arc<ClientConfig> {
    let mut config = (*config.unwrap_or_else(tls::platform_client_config)).clone();
    config.alpn_protocols = vec![b"h2".to_vec()];
    Arc::new(config)
}
