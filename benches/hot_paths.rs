//! The per-request work of the idempotency layer that does not touch the network: key
//! parsing, fingerprinting (bodies read as bytes and as JSON), encoding and decoding records,
//! canonicalizing JSON bodies for `fingerprint_body = "json"`, and recording each finished
//! request (metrics, log line, status page).
//!
//! `cargo bench --bench hot_paths`

use std::time::SystemTime;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use idempotency_core::observe::Outcome;
use idempotency_core::policy::{jcs, JsonPointer};
use idempotency_core::proxy::RouteMetrics;
use idempotency_core::{
    backend::{
        CompletedRecord, FencingToken, Fingerprint, IdempotencyKey, Record, RouteName, StoredBody,
    },
    policy::FingerprintBody,
};
use idempotency_proxy::{install_metrics_recorder, RouteActivity, RouteTelemetry};
use sha2::{Digest, Sha256};

fn key_parsing(c: &mut Criterion) {
    let mut group = c.benchmark_group("key");
    group.bench_function("bare_uuid", |b| {
        b.iter(|| {
            IdempotencyKey::from_header_value(std::hint::black_box(
                b"8e03978e-40d5-43e8-bc93-6894a57f9324",
            ))
        });
    });
    group.bench_function("sf_string_uuid", |b| {
        b.iter(|| {
            IdempotencyKey::from_header_value(std::hint::black_box(
                b"\"8e03978e-40d5-43e8-bc93-6894a57f9324\"",
            ))
        });
    });
    group.finish();
}

/// The fingerprint of a keyed request, its body read as bytes and as JSON (with a member to
/// ignore), beside the single digest records stored before part digests carry, which is what
/// every request paid before.
fn fingerprint(c: &mut Criterion) {
    let mut group = c.benchmark_group("fingerprint");
    let uri: Uri = "/v1/charges?expand=customer".parse().unwrap();
    let mut headers = HeaderMap::new();
    headers.insert("x-tenant", HeaderValue::from_static("acme"));
    let names = [HeaderName::from_static("x-tenant")];
    let ignore = vec![JsonPointer::parse("/metadata/request_time").unwrap()];
    let forms = [
        ("bytes", FingerprintBody::Bytes),
        ("json", FingerprintBody::Json { ignore }),
    ];
    for size in [256usize, 16 * 1024] {
        let body = json_body(size);
        group.throughput(Throughput::Bytes(size as u64));
        for (name, form) in &forms {
            group.bench_with_input(BenchmarkId::new(*name, size), &body, |b, body| {
                b.iter(|| Fingerprint::compute(&Method::POST, &uri, &headers, &names, body, form));
            });
        }
        group.bench_with_input(BenchmarkId::new("unsplit", size), &body, |b, body| {
            b.iter(|| Fingerprint::compute_unsplit(&Method::POST, &uri, &headers, &names, body));
        });
    }
    group.finish();
}

fn completed(body_len: usize) -> Record {
    let mut headers = HeaderMap::new();
    headers.insert("content-type", HeaderValue::from_static("application/json"));
    headers.insert("x-request-id", HeaderValue::from_static("req_8e03978e40d5"));
    Record::Completed(CompletedRecord {
        fingerprint: Fingerprint::from_bytes([7; 32]),
        token: FencingToken::generate(),
        created_at: SystemTime::now(),
        status: StatusCode::CREATED,
        headers,
        body: StoredBody::Kept(Bytes::from(vec![b'x'; body_len])),
    })
}

fn records(c: &mut Criterion) {
    let mut group = c.benchmark_group("record");
    for size in [256usize, 16 * 1024] {
        let record = completed(size);
        let encoded = record.encode();
        group.throughput(Throughput::Bytes(encoded.len() as u64));
        group.bench_with_input(BenchmarkId::new("encode", size), &record, |b, r| {
            b.iter(|| r.encode());
        });
        group.bench_with_input(BenchmarkId::new("decode", size), &encoded, |b, e| {
            b.iter(|| Record::decode(e.clone()));
        });
    }
    group.finish();
}

