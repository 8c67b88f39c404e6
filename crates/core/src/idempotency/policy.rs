//! What a route promises: the settings the idempotency layer applies to each request.
//!
//! A `Policy` is the resolved form of one route's config: defaults already merged, units already
//! parsed. Library users build one with [`Policy::builder`]; the proxy's config loader sets its
//! fields from a file. Both end in [`Policy::validate`], so a bad value is refused in the same
//! words either way.

use std::time::Duration;

use http::{HeaderName, Method, StatusCode};
use serde::{Deserialize, Serialize};

pub use super::policy_builder::PolicyBuilder;
#[cfg(feature = "webhooks")]
use super::verify::Verifier;
use crate::grpc::{self, GrpcCode, Protocol};
use crate::model::{FingerprintBody, RouteName};
use crate::units::ByteSize;

/// Where the idempotency key is taken from. A route names exactly one source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// A request header, e.g. `Idempotency-Key` or `X-GitHub-Delivery`.
    Header(HeaderName),
    /// An RFC 6901 JSON pointer into the request body, e.g. `/id` for Stripe events.
    BodyPointer(String),
}

impl KeySource {
    /// An RFC 6901 pointer: empty (the whole body) or starting with `/`.
    pub(crate) fn check_pointer(raw: &str) -> Result<(), PolicyError> {
        if raw.is_empty() || raw.starts_with('/') {
            return Ok(());
        }
        let reason = format!(
            "invalid JSON pointer {raw:?}: expected \"\" or a path starting with '/', such as \"/id\""
        );
        Err(PolicyError::new("key_body_pointer", reason))
    }
}

/// Why a policy was refused: the setting (named as the config file names it) and the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("key {key:?}: {reason}")]
pub struct PolicyError {
    key: &'static str,
    reason: String,
}

impl PolicyError {
    pub(crate) fn new(key: &'static str, reason: impl Into<String>) -> Self {
        Self {
            key,
            reason: reason.into(),
        }
    }

    /// The setting refused, as the config file names it (`lease`, `mode`, ...).
    pub fn key(&self) -> &'static str {
        self.key
    }

    /// Why, without the key.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

/// What a duplicate gets while the first request with its key is still running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConcurrentPolicy {
    /// `409 request-in-flight` with `Retry-After`.
    Conflict,
    /// Hold the duplicate until the first completes (at most `wait_timeout`), then replay.
    Wait,
}

/// What is stored when it is unknown whether the upstream ran the operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AmbiguousPolicy {
    /// Store what the client got, so a retry never runs the operation twice.
    Keep,
    /// Free the key, so the sender's retry runs again (webhook receivers).
    Release,
}

/// What a route does with a covered keyed request (docs/reference.md#inbox-routes).
///
/// Only the proxy serves [`RouteMode::Inbox`]: it delivers what the layer queued, and sets the
/// mode from its config (the policy builder has no setter for it); a layer built for such a
/// policy needs the proxy's [`InboxHook`](crate::proxy::InboxHook).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RouteMode {
    /// Forward the first request and store the upstream's answer.
    Proxy,
    /// Store the request with its key, answer `inbox_ack_status` at once, and deliver it to the
    /// upstream later, at least once.
    Inbox,
}

/// What happens when the store cannot be reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreErrorPolicy {
    /// `503 store-unavailable`: never risk a second execution.
    FailClosed,
    /// Forward without deduplication, and count it.
    FailOpen,
}

