//! Steps 1 to 3 of a request's life (docs/reference.md#the-life-of-a-request): is it covered, what is its key, is its
//! body within the limit (and, on routes that verify them, is its signature good); then its
//! scope and fingerprint. It reads only the request and the policy: nothing here touches the
//! store.

use axum_core::body::Body;
use bytes::Bytes;
use http::{request::Parts, Request};

use super::extract::{key_from_body, key_from_headers, read_body};
use super::policy::{KeySource, Policy};
use crate::error::Problem;
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
    Refused(Problem),
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
#[cfg(feature = "webhooks")]
async fn verified(policy: &Policy, parts: &Parts, body: Body) -> Result<Body, Problem> {
    let Some(verifier) = &policy.verify else {
        return Ok(body);
    };
    let bytes = read_body(parts, body, policy.max_request_body).await?;
    let now = std::time::SystemTime::now();
    verifier
        .verify(&parts.headers, &bytes, now)
        .map_err(Problem::BadSignature)?;
    // Reading it again takes the one chunk back without copying.
    Ok(Body::from(bytes))
}

/// Without the `webhooks` feature no route verifies a signature.
#[cfg(not(feature = "webhooks"))]
#[allow(clippy::unused_async)]
async fn verified(_: &Policy, _: &Parts, body: Body) -> Result<Body, Problem> {
    Ok(body)
}

fn keyless(policy: &Policy, parts: Parts, body: Body) -> Admission {
    if policy.require_key {
        Admission::Refused(Problem::MissingKey)
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

#[cfg(test)]
mod tests {
    use http::Method;
    use http_body_util::BodyExt;

    use super::*;
    use crate::model::RouteName;

    fn policy() -> Policy {
        Policy::new(RouteName::new("r").unwrap())
    }

    fn request(method: Method, key: Option<&str>, body: &'static str) -> Request<Body> {
        let builder = Request::builder().method(method).uri("/v1/x?a=1");
        let builder = match key {
            Some(key) => builder.header("idempotency-key", key),
            None => builder,
        };
        builder.body(Body::from(body)).unwrap()
    }

    async fn keyed(policy: &Policy, request: Request<Body>) -> KeyedRequest {
        match admit(policy, request).await {
            Admission::Keyed(keyed) => keyed,
            _ => panic!("expected a keyed request"),
        }
    }

    #[tokio::test]
    async fn a_keyless_request_passes_with_its_body_whole() {
        let Admission::PassThrough(passed) =
            admit(&policy(), request(Method::POST, None, "{}")).await
        else {
            panic!("expected a pass-through");
        };
        assert_eq!(passed.into_body().collect().await.unwrap().to_bytes(), "{}");
    }

    #[tokio::test]
    async fn a_key_in_the_body_is_found_and_its_body_kept() {
        let mut by_pointer = policy();
        by_pointer.key_source = KeySource::BodyPointer("/id".into());
        let body = r#"{"id":"evt_1"}"#;
        let admitted = keyed(&by_pointer, request(Method::POST, None, body)).await;
        assert_eq!(admitted.key.key().as_str(), "evt_1");
        assert_eq!(admitted.body, body);
    }

    #[tokio::test]
    async fn the_fingerprint_is_the_requests_and_the_scope_the_clients() {
        let mut scoped = policy();
        scoped.scope_header = Some(http::HeaderName::from_static("authorization"));
        let with_client = |client: &'static str, body: &'static str| {
            let mut request = request(Method::POST, Some("k"), body);
            let value = http::HeaderValue::from_static(client);
            request.headers_mut().insert("authorization", value);
            request
        };
        let a = keyed(&scoped, with_client("Bearer a", "{}")).await;
        let again = keyed(&scoped, with_client("Bearer a", "{}")).await;
        let other_body = keyed(&scoped, with_client("Bearer a", "{ }")).await;
        let other_client = keyed(&scoped, with_client("Bearer b", "{}")).await;
        assert_eq!((a.fingerprint, &a.key), (again.fingerprint, &again.key));
        assert_ne!(a.fingerprint, other_body.fingerprint);
        assert_ne!(a.key, other_client.key);
        assert_eq!(a.fingerprint, other_client.fingerprint);
    }
}
