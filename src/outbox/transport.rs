//! An outbox relay's attempts go out through the proxy's own upstream client: a pool of
//! connections per receiver origin (`scheme://host:port`), TLS under the outbox's
//! `upstream_ca` and client certificate, and no `X-Forwarded-*` header (no client is behind an
//! attempt).

use std::collections::HashMap;

use async_trait::async_trait;
use axum::body::Body;
use bytes::Bytes;
use http::uri::{PathAndQuery, Uri};
use http::{Request, Response};
use http_body_util::{BodyExt, Limited};
use tower::ServiceExt;

use super::OutboxSettings;
use crate::net::upstream::{Originated, PoolSettings, Upstream};
use idempotency_core::BoxError;
use idempotency_outbox::{DestinationKind, Transport};

/// How much of an answer's body is read (and dropped) so its connection can be used again;
/// past it the connection is closed instead.
const DRAINED_BODY: usize = 64 * 1024;

/// One outbox's client: an upstream per receiver origin its destinations name.
#[derive(Debug)]
pub(crate) struct UpstreamTransport {
    origins: HashMap<String, Upstream>,
}

impl UpstreamTransport {
    pub(crate) fn new(outbox: &OutboxSettings) -> Self {
        let relay = &outbox.relay;
        let tls = outbox.upstream_tls.client_config_for_https().cloned();
        let origins = relay
            .deliver_to
            .iter()
            .chain(relay.topics.values())
            // Brokers are reached by the outbox's own clients, never through an upstream.
            .filter(|url| DestinationKind::of(url) == Some(DestinationKind::Http))
            .filter_map(|url| {
                let origin = origin(url)?;
                let base: Uri = origin.parse().ok()?;
                let upstream = Upstream::new(base, PoolSettings::default(), tls.clone());
                Some((origin, upstream))
            })
            .collect();
        Self { origins }
    }
}

/// `scheme://authority` of a destination URL.
fn origin(url: &Uri) -> Option<String> {
    Some(format!("{}://{}", url.scheme_str()?, url.authority()?))
}

#[async_trait]
impl Transport for UpstreamTransport {
    async fn send(&self, request: Request<Bytes>) -> Result<Response<()>, BoxError> {
        let (mut parts, body) = request.into_parts();
        let upstream = origin(&parts.uri)
            .and_then(|origin| self.origins.get(&origin))
            .ok_or("the destination is none of the outbox's")?
            .clone();
        let target = parts.uri.path_and_query().map_or("/", PathAndQuery::as_str);
        parts.uri = target.parse()?;
        parts.extensions.insert(Originated);
        let response = upstream
            .oneshot(Request::from_parts(parts, Body::from(body)))
            .await?;
        let (parts, body) = response.into_parts();
        // Read to its end so the connection goes back to the pool; a long one is cut off.
        let _ = Limited::new(body, DRAINED_BODY).collect().await;
        Ok(Response::from_parts(parts, ()))
    }
}