/// The resolved settings of one route.
///
/// ```
/// use std::time::Duration;
/// use idempotency_core::Policy;
///
/// let policy = Policy::builder("payments")
///     .with_require_key(true)
///     .with_ttl(Duration::from_secs(3600))
///     .build()
///     .unwrap();
/// assert!(policy.require_key);
///
/// let refused = Policy::builder("payments")
///     .with_lease(Duration::ZERO)
///     .build()
///     .unwrap_err();
/// assert_eq!(refused.key(), "lease");
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Policy {
    /// The route's name: part of every scoped key, and of metrics and logs.
    pub route: RouteName,
    /// The methods the route covers; others pass straight through.
    pub methods: Vec<Method>,
    /// Where the key is read from.
    pub key_source: KeySource,
    /// Whether a covered request without a key is refused (`400 missing-key`).
    pub require_key: bool,
    /// The client identity header; its SHA-256 is part of the scope.
    pub scope_header: Option<HeaderName>,
    /// Headers that are part of "the same request".
    pub fingerprint_headers: Vec<HeaderName>,
    /// How the fingerprint reads the body: its bytes, or its canonical JSON without the
    /// members to ignore (`fingerprint_body`, `fingerprint_ignore`).
    pub fingerprint_body: FingerprintBody,
    /// How long a completed record is kept.
    pub ttl: Duration,
    /// How long an in-flight reservation lives without renewal.
    pub lease: Duration,
    /// What a duplicate gets while the first is running.
    pub concurrent: ConcurrentPolicy,
    /// How long a waiting duplicate waits (`concurrent = "wait"`).
    pub wait_timeout: Duration,
    /// How long the upstream may take; past it the outcome is ambiguous.
    pub upstream_timeout: Duration,
    /// The largest request body a covered request may have.
    pub max_request_body: ByteSize,
    /// The largest answer body that is stored; larger ones are streamed and not kept.
    pub max_cached_body: ByteSize,
    /// Statuses meaning "not executed": the reservation is released.
    pub release_on: Vec<StatusCode>,
    /// What is stored when it is unknown whether the operation ran.
    pub on_ambiguous: AmbiguousPolicy,
    /// What happens when the store cannot be reached.
    pub on_store_error: StoreErrorPolicy,
    /// Response headers never stored nor replayed, beyond the fixed set.
    pub replay_exclude_headers: Vec<HeaderName>,
    /// The signature every covered request must carry (signed webhooks), checked before the
    /// key is reserved.
    #[cfg(feature = "webhooks")]
    pub verify: Option<Verifier>,
    /// Forward (`proxy`, the default) or acknowledge and deliver later (`inbox`).
    pub mode: RouteMode,
    /// What an inbox route answers a request it stored (`inbox_ack_status`, default `202`).
    pub inbox_ack_status: StatusCode,
    /// HTTP, or gRPC calls (docs/grpc.md).
    pub protocol: Protocol,
    /// On a gRPC route, the statuses meaning "not executed": the reservation is released.
    pub grpc_release_on: Vec<GrpcCode>,
    /// On a gRPC route, whether calls of more than one message each way are deduplicated too.
    pub grpc_keyed_streams: bool,
}

impl Policy {
    /// A builder starting from the defaults, for a route of this name (1 to 64 letters,
    /// digits, `-`, `_` or `.`; [`PolicyBuilder::build`] refuses any other).
    ///
    /// ```
    /// use idempotency_core::Policy;
    ///
    /// let policy = Policy::builder("payments").with_require_key(true).build()?;
    /// assert_eq!(policy.route.as_str(), "payments");
    /// # Ok::<(), idempotency_core::PolicyError>(())
    /// ```
    pub fn builder(route: impl AsRef<str>) -> PolicyBuilder {
        PolicyBuilder::new(route.as_ref())
    }

    /// The defaults for a route of this name: every request method but `POST` and `PATCH`
    /// passes through, keys come from `Idempotency-Key`, answers are kept for a day.
    pub fn new(route: RouteName) -> Self {
        Self {
            route,
            methods: vec![Method::POST, Method::PATCH],
            key_source: KeySource::Header(HeaderName::from_static("idempotency-key")),
            require_key: false,
            scope_header: None,
            fingerprint_headers: Vec::new(),
            fingerprint_body: FingerprintBody::Bytes,
            ttl: Duration::from_secs(24 * 60 * 60),
            lease: Duration::from_secs(30),
            concurrent: ConcurrentPolicy::Conflict,
            wait_timeout: Duration::from_secs(10),
            upstream_timeout: Duration::from_secs(30),
            max_request_body: ByteSize::mib(1),
            max_cached_body: ByteSize::mib(1),
            release_on: [408, 425, 429, 503]
                .map(|s| StatusCode::from_u16(s).expect("valid status"))
                .to_vec(),
            on_ambiguous: AmbiguousPolicy::Keep,
            on_store_error: StoreErrorPolicy::FailClosed,
            replay_exclude_headers: Vec::new(),
            #[cfg(feature = "webhooks")]
            verify: None,
            mode: RouteMode::Proxy,
            inbox_ack_status: StatusCode::ACCEPTED,
            protocol: Protocol::Http,
            grpc_release_on: vec![GrpcCode::UNAVAILABLE],
            grpc_keyed_streams: false,
        }
    }

