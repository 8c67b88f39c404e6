//! The file store's write-ahead log through what a crash of the machine does to it: the log cut
//! at every offset of its last entries, or with a byte flipped in them, still opens and serves
//! exactly what the whole entries before the damage hold (every completion acknowledged before
//! the cut, nothing from a torn or corrupt entry); and after a crash the store waits out a lease
//! for fresh reservations only when the machine has restarted.
//!
//! During that wait the proxy answers a fresh key `503 store-unavailable` with `Retry-After`,
//! even on a route that fails open.
//!
//! The crash images come from a child process killed with SIGKILL; a machine crash is what such
//! an image looks like with the log's unsynced tail lost, which cutting the log stands for, and
//! with another boot id, which the store takes as an option.

use std::collections::HashMap;
use std::convert::Infallible;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use bytes::Bytes;
use http::header::RETRY_AFTER;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use idempotency_core::idempotency::policy::StoreErrorPolicy;
use idempotency_core::model::{Record, RouteName, ScopedKey};
use idempotency_core::store::{Reservation, Store, StoreError};
use idempotency_core::{IdempotencyLayer, Policy, ProblemLayer};
use idempotency_file_store::{FileStore, FileStoreOptions};
use idempotency_test_support::records::{acquire, fp, key, outcome};
use idempotency_test_support::temp::TempPath;
use tower::{Layer, ServiceExt};

/// Longer than any test here runs, so nothing it writes expires while it checks.
const LONG: Duration = Duration::from_secs(3600);
/// Damaged copies opened at once: each open and close waits on a few syncs, which overlap.
const AT_ONCE: usize = 8;
const CHILD_DB: &str = "IDEMPOTENCY_PROXY_LOG_CHILD_DB";
const CHILD_MODE: &str = "IDEMPOTENCY_PROXY_LOG_CHILD_MODE";
const BOOT: &str = "boot-of-the-crash";

fn options(boot: &str) -> FileStoreOptions {
    FileStoreOptions::default().boot_id(boot)
}

fn log_of(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push("-wal");
    PathBuf::from(name)
}

fn now_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn ack(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "ACK {line}").unwrap();
    out.flush().unwrap();
}

/// The child: opens the store on the boot `BOOT` and, by its mode, either reserves and
/// completes keys from 4 tasks until it is killed (`load`), or completes `done`, reserves
/// `held` and waits to be killed (`hold`), printing each write once acknowledged.
#[test]
#[ignore = "run by the tests below in a child process"]
fn log_child() {
    let (Some(path), Ok(mode)) = (std::env::var_os(CHILD_DB), std::env::var(CHILD_MODE)) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let store = Arc::new(FileStore::open_with(Path::new(&path), &options(BOOT)).unwrap());
        if mode == "hold" {
            return hold(&*store).await;
        }
        let tasks: Vec<_> = (0..4)
            .map(|task| tokio::spawn(complete_until_killed(store.clone(), task)))
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
    });
}

async fn complete_until_killed(store: Arc<FileStore>, task: usize) {
    for i in 0.. {
        let name = format!("log-{task}-{i}");
        let token = acquire(&*store, &key(&name), LONG).await;
        ack(&format!("acquired {name}"));
        let done = outcome(token, Bytes::from(name.clone()));
        store.complete(&key(&name), &done, LONG).await.unwrap();
        ack(&format!("completed {name}"));
    }
}

async fn hold(store: &dyn Store) {
    let token = acquire(store, &key("done"), LONG).await;
    let done = outcome(token, Bytes::from_static(b"done"));
    store.complete(&key("done"), &done, LONG).await.unwrap();
    // The reservation below is the last entry: it was written no earlier than this.
    ack(&format!("last-write-after {}", now_millis()));
    acquire(store, &key("held"), LONG).await;
    ack("ready -");
    std::future::pending::<()>().await;
}

