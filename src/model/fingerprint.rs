//! The fingerprint: a digest of what a request asks for.
//!
//! Same key with another fingerprint is a client bug (or an attack), answered `422 key-reused`
//! and never a replay. Every part is length-prefixed, so moving bytes from the path into the
//! body, or from one header into another, always changes the digest.

use std::fmt;

use http::{HeaderMap, HeaderName, Method, Uri};
use sha2::{Digest, Sha256};

/// SHA-256 over method, path and query, the route's `fingerprint_headers`, and the body.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint([u8; 32]);

impl Fingerprint {
    /// Its length in bytes.
    pub const LEN: usize = 32;

    /// The fingerprint of a request: its method, path and query, the values of the route's
    /// `fingerprint_headers`, and its body.
    pub fn compute(
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        fingerprint_headers: &[HeaderName],
        body: &[u8],
    ) -> Self {
        let mut digest = Sha256::new();
        let mut field = |bytes: &[u8]| {
            digest.update((bytes.len() as u64).to_be_bytes());
            digest.update(bytes);
        };
        field(method.as_str().as_bytes());
        field(
            uri.path_and_query()
                .map_or("/", |pq| pq.as_str())
                .as_bytes(),
        );
        for name in fingerprint_headers {
            field(name.as_str().as_bytes());
            // The count matters: a header sent twice is not the same request as once.
            let values = headers.get_all(name);
            field(&(values.iter().count() as u64).to_be_bytes());
            for value in values {
                field(value.as_bytes());
            }
        }
        field(body);
        Self(digest.finalize().into())
    }

    /// A fingerprint as stored.
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// The digest, as stored.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The first hex digits, enough for an operator to compare two records by eye.
    pub fn short_hex(&self) -> String {
        hex::encode(&self.0[..8])
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({}…)", self.short_hex())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use proptest::prelude::*;

    fn fp(
        method: &str,
        uri: &str,
        headers: &HeaderMap,
        names: &[HeaderName],
        body: &[u8],
    ) -> Fingerprint {
        Fingerprint::compute(
            &method.parse().unwrap(),
            &uri.parse().unwrap(),
            headers,
            names,
            body,
        )
    }

    #[test]
    fn each_part_of_the_request_counts() {
        let none = HeaderMap::new();
        let base = fp("POST", "/v1/charges?a=1", &none, &[], b"{}");
        assert_eq!(base, fp("POST", "/v1/charges?a=1", &none, &[], b"{}"));
        assert_ne!(base, fp("PATCH", "/v1/charges?a=1", &none, &[], b"{}"));
        assert_ne!(base, fp("POST", "/v1/charges?a=2", &none, &[], b"{}"));
        assert_ne!(base, fp("POST", "/v1/charges?a=1", &none, &[], b"{ }"));
    }

    #[test]
    fn only_named_headers_count() {
        let tenant = HeaderName::from_static("x-tenant");
        let mut a = HeaderMap::new();
        a.insert(&tenant, HeaderValue::from_static("a"));
        a.insert("x-request-id", HeaderValue::from_static("1"));
        let mut b = a.clone();
        b.insert("x-request-id", HeaderValue::from_static("2"));
        let names = [tenant.clone()];
        assert_eq!(
            fp("POST", "/", &a, &names, b""),
            fp("POST", "/", &b, &names, b"")
        );
        b.insert(&tenant, HeaderValue::from_static("b"));
        assert_ne!(
            fp("POST", "/", &a, &names, b""),
            fp("POST", "/", &b, &names, b"")
        );
        b.remove(&tenant);
        assert_ne!(
            fp("POST", "/", &a, &names, b""),
            fp("POST", "/", &b, &names, b"")
        );
    }

    proptest! {
        #[test]
        fn moving_bytes_between_path_and_body_changes_it(path in "/[a-z]{0,8}", body in proptest::collection::vec(any::<u8>(), 1..64)) {
            let none = HeaderMap::new();
            let moved = format!("{path}{}", String::from_utf8_lossy(&body[..1]).replace(|c: char| !c.is_ascii_alphanumeric(), "x"));
            let original = fp("POST", &path, &none, &[], &body);
            prop_assert_ne!(original, fp("POST", &moved, &none, &[], &body[1..]));
        }

        #[test]
        fn distinct_bodies_give_distinct_fingerprints(a in proptest::collection::vec(any::<u8>(), 0..128), b in proptest::collection::vec(any::<u8>(), 0..128)) {
            let none = HeaderMap::new();
            prop_assert_eq!(a == b, fp("POST", "/", &none, &[], &a) == fp("POST", "/", &none, &[], &b));
        }
    }
}