    /// Checks the values no type can: durations above zero, a body pointer that is one, an
    /// acknowledgement that is a `2xx`. The builder and the proxy's config loader both call it.
    pub fn validate(&self) -> Result<(), PolicyError> {
        let durations = [
            ("ttl", self.ttl),
            ("lease", self.lease),
            ("wait_timeout", self.wait_timeout),
            ("upstream_timeout", self.upstream_timeout),
        ];
        if let Some((key, _)) = durations.iter().find(|(_, d)| d.is_zero()) {
            let reason =
                "must be more than zero: a zero ttl, lease or timeout would fail every request";
            return Err(PolicyError::new(key, reason));
        }
        if let KeySource::BodyPointer(pointer) = &self.key_source {
            KeySource::check_pointer(pointer)?;
        }
        if self.protocol == Protocol::Grpc {
            validate_grpc(self)?;
        }
        if !self.inbox_ack_status.is_success() {
            let status = self.inbox_ack_status.as_u16();
            let reason = format!("status {status} is not a 2xx: senders would retry it");
            return Err(PolicyError::new("inbox_ack_status", reason));
        }
        Ok(())
    }

    /// How a gRPC call's status is to be treated (docs/grpc.md#outcomes).
    pub(crate) fn classify_grpc(&self, code: GrpcCode) -> Effect {
        if self.grpc_release_on.contains(&code) {
            Effect::NotExecuted
        } else {
            Effect::Definite
        }
    }

    /// How long the upstream may take for this request: `upstream_timeout`, or on a gRPC
    /// route the call's own `grpc-timeout` where that is shorter.
    pub(crate) fn upstream_deadline(&self, headers: &http::HeaderMap) -> Duration {
        if self.protocol == Protocol::Http {
            return self.upstream_timeout;
        }
        grpc::timeout_of(headers).map_or(self.upstream_timeout, |t| t.min(self.upstream_timeout))
    }

    /// Whether a keyed request with this body is a stream a gRPC route passes through
    /// unkeyed: anything but exactly one message, unless the route deduplicates streams.
    pub(crate) fn is_unkeyed_stream(&self, body: &[u8]) -> bool {
        self.protocol == Protocol::Grpc
            && !self.grpc_keyed_streams
            && !grpc::is_single_message(body)
    }

    /// Whether requests of this method are deduplicated.
    pub fn covers(&self, method: &Method) -> bool {
        self.methods.contains(method)
    }

    /// How an upstream status is to be treated.
    pub(crate) fn classify(&self, status: StatusCode) -> Effect {
        if self.release_on.contains(&status) {
            Effect::NotExecuted
        } else if status == StatusCode::BAD_GATEWAY || status == StatusCode::GATEWAY_TIMEOUT {
            Effect::Ambiguous
        } else {
            Effect::Definite
        }
    }

    /// How often the holder of a reservation renews its lease.
    pub(crate) fn renew_every(&self) -> Duration {
        (self.lease / 3).max(Duration::from_millis(10))
    }
}

/// A gRPC route's messages are binary: canonical JSON cannot read them, nor an inbox queue
/// deliver them (it drops trailers).
fn validate_grpc(policy: &Policy) -> Result<(), PolicyError> {
    if matches!(policy.fingerprint_body, FingerprintBody::Json { .. }) {
        let reason = "a gRPC route's messages are binary protobuf, not JSON: use \"bytes\"";
        return Err(PolicyError::new("fingerprint_body", reason));
    }
    if policy.mode == RouteMode::Inbox {
        return Err(PolicyError::new(
            "mode",
            "a gRPC route cannot be an inbox route",
        ));
    }
    Ok(())
}

