//! Keys, fingerprints and records for store tests, the same in every suite.

use std::time::{Duration, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};
use idempotency_core::backend::{
    ClientScope, CompletedRecord, FencingToken, Fingerprint, IdempotencyKey, RouteName, ScopedKey,
    StoredBody,
};
use idempotency_core::{backend::Reservation, Store};

/// The scoped key of `key` on `route`, for the client whose secret is `client`, if any.
pub fn scoped(route: &str, client: Option<&[u8]>, key: &str) -> ScopedKey {
    ScopedKey::new(
        RouteName::new(route).unwrap(),
        client.map(ClientScope::from_secret),
        IdempotencyKey::new(key).unwrap(),
    )
}

/// `key` on the route `payments`, with no client scope.
pub fn key(name: &str) -> ScopedKey {
    scoped("payments", None, name)
}

/// A fingerprint made of one repeated byte: easy to tell apart in a failure.
pub fn fp(n: u8) -> Fingerprint {
    Fingerprint::from_bytes([n; 32])
}

/// A completed record of fingerprint `fp(1)` with repeated headers and `body`; `created_at` is
/// whole milliseconds, as the encoding keeps it, so a record read back compares equal.
pub fn outcome(token: FencingToken, body: Bytes) -> CompletedRecord {
    let mut headers = HeaderMap::new();
    headers.append("content-type", HeaderValue::from_static("application/json"));
    headers.append("x-multi", HeaderValue::from_static("first"));
    headers.append("x-multi", HeaderValue::from_static("second"));
    CompletedRecord {
        fingerprint: fp(1),
        token,
        created_at: UNIX_EPOCH + Duration::from_millis(1_700_000_000_123),
        status: StatusCode::CREATED,
        headers,
        body: StoredBody::Kept(body),
    }
}

/// A small JSON body, as an API answers a charge.
pub fn small_body() -> Bytes {
    Bytes::from_static(b"{\"id\":\"ch_1\"}")
}

/// 1 MiB of arbitrary bytes (zeros, invalid UTF-8, CR LF), so any re-encoding or truncation shows.
pub fn big_body() -> Bytes {
    (0..1u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect()
}

/// Reserves `key` with fingerprint `fp(1)`, which must be free.
pub async fn acquire(store: &dyn Store, key: &ScopedKey, lease: Duration) -> FencingToken {
    match store.reserve(key, fp(1), lease).await.unwrap() {
        Reservation::Acquired(token) => token,
        other => panic!("expected Acquired, got {other:?}"),
    }
}

/// Sealing keys from a 32-byte key written to a file of the test's own, read back as an
/// operator's `file:` secret is: encryption at rest as the proxy sets it up.
pub fn sealing_keys(test: &str) -> idempotency_core::backend::SealingKeys {
    use idempotency_core::backend::{SealingKey, SealingKeys};
    let path = crate::temp::TempPath::new(&format!("{test}.key"));
    std::fs::write(path.path(), "07".repeat(32)).unwrap();
    let secret = idempotency_core::Secret::resolve(&format!("file:{}", path.path().display()));
    let key = SealingKey::from_secret(&secret.unwrap()).unwrap();
    SealingKeys::new(key, Vec::new())
}
