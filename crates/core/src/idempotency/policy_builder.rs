//! Building a [`Policy`] the way a library user expects: start from the defaults, change what
//! the route needs with `with_*` setters, and have [`build`](PolicyBuilder::build) refuse a bad
//! value with the words the config loader uses.

use std::time::Duration;

use http::{HeaderName, Method, StatusCode};

use super::policy::{
    AmbiguousPolicy, ConcurrentPolicy, KeySource, Policy, PolicyError, StoreErrorPolicy,
};
#[cfg(feature = "webhooks")]
use super::verify::Verifier;
use crate::grpc::{GrpcCode, Protocol};
use crate::model::{FingerprintBody, RouteName, RouteNameError};
use crate::units::ByteSize;

/// Builds a [`Policy`] from the defaults of [`Policy::new`].
#[derive(Debug, Clone)]
#[must_use]
pub struct PolicyBuilder {
    policy: Policy,
    /// Why the route's name is not one, if it is not: [`build`](PolicyBuilder::build) says so.
    route_error: Option<RouteNameError>,
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
    pub(super) fn new(route: &str) -> Self {
        let (name, route_error) = match RouteName::new(route) {
            Ok(name) => (name, None),
            Err(reason) => (
                RouteName::new(RouteName::DEFAULT).expect("a valid name"),
                Some(reason),
            ),
        };
        Self {
            policy: Policy::new(name),
            route_error,
        }
    }

    /// The methods the route covers (default `POST` and `PATCH`); others pass straight through.
    ///
    /// ```
    /// use http::Method;
    /// use idempotency_core::Policy;
    ///
    /// let policy = Policy::builder("orders").with_methods([Method::POST, Method::PUT]).build()?;
    /// assert!(policy.covers(&Method::PUT));
    /// # Ok::<(), idempotency_core::PolicyError>(())
    /// ```
    pub fn with_methods(mut self, methods: impl IntoIterator<Item = Method>) -> Self {
        self.policy.methods = methods.into_iter().collect();
        self
    }

    /// Takes the key from this header (default `Idempotency-Key`).
    ///
    /// ```
    /// use http::HeaderName;
    /// use idempotency_core::Policy;
    ///
    /// let header = HeaderName::from_static("x-request-id");
    /// let policy = Policy::builder("orders").with_key_header(header).build()?;
    /// # Ok::<(), idempotency_core::PolicyError>(())
    /// ```
    pub fn with_key_header(mut self, header: HeaderName) -> Self {
        self.policy.key_source = KeySource::Header(header);
        self
    }

    /// Takes the key from this RFC 6901 pointer into a JSON body instead of a header (`/id`);
    /// [`build`](Self::build) refuses one that is not a pointer.
    ///
    /// ```
    /// use idempotency_core::Policy;
    ///
    /// let stripe = Policy::builder("stripe").with_key_body_pointer("/id").build()?;
    /// let refused = Policy::builder("stripe").with_key_body_pointer("id").build().unwrap_err();
    /// assert_eq!(refused.key(), "key_body_pointer");
    /// # Ok::<(), idempotency_core::PolicyError>(())
    /// ```
    pub fn with_key_body_pointer(mut self, pointer: impl Into<String>) -> Self {
        self.policy.key_source = KeySource::BodyPointer(pointer.into());
        self
    }

    /// Makes this header's value (its SHA-256) part of every key's scope, so two clients that
    /// send the same key never see each other's answers.
    ///
    /// ```
    /// use http::header::AUTHORIZATION;
    /// use idempotency_core::Policy;
    ///
    /// let policy = Policy::builder("orders").with_scope_header(AUTHORIZATION).build()?;
    /// # Ok::<(), idempotency_core::PolicyError>(())
    /// ```
    pub fn with_scope_header(mut self, header: HeaderName) -> Self {
        self.policy.scope_header = Some(header);
        self
    }

    /// Headers that are part of "the same request" beside method, target and body.
    ///
    /// ```
    /// use http::header::CONTENT_TYPE;
    /// use idempotency_core::Policy;
    ///
    /// let policy = Policy::builder("orders").with_fingerprint_headers([CONTENT_TYPE]).build()?;
    /// # Ok::<(), idempotency_core::PolicyError>(())
    /// ```
    pub fn with_fingerprint_headers(
        mut self,
        headers: impl IntoIterator<Item = HeaderName>,
    ) -> Self {
        self.policy.fingerprint_headers = headers.into_iter().collect();
        self
    }

    /// Statuses that mean "not executed" (default 408, 425, 429, 503): the key is freed.
    ///
    /// ```
    /// use http::StatusCode;
    /// use idempotency_core::Policy;
    ///
    /// let policy = Policy::builder("orders")
    ///     .with_release_on([StatusCode::TOO_MANY_REQUESTS, StatusCode::SERVICE_UNAVAILABLE])
    ///     .build()?;
    /// # Ok::<(), idempotency_core::PolicyError>(())
    /// ```
    pub fn with_release_on(mut self, statuses: impl IntoIterator<Item = StatusCode>) -> Self {
        self.policy.release_on = statuses.into_iter().collect();
        self
    }

