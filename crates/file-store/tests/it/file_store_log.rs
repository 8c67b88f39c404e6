//! The file store's log through what a crash of the machine does to it: the log's last segment
//! cut at every offset of its last entries, or with a byte flipped in them, still opens and
//! serves exactly what the whole entries before the damage hold (every completion acknowledged
//! before the cut, nothing from a torn or corrupt entry); and after a crash the store waits out
//! a lease for fresh reservations only when the machine has restarted.
//!
//! During that wait the proxy answers a fresh key `503 store-unavailable` with `Retry-After`,
//! even on a route that fails open.

use crate::crash;

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use bytes::Bytes;
use http::header::RETRY_AFTER;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use idempotency_core::backend::{Record, RouteName, ScopedKey};
use idempotency_core::policy::StoreErrorPolicy;
use idempotency_core::{backend::Reservation, Store, StoreError};
use idempotency_core::{IdempotencyLayer, Policy, ProblemLayer};
use idempotency_file_store::FileStore;
use idempotency_test_support::records::{acquire, fp, key, outcome};
use idempotency_test_support::temp::TempPath;
use tower::{Layer, ServiceExt};

use crash::{
    check_all, logged_entries, now_millis, options, run_child, segments, state_of, touched, Case,
    LoggedEntry, BOOT, LONG,
};

/// The child of the tests below, run in a process of its own.
#[test]
#[ignore = "run by the tests below in a child process"]
fn log_child() {
    crash::child();
}

/// Kills a child that reserves and completes keys from 4 tasks, after 200 completions; the
/// store it leaves is the crash image. Returns its one segment's path, bytes and entries, and
/// the keys it acknowledged, having checked that every completion it was told of is in a whole
/// entry.
fn crash_image(path: &Path) -> (PathBuf, Vec<u8>, Vec<LoggedEntry>, Vec<ScopedKey>) {
    let acks = run_child("file_store_log::log_child", path, "load", None, |acks| {
        acks.iter().filter(|(kind, ..)| kind == "completed").count() == 200
    });
    let segments = segments(path);
    assert_eq!(
        segments.len(),
        1,
        "a fresh store's short run fills one segment"
    );
    let bytes = std::fs::read(&segments[0]).unwrap();
    let entries = logged_entries(&bytes);
    let everything = state_of(&entries);
    for (kind, name, _) in &acks {
        let logged = everything.get(key(name).storage_key());
        if kind == "completed" {
            assert!(
                matches!(logged, Some(Record::Completed(_))),
                "{name}: acknowledged, not in the log"
            );
        }
    }
    let acquired = acks.iter().filter(|(kind, ..)| kind == "acquired");
    let names = acquired.map(|(_, name, _)| key(name)).collect();
    (segments[0].clone(), bytes, entries, names)
}