/// Runs the child in `mode` on a store at `path`, and kills it (SIGKILL: no destructor, no
/// clean close) once `enough` says so; returns the acknowledgements it printed.
fn run_child(
    path: &Path,
    mode: &str,
    enough: impl Fn(&[(String, String)]) -> bool,
) -> Vec<(String, String)> {
    let mut child: Child = Command::new(std::env::current_exe().unwrap())
        .args(["log_child", "--exact", "--ignored", "--nocapture"])
        .env(CHILD_DB, path)
        .env(CHILD_MODE, mode)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut acks = Vec::new();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        let Some((kind, name)) = line.split_once("ACK ").and_then(|(_, a)| a.split_once(' '))
        else {
            continue;
        };
        acks.push((kind.to_owned(), name.to_owned()));
        if enough(&acks) {
            child.kill().unwrap();
        }
    }
    child.wait().unwrap();
    acks
}

/// One whole entry of the log as the format defines it: where it ends, and each record it put
/// (decoded) or deleted (`None`), by storage key.
struct LoggedEntry {
    end: usize,
    changes: Vec<(String, Option<Record>)>,
}

/// The entries of a log, read independently of the store's own reader.
fn logged_entries(log: &[u8]) -> Vec<LoggedEntry> {
    assert_eq!(&log[..8], b"IPXWAL\r\n", "the log's header");
    let (mut at, mut entries) = (16, Vec::new());
    let u32_at = |at: usize| u32::from_le_bytes(log[at..at + 4].try_into().unwrap()) as usize;
    while at + 24 <= log.len() {
        let end = at + 24 + u32_at(at);
        if end > log.len() {
            break;
        }
        let seq = u64::from_le_bytes(log[at + 8..at + 16].try_into().unwrap());
        assert_eq!(
            seq,
            entries.len() as u64 + 1,
            "no checkpoint in the child's short run"
        );
        entries.push(LoggedEntry {
            end,
            changes: changes(&log[at + 24..end]),
        });
        at = end;
    }
    entries
}

fn changes(mut payload: &[u8]) -> Vec<(String, Option<Record>)> {
    let field = |payload: &mut &[u8]| {
        let len = u32::from_le_bytes(payload[..4].try_into().unwrap()) as usize;
        let (value, rest) = payload[4..].split_at(len);
        *payload = rest;
        value.to_vec()
    };
    let mut changes = Vec::new();
    while let Some((&tag, rest)) = payload.split_first() {
        payload = rest;
        let key = String::from_utf8(field(&mut payload)).unwrap();
        let record = match tag {
            // A put: the value is the expiry (8 bytes) and the encoded record.
            1 => Some(Record::decode(Bytes::from(field(&mut payload)[8..].to_vec())).unwrap()),
            2 => None,
            other => panic!("a change of kind {other} in a log of records only"),
        };
        changes.push((key, record));
    }
    changes
}

/// What the store must hold after the entries that end at or before `cut`.
fn state_before(entries: &[LoggedEntry], cut: usize) -> HashMap<String, Record> {
    let mut state = HashMap::new();
    for entry in entries.iter().take_while(|entry| entry.end <= cut) {
        for (key, record) in &entry.changes {
            match record {
                Some(record) => state.insert(key.clone(), record.clone()),
                None => state.remove(key),
            };
        }
    }
    state
}

/// Opens a copy of the crash image with `log` as its log, and checks that it holds as many
/// records as `expected` and that each of `names` holds what `expected` says: the records of
/// whole entries, nothing else, nothing corrupt.
async fn check_opens_to(
    image: &Path,
    n: usize,
    log: &[u8],
    names: &[ScopedKey],
    expected: &HashMap<String, Record>,
    case: &str,
) {
    let name = image.file_name().unwrap().to_string_lossy();
    let copy = TempPath::new(&format!("{name}-{n}"));
    std::fs::copy(image, copy.path()).unwrap();
    std::fs::write(log_of(copy.path()), log).unwrap();
    let path = copy.path().to_owned();
    let opened = tokio::task::spawn_blocking(move || FileStore::open_with(&path, &options(BOOT)));
    let store = opened
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{case}: the store did not open: {e}"));
    let stored = store.stored_records().await.unwrap();
    assert_eq!(stored, expected.len() as u64, "{case}: records held");
    for name in names {
        let found = store.get(name).await;
        let found = found.unwrap_or_else(|e| panic!("{case}: {}: {e}", name.storage_key()));
        let wanted = expected.get(name.storage_key());
        assert_eq!(
            found.map(|(r, _)| r).as_ref(),
            wanted,
            "{case}: {}",
            name.storage_key()
        );
    }
}

