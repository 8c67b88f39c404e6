//! What the memory store holds per completed record, next to the record's encoded size: the
//! bytes its allocations asked for (counted by a wrapper around the system allocator: the
//! proxy's mimalloc cannot be wrapped without `unsafe`), how many allocations that was, and the
//! growth of resident memory, which adds the allocator's own rounding and bookkeeping. Then the same after every record was read back
//! once, as a replay reads it, and the time one such read takes.
//!
//! `cargo bench --bench record_bytes`

use std::alloc::{GlobalAlloc, System};
use std::time::{Duration, Instant, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use idempotency_core::backend::{
    CompletedRecord, Fingerprint, IdempotencyKey, PartDigests, Record, RouteName, ScopedKey,
    StoredBody,
};
use idempotency_proxy::store::{MemoryStore, Reservation, Store};
use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};

#[global_allocator]
static ALLOCATOR: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const RECORDS: usize = 100_000;
const TTL: Duration = Duration::from_secs(3600);
/// Rounds of reading every record back, for the time of one read: the machine is shared.
const REPLAY_ROUNDS: usize = 5;

/// A typical answer's headers: a handful, two of them names `http` does not know.
const HEADERS: [(&str, &str); 5] = [
    ("content-type", "application/json"),
    ("cache-control", "no-store"),
    ("etag", "\"33a64df551425fcc55e4d42a148795d9f25f89d4\""),
    ("x-request-id", "3f0c2a4e-9b1d-4c61-8f57-2d9e0b7a6c15"),
    ("x-ratelimit-remaining", "99"),
];

/// A 200-byte JSON body, different for each record.
fn body(n: usize) -> Bytes {
    let mut body = format!(
        "{{\"id\":\"ch_{n:012}\",\"object\":\"charge\",\"amount\":2000,\"currency\":\"eur\",\
         \"status\":\"succeeded\",\"customer\":\"cus_9s6XKzkNRiz8i3\",\"description\":\"Order\""
    );
    while body.len() < 199 {
        body.push(' ');
    }
    body.push('}');
    Bytes::from(body)
}

fn key(n: usize) -> ScopedKey {
    let key = IdempotencyKey::new(format!("order-{n:08}")).unwrap();
    ScopedKey::new(RouteName::new("payments").unwrap(), None, key)
}

/// The record the proxy would complete with: its values and body in one buffer of their own.
fn record(
    n: usize,
    fingerprint: Fingerprint,
    token: idempotency_core::backend::FencingToken,
) -> CompletedRecord {
    let mut headers = HeaderMap::new();
    for (name, value) in HEADERS {
        headers.append(
            HeaderName::from_static(name),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    CompletedRecord {
        fingerprint,
        token,
        created_at: UNIX_EPOCH + Duration::from_millis(1_700_000_000_123),
        status: StatusCode::CREATED,
        headers,
        body: StoredBody::Kept(body(n)),
    }
    .detached()
}

fn fingerprint(n: usize) -> Fingerprint {
    let parts: [u8; PartDigests::STORED_LEN] = std::array::from_fn(|i| (i + n) as u8);
    Fingerprint::with_parts([(n % 251) as u8; 32], PartDigests::from_bytes(parts))
}

/// Bytes asked for and not yet given back, and allocations alive, within `region`.
fn held<T: GlobalAlloc>(region: &Region<'_, T>) -> (isize, isize) {
    let change = region.change();
    let bytes = change.bytes_allocated as isize - change.bytes_deallocated as isize
        + change.bytes_reallocated;
    let allocations = change.allocations as isize - change.deallocations as isize;
    (bytes, allocations)
}

/// Resident memory in bytes, from `/proc/self/statm` (its second field, in pages of 4 KiB).
fn resident() -> isize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: isize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

async fn fill(store: &MemoryStore, keys: &[ScopedKey]) -> usize {
    let mut encoded = 0;
    for (n, key) in keys.iter().enumerate() {
        let fingerprint = fingerprint(n);
        let Reservation::Acquired(token) = store.reserve(key, fingerprint, TTL).await.unwrap()
        else {
            panic!("a fresh key is acquired");
        };
        let record = record(n, fingerprint, token);
        encoded += Record::Completed(record.clone()).encode().len();
        store.complete(key, &record, TTL).await.unwrap();
    }
    encoded
}

/// Reads every record back as a replay does; the fastest of `REPLAY_ROUNDS` rounds.
async fn replay_all(store: &MemoryStore, keys: &[ScopedKey]) -> Duration {
    let mut fastest = Duration::MAX;
    for _ in 0..REPLAY_ROUNDS {
        let started = Instant::now();
        for key in keys {
            let (record, _) = store.get(key).await.unwrap().unwrap();
            std::hint::black_box(record);
        }
        fastest = fastest.min(started.elapsed());
    }
    fastest
}

fn row(what: &str, (bytes, allocations): (isize, isize), rss: isize, encoded: f64) {
    let per = |v: isize| v as f64 / RECORDS as f64;
    println!(
        "{what:<22} {:>12.1} {:>12.2} {:>12.1} {:>12.1} {:>8.2}",
        encoded,
        per(allocations),
        per(bytes),
        per(rss),
        per(bytes) / encoded
    );
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // The keys are made before counting starts: the store's caller owns them.
    let keys: Vec<ScopedKey> = (0..RECORDS).map(key).collect();
    let store = MemoryStore::new();
    let (rss, region) = (resident(), Region::new(ALLOCATOR));
    let encoded = runtime.block_on(fill(&store, &keys)) as f64 / RECORDS as f64;
    let (filled, filled_rss) = (held(&region), resident() - rss);
    let replay = runtime.block_on(replay_all(&store, &keys));
    let (replayed, replayed_rss) = (held(&region), resident() - rss);
    println!("{RECORDS} completed records, 5 headers and a 200-byte body each; per record:");
    println!(
        "{:<22} {:>12} {:>12} {:>12} {:>12} {:>8}",
        "", "encoded B", "allocations", "held B", "resident B", "held/enc"
    );
    row("after completing", filled, filled_rss, encoded);
    row("after one replay each", replayed, replayed_rss, encoded);
    println!(
        "one replay's read (store.get, fastest of {REPLAY_ROUNDS} rounds): {:.0} ns",
        replay.as_nanos() as f64 / RECORDS as f64
    );
    drop(store);
}
