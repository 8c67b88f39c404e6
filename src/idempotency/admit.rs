//! Steps 1 to 3 of a request's life: is it covered, what is its key, is its body within the
//! limit (and, on routes that verify them, is its signature good); then its scope and
//! fingerprint. Nothing here touches the store.

use axum::body::Body;
use bytes::Bytes;
use http::{request::Parts, Request};

use super::extract::{key_from_body, key_from_headers, read_body};
use super::fingerprint::Fingerprint;
use super::key::{ClientScope, IdempotencyKey, ScopedKey};
use super::policy::KeySource;
use super::service::Handler;
use crate::error::ProxyError;

/// A request whose key, scope and fingerprint are known and whose body is read.
pub(super) struct KeyedRequest {
    pub parts: Parts,
    pub body: Bytes,
    pub key: ScopedKey,
    pub fingerprint: Fingerprint,
}

pub(super) enum Admission {
    /// Not ours to deduplicate: forwarded as it is, body streamed.
    PassThrough(Request<Body>),
    Refused(ProxyError),
    Keyed(KeyedRequest),
}

impl Handler {
    /// Steps 1 to 3 of the request's life: method, key, body limit; then scope and fingerprint.
    pub(super) async fn admit(&self, request: Request<Body>) -> Admission {
        if !self.policy.covers(request.method()) {
            return Admission::PassThrough(request);
        }
        let (parts, body) = request.into_parts();
        let body = match self.verified(&parts, body).await {
            Ok(body) => body,
            Err(e) => return Admission::Refused(e),
        };
        let (key, body) = match &self.policy.key_source {
            KeySource::Header(name) => match key_from_headers(&parts.headers, name) {
                Err(e) => return Admission::Refused(e.into()),
                Ok(None) => return self.keyless(parts, body),
                Ok(Some(key)) => {
                    match read_body(&parts, body, self.policy.max_request_body).await {
                        Ok(bytes) => (key, bytes),
                        Err(e) => return Admission::Refused(e),
                    }
                }
            },
            KeySource::BodyPointer(pointer) => {
                match read_body(&parts, body, self.policy.max_request_body).await {
                    Err(e) => return Admission::Refused(e),
                    Ok(bytes) => match key_from_body(&bytes, pointer) {
                        Err(e) => return Admission::Refused(e.into()),
                        Ok(None) => return self.keyless(parts, Body::from(bytes)),
                        Ok(Some(key)) => (key, bytes),
                    },
                }
            }
        };
        Admission::Keyed(self.keyed(parts, body, key))
    }

    /// Checks the signature of a route that verifies one (signed webhooks); other routes' bodies
    /// pass untouched. The check lives here, rather than in a layer in front, because here the
    /// body is read once, within `max_request_body` and with its `413`, and the check falls
    /// exactly between reading (signatures cover the body) and reserving (a forged delivery must
    /// neither run nor take the key). Every covered request is checked, keyed or not, so an
    /// unsigned one cannot reach the upstream by leaving its key out.
    async fn verified(&self, parts: &Parts, body: Body) -> Result<Body, ProxyError> {
        let Some(verifier) = &self.policy.verify else {
            return Ok(body);
        };
        let bytes = read_body(parts, body, self.policy.max_request_body).await?;
        let now = std::time::SystemTime::now();
        verifier
            .verify(&parts.headers, &bytes, now)
            .map_err(ProxyError::BadSignature)?;
        // Reading it again below takes the one chunk back without copying.
        Ok(Body::from(bytes))
    }

    fn keyless(&self, parts: Parts, body: Body) -> Admission {
        if self.policy.require_key {
            Admission::Refused(ProxyError::MissingKey)
        } else {
            Admission::PassThrough(Request::from_parts(parts, body))
        }
    }

    fn keyed(&self, parts: Parts, body: Bytes, key: IdempotencyKey) -> KeyedRequest {
        let policy = &self.policy;
        let scope = policy
            .scope_header
            .as_ref()
            .and_then(|name| parts.headers.get(name));
        let scope = scope.map(|secret| ClientScope::from_secret(secret.as_bytes()));
        let key = ScopedKey::new(policy.route.clone(), scope, key);
        let fingerprint = Fingerprint::compute(
            &parts.method,
            &parts.uri,
            &parts.headers,
            &policy.fingerprint_headers,
            &body,
        );
        KeyedRequest {
            parts,
            body,
            key,
            fingerprint,
        }
    }
}
