//! The file store's campaign starts from a store its proxy did not write: segments of records
//! (a long-lived one beside three short-lived ones), the short ones expiring one stretch after
//! another through the campaign. So the proxy retires segment after segment under the faults,
//! writing the long-lived records again at the head of its log before deleting each, and a
//! proxy kill lands in the middle of that now and then. After the campaign every long-lived
//! record must be there byte for byte.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use idempotency_core::backend::{CompletedRecord, Record, ScopedKey};
use idempotency_file_store::FileStoreOptions;
use idempotency_proxy::store::{FileStore, Reservation, Store};
use idempotency_test_support::records;

/// Small segments, so the prefill fills many and each is retired on its own.
const SEGMENT: u64 = 32 << 10;
/// Rounds of one long-lived and three short-lived records.
const ROUNDS: usize = 1200;
/// Past any campaign.
const LONG: Duration = Duration::from_secs(24 * 3600);
/// The first short-lived records expire this long after the prefill; the last, this long
/// before the end of the faults.
const MARGIN: Duration = Duration::from_secs(5);

/// What was written before the proxy started.
pub struct Prefill {
    path: PathBuf,
    long: Vec<(ScopedKey, CompletedRecord)>,
    segments: Vec<u32>,
}

fn key(name: &str) -> ScopedKey {
    records::scoped("prefill", None, name)
}

async fn put(store: &FileStore, name: &str, ttl: Duration) -> Result<CompletedRecord, String> {
    let reserved = store.reserve(&key(name), records::fp(1), LONG).await;
    let Ok(Reservation::Acquired(token)) = reserved else {
        return Err(format!("prefill: {name} was not acquired: {reserved:?}"));
    };
    let record = records::outcome(token, Bytes::from(format!("{{\"prefilled\":\"{name}\"}}")));
    let stored = store.complete(&key(name), &record, ttl).await;
    stored.map_err(|e| format!("prefill: {name}: {e}"))?;
    Ok(record)
}

fn segments(path: &Path) -> Vec<u32> {
    let log = PathBuf::from(format!("{}-log", path.display()));
    let mut numbers: Vec<u32> = std::fs::read_dir(log)
        .into_iter()
        .flatten()
        .filter_map(|entry| {
            entry
                .ok()?
                .file_name()
                .to_str()?
                .strip_suffix(".seg")?
                .parse()
                .ok()
        })
        .collect();
    numbers.sort_unstable();
    numbers
}

/// One round: a long-lived record, and three that live `ttl`.
async fn round(
    store: &FileStore,
    round: usize,
    ttl: Duration,
) -> Result<(ScopedKey, CompletedRecord), String> {
    let name = format!("long-{round}");
    let long = put(store, &name, LONG).await?;
    for short in 0..3 {
        put(store, &format!("short-{round}-{short}"), ttl).await?;
    }
    Ok((key(&name), long))
}

/// Writes the prefill into the store at `path`, for a campaign of `duration`: rounds written
/// `AT_ONCE` at a time (so they share syncs), each round's short-lived records expiring a
/// little later than the round before.
pub async fn write(path: &Path, duration: Duration) -> Result<Prefill, String> {
    const AT_ONCE: usize = 32;
    let options = FileStoreOptions::default().segment_bytes(SEGMENT);
    let store = Arc::new(FileStore::open_with(path, &options).map_err(|e| e.to_string())?);
    let spread = duration.saturating_sub(MARGIN * 2);
    let mut long = Vec::with_capacity(ROUNDS);
    for first in (0..ROUNDS).step_by(AT_ONCE) {
        let tasks: Vec<_> = (first..(first + AT_ONCE).min(ROUNDS))
            .map(|n| {
                let (store, ttl) = (
                    store.clone(),
                    MARGIN + spread.mul_f64(n as f64 / ROUNDS as f64),
                );
                tokio::spawn(async move { round(&store, n, ttl).await })
            })
            .collect();
        for task in tasks {
            long.push(task.await.map_err(|e| e.to_string())??);
        }
    }
    drop(store);
    let segments = segments(path);
    println!(
        "chaos: prefilled the file store with {ROUNDS} long-lived records in {} segments",
        segments.len()
    );
    Ok(Prefill {
        path: path.to_owned(),
        long,
        segments,
    })
}

/// After the campaign: every long-lived record is there as it was written. Says how many of the
/// prefilled segments were retired meanwhile; the error names the records lost.
pub async fn check(prefill: &Prefill) -> Result<String, String> {
    let store = FileStore::open(&prefill.path).map_err(|e| e.to_string())?;
    let mut lost = Vec::new();
    for (key, record) in &prefill.long {
        let found = store.get(key).await.map_err(|e| e.to_string())?;
        if found.map(|(found, _)| found) != Some(Record::Completed(record.clone())) {
            lost.push(key.key().as_str().to_owned());
        }
    }
    let left = segments(&prefill.path);
    let retired = prefill
        .segments
        .iter()
        .filter(|n| !left.contains(n))
        .count();
    let summary = format!(
        "{retired} of {} prefilled segments retired under the faults, {} of {} long-lived records kept",
        prefill.segments.len(),
        prefill.long.len() - lost.len(),
        prefill.long.len()
    );
    match lost.is_empty() {
        true => Ok(summary),
        false => Err(format!("{summary}; LOST: {}", lost.join(", "))),
    }
}
