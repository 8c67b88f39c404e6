//! Building a [`Policy`] the way a library user expects: start from the defaults, change what
//! the route needs with `with_*` setters, and have [`build`](PolicyBuilder::build) refuse a bad
//! value with the words the config loader uses.

use std::time::Duration;

use http::{HeaderName, Method, StatusCode};

use super::policy::{
    AmbiguousPolicy, ConcurrentPolicy, KeySource, Policy, PolicyError, RouteMode, StoreErrorPolicy,
};
use super::verify::Verifier;
use crate::grpc::{GrpcCode, Protocol};
use crate::model::{FingerprintBody, RouteName};
use crate::units::ByteSize;

/// Builds a [`Policy`] from the defaults of [`Policy::new`].
#[derive(Debug, Clone)]
#[must_use]
pub struct PolicyBuilder {
    policy: Policy,
}

/// One setter per plain field: the same shape each time, with its own documentation.
macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident => $field:ident: $ty:ty;)*) => {
        $(
            $(#[$doc])*
            pub fn $name(mut self, value: $ty) -> Self {
                self.policy.$field = value;
                self
            }
        )*
    };
}

impl PolicyBuilder {
    pub(super) fn new(route: RouteName) -> Self {
        Self {
            policy: Policy::new(route),
        }
    }

    /// The methods the route covers (default `POST` and `PATCH`); others pass straight through.
    pub fn with_methods(mut self, methods: impl IntoIterator<Item = Method>) -> Self {
        self.policy.methods = methods.into_iter().collect();
        self
    }

    /// Takes the key from this header (default `Idempotency-Key`).
    pub fn with_key_header(mut self, header: HeaderName) -> Self {
        self.policy.key_source = KeySource::Header(header);
        self
    }

    /// Takes the key from this RFC 6901 pointer into a JSON body instead of a header (`/id`).
    pub fn with_key_body_pointer(mut self, pointer: impl Into<String>) -> Self {
        self.policy.key_source = KeySource::BodyPointer(pointer.into());
        self
    }

    /// Makes this header's value (its SHA-256) part of every key's scope, so two clients that
    /// send the same key never see each other's answers.
    pub fn with_scope_header(mut self, header: HeaderName) -> Self {
        self.policy.scope_header = Some(header);
        self
    }

    /// Headers that are part of "the same request" beside method, target and body.
    pub fn with_fingerprint_headers(
        mut self,
        headers: impl IntoIterator<Item = HeaderName>,
    ) -> Self {
        self.policy.fingerprint_headers = headers.into_iter().collect();
        self
    }

    /// Statuses that mean "not executed" (default 408, 425, 429, 503): the key is freed.
    pub fn with_release_on(mut self, statuses: impl IntoIterator<Item = StatusCode>) -> Self {
        self.policy.release_on = statuses.into_iter().collect();
        self
    }

    /// Response headers never stored nor replayed, beyond the fixed set.
    pub fn with_replay_exclude_headers(
        mut self,
        headers: impl IntoIterator<Item = HeaderName>,
    ) -> Self {
        self.policy.replay_exclude_headers = headers.into_iter().collect();
        self
    }

    /// Refuses every covered request without a valid signature of this scheme and secret.
    pub fn with_verifier(mut self, verifier: Verifier) -> Self {
        self.policy.verify = Some(verifier);
        self
    }

    setters! {
        /// Refuses a covered request without a key (`400 missing-key`) instead of passing it.
        with_require_key => require_key: bool;
        /// Fingerprints the body's bytes (default) or its canonical JSON.
        with_fingerprint_body => fingerprint_body: FingerprintBody;
        /// How long a completed record is kept (default 24 hours).
        with_ttl => ttl: Duration;
        /// How long a reservation lives without renewal (default 30 s); renewed while the
        /// inner service works.
        with_lease => lease: Duration;
        /// What a duplicate gets while the first request runs (default `409`).
        with_concurrent => concurrent: ConcurrentPolicy;
        /// How long a waiting duplicate waits (`ConcurrentPolicy::Wait`; default 10 s).
        with_wait_timeout => wait_timeout: Duration;
        /// How long the inner service may take before the outcome is ambiguous (default 30 s).
        with_upstream_timeout => upstream_timeout: Duration;
        /// The largest request body a covered request may have (default 1 MiB).
        with_max_request_body => max_request_body: ByteSize;
        /// The largest answer body that is kept (default 1 MiB); larger ones are streamed.
        with_max_cached_body => max_cached_body: ByteSize;
        /// What is stored when it is unknown whether the operation ran (default keep).
        with_on_ambiguous => on_ambiguous: AmbiguousPolicy;
        /// What happens when the store cannot be reached (default `503`).
        with_on_store_error => on_store_error: StoreErrorPolicy;
        /// Forward (default) or acknowledge and deliver later; only the proxy can deliver, so
        /// a layer refuses [`RouteMode::Inbox`].
        with_mode => mode: RouteMode;
        /// What an inbox route answers a request it stored (default `202`).
        with_inbox_ack_status => inbox_ack_status: StatusCode;
        /// HTTP (default) or gRPC calls.
        with_protocol => protocol: Protocol;
        /// On a gRPC route, the statuses that free the key (default UNAVAILABLE).
        with_grpc_release_on => grpc_release_on: Vec<GrpcCode>;
        /// On a gRPC route, whether streams are deduplicated too (default not).
        with_grpc_keyed_streams => grpc_keyed_streams: bool;
    }

    /// The policy, if [`Policy::validate`] accepts it.
    pub fn build(self) -> Result<Policy, PolicyError> {
        self.policy.validate()?;
        Ok(self.policy)
    }
}