    /// Response headers never stored nor replayed, beyond the fixed set.
    ///
    /// ```
    /// use http::HeaderName;
    /// use idempotency_core::Policy;
    ///
    /// let policy = Policy::builder("orders")
    ///     .with_replay_exclude_headers([HeaderName::from_static("x-trace-id")])
    ///     .build()?;
    /// # Ok::<(), idempotency_core::PolicyError>(())
    /// ```
    pub fn with_replay_exclude_headers(
        mut self,
        headers: impl IntoIterator<Item = HeaderName>,
    ) -> Self {
        self.policy.replay_exclude_headers = headers.into_iter().collect();
        self
    }

    /// Refuses every covered request without a valid signature of this scheme and secret
    /// (the `webhooks` feature).
    ///
    /// ```
    /// use idempotency_core::policy::{Scheme, Verifier, DEFAULT_TOLERANCE};
    /// use idempotency_core::Secret;
    /// use idempotency_core::Policy;
    ///
    /// # let path = std::env::temp_dir().join(format!("github-secret-{}", std::process::id()));
    /// # std::fs::write(&path, "It's a Secret to Everybody").unwrap();
    /// # let reference = format!("file:{}", path.display());
    /// // `reference` is "env:NAME" or "file:PATH", as the config file names it.
    /// let secret = Secret::resolve(&reference).unwrap();
    /// let verifier = Verifier::new(Scheme::Github, secret, None).unwrap();
    /// let policy = Policy::builder("github").with_verifier(verifier).build()?;
    /// # Ok::<(), idempotency_core::PolicyError>(())
    /// ```
    #[cfg(feature = "webhooks")]
    pub fn with_verifier(mut self, verifier: Verifier) -> Self {
        self.policy.verify = Some(verifier);
        self
    }