/// What an upstream answer says about whether the operation ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Effect {
    /// It ran (or definitely failed): store and replay it.
    Definite,
    /// It did not run: free the key.
    NotExecuted,
    /// It may have run: `on_ambiguous` decides.
    Ambiguous,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_classified_as_the_spec_says() {
        let policy = Policy::new(RouteName::new("r").unwrap());
        for (status, want) in [
            (200, Effect::Definite),
            (201, Effect::Definite),
            (400, Effect::Definite),
            (500, Effect::Definite),
            (408, Effect::NotExecuted),
            (425, Effect::NotExecuted),
            (429, Effect::NotExecuted),
            (503, Effect::NotExecuted),
            (502, Effect::Ambiguous),
            (504, Effect::Ambiguous),
        ] {
            assert_eq!(
                policy.classify(StatusCode::from_u16(status).unwrap()),
                want,
                "{status}"
            );
        }
    }

    #[test]
    fn body_pointers_are_empty_or_rooted() {
        assert!(KeySource::check_pointer("").is_ok());
        assert!(KeySource::check_pointer("/data/id").is_ok());
        let refused = Policy::builder("r")
            .with_key_body_pointer("data/id")
            .build()
            .unwrap_err();
        assert_eq!(refused.key(), "key_body_pointer");
        assert!(refused.reason().contains("starting with '/'"), "{refused}");
    }

    #[test]
    fn zero_durations_and_acknowledgements_that_are_not_2xx_are_refused() {
        let route = || Policy::builder("r");
        let zero_ttl = route().with_ttl(Duration::ZERO).build().unwrap_err();
        assert_eq!(zero_ttl.to_string(), "key \"ttl\": must be more than zero: a zero ttl, lease or timeout would fail every request");
        let wait = route()
            .with_wait_timeout(Duration::ZERO)
            .build()
            .unwrap_err();
        assert_eq!(wait.key(), "wait_timeout");
        let mut ack = Policy::new(RouteName::new("r").unwrap());
        ack.inbox_ack_status = StatusCode::OK;
        assert!(ack.validate().is_ok());
        ack.inbox_ack_status = StatusCode::FOUND;
        assert_eq!(ack.validate().unwrap_err().key(), "inbox_ack_status");
        assert!(route().build().is_ok(), "the defaults are valid");
    }

    #[test]
    fn a_grpc_route_reads_its_statuses_and_deadlines_and_refuses_json_and_inbox() {
        let grpc = || Policy::builder("r").with_protocol(Protocol::Grpc);
        let policy = grpc().build().unwrap();
        assert_eq!(
            policy.classify_grpc(GrpcCode::UNAVAILABLE),
            Effect::NotExecuted
        );
        assert_eq!(policy.classify_grpc(GrpcCode::OK), Effect::Definite);
        assert_eq!(policy.classify_grpc(GrpcCode(13)), Effect::Definite);
        let mut headers = http::HeaderMap::new();
        headers.insert("grpc-timeout", http::HeaderValue::from_static("200m"));
        assert_eq!(
            policy.upstream_deadline(&headers),
            Duration::from_millis(200)
        );
        headers.insert("grpc-timeout", http::HeaderValue::from_static("1H"));
        assert_eq!(policy.upstream_deadline(&headers), policy.upstream_timeout);
        let http = Policy::new(RouteName::new("r").unwrap());
        headers.insert("grpc-timeout", http::HeaderValue::from_static("200m"));
        assert_eq!(
            http.upstream_deadline(&headers),
            http.upstream_timeout,
            "HTTP ignores it"
        );
        let json = FingerprintBody::Json { ignore: Vec::new() };
        let refused = grpc().with_fingerprint_body(json).build().unwrap_err();
        assert_eq!(refused.key(), "fingerprint_body");
        let mut inbox = grpc().build().unwrap();
        inbox.mode = RouteMode::Inbox;
        assert_eq!(inbox.validate().unwrap_err().key(), "mode");
        let message = |body: &[u8]| [&[0, 0, 0, 0, body.len() as u8][..], body].concat();
        assert!(!policy.is_unkeyed_stream(&message(b"ab")));
        assert!(policy.is_unkeyed_stream(&[message(b"a"), message(b"b")].concat()));
        assert!(
            !http.is_unkeyed_stream(b"{}"),
            "an HTTP body is never a stream"
        );
    }

    #[test]
    fn release_on_wins_over_ambiguity() {
        let mut policy = Policy::new(RouteName::new("r").unwrap());
        policy.release_on.push(StatusCode::BAD_GATEWAY);
        assert_eq!(
            policy.classify(StatusCode::BAD_GATEWAY),
            Effect::NotExecuted
        );
    }
}