/// Kills a child that reserves and completes keys from 4 tasks, after 200 completions; the
/// store file it leaves is the crash image. Returns its log, its entries, and the keys it
/// acknowledged, having checked that every completion it was told of is in a whole entry.
fn crash_image(path: &Path) -> (Vec<u8>, Vec<LoggedEntry>, Vec<ScopedKey>) {
    let acks = run_child(path, "load", |acks| {
        acks.iter().filter(|(kind, _)| kind == "completed").count() == 200
    });
    let log = std::fs::read(log_of(path)).unwrap();
    // Opened once without its log, the image is its last durable state (what a machine crash
    // leaves of the store file), closed: each damaged copy then opens without redb's repair
    // walk, which in a test build costs most of an open.
    std::fs::remove_file(log_of(path)).unwrap();
    drop(FileStore::open_with(path, &options(BOOT)).unwrap());
    let entries = logged_entries(&log);
    let everything = state_before(&entries, log.len());
    for (kind, name) in &acks {
        let logged = everything.get(key(name).storage_key());
        if kind == "completed" {
            assert!(
                matches!(logged, Some(Record::Completed(_))),
                "{name}: acknowledged, not in the log"
            );
        }
    }
    let acquired = acks.iter().filter(|(kind, _)| kind == "acquired");
    let names = acquired.map(|(_, name)| key(name)).collect();
    (log, entries, names)
}

/// Where entry `n` (from 0) starts.
fn start_of(entries: &[LoggedEntry], n: usize) -> usize {
    n.checked_sub(1).map_or(16, |before| entries[before].end)
}

/// A damaged log, and the state the store must open to with it.
struct Case {
    what: String,
    log: Vec<u8>,
    expected: HashMap<String, Record>,
}

/// Opens a copy of the crash image at `image` with each case's log, `AT_ONCE` at a time. Keys
/// that only whole entries before the damaged region touch are the same in every case: they
/// are checked one by one in the first and last case, and by the count in the others; the keys
/// the region touches are checked one by one in every case.
async fn check_all(image: &Path, cases: Vec<Case>, all: Vec<ScopedKey>, region: Vec<ScopedKey>) {
    let (all, region) = (Arc::new(all), Arc::new(region));
    let last = cases.len() - 1;
    let mut cases = cases.into_iter().enumerate().peekable();
    while cases.peek().is_some() {
        let running: Vec<_> = cases
            .by_ref()
            .take(AT_ONCE)
            .map(|(n, case)| {
                let image = image.to_owned();
                let names = if n == 0 || n == last { &all } else { &region }.clone();
                tokio::spawn(async move {
                    check_opens_to(&image, n, &case.log, &names, &case.expected, &case.what).await;
                })
            })
            .collect();
        for check in running {
            check.await.unwrap();
        }
    }
}

