//! Putting a consumer together: the layer's policy from the consumer's settings, so a message
//! goes through exactly what an HTTP request of a route goes through (reserve, lease renewal,
//! fencing, TTL, whatever the store adds such as encryption at rest).

use std::sync::Arc;

use http::StatusCode;
use idempotency_core::policy::{AmbiguousPolicy, ByteSize, ConcurrentPolicy};
use idempotency_core::{IdempotencyLayer, Policy, PolicyError, Store};
use tower::Layer;

use crate::engine::{Consumer, Upstream};
use crate::settings::ConsumerSettings;
use crate::source::Source;
use crate::verdict::is_transient;

/// A consumer's settings the layer refuses.
#[derive(Debug, thiserror::Error)]
#[error("consumer {name:?}: {source}")]
pub struct BuildError {
    name: String,
    #[source]
    source: PolicyError,
}

impl BuildError {
    /// The key at fault, in the layer's words (`ttl`, `lease`, `upstream_timeout`, ...).
    pub fn key(&self) -> &'static str {
        self.source.key()
    }
}

/// The largest message the layer takes: a broker's own limit is the real bound.
const MAX_MESSAGE: ByteSize = ByteSize::mib(64);

impl Consumer {
    /// A consumer reading `source`, delivering through `upstream`, recording in `store`.
    pub fn build(
        settings: ConsumerSettings,
        source: Arc<dyn Source>,
        upstream: Upstream,
        store: Arc<dyn Store>,
    ) -> Result<Self, BuildError> {
        let policy = policy(&settings).map_err(|source| BuildError {
            name: settings.name.clone(),
            source,
        })?;
        let service = IdempotencyLayer::new(store.clone(), policy).layer(upstream);
        Ok(Consumer::new(settings, source, service, store))
    }
}

/// The route a consumer's messages go through: keyed, a duplicate of one running refused (the
/// broker is asked to send it later), every transient answer released so the next attempt
/// goes upstream again.
fn policy(settings: &ConsumerSettings) -> Result<Policy, PolicyError> {
    let release_on = (100..=599)
        .filter_map(|s| StatusCode::from_u16(s).ok())
        .filter(|s| is_transient(*s) && !settings.is_success(*s));
    Policy::builder(settings.scope())
        .with_methods([settings.method.clone()])
        .with_require_key(true)
        .with_ttl(settings.ttl)
        .with_lease(settings.lease)
        .with_upstream_timeout(settings.deliver_timeout)
        .with_concurrent(ConcurrentPolicy::Conflict)
        .with_on_ambiguous(AmbiguousPolicy::Release)
        .with_release_on(release_on)
        .with_max_request_body(MAX_MESSAGE)
        .build()
}
