//! A consumer's counts (`GET /consumers/{name}`), its dead messages (`GET
//! /consumers/{name}/dead`), and the metrics that mirror them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::source::Message;

/// `idempotency_consumer_messages_total{consumer,result}`.
pub const MESSAGES_TOTAL: &str = "idempotency_consumer_messages_total";
/// `idempotency_consumer_in_flight{consumer}`.
pub const IN_FLIGHT: &str = "idempotency_consumer_in_flight";
/// `idempotency_consumer_lag{consumer}`.
pub const LAG: &str = "idempotency_consumer_lag";
/// `idempotency_consumer_delivery_seconds{consumer}`.
pub const DELIVERY_SECONDS: &str = "idempotency_consumer_delivery_seconds";

/// What `GET /consumers/{name}` answers.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct Counts {
    /// Messages delivered to the upstream and acknowledged.
    pub delivered: u64,
    /// Messages acknowledged because an earlier delivery had been recorded.
    pub duplicates: u64,
    /// Attempts that failed and were asked for again.
    pub retried: u64,
    /// Messages that died.
    pub dead: u64,
    /// Messages being worked on now.
    pub in_flight: u64,
    /// Messages not yet acknowledged, as the broker counts them.
    pub lag: u64,
}

/// A dead message as the admin view shows it.
#[derive(Debug, Clone, Serialize)]
pub struct DeadMessage {
    /// Its key, or for a keyless message `-` and a number of this process.
    pub key: String,
    /// The subject or routing key.
    pub subject: String,
    /// Why it died.
    pub reason: String,
    /// The attempts it had.
    pub attempts: u32,
    /// When it died (Unix milliseconds).
    pub dead_at_ms: u64,
    /// The payload, as text where it is UTF-8.
    pub body: String,
    /// The message as it came, to deliver again on a retry.
    #[serde(skip)]
    pub message: Message,
}

/// The counts, the dead list and the broker's state of one consumer.
#[derive(Debug)]
pub struct Stats {
    name: String,
    delivered: AtomicU64,
    duplicates: AtomicU64,
    retried: AtomicU64,
    dead: AtomicU64,
    in_flight: AtomicU64,
    lag: AtomicU64,
    broker_down: AtomicBool,
    keyless: AtomicU64,
    dead_list: Mutex<BTreeMap<String, DeadMessage>>,
}

/// How many dead messages the admin view keeps; the dead letter keeps them all.
const DEAD_KEPT: usize = 10_000;

impl Stats {
    /// Empty counts for the consumer `name`.
    pub fn new(name: &str) -> Self {
        // Every result's series is exported from the start, at 0: a consumer's first dead
        // message is then an increase an alert's `increase()` sees, not a new series it cannot.
        for result in ["delivered", "duplicate", "retried", "dead"] {
            metrics::counter!(MESSAGES_TOTAL, "consumer" => name.to_owned(), "result" => result)
                .increment(0);
        }
        Self {
            name: name.to_owned(),
            delivered: AtomicU64::new(0),
            duplicates: AtomicU64::new(0),
            retried: AtomicU64::new(0),
            dead: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            lag: AtomicU64::new(0),
            broker_down: AtomicBool::new(false),
            keyless: AtomicU64::new(0),
            dead_list: Mutex::new(BTreeMap::new()),
        }
    }

    /// The consumer's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The counts now.
    pub fn counts(&self) -> Counts {
        Counts {
            delivered: self.delivered.load(Ordering::Relaxed),
            duplicates: self.duplicates.load(Ordering::Relaxed),
            retried: self.retried.load(Ordering::Relaxed),
            dead: self.dead.load(Ordering::Relaxed),
            in_flight: self.in_flight.load(Ordering::Relaxed),
            lag: self.lag.load(Ordering::Relaxed),
        }
    }

    /// Whether the broker could not be reached at the last try (`/readyz` names the consumer).
    pub fn broker_down(&self) -> bool {
        self.broker_down.load(Ordering::Relaxed)
    }

    /// Up to `limit` dead messages whose keys sort after `after`.
    pub fn dead(&self, limit: usize, after: Option<&str>) -> Vec<DeadMessage> {
        let list = self
            .dead_list
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let from = after.map_or(std::ops::Bound::Unbounded, |a| {
            std::ops::Bound::Excluded(a.to_owned())
        });
        list.range((from, std::ops::Bound::Unbounded))
            .take(limit)
            .map(|(_, m)| m.clone())
            .collect()
    }

    /// Takes a dead message out of the admin view (retry, delete).
    pub fn take_dead(&self, key: &str) -> Option<DeadMessage> {
        let mut list = self
            .dead_list
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        list.remove(key)
    }

    pub(crate) fn set_broker_down(&self, down: bool) {
        self.broker_down.store(down, Ordering::Relaxed);
    }

    pub(crate) fn set_lag(&self, lag: u64) {
        self.lag.store(lag, Ordering::Relaxed);
        metrics::gauge!(LAG, "consumer" => self.name.clone()).set(lag as f64);
    }

    pub(crate) fn started(&self) {
        let now = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        metrics::gauge!(IN_FLIGHT, "consumer" => self.name.clone()).set(now as f64);
    }

    pub(crate) fn finished(&self) {
        let now = self
            .in_flight
            .fetch_sub(1, Ordering::Relaxed)
            .saturating_sub(1);
        metrics::gauge!(IN_FLIGHT, "consumer" => self.name.clone()).set(now as f64);
    }

    pub(crate) fn took(&self, elapsed: Duration) {
        metrics::histogram!(DELIVERY_SECONDS, "consumer" => self.name.clone())
            .record(elapsed.as_secs_f64());
    }

    pub(crate) fn count(&self, result: &'static str) {
        let counter = match result {
            "delivered" => &self.delivered,
            "duplicate" => &self.duplicates,
            "retried" => &self.retried,
            _ => &self.dead,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(MESSAGES_TOTAL, "consumer" => self.name.clone(), "result" => result)
            .increment(1);
    }

    /// Keeps a dead message for the admin view.
    pub(crate) fn keep_dead(&self, key: Option<&str>, message: &Message, reason: &str) {
        let key = key.map_or_else(
            || format!("-{}", self.keyless.fetch_add(1, Ordering::Relaxed) + 1),
            str::to_owned,
        );
        let dead_at_ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let entry = DeadMessage {
            key: key.clone(),
            subject: message.subject.clone(),
            reason: reason.to_owned(),
            attempts: message.attempt,
            dead_at_ms,
            body: String::from_utf8_lossy(&message.body).into_owned(),
            message: message.clone(),
        };
        let mut list = self
            .dead_list
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if list.len() < DEAD_KEPT || list.contains_key(&key) {
            list.insert(key, entry);
        }
    }
}
