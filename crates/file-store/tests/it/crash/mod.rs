//! What the crash tests of the file store's log share: a child process that writes until it is
//! killed (SIGKILL: no destructor, no clean close), the log it leaves read back by the format
//! alone (not by the store's own reader), and opening damaged copies of it.
//!
//! A crash of the machine is what a killed child's files look like with the log's unsynced end
//! lost, which cutting the log stands for, and with another boot id, which the store takes as an
//! option.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use idempotency_core::backend::{Record, ScopedKey};
use idempotency_core::Store;
use idempotency_file_store::{FileStore, FileStoreOptions};
use idempotency_test_support::records::{acquire, key, outcome};
use idempotency_test_support::temp::TempPath;

/// Longer than any test here runs, so nothing it writes expires while it checks.
pub(crate) const LONG: Duration = Duration::from_secs(3600);
/// Damaged copies opened at once: each open and close waits on a few syncs, which overlap.
const AT_ONCE: usize = 8;
const CHILD_DB: &str = "IDEMPOTENCY_PROXY_LOG_CHILD_DB";
const CHILD_MODE: &str = "IDEMPOTENCY_PROXY_LOG_CHILD_MODE";
const CHILD_SEGMENT: &str = "IDEMPOTENCY_PROXY_LOG_CHILD_SEGMENT";
pub(crate) const BOOT: &str = "boot-of-the-crash";

pub(crate) fn options(boot: &str) -> FileStoreOptions {
    FileStoreOptions::default().boot_id(boot)
}

pub(crate) fn log_dir(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push("-log");
    PathBuf::from(name)
}

/// The log's segment files, oldest first.
pub(crate) fn segments(path: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(log_dir(path))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "seg"))
        .collect();
    files.sort();
    files
}

/// The number of a segment file.
pub(crate) fn segment_number(segment: &Path) -> u32 {
    let stem = segment.file_stem().unwrap().to_string_lossy();
    stem.parse().unwrap()
}

pub(crate) fn now_millis() -> u64 {
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

/// The child: opens the store on the boot `BOOT` (with segments of `CHILD_SEGMENT` bytes when
/// set) and, by its mode, reserves and completes keys from 4 tasks until it is killed (`load`),
/// or does so with three short-lived keys beside each long-lived one (`churn`: the log retires
/// segments all the while), or completes `done`, reserves `held` and waits to be killed
/// (`hold`), printing each write once acknowledged.
pub(crate) fn child() {
    let (Some(path), Ok(mode)) = (std::env::var_os(CHILD_DB), std::env::var(CHILD_MODE)) else {
        return;
    };
    let mut options = options(BOOT);
    if let Some(bytes) = std::env::var(CHILD_SEGMENT)
        .ok()
        .and_then(|b| b.parse().ok())
    {
        options = options.segment_bytes(bytes);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let store = Arc::new(FileStore::open_with(Path::new(&path), &options).unwrap());
        if mode == "hold" {
            return hold(&*store).await;
        }
        let churn = mode == "churn";
        let tasks: Vec<_> = (0..4)
            .map(|task| tokio::spawn(complete_until_killed(store.clone(), task, churn)))
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
    });
}

/// The body a key's outcome carries: its name, so every record differs.
pub(crate) fn body(name: &str) -> Bytes {
    Bytes::from(format!("outcome of {name};").repeat(8))
}

async fn complete_until_killed(store: Arc<FileStore>, task: usize, churn: bool) {
    // Named after the process too: a store may have been written by children before this one.
    let life = std::process::id();
    for i in 0.. {
        let name = format!("log-{life}-{task}-{i}");
        let token = acquire(&*store, &key(&name), LONG).await;
        ack(&format!("acquired {name} {}", token.as_u64()));
        let done = outcome(token, body(&name));
        store.complete(&key(&name), &done, LONG).await.unwrap();
        ack(&format!("completed {name} {}", token.as_u64()));
        for short in (0..3).filter(|_| churn) {
            let name = format!("short-{life}-{task}-{i}-{short}");
            let token = acquire(&*store, &key(&name), LONG).await;
            let done = outcome(token, body(&name));
            let ttl = Duration::from_millis(50);
            store.complete(&key(&name), &done, ttl).await.unwrap();
        }
    }
}

async fn hold(store: &dyn Store) {
    let token = acquire(store, &key("done"), LONG).await;
    let done = outcome(token, Bytes::from_static(b"done"));
    store.complete(&key("done"), &done, LONG).await.unwrap();
    // The reservation below is the last entry: it was written no earlier than this.
    ack(&format!("last-write-after - {}", now_millis()));
    acquire(store, &key("held"), LONG).await;
    ack("ready - 0");
    std::future::pending::<()>().await;
}

/// An acknowledgement the child printed: its kind, the key's name, and a number.
pub(crate) type Ack = (String, String, u64);