/// A payment-like JSON body of exactly `size` bytes, its members out of canonical order and
/// spaced as a client might send them: order lines fill it, a note pads it to the byte.
fn json_body(size: usize) -> Vec<u8> {
    let head = r#"{"metadata": {"request_time": "2024-05-01T12:00:00.123Z", "order_id": "1042"}, "amount": 1999, "currency": "eur", "items": ["#;
    let mut body = String::from(head);
    let tail_len = r#"], "note": ""}"#.len();
    for i in 0.. {
        let separator = if i == 0 { "" } else { ", " };
        let item = format!(
            r#"{separator}{{"sku": "sku_{i:04}", "quantity": {}, "unit_price": {}.5, "name": "Item {i}"}}"#,
            i % 3 + 1,
            i * 7 % 100
        );
        if body.len() + item.len() + tail_len > size {
            break;
        }
        body.push_str(&item);
    }
    let padding = size - body.len() - tail_len;
    body.push_str(&format!(r#"], "note": "{}"}}"#, "n".repeat(padding)));
    assert_eq!(body.len(), size);
    body.into_bytes()
}

/// What `fingerprint_body = "json"` adds to a request: canonicalizing the body, with and without
/// a pointer to ignore, beside the SHA-256 of the same bytes that every fingerprint pays.
fn json_canonicalization(c: &mut Criterion) {
    let mut group = c.benchmark_group("jcs");
    let ignore = [JsonPointer::parse("/metadata/request_time").unwrap()];
    for size in [256usize, 16 * 1024] {
        let body = json_body(size);
        assert!(jcs::canonicalize(&body, &ignore).is_some());
        group.throughput(Throughput::Bytes(size as u64));
        group.bench_with_input(BenchmarkId::new("canonicalize", size), &body, |b, body| {
            b.iter(|| jcs::canonicalize(body, &[]));
        });
        group.bench_with_input(
            BenchmarkId::new("canonicalize_ignoring", size),
            &body,
            |b, body| b.iter(|| jcs::canonicalize(body, &ignore)),
        );
        group.bench_with_input(BenchmarkId::new("sha256", size), &body, |b, body| {
            b.iter(|| Sha256::digest(body));
        });
    }
    group.finish();
}

/// What every finished request costs to record: the status page's share alone (counts, the
/// per-second ring, the last decisions), then the whole hook with the Prometheus recorder
/// installed, and the status page's share with two threads recording one route at once.
fn recording(c: &mut Criterion) {
    install_metrics_recorder();
    let mut group = c.benchmark_group("finished");
    let route = RouteName::new("bench-payments").unwrap();
    let activity = RouteActivity::of(&route);
    // The wall clock read that recording makes, for scale.
    group.bench_function("wall_clock", |b| b.iter(std::time::SystemTime::now));
    group.bench_function("status_page", |b| {
        b.iter(|| {
            activity.request_finished(Outcome::Replayed, 201, None, Some("0a1b2c3d4e5f"));
        });
    });
    let metrics = RouteMetrics::new(&route, RouteTelemetry::new(&route));
    let response = http::Response::builder()
        .status(StatusCode::CREATED)
        .body(axum::body::Body::empty())
        .unwrap();
    group.bench_function("request_finished", |b| {
        b.iter(|| {
            metrics.request_finished(
                Outcome::Replayed,
                &response,
                Some("0a1b2c3d4e5f"),
                std::time::Duration::from_micros(250),
            );
        });
    });
    group.bench_function("status_page_two_threads", |b| {
        b.iter_custom(|iterations| {
            let started = std::time::Instant::now();
            std::thread::scope(|threads| {
                for _ in 0..2 {
                    threads.spawn(|| {
                        for _ in 0..iterations {
                            activity.request_finished(
                                Outcome::Forwarded,
                                201,
                                None,
                                Some("0a1b2c3d4e5f"),
                            );
                        }
                    });
                }
            });
            // Each thread made `iterations` recordings side by side: the time one took while
            // the other thread was recording into the same route.
            started.elapsed()
        });
    });
    group.finish();
}

criterion_group!(
    benches,
    key_parsing,
    fingerprint,
    records,
    json_canonicalization,
    recording
);
criterion_main!(benches);
