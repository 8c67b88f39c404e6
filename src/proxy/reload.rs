//! Reloading the config without a restart (docs/reference.md#reload).
//!
//! On SIGHUP or `POST /reload` the config file is read again, merged with the flags and
//! environment the process started with (their values as they were then: a reload is about the
//! file), and checked as `--check` checks it, files named in it included. Then either the next
//! requests are served by a generation built from it, or, for an invalid file or a change to
//! what only a restart can change, nothing changes and the reason is logged as one line.
//! Either way it is counted in `idempotency_config_reloads_total{result}` and kept as the last
//! reload's outcome ([`ReloadState`]).
//!
//! This file decides whether a config may replace the running one, and records how each reload
//! went. The swap itself is `Proxy::reload` in `mod.rs`: it builds the generation
//! (`generation.rs`), hands its app to `LiveApp::replace` (`server/live.rs`), which serves every
//! request that arrives after, and tells the status page.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::SystemTime;

use crate::config::config_digest;
use crate::config::{self, ConfigError, Overrides, Settings};
use crate::operator::telemetry;

/// The running config's digest and how the last reload went, with the reason of a refusal
/// (the status page shows the same digest and whether the last reload applied).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReloadState {
    /// SHA-256 (hex) of the running config as `--check` prints it.
    pub digest: String,
    /// When the last reload was asked for, and whether it was applied or, if not, why (its
    /// `Display` is the one line that was logged). `None` until the first reload.
    pub last: Option<(SystemTime, Result<(), ConfigError>)>,
}

/// Where reloads read the config, what runs now, and how the last reload went.
pub(super) struct Reloads {
    source: Mutex<Overrides>,
    running: Mutex<Settings>,
    state: Mutex<ReloadState>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Each value is replaced whole under its lock, so a poisoned one is still consistent.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Reloads {
    pub(super) fn new(running: &Settings) -> Self {
        // Both series exist from the start, so a dashboard sees zeros rather than gaps.
        for result in ["ok", "error"] {
            metrics::counter!(telemetry::CONFIG_RELOADS_TOTAL, "result" => result).increment(0);
        }
        let state = ReloadState {
            digest: config_digest(running),
            last: None,
        };
        Self {
            source: Mutex::new(Overrides::default()),
            running: Mutex::new(running.clone()),
            state: Mutex::new(state),
        }
    }

    pub(super) fn set_source(&self, overrides: Overrides) {
        *lock(&self.source) = overrides;
    }

    pub(super) fn state(&self) -> ReloadState {
        lock(&self.state).clone()
    }

    /// The settings in force.
    pub(super) fn running(&self) -> Settings {
        lock(&self.running).clone()
    }

    /// Loads the config again and, if it may replace the running one and `servable` accepts
    /// it, calls `apply` with it before it becomes the running one. One reload at a time: a
    /// second waits for the first, so each is checked against what really runs.
    pub(super) fn reload(
        &self,
        servable: impl FnOnce(&Settings) -> Result<(), ConfigError>,
        apply: impl FnOnce(&Settings),
    ) -> Result<String, ConfigError> {
        let mut running = lock(&self.running);
        let source = lock(&self.source).clone();
        let loaded = config::load_for_reload(&source, &running);
        let loaded = loaded.and_then(|settings| servable(&settings).map(|()| settings));
        let outcome = loaded.map(|settings| {
            apply(&settings);
            let digest = config_digest(&settings);
            *running = settings;
            digest
        });
        self.record(&outcome);
        outcome
    }

    fn record(&self, outcome: &Result<String, ConfigError>) {
        let result = if outcome.is_ok() { "ok" } else { "error" };
        metrics::counter!(telemetry::CONFIG_RELOADS_TOTAL, "result" => result).increment(1);
        let mut state = lock(&self.state);
        match outcome {
            Ok(digest) => {
                tracing::info!(digest = %digest, "config reloaded");
                state.digest.clone_from(digest);
                state.last = Some((SystemTime::now(), Ok(())));
            }
            Err(e) => {
                tracing::warn!(reason = %e, "config reload refused; the running config stays");
                state.last = Some((SystemTime::now(), Err(e.clone())));
            }
        }
    }
}
