//! Whether a relay can do its work, as readiness probes ask: each change is logged once, so an
//! outage makes two lines (paused, resumed), not one per poll.

use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::names::OutboxName;
use crate::OutboxError;

/// A relay's state, as `/readyz` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// It has not reached its database yet.
    Starting,
    /// Its last claim succeeded.
    Ready,
    /// Its database does not answer (why): it is paused, and resumes by itself.
    Unreachable(String),
    /// Its table lacks what the relay needs (the problems): it waits for the table to be fixed.
    TableRefused(String),
    /// It was drained.
    Stopped,
}

impl Health {
    /// Whether the relay is doing its work.
    pub fn is_ready(&self) -> bool {
        *self == Health::Ready
    }
}

/// The state, changed by the relay's tasks.
#[derive(Debug)]
pub(crate) struct HealthState {
    outbox: OutboxName,
    state: Mutex<Health>,
}

impl HealthState {
    pub(crate) fn new(outbox: OutboxName) -> Self {
        Self {
            outbox,
            state: Mutex::new(Health::Starting),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Health> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn get(&self) -> Health {
        self.lock().clone()
    }

    pub(crate) fn ready(&self) {
        let mut state = self.lock();
        if matches!(*state, Health::Unreachable(_) | Health::TableRefused(_)) {
            tracing::info!(outbox = %self.outbox, "outbox: the database answers again; the relay resumes");
        }
        if *state != Health::Stopped {
            *state = Health::Ready;
        }
    }

    pub(crate) fn unreachable(&self, error: &OutboxError) {
        let mut state = self.lock();
        if !matches!(*state, Health::Unreachable(_)) {
            tracing::warn!(outbox = %self.outbox, failure = %error.failure(), sqlstate = error.sqlstate().map(idempotency_postgres::tokio_postgres::error::SqlState::code), error = %error, "outbox: the database does not answer; the relay is paused until it does");
        }
        if *state != Health::Stopped {
            *state = Health::Unreachable(error.to_string());
        }
    }

    pub(crate) fn table_refused(&self, why: &str) {
        let mut state = self.lock();
        if !matches!(*state, Health::TableRefused(_)) {
            tracing::error!(outbox = %self.outbox, error = why, "outbox: the table cannot be used; the relay waits until it is fixed");
        }
        *state = Health::TableRefused(why.to_owned());
    }

    pub(crate) fn stopped(&self) {
        *self.lock() = Health::Stopped;
    }
}
