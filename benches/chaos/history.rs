//! The histories a campaign writes and its checker reads: one JSON object per line, in the run
//! directory. `executions.jsonl` is the upstream's (every operation it ran), `attempts.jsonl`
//! the clients' (every request and what came of it), `faults.jsonl` the nemesis's (every fault,
//! with when it began and ended), and `run.json` the parameters the checker judges against.
//!
//! Times are microseconds since the campaign began, on one monotonic clock shared by the
//! upstream, the clients and the nemesis (they run in one process).

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::Path;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub const EXECUTIONS: &str = "executions.jsonl";
pub const ATTEMPTS: &str = "attempts.jsonl";
pub const FAULTS: &str = "faults.jsonl";
pub const RUN: &str = "run.json";

static START: OnceLock<Instant> = OnceLock::new();

/// Microseconds since the campaign began (the first call starts the clock).
pub fn now() -> u64 {
    START.get_or_init(Instant::now).elapsed().as_micros() as u64
}

/// The first 16 hex digits of a SHA-256: enough to tell bodies apart, short in the history.
pub fn digest(bytes: &[u8]) -> String {
    hex::encode(&Sha256::digest(bytes)[..8])
}

/// One run of an operation by the upstream: it received the whole request and acted on it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Execution {
    pub t: u64,
    /// Unique per run; the upstream puts it in its answer, so every answer names its run.
    pub exec: u64,
    pub key: String,
    pub body: String,
    /// The proxy it came through (each proxy has an upstream port of its own).
    pub via: usize,
    /// `ok`, `slow`, `reset` or `fail500`: what the upstream did after running it.
    pub mode: String,
}

/// One request a client sent, and what came of it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Attempt {
    pub start: u64,
    pub end: u64,
    pub client: usize,
    pub key: String,
    pub body: String,
    /// The operation's own body; `false` for a deliberate reuse of its key with another body.
    pub main: bool,
    pub replica: usize,
    pub status: Option<u16>,
    pub replayed: bool,
    /// Digest of the answer's body.
    pub answer: Option<String>,
    /// The upstream run the answer came from, when the body names one.
    pub exec: Option<u64>,
    /// `timeout`, `connect` or `io` when no answer came.
    pub error: Option<String>,
    /// `run` during the faults, `sweep` in the check after them.
    pub phase: String,
}

impl Attempt {
    /// An answer the proxy keeps as the operation's outcome: anything but "try again".
    pub fn definite(&self) -> bool {
        matches!(self.status, Some(s) if s != 409 && s != 503)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    ProxyKill,
    ProxyPause,
    StoreKill,
    StorePause,
    RelayDelay,
    RelayStall,
    RelayCut,
    UpstreamSlow,
    UpstreamReset,
    Upstream500,
    Upstream503,
}

/// One fault as it happened. `end` is when the target was back to normal (a killed process
/// listening again).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Fault {
    pub kind: FaultKind,
    pub target: String,
    pub start: u64,
    pub end: u64,
    pub detail: String,
}

/// The campaign's parameters, as the checker needs them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunInfo {
    pub seed: u64,
    pub store: String,
    pub replicas: usize,
    pub clients: usize,
    pub duration_secs: u64,
    pub lease_ms: u64,
    pub upstream_timeout_ms: u64,
    /// A digest of the planned fault schedule: equal for equal seeds and settings.
    pub schedule: String,
    pub planned_faults: usize,
}

/// An append-only JSON-lines file, shared by every task that writes to it.
pub struct Journal<T> {
    out: Mutex<BufWriter<File>>,
    _kind: std::marker::PhantomData<fn(&T)>,
}

impl<T: Serialize> Journal<T> {
    pub fn create(path: &Path) -> std::io::Result<Self> {
        Ok(Self {
            out: Mutex::new(BufWriter::new(File::create(path)?)),
            _kind: std::marker::PhantomData,
        })
    }

    pub fn write(&self, entry: &T) {
        let mut line = serde_json::to_vec(entry).expect("history entries serialize");
        line.push(b'\n');
        let mut out = self
            .out
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        out.write_all(&line).expect("the history file is writable");
    }

    pub fn flush(&self) {
        let mut out = self
            .out
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        out.flush().expect("the history file is writable");
    }
}

/// Every entry of a JSON-lines history.
pub fn read<T: DeserializeOwned>(path: &Path) -> Result<Vec<T>, String> {
    let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut entries = Vec::new();
    for (number, line) in BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| format!("{}: {e}", path.display()))?;
        let entry = serde_json::from_str(&line)
            .map_err(|e| format!("{}:{}: {e}", path.display(), number + 1))?;
        entries.push(entry);
    }
    Ok(entries)
}
