//! Store files of the previous releases open as they are, converted at the first start: the
//! release that kept records in redb tables behind a write-ahead log (`PATH-wal`), and the one
//! before it that synced every write and kept no log. Built here byte for byte as those
//! releases wrote them, from their documented layouts.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use idempotency_core::backend::{FencingToken, Record};
use idempotency_core::{backend::Reservation, Store, StoreError};
use idempotency_file_store::{FileStore, FileStoreOptions};
use idempotency_test_support::records::{acquire, big_body, fp, key, outcome};
use idempotency_test_support::temp::TempPath;
use redb::{Database, TableDefinition};

const RECORDS: TableDefinition<&str, &[u8]> = TableDefinition::new("records");
const EXPIRIES: TableDefinition<(u64, &str), ()> = TableDefinition::new("expiries");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
const LONG: Duration = Duration::from_secs(3600);
const BOOT: &str = "the-previous-boot";

fn now_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// A stored value: the expiry (unix ms, big endian), then the record's encoding.
fn value(record: &Record, expiry: u64) -> Vec<u8> {
    let mut value = expiry.to_be_bytes().to_vec();
    value.extend_from_slice(&record.encode());
    value
}

fn completed(body: &str) -> Record {
    Record::Completed(outcome(
        FencingToken::generate(),
        Bytes::from(body.to_owned()),
    ))
}

/// The record tables, with each `(name, record, expiry)`, and `meta` when given.
fn tables_file(path: &Path, records: &[(&str, Record, u64)], meta: &[(&str, Vec<u8>)]) {
    let db = Database::create(path).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut table = txn.open_table(RECORDS).unwrap();
        let mut index = txn.open_table(EXPIRIES).unwrap();
        for (name, record, expiry) in records {
            let storage_key = key(name).storage_key().to_owned();
            table
                .insert(storage_key.as_str(), value(record, *expiry).as_slice())
                .unwrap();
            index.insert((*expiry, storage_key.as_str()), ()).unwrap();
        }
        if !meta.is_empty() {
            let mut table = txn.open_table(META).unwrap();
            for (name, value) in meta {
                table.insert(*name, value.as_slice()).unwrap();
            }
        }
    }
    txn.commit().unwrap();
}

/// A change of the write-ahead log: a put of a record, or a delete.
fn change(name: &str, put: Option<&[u8]>) -> Vec<u8> {
    let storage_key = key(name).storage_key().to_owned();
    let mut bytes = vec![if put.is_some() { 1 } else { 2 }];
    bytes.extend_from_slice(&(storage_key.len() as u32).to_le_bytes());
    bytes.extend_from_slice(storage_key.as_bytes());
    if let Some(value) = put {
        bytes.extend_from_slice(&(value.len() as u32).to_le_bytes());
        bytes.extend_from_slice(value);
    }
    bytes
}

/// The write-ahead log: its header, then each `(sequence, payload)` as an entry.
fn wal(path: &Path, entries: &[(u64, Vec<u8>)]) {
    let mut bytes = b"IPXWAL\r\n".to_vec();
    bytes.extend_from_slice(&1u32.to_le_bytes());
    bytes.extend_from_slice(&[0; 4]);
    for (seq, payload) in entries {
        let mut entry = (payload.len() as u32).to_le_bytes().to_vec();
        entry.extend_from_slice(&[0; 4]);
        entry.extend_from_slice(&seq.to_le_bytes());
        entry.extend_from_slice(&now_millis().to_le_bytes());
        entry.extend_from_slice(payload);
        let crc = crc32c::crc32c_append(crc32c::crc32c(&entry[..4]), &entry[8..]);
        entry[4..8].copy_from_slice(&crc.to_le_bytes());
        bytes.extend_from_slice(&entry);
    }
    std::fs::write(beside(path, "-wal"), bytes).unwrap();
}

/// The `meta` of the release with the write-ahead log: not closed, on `boot`, with entries up
/// to `applied` in its tables.
fn unclean_meta(boot: &str, applied: u64) -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("layout", 1u64.to_le_bytes().to_vec()),
        ("applied", applied.to_le_bytes().to_vec()),
        ("last_entry_at", now_millis().to_le_bytes().to_vec()),
        ("boot", boot.as_bytes().to_vec()),
        ("clean", vec![0]),
        ("guard_from", 0u64.to_le_bytes().to_vec()),
    ]
}