/// The keys among `names` that the entries from `first` on change.
fn touched(entries: &[LoggedEntry], first: usize, names: &[ScopedKey]) -> Vec<ScopedKey> {
    let touched: Vec<&String> = entries[first..]
        .iter()
        .flat_map(|entry| entry.changes.iter().map(|(key, _)| key))
        .collect();
    let is_touched = |name: &&ScopedKey| touched.contains(&&name.storage_key().to_owned());
    names.iter().filter(is_touched).cloned().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_cut_anywhere_in_its_last_entries_opens_to_its_whole_entries() {
    let image = TempPath::new("log-cut.redb");
    let (log, entries, names) = crash_image(image.path());
    let first = entries.len() - 2;
    let cases: Vec<Case> = (start_of(&entries, first)..=log.len())
        .map(|cut| Case {
            what: format!("cut at {cut} of {}", log.len()),
            log: log[..cut].to_vec(),
            expected: state_before(&entries, cut),
        })
        .collect();
    let region = touched(&entries, first, &names);
    check_all(image.path(), cases, names, region).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flipped_byte_in_the_last_entries_drops_that_entry_and_what_follows() {
    let image = TempPath::new("log-flip.redb");
    let (log, entries, names) = crash_image(image.path());
    let first = entries.len() - 1;
    let cases: Vec<Case> = (start_of(&entries, first)..log.len())
        .map(|at| {
            let mut damaged = log.clone();
            damaged[at] ^= 0x5A;
            Case {
                what: format!("byte {at} of {} flipped", log.len()),
                log: damaged,
                // The entry holding the flipped byte, and any after it, are not whole.
                expected: state_before(&entries, at),
            }
        })
        .collect();
    let region = touched(&entries, first, &names);
    check_all(image.path(), cases, names, region).await;
}

/// A child that completed `done`, reserved `held` and was killed; returns the time before its
/// last write (unix ms).
fn killed_holder(path: &Path) -> u64 {
    let acks = run_child(path, "hold", |acks| {
        acks.iter().any(|(kind, _)| kind == "ready")
    });
    let last_write_after = acks.iter().find(|(kind, _)| kind == "last-write-after");
    last_write_after
        .expect("the child wrote")
        .1
        .parse()
        .unwrap()
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
    let store = FileStore::open_with(path.path(), &options("the-next-boot")).unwrap();
    match fresh_reservation(&store, "fresh", lease).await {
        Err(StoreError::Recovering(wait)) => assert!(wait <= lease, "{wait:?}"),
        other => panic!("a fresh key during the wait: {other:?}"),
    }
    let replay = store.reserve(&key("done"), fp(1), lease).await.unwrap();
    assert!(matches!(replay, Reservation::Completed(_)), "{replay:?}");
    let held = store.reserve(&key("held"), fp(1), lease).await.unwrap();
    assert!(matches!(held, Reservation::InFlight(_)), "{held:?}");

    // A restart within the wait, on the same boot, still waits.
    drop(store);
    let store = FileStore::open_with(path.path(), &options("the-next-boot")).unwrap();
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
async fn a_clean_close_waits_for_nothing_on_a_new_boot_and_leaves_no_log() {
    let path = TempPath::new("log-clean.redb");
    let store = FileStore::open_with(path.path(), &options(BOOT)).unwrap();
    let token = acquire(&store, &key("done"), LONG).await;
    let done = outcome(token, Bytes::from_static(b"done"));
    store.complete(&key("done"), &done, LONG).await.unwrap();
    assert!(log_of(path.path()).exists());
    drop(store);
    assert!(!log_of(path.path()).exists(), "a clean close leaves no log");

    let store = FileStore::open_with(path.path(), &options("the-next-boot")).unwrap();
    fresh_reservation(&store, "fresh", Duration::from_secs(3600))
        .await
        .unwrap();
    let (record, _) = store.get(&key("done")).await.unwrap().unwrap();
    assert_eq!(record, Record::Completed(done));
}

#[test]
fn a_log_that_is_not_this_stores_stops_the_open_with_its_name() {
    let path = TempPath::new("log-foreign.redb");
    drop(FileStore::open(path.path()).unwrap());
    let foreign = "not a write-ahead log\n".repeat(10);
    std::fs::write(log_of(path.path()), &foreign).unwrap();
    let message = match FileStore::open(path.path()) {
        Err(StoreError::Open(message)) => message,
        other => panic!("expected StoreError::Open, got {other:?}"),
    };
    assert!(
        message.contains(&*log_of(path.path()).to_string_lossy()),
        "{message}"
    );
    assert!(message.contains("refusing to touch it"), "{message}");
    assert_eq!(
        std::fs::read_to_string(log_of(path.path())).unwrap(),
        foreign
    );
    std::fs::remove_file(log_of(path.path())).unwrap();
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
    let layer = IdempotencyLayer::new(Arc::new(store), policy).expect("a valid policy");
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
