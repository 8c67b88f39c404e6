//! Steps 1 to 3 of a request's life (SPEC section 3): is it covered, what is its key, is its
//! body within the limit (and, on routes that verify them, is its signature good); then its
//! scope and fingerprint. It reads only the request and the policy: nothing here touches the
//! store.

use axum::body::Body;
use bytes::Bytes;
use http::{request::Parts, Request};

use super::extract::{key_from_body, key_from_headers, read_body};
use super::policy::{KeySource, Policy};
use crate::error::ProxyError;
use crate::model::{ClientScope, Fingerprint, IdempotencyKey, ScopedKey};

/// A request whose key, scope and fingerprint are known and whose body is read.
pub(super) struct KeyedRequest {
    pub(super) parts: Parts,
    pub(super) body: Bytes,
    pub(super) key: ScopedKey,
    pub(super) fingerprint: Fingerprint,
}

impl KeyedRequest {
    /// Whether `stored`, the fingerprint of a record under this request's key, is this
    /// request's. A record stored before part digests existed carries the single digest of
    /// those days, over the body's bytes (there was no other way to read it), so that digest is
    /// computed for it: a second pass over the body, paid only until such records expire.
    pub(super) fn is_same_as(&self, stored: &Fingerprint, policy: &Policy) -> bool {
        if stored.parts().is_some() {
            return *stored == self.fingerprint;
        }
        let parts = &self.parts;
        let names = &policy.fingerprint_headers;
        let unsplit = Fingerprint::compute_unsplit(
            &parts.method,
            &parts.uri,
            &parts.headers,
            names,
            &self.body,
        );
        *stored == unsplit
    }

    /// The request as it goes upstream.
    pub(super) fn into_request(self) -> Request<Body> {
        Request::from_parts(self.parts, Body::from(self.body))
    }
}

/// What the first steps decided.
pub(super) enum Admission {
    /// Not ours to deduplicate: forwarded as it is, body streamed.
    PassThrough(Request<Body>),
    /// Refused before anything is stored.
    Refused(ProxyError),
    /// To be deduplicated.
    Keyed(KeyedRequest),
}

/// Steps 1 to 3: method, key, body limit; then scope and fingerprint.
pub(super) async fn admit(policy: &Policy, request: Request<Body>) -> Admission {
    if !policy.covers(request.method()) {
        return Admission::PassThrough(request);
    }
    let (parts, body) = request.into_parts();
    let body = match verified(policy, &parts, body).await {
        Ok(body) => body,
        Err(e) => return Admission::Refused(e),
    };
    let (key, body) = match &policy.key_source {
        KeySource::Header(name) => match key_from_headers(&parts.headers, name) {
            Err(e) => return Admission::Refused(e.into()),
            Ok(None) => return keyless(policy, parts, body),
            Ok(Some(key)) => match read_body(&parts, body, policy.max_request_body).await {
                Ok(bytes) => (key, bytes),
                Err(e) => return Admission::Refused(e),
            },
        },
        KeySource::BodyPointer(pointer) => {
            let bytes = match read_body(&parts, body, policy.max_request_body).await {
                Ok(bytes) => bytes,
                Err(e) => return Admission::Refused(e),
            };
            match key_from_body(&bytes, pointer) {
                Err(e) => return Admission::Refused(e.into()),
                Ok(None) => return keyless(policy, parts, Body::from(bytes)),
                Ok(Some(key)) => (key, bytes),
            }
        }
    };
    Admission::Keyed(keyed(policy, parts, body, key))
}

/// Checks the signature of a route that verifies one (signed webhooks); other routes' bodies
/// pass untouched. The check lives here, rather than in a layer in front, because here the
/// body is read once, within `max_request_body` and with its `413`, and the check falls
/// exactly between reading (signatures cover the body) and reserving (a forged delivery must
/// neither run nor take the key). Every covered request is checked, keyed or not, so an
/// unsigned one cannot reach the upstream by leaving its key out.
async fn verified(policy: &Policy, parts: &Parts, body: Body) -> Result<Body, ProxyError> {
    let Some(verifier) = &policy.verify else {
        return Ok(body);
    };
    let bytes = read_body(parts, body, policy.max_request_body).await?;
    let now = std::time::SystemTime::now();
    verifier
        .verify(&parts.headers, &bytes, now)
        .map_err(ProxyError::BadSignature)?;
    // Reading it again takes the one chunk back without copying.
    Ok(Body::from(bytes))
}

fn keyless(policy: &Policy, parts: Parts, body: Body) -> Admission {
    if policy.require_key {
        Admission::Refused(ProxyError::MissingKey)
    } else {
        Admission::PassThrough(Request::from_parts(parts, body))
    }
}

fn keyed(policy: &Policy, parts: Parts, body: Bytes, key: IdempotencyKey) -> KeyedRequest {
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
        &policy.fingerprint_body,
    );
    KeyedRequest {
        parts,
        body,
        key,
        fingerprint,
    }
}