    setters! {
        /// Refuses a covered request without a key (`400 missing-key`) instead of passing it.
        ///
        /// ```
        /// use idempotency_core::Policy;
        ///
        /// let policy = Policy::builder("orders").with_require_key(true).build()?;
        /// assert!(policy.require_key);
        /// # Ok::<(), idempotency_core::PolicyError>(())
        /// ```
        with_require_key => require_key: bool;
        /// Fingerprints the body's bytes (default) or its canonical JSON, without the members
        /// named.
        ///
        /// ```
        /// use idempotency_core::policy::{FingerprintBody, JsonPointer};
        /// use idempotency_core::Policy;
        ///
        /// let ignore = vec![JsonPointer::parse("/sent_at").unwrap()];
        /// let policy = Policy::builder("orders")
        ///     .with_fingerprint_body(FingerprintBody::Json { ignore })
        ///     .build()?;
        /// # Ok::<(), idempotency_core::PolicyError>(())
        /// ```
        with_fingerprint_body => fingerprint_body: FingerprintBody;
        /// How long a completed record is kept (default 24 hours).
        ///
        /// ```
        /// use std::time::Duration;
        /// use idempotency_core::Policy;
        ///
        /// let policy = Policy::builder("orders").with_ttl(Duration::from_secs(3600)).build()?;
        /// # Ok::<(), idempotency_core::PolicyError>(())
        /// ```
        with_ttl => ttl: Duration;
        /// How long a reservation lives without renewal (default 30 s); renewed while the
        /// inner service works. [`build`](Self::build) refuses zero, as every duration here.
        ///
        /// ```
        /// use std::time::Duration;
        /// use idempotency_core::Policy;
        ///
        /// let policy = Policy::builder("orders").with_lease(Duration::from_secs(10)).build()?;
        /// let refused = Policy::builder("orders").with_lease(Duration::ZERO).build().unwrap_err();
        /// assert_eq!(refused.key(), "lease");
        /// # Ok::<(), idempotency_core::PolicyError>(())
        /// ```
        with_lease => lease: Duration;
        /// What a duplicate gets while the first request runs (default `409`).
        ///
        /// ```
        /// use idempotency_core::policy::ConcurrentPolicy;
        /// use idempotency_core::Policy;
        ///
        /// let policy = Policy::builder("orders").with_concurrent(ConcurrentPolicy::Wait).build()?;
        /// # Ok::<(), idempotency_core::PolicyError>(())
        /// ```
        with_concurrent => concurrent: ConcurrentPolicy;
        /// How long a waiting duplicate waits (`ConcurrentPolicy::Wait`; default 10 s).
        ///
        /// ```
        /// use std::time::Duration;
        /// use idempotency_core::Policy;
        ///
        /// let policy = Policy::builder("orders").with_wait_timeout(Duration::from_secs(2)).build()?;
        /// # Ok::<(), idempotency_core::PolicyError>(())
        /// ```
        with_wait_timeout => wait_timeout: Duration;
        /// How long the inner service may take before the outcome is ambiguous (default 30 s).
        ///
        /// ```
        /// use std::time::Duration;
        /// use idempotency_core::Policy;
        ///
        /// let policy = Policy::builder("orders")
        ///     .with_upstream_timeout(Duration::from_secs(5))
        ///     .build()?;
        /// # Ok::<(), idempotency_core::PolicyError>(())
        /// ```
        with_upstream_timeout => upstream_timeout: Duration;
        /// The largest request body a covered request may have (default 1 MiB).
        ///
        /// ```
        /// use idempotency_core::policy::ByteSize;
        /// use idempotency_core::Policy;
        ///
        /// let policy = Policy::builder("orders").with_max_request_body(ByteSize::kib(64)).build()?;
        /// # Ok::<(), idempotency_core::PolicyError>(())
        /// ```
        with_max_request_body => max_request_body: ByteSize;
        /// The largest answer body that is kept (default 1 MiB); larger ones are streamed.
        ///
        /// ```
        /// use idempotency_core::policy::ByteSize;
        /// use idempotency_core::Policy;
        ///
        /// let policy = Policy::builder("orders").with_max_cached_body(ByteSize::mib(4)).build()?;
        /// # Ok::<(), idempotency_core::PolicyError>(())
        /// ```
        with_max_cached_body => max_cached_body: ByteSize;
        /// What is stored when it is unknown whether the operation ran (default keep).
        ///
        /// ```
        /// use idempotency_core::policy::AmbiguousPolicy;
        /// use idempotency_core::Policy;
        ///
        /// let policy = Policy::builder("webhooks")
        ///     .with_on_ambiguous(AmbiguousPolicy::Release)
        ///     .build()?;
        /// # Ok::<(), idempotency_core::PolicyError>(())
        /// ```
        with_on_ambiguous => on_ambiguous: AmbiguousPolicy;
        /// What happens when the store cannot be reached (default `503`).
        ///
        /// ```
        /// use idempotency_core::policy::StoreErrorPolicy;
        /// use idempotency_core::Policy;
        ///
        /// let policy = Policy::builder("orders")
        ///     .with_on_store_error(StoreErrorPolicy::FailOpen)
        ///     .build()?;
        /// # Ok::<(), idempotency_core::PolicyError>(())
        /// ```
        with_on_store_error => on_store_error: StoreErrorPolicy;
        /// HTTP (default) or gRPC calls; [`build`](Self::build) refuses a gRPC route that
        /// fingerprints JSON.
        ///
        /// ```
        /// use idempotency_core::policy::Protocol;
        /// use idempotency_core::Policy;
        ///
        /// let policy = Policy::builder("ledger").with_protocol(Protocol::Grpc).build()?;
        /// # Ok::<(), idempotency_core::PolicyError>(())
        /// ```
        with_protocol => protocol: Protocol;
        /// On a gRPC route, the statuses that free the key (default UNAVAILABLE).
        ///
        /// ```
        /// use idempotency_core::policy::{GrpcCode, Protocol};
        /// use idempotency_core::Policy;
        ///
        /// let policy = Policy::builder("ledger")
        ///     .with_protocol(Protocol::Grpc)
        ///     .with_grpc_release_on(vec![GrpcCode::UNAVAILABLE, GrpcCode::RESOURCE_EXHAUSTED])
        ///     .build()?;
        /// # Ok::<(), idempotency_core::PolicyError>(())
        /// ```
        with_grpc_release_on => grpc_release_on: Vec<GrpcCode>;
        /// On a gRPC route, whether streams are deduplicated too (default not).
        ///
        /// ```
        /// use idempotency_core::policy::Protocol;
        /// use idempotency_core::Policy;
        ///
        /// let policy = Policy::builder("ledger")
        ///     .with_protocol(Protocol::Grpc)
        ///     .with_grpc_keyed_streams(true)
        ///     .build()?;
        /// # Ok::<(), idempotency_core::PolicyError>(())
        /// ```
        with_grpc_keyed_streams => grpc_keyed_streams: bool;
    }

    /// The policy, if its route name is one and [`Policy::validate`] accepts it: the one step
    /// of setting up a layer that can fail.
    ///
    /// ```
    /// use idempotency_core::Policy;
    ///
    /// let policy = Policy::builder("payments").build()?;
    /// let refused = Policy::builder("pay ments").build().unwrap_err();
    /// assert_eq!(refused.key(), "name");
    /// # Ok::<(), idempotency_core::PolicyError>(())
    /// ```
    pub fn build(self) -> Result<Policy, PolicyError> {
        if let Some(refused) = self.route_error {
            return Err(PolicyError::new("name", refused.to_string()));
        }
        self.policy.validate()?;
        Ok(self.policy)
    }
}