/// What the store must hold with the segment cut at `cut`: the entries that end by then.
fn state_before(entries: &[LoggedEntry], cut: usize) -> std::collections::HashMap<String, Record> {
    state_of(entries.iter().take_while(|entry| entry.end <= cut))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_cut_anywhere_in_its_last_entries_opens_to_its_whole_entries() {
    let image = TempPath::new("log-cut.redb");
    let (segment, log, entries, names) = crash_image(image.path());
    let first = entries.len() - 2;
    let cases: Vec<Case> = (entries[first].start..=log.len())
        .map(|cut| Case {
            what: format!("cut at {cut} of {}", log.len()),
            segment: segment.clone(),
            bytes: log[..cut].to_vec(),
            expected: state_before(&entries, cut),
        })
        .collect();
    let region = touched(&entries[first..], &names);
    check_all(image.path(), cases, names, region).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flipped_byte_in_the_last_entries_drops_that_entry_and_what_follows() {
    let image = TempPath::new("log-flip.redb");
    let (segment, log, entries, names) = crash_image(image.path());
    let first = entries.len() - 1;
    let cases: Vec<Case> = (entries[first].start..log.len())
        .map(|at| {
            let mut damaged = log.clone();
            damaged[at] ^= 0x5A;
            Case {
                what: format!("byte {at} of {} flipped", log.len()),
                segment: segment.clone(),
                bytes: damaged,
                // The entry holding the flipped byte, and any after it, are not whole.
                expected: state_before(&entries, at),
            }
        })
        .collect();
    let region = touched(&entries[first..], &names);
    check_all(image.path(), cases, names, region).await;
}

/// A child that completed `done`, reserved `held` and was killed; returns the time before its
/// last write (unix ms).
fn killed_holder(path: &Path) -> u64 {
    let acks = run_child("file_store_log::log_child", path, "hold", None, |acks| {
        acks.iter().any(|(kind, ..)| kind == "ready")
    });
    let last_write_after = acks.iter().find(|(kind, ..)| kind == "last-write-after");
    last_write_after.expect("the child wrote").2
}

async fn fresh_reservation(
    store: &FileStore,
    name: &str,
    lease: Duration,
) -> Result<(), StoreError> {
    match store.reserve(&key(name), fp(1), lease).await? {
        Reservation::Acquired(_) => Ok(()),
        other => panic!("{name} is fresh, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_machine_crash_fresh_keys_wait_out_the_lease_and_replays_are_served() {
    let path = TempPath::new("log-new-boot.redb");
    let last_write_after = killed_holder(path.path());
    let lease = Duration::from_secs(2);
    // The wait is a lease from the last write, and each request brings its own: under this
    // one the wait is surely not over when the checks below are made, however slow the machine
    // is to get there; under `lease` it runs out within the test.
    let longer = Duration::from_secs(600);
    let store = FileStore::open_with(path.path(), &options("the-next-boot")).unwrap();
    match fresh_reservation(&store, "fresh", longer).await {
        Err(StoreError::Recovering(wait)) => assert!(wait <= longer, "{wait:?}"),
        other => panic!("a fresh key during the wait: {other:?}"),
    }
    let replay = store.reserve(&key("done"), fp(1), lease).await.unwrap();
    assert!(matches!(replay, Reservation::Completed(_)), "{replay:?}");
    let held = store.reserve(&key("held"), fp(1), lease).await.unwrap();
    assert!(matches!(held, Reservation::InFlight(_)), "{held:?}");

    // A restart within the wait, on the same boot, still waits.
    drop(store);
    let store = FileStore::open_with(path.path(), &options("the-next-boot")).unwrap();
    let refused = fresh_reservation(&store, "fresh", longer).await;
    assert!(
        matches!(refused, Err(StoreError::Recovering(_))),
        "{refused:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match fresh_reservation(&store, "fresh", lease).await {
            Ok(()) => break,
            Err(StoreError::Recovering(_)) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(
        now_millis() >= last_write_after + lease.as_millis() as u64,
        "a fresh key was let in before the lease had passed since the last write"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_on_the_same_boot_waits_for_nothing() {
    let path = TempPath::new("log-same-boot.redb");
    killed_holder(path.path());
    let store = FileStore::open_with(path.path(), &options(BOOT)).unwrap();
    // Under an hour's lease, any wait at all would refuse it.
    fresh_reservation(&store, "fresh", Duration::from_secs(3600))
        .await
        .unwrap();
    let replay = store.reserve(&key("done"), fp(1), LONG).await.unwrap();
    assert!(matches!(replay, Reservation::Completed(_)), "{replay:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_close_waits_for_nothing_on_a_new_boot() {
    let path = TempPath::new("log-clean.redb");
    let store = FileStore::open_with(path.path(), &options(BOOT)).unwrap();
    let token = acquire(&store, &key("done"), LONG).await;
    let done = outcome(token, Bytes::from_static(b"done"));
    store.complete(&key("done"), &done, LONG).await.unwrap();
    drop(store);

    let store = FileStore::open_with(path.path(), &options("the-next-boot")).unwrap();
    fresh_reservation(&store, "fresh", Duration::from_secs(3600))
        .await
        .unwrap();
    let (record, _) = store.get(&key("done")).await.unwrap().unwrap();
    assert_eq!(record, Record::Completed(done));
}

#[test]
fn a_segment_that_is_not_this_stores_stops_the_open_with_its_name() {
    let path = TempPath::new("log-foreign.redb");
    drop(FileStore::open(path.path()).unwrap());
    let foreign = "not a segment of a log\n".repeat(10);
    let segment = segments(path.path()).pop().unwrap();
    std::fs::write(&segment, &foreign).unwrap();
    let message = match FileStore::open(path.path()) {
        // The store's words and the cause behind them, as the proxy prints them.
        Err(e @ StoreError::Open { .. }) => idempotency_core::proxy::ErrorChain(&e).to_string(),
        other => panic!("expected StoreError::Open, got {other:?}"),
    };
    assert!(message.contains(&*segment.to_string_lossy()), "{message}");
    assert!(message.contains("refusing to touch it"), "{message}");
    assert_eq!(std::fs::read_to_string(&segment).unwrap(), foreign);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn during_the_wait_a_fresh_key_is_refused_503_with_retry_after_even_under_fail_open() {
    let path = TempPath::new("log-layer.redb");
    killed_holder(path.path());
    let store = FileStore::open_with(path.path(), &options("the-next-boot")).unwrap();
    let mut policy = Policy::new(RouteName::new("payments").unwrap());
    policy.lease = Duration::from_secs(3600);
    policy.on_store_error = StoreErrorPolicy::FailOpen;
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let upstream = tower::service_fn(move |_: Request<Body>| {
        counted.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, Infallible>(Response::new(Body::empty())) }
    });
    let layer = IdempotencyLayer::new(Arc::new(store), policy);
    let layered = layer.layer(upstream);
    let service = ProblemLayer::default().layer(layered);
    let request = Request::post("/v1/charges")
        .header("idempotency-key", "fresh")
        .body(Body::from("{}"))
        .unwrap();
    let response = service.oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let retry_after: u64 = response.headers()[RETRY_AFTER]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    // The route's own lease, counted from the child's last write moments ago.
    assert!((3000..=3600).contains(&retry_after), "{retry_after}");
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let problem: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert!(
        problem["type"]
            .as_str()
            .unwrap()
            .ends_with(":store-unavailable"),
        "{problem}"
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "nothing reached the upstream"
    );
}