/// Runs the child (the test `child_test` of this binary, by its full name `module::function`,
/// alone in a process of its own) in `mode` on a store at `path`, with segments of `segment`
/// bytes if given, and kills it once `enough` says so; returns the acknowledgements it printed.
pub(crate) fn run_child(
    child_test: &str,
    path: &Path,
    mode: &str,
    segment: Option<u64>,
    enough: impl Fn(&[Ack]) -> bool,
) -> Vec<Ack> {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([child_test, "--exact", "--ignored", "--nocapture"])
        .env(CHILD_DB, path)
        .env(CHILD_MODE, mode)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(segment) = segment {
        command.env(CHILD_SEGMENT, segment.to_string());
    }
    let mut child: Child = command.spawn().unwrap();
    let mut acks = Vec::new();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        let Some(ack) = line.split_once("ACK ").map(|(_, ack)| ack.to_owned()) else {
            continue;
        };
        let fields: Vec<&str> = ack.split(' ').collect();
        let number = fields[2].parse().unwrap();
        acks.push((fields[0].to_owned(), fields[1].to_owned(), number));
        if enough(&acks) {
            child.kill().unwrap();
        }
    }
    child.wait().unwrap();
    acks
}

/// One whole entry of a segment as the format defines it: where it starts and ends, and each
/// record it put (decoded) or deleted (`None`), by storage key.
pub(crate) struct LoggedEntry {
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) changes: Vec<(String, Option<Record>)>,
}

/// The entries of a segment's bytes, read independently of the store's own reader.
pub(crate) fn logged_entries(segment: &[u8]) -> Vec<LoggedEntry> {
    assert_eq!(&segment[..8], b"IPXLOG\r\n", "the segment's header");
    let (mut at, mut entries) = (16, Vec::new());
    let u32_at = |at: usize| u32::from_le_bytes(segment[at..at + 4].try_into().unwrap()) as usize;
    while at + 24 <= segment.len() {
        let end = at + 24 + u32_at(at);
        if end > segment.len() {
            break;
        }
        entries.push(LoggedEntry {
            start: at,
            end,
            changes: changes(&segment[at + 24..end]),
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

/// What the store must hold after applying `entries` in order.
pub(crate) fn state_of<'a>(
    entries: impl IntoIterator<Item = &'a LoggedEntry>,
) -> HashMap<String, Record> {
    let mut state = HashMap::new();
    for entry in entries {
        for (key, record) in &entry.changes {
            match record {
                Some(record) => state.insert(key.clone(), record.clone()),
                None => state.remove(key),
            };
        }
    }
    state
}

/// A store's files with one segment's bytes replaced, and the state it must open to.
pub(crate) struct Case {
    pub(crate) what: String,
    pub(crate) segment: PathBuf,
    pub(crate) bytes: Vec<u8>,
    pub(crate) expected: HashMap<String, Record>,
}

/// Opens a copy of the store at `image` with `case`'s segment, and checks that it holds as many
/// records as expected and that each of `names` holds what is expected: the records of whole
/// entries, nothing else, nothing corrupt.
async fn check_opens_to(image: &Path, n: usize, case: &Case, names: &[ScopedKey]) {
    let name = image.file_name().unwrap().to_string_lossy();
    let copy = TempPath::new(&format!("{name}-{n}"));
    std::fs::copy(image, copy.path()).unwrap();
    std::fs::create_dir_all(log_dir(copy.path())).unwrap();
    for segment in segments(image) {
        let into = log_dir(copy.path()).join(segment.file_name().unwrap());
        match segment == case.segment {
            true => std::fs::write(into, &case.bytes).unwrap(),
            false => drop(std::fs::copy(&segment, into).unwrap()),
        }
    }
    let path = copy.path().to_owned();
    let opened = tokio::task::spawn_blocking(move || FileStore::open_with(&path, &options(BOOT)));
    let what = &case.what;
    let store = opened
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{what}: the store did not open: {e}"));
    let stored = store.stored_records().await.unwrap();
    assert_eq!(stored, case.expected.len() as u64, "{what}: records held");
    for name in names {
        let found = store.get(name).await;
        let found = found.unwrap_or_else(|e| panic!("{what}: {}: {e}", name.storage_key()));
        let wanted = case.expected.get(name.storage_key());
        let found = found.map(|(record, _)| record);
        assert_eq!(found.as_ref(), wanted, "{what}: {}", name.storage_key());
    }
}

/// Opens a copy of the store at `image` for each case, `AT_ONCE` at a time. Keys only whole
/// entries away from the damage touch are the same in every case: they are checked one by one
/// in the first and last case, and by the count in the others; the keys the damaged region
/// touches are checked one by one in every case.
pub(crate) async fn check_all(
    image: &Path,
    cases: Vec<Case>,
    all: Vec<ScopedKey>,
    region: Vec<ScopedKey>,
) {
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
                tokio::spawn(async move { check_opens_to(&image, n, &case, &names).await })
            })
            .collect();
        for check in running {
            check.await.unwrap();
        }
    }
}

/// The keys among `names` that `entries` change.
pub(crate) fn touched<'a>(
    entries: impl IntoIterator<Item = &'a LoggedEntry>,
    names: &[ScopedKey],
) -> Vec<ScopedKey> {
    let touched: Vec<&String> = entries
        .into_iter()
        .flat_map(|entry| entry.changes.iter().map(|(key, _)| key))
        .collect();
    let is_touched = |name: &&ScopedKey| touched.contains(&&name.storage_key().to_owned());
    names.iter().filter(is_touched).cloned().collect()
}
