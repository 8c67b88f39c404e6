//! How long the file store takes to start with a large log, and the memory its index takes: a
//! store of `START_RECORDS` (1,000,000) completed records is written through the store (a
//! reservation and a completion each, from 64 tasks, the load benchmark's 47-byte answer), closed,
//! then opened again, each time in a process of its own, timing the open (the whole log read
//! into memory) with the log in the page cache and, where `python3` can drop the segments'
//! pages, read from the disk. The resident set's growth over the open, per record, is what the
//! index takes in memory.
//!
//! `cargo bench -p idempotency-file-store --bench start` (`START_RECORDS=N` for another count,
//! `START_DIR=path` for where the store goes, the temp directory by default).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use idempotency_core::backend::Record;
use idempotency_core::{backend::Reservation, Store};
use idempotency_file_store::FileStore;
use idempotency_test_support::records::{fp, key, outcome};

const TASKS: usize = 64;
const LONG: Duration = Duration::from_secs(24 * 3600);
/// The load benchmark's upstream answer.
const ANSWER: &[u8] = br#"{"id":"ch_1","object":"charge","status":"ok"}"#;

fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let line = status.lines().find(|line| line.starts_with("VmRSS:"));
    let kib = line.and_then(|line| line.split_whitespace().nth(1)?.parse::<u64>().ok());
    kib.unwrap_or(0) * 1024
}

async fn fill(store: Arc<FileStore>, records: usize) {
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let store = store.clone();
            tokio::spawn(async move {
                for n in (task..records).step_by(TASKS) {
                    let name = format!("start-{n}-8e03978e-40d5-43e8-bc93-6894a57f9324");
                    let Reservation::Acquired(token) =
                        store.reserve(&key(&name), fp(1), LONG).await.unwrap()
                    else {
                        panic!("{name} is fresh");
                    };
                    let done = outcome(token, Bytes::from_static(ANSWER));
                    store.complete(&key(&name), &done, LONG).await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
}

/// In a process of its own: opens the store, checks it holds `records`, and says how long and
/// how much memory it took.
fn open_in_child(path: &Path, records: usize, how: &str) {
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--open",
            &path.display().to_string(),
            &records.to_string(),
            how,
        ])
        .status()
        .unwrap();
    assert!(status.success(), "the open in a child failed");
}

fn open(runtime: &tokio::runtime::Runtime, path: &Path, records: usize, how: &str) {
    let before = resident_bytes();
    let started = Instant::now();
    let store = FileStore::open(path).unwrap();
    let took = started.elapsed();
    let grown = resident_bytes().saturating_sub(before);
    let held = runtime.block_on(store.stored_records()).unwrap();
    assert_eq!(held, records as u64);
    let last = format!("start-{}-8e03978e-40d5-43e8-bc93-6894a57f9324", records - 1);
    let found = runtime.block_on(store.get(&key(&last))).unwrap();
    assert!(matches!(found, Some((Record::Completed(_), _))), "{last}");
    println!(
        "start/{how}: {records} records opened in {:.2} s; resident set grew {:.1} MiB, {:.1} bytes a record",
        took.as_secs_f64(),
        grown as f64 / (1 << 20) as f64,
        grown as f64 / records as f64,
    );
    drop(store);
}

/// Asks the kernel to drop the log's pages from its cache, so the next open reads the disk.
fn drop_cached(log: &Path) -> bool {
    let script = "import os,sys\nfor f in os.listdir(sys.argv[1]):\n    fd=os.open(os.path.join(sys.argv[1],f),os.O_RDONLY); os.fdatasync(fd); os.posix_fadvise(fd,0,0,os.POSIX_FADV_DONTNEED); os.close(fd)";
    let status = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(log)
        .status();
    status.is_ok_and(|status| status.success())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let [_, flag, path, records, how] = &args[..] {
        if flag == "--open" {
            return open(&runtime(), Path::new(path), records.parse().unwrap(), how);
        }
    }
    // `cargo bench` passes `--bench`; nothing else is taken.
    let records: usize = std::env::var("START_RECORDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000_000);
    let dir = std::env::var_os("START_DIR").map_or_else(std::env::temp_dir, PathBuf::from);
    let path = dir.join(format!("idempotency-proxy-start-{}.db", std::process::id()));
    let log = PathBuf::from(format!("{}-log", path.display()));
    let runtime = runtime();
    let store = Arc::new(FileStore::open(&path).unwrap());
    let started = Instant::now();
    runtime.block_on(fill(store.clone(), records));
    let wrote = started.elapsed();
    drop(store);
    let bytes: u64 = std::fs::read_dir(&log)
        .unwrap()
        .map(|entry| entry.unwrap().metadata().unwrap().len())
        .sum();
    println!(
        "start/fill: {records} reserve+complete pairs in {:.1} s ({:.0} pairs/s); log {:.0} MiB, {:.0} bytes a record",
        wrote.as_secs_f64(),
        records as f64 / wrote.as_secs_f64(),
        bytes as f64 / (1 << 20) as f64,
        bytes as f64 / records as f64,
    );
    open_in_child(&path, records, "cached");
    open_in_child(&path, records, "cached");
    if drop_cached(&log) {
        open_in_child(&path, records, "from-disk");
    } else {
        println!("start/from-disk: skipped (python3 could not drop the log's cached pages)");
    }
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_dir_all(&log);
}
