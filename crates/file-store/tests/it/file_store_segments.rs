//! The file store's log across its segments: damage in a segment that was whole on the disk
//! loses only the entries it broke, and retiring segments (their current records written again
//! at the head, then the file deleted) loses nothing, whenever the process is killed, and
//! changes nothing when a deleted segment comes back (its deletion lost with the machine).

use crate::crash;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use idempotency_core::backend::{CompletedRecord, FencingToken, Record};
use idempotency_core::Store;
use idempotency_file_store::FileStore;
use idempotency_test_support::poll;
use idempotency_test_support::records::{acquire, key, outcome};
use idempotency_test_support::temp::TempPath;

use crash::{
    body, check_all, logged_entries, options, run_child, segments, state_of, touched, Ack, Case,
    BOOT, LONG,
};

/// Small segments, so a short run fills many.
const SEGMENT: u64 = 4096;

/// The child of the tests below, run in a process of its own.
#[test]
#[ignore = "run by the tests below in a child process"]
fn segments_child() {
    crash::child();
}

fn completions(acks: &[Ack]) -> usize {
    acks.iter().filter(|(kind, ..)| kind == "completed").count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flipped_byte_in_a_sealed_segment_loses_that_entry_only() {
    let image = TempPath::new("segments-flip.redb");
    let acks = run_child(
        "file_store_segments::segments_child",
        image.path(),
        "load",
        Some(SEGMENT),
        |acks| completions(acks) == 150,
    );
    let files = segments(image.path());
    assert!(files.len() > 4, "{} segments", files.len());
    let logs: Vec<Vec<u8>> = files
        .iter()
        .map(|file| std::fs::read(file).unwrap())
        .collect();
    let entries: Vec<Vec<_>> = logs.iter().map(|log| logged_entries(log)).collect();
    let middle = files.len() / 2;
    let damaged = entries[middle].len() / 2;
    let others = || {
        entries.iter().enumerate().flat_map(move |(n, segment)| {
            let skip = move |(i, _): &(usize, _)| n == middle && *i == damaged;
            segment
                .iter()
                .enumerate()
                .filter(move |e| !skip(e))
                .map(|(_, e)| e)
        })
    };
    let expected = state_of(others());
    let entry = &entries[middle][damaged];
    let cases: Vec<Case> = (entry.start..entry.end)
        .map(|at| {
            let mut bytes = logs[middle].clone();
            bytes[at] ^= 0x5A;
            Case {
                what: format!("byte {at} of {} flipped", files[middle].display()),
                segment: files[middle].clone(),
                bytes,
                expected: expected.clone(),
            }
        })
        .collect();
    let names: Vec<_> = acks.iter().map(|(_, name, _)| key(name)).collect();
    let region = touched([entry], &names);
    assert!(!region.is_empty(), "the damaged entry holds records");
    check_all(image.path(), cases, names, region).await;
}

/// Checks that every completion of `acks` is in the store at `path`, as it was acknowledged.
async fn every_completion_is_there(path: &Path, acks: &[Ack]) {
    let store = FileStore::open_with(path, &options(BOOT)).unwrap();
    for (kind, name, token) in acks.iter().filter(|(kind, ..)| kind == "completed") {
        let found = store
            .get(&key(name))
            .await
            .unwrap()
            .map(|(record, _)| record);
        let wanted = outcome(FencingToken::from_u64(*token), body(name));
        assert_eq!(found, Some(Record::Completed(wanted)), "{kind} {name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kills_while_segments_are_retired_lose_no_acknowledged_completion() {
    let path = TempPath::new("segments-churn.redb");
    let mut acks = Vec::new();
    // Three lives, each killed at another point of its work, once it has retired segments
    // itself (its short-lived records count as current until the second after they expire, so
    // that takes a second or more however fast the machine): each kill comes while segments
    // are retired, and each life starts from what the last left, retirements cut short
    // included.
    for life in [70, 110, 150] {
        let before = oldest_segment(path.path());
        let began = Instant::now();
        let lived = run_child(
            "file_store_segments::segments_child",
            path.path(),
            "churn",
            Some(SEGMENT),
            |acks| {
                let done = completions(acks) >= life
                    && oldest_segment(path.path()) >= before + RETIRED_PER_LIFE;
                done || began.elapsed() > RETIRING
            },
        );
        assert!(completions(&lived) >= life, "the child stopped early");
        let retired = oldest_segment(path.path()) - before;
        assert!(
            retired >= RETIRED_PER_LIFE,
            "life {life}: {retired} segments retired in {RETIRING:?}"
        );
        acks.extend(lived);
        every_completion_is_there(path.path(), &acks).await;
    }
    let first = oldest_segment(path.path());
    assert!(
        first > 10,
        "segments were retired: the oldest left is {first}"
    );
}

/// Segments each life of the churn test retires before it is killed.
const RETIRED_PER_LIFE: u32 = 4;
/// How long a life may write before it has retired them: far longer than it takes on a
/// loaded machine, which is a second or two.
const RETIRING: Duration = Duration::from_secs(120);

/// The number of the oldest segment left, 1 before the store was first opened.
fn oldest_segment(path: &Path) -> u32 {
    if !crash::log_dir(path).is_dir() {
        return 1;
    }
    segments(path)
        .first()
        .map_or(1, |oldest| crash::segment_number(oldest))
}

/// Checks that every one of `records` is in `store` as it was completed.
async fn all_there(store: &FileStore, records: &[(String, CompletedRecord)]) {
    for (name, done) in records {
        let found = store.get(&key(name)).await.unwrap();
        let found = found.map(|(record, _)| record);
        assert_eq!(found, Some(Record::Completed(done.clone())), "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retired_segment_that_comes_back_changes_nothing() {
    let path = TempPath::new("segments-back.redb");
    let store =
        Arc::new(FileStore::open_with(path.path(), &options(BOOT).segment_bytes(SEGMENT)).unwrap());
    let first = segments(path.path())[0].clone();
    let mut kept = None;
    let mut long = Vec::new();
    for n in 0.. {
        let name = format!("long-{n}");
        let token = acquire(&*store, &key(&name), LONG).await;
        let done = outcome(token, body(&name));
        store.complete(&key(&name), &done, LONG).await.unwrap();
        long.push((name, done));
        for short in 0..3 {
            let name = format!("short-{n}-{short}");
            let token = acquire(&*store, &key(&name), LONG).await;
            let done = outcome(token, Bytes::from(name.clone()));
            let ttl = Duration::from_millis(300);
            store.complete(&key(&name), &done, ttl).await.unwrap();
        }
        // The first segment, once sealed, as a machine crash could bring it back: it cannot be
        // retired before its short-lived records have expired.
        if kept.is_none() && segments(path.path()).len() > 1 {
            kept = Some(std::fs::read(&first).unwrap());
        }
        if !first.exists() {
            break;
        }
    }
    drop(store);
    std::fs::write(&first, kept.expect("the first segment was sealed")).unwrap();

    let store = FileStore::open_with(path.path(), &options(BOOT).segment_bytes(SEGMENT)).unwrap();
    all_there(&store, &long).await;
    assert_eq!(store.get(&key("short-0-0")).await.unwrap(), None);
    // It is retired again, its records found where they moved.
    let gone = async || !first.exists();
    poll::until(Duration::from_secs(30), "the segment retired again", gone).await;
    all_there(&store, &long).await;
}