async fn record_of(store: &FileStore, name: &str) -> Option<Record> {
    store
        .get(&key(name))
        .await
        .unwrap()
        .map(|(record, _)| record)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_with_a_write_ahead_log_converts_with_the_entries_past_its_checkpoint() {
    let path = TempPath::new("previous-wal.redb");
    let (done, deleted, stale, from_log) = (
        completed("done"),
        completed("deleted"),
        completed("stale"),
        completed("from the log"),
    );
    let expiry = now_millis() + LONG.as_millis() as u64;
    let records = [
        ("done", done.clone(), expiry),
        ("deleted", deleted, expiry),
        ("expired", completed("expired"), now_millis() - 1000),
    ];
    tables_file(path.path(), &records, &unclean_meta(BOOT, 3));
    wal(
        path.path(),
        &[
            // Already in the tables at the last checkpoint: passed over.
            (3, change("stale", Some(&value(&stale, expiry)))),
            (4, change("deleted", None)),
            (5, change("from-log", Some(&value(&from_log, expiry)))),
        ],
    );
    // Killed on this same boot: nothing was lost, nothing waits.
    let options = FileStoreOptions::default().boot_id(BOOT);
    let store = FileStore::open_with(path.path(), &options).unwrap();
    assert_eq!(record_of(&store, "done").await, Some(done.clone()));
    assert_eq!(record_of(&store, "from-log").await, Some(from_log.clone()));
    for gone in ["deleted", "stale", "expired"] {
        assert_eq!(record_of(&store, gone).await, None, "{gone}");
    }
    acquire(&store, &key("fresh"), LONG).await;
    assert_eq!(store.stored_records().await.unwrap(), 3);
    assert!(!beside(path.path(), "-wal").exists(), "the old log is gone");
    assert!(store.log_dir().is_dir());
    drop(store);

    // Written from then on in this release's layout, and read back by it.
    let store = FileStore::open_with(path.path(), &options).unwrap();
    assert_eq!(record_of(&store, "done").await, Some(done));
    assert_eq!(record_of(&store, "from-log").await, Some(from_log));
    assert!(matches!(
        store.reserve(&key("fresh"), fp(1), LONG).await.unwrap(),
        Reservation::InFlight(_)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_left_by_a_machine_crash_of_the_previous_release_still_waits_out_a_lease() {
    let path = TempPath::new("previous-crash.redb");
    let expiry = now_millis() + LONG.as_millis() as u64;
    tables_file(
        path.path(),
        &[("done", completed("done"), expiry)],
        &unclean_meta(BOOT, 0),
    );
    let options = FileStoreOptions::default().boot_id("the-boot-after");
    let store = FileStore::open_with(path.path(), &options).unwrap();
    match store.reserve(&key("fresh"), fp(1), LONG).await {
        Err(StoreError::Recovering(wait)) => assert!(wait <= LONG, "{wait:?}"),
        other => panic!("a fresh key during the wait: {other:?}"),
    }
    let replay = store.reserve(&key("done"), fp(1), LONG).await.unwrap();
    assert!(matches!(replay, Reservation::Completed(_)), "{replay:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_of_the_release_before_opens_as_it_is() {
    let path = TempPath::new("previous-no-log.redb");
    let done = Record::Completed(outcome(FencingToken::generate(), big_body()));
    let expiry = now_millis() + LONG.as_millis() as u64;
    tables_file(path.path(), &[("done", done.clone(), expiry)], &[]);
    // On another boot than any: that release synced every write, so it lost nothing and
    // nothing waits.
    let options = FileStoreOptions::default().boot_id("a-boot-it-never-saw");
    let store = FileStore::open_with(path.path(), &options).unwrap();
    assert_eq!(record_of(&store, "done").await, Some(done));
    acquire(&store, &key("fresh"), LONG).await;
    drop(store);
    let store = FileStore::open(path.path()).unwrap();
    assert!(record_of(&store, "fresh").await.is_some());
    assert_eq!(store.stored_records().await.unwrap(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversion_cut_short_by_a_crash_is_done_again_from_the_start() {
    let path = TempPath::new("previous-cut.redb");
    let done = completed("done");
    let expiry = now_millis() + LONG.as_millis() as u64;
    tables_file(
        path.path(),
        &[("done", done.clone(), expiry)],
        &unclean_meta(BOOT, 0),
    );
    // What a crash in the middle of a conversion leaves: the old file as it was, and a log
    // folder with a segment half written.
    let log = beside(path.path(), "-log");
    std::fs::create_dir_all(&log).unwrap();
    std::fs::write(
        log.join("0000000001.seg"),
        b"IPXLOG\r\n\x02\0\0\0\0\0\0\0half an en",
    )
    .unwrap();
    let options = FileStoreOptions::default().boot_id(BOOT);
    let store = FileStore::open_with(path.path(), &options).unwrap();
    assert_eq!(record_of(&store, "done").await, Some(done));
    assert_eq!(store.stored_records().await.unwrap(), 1);
}
