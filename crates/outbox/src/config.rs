//! What one outbox relay does: where its events go, how they are signed, how fast and how long
//! it tries, what a dead row does to the rows after it, and how long delivered rows are kept.

use std::collections::BTreeMap;
use std::time::Duration;

use http::{Method, Uri};
use idempotency_delivery::backoff::Backoff;
use idempotency_delivery::signing::WebhookSigner;

use crate::names::{OutboxName, TableName};

/// Added to `deliver_timeout` in a claim's lease, so that an attempt (and the mark after it)
/// ends well before its claim does, and another relay does not start a second one meanwhile.
pub const LEASE_MARGIN: Duration = Duration::from_secs(5);

/// What the later rows of an aggregate do while an earlier one is dead.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnDead {
    /// They go on: the dead row no longer holds its aggregate.
    #[default]
    Skip,
    /// They wait until the dead row is retried and delivered, or deleted.
    Block,
}

impl OnDead {
    /// As the config writes it: `"skip"` or `"block"`.
    pub fn as_str(self) -> &'static str {
        match self {
            OnDead::Skip => "skip",
            OnDead::Block => "block",
        }
    }
}

/// One outbox relay's settings. [`OutboxConfig::new`] gives every default; set the fields to
/// change them.
#[derive(Debug, Clone)]
pub struct OutboxConfig {
    /// Names logs, metrics and admin paths.
    pub name: OutboxName,
    /// The table (`table`, default `outbox`).
    pub table: TableName,
    /// Where a topic without a line in `topics` goes (`deliver_to`).
    pub deliver_to: Option<Uri>,
    /// Where each listed topic goes (`topics`).
    pub topics: BTreeMap<String, Uri>,
    /// The method of every attempt (`method`, default `POST`).
    pub method: Method,
    /// Signs every attempt as Standard Webhooks do, when set (`signing_secret`).
    pub signer: Option<WebhookSigner>,
    /// How often the table is asked for due rows, whatever wakes the relay sooner
    /// (`poll_interval`, default 500 ms).
    pub poll_interval: Duration,
    /// The channel whose `NOTIFY` wakes the relay at once (`notify_channel`).
    pub notify_channel: Option<String>,
    /// Attempts in flight at once (`deliver_concurrency`, default 16).
    pub deliver_concurrency: usize,
    /// How long one attempt may take, the answer's body included (`deliver_timeout`, 30 s).
    pub deliver_timeout: Duration,
    /// The backoff between failed attempts (`retry_initial` 1 s, `retry_max` 10 min).
    pub retry: Backoff,
    /// Attempts before a row is dead (`max_attempts`, default 20).
    pub max_attempts: u32,
    /// Age (since `created_at`) past which a failed row is dead (`max_age`, default 72 h).
    pub max_age: Duration,
    /// How long a claim holds a row (`lease`, default 30 s); at least `deliver_timeout` and
    /// [`LEASE_MARGIN`] in effect.
    pub lease: Duration,
    /// What later rows of an aggregate do while an earlier one is dead (`on_dead`).
    pub on_dead: OnDead,
    /// How long delivered rows are kept before they are deleted (`keep_delivered`, default
    /// 24 h; zero deletes a row as it is marked delivered).
    pub keep_delivered: Duration,
    /// How long dead rows are kept before they are deleted (`keep_dead`; `None`, the default,
    /// keeps them until an operator retries or deletes them).
    pub keep_dead: Option<Duration>,
}

impl OutboxConfig {
    /// The defaults, for the outbox `name` on the table `outbox`, with no destination yet.
    pub fn new(name: OutboxName) -> Self {
        Self {
            name,
            table: TableName::default(),
            deliver_to: None,
            topics: BTreeMap::new(),
            method: Method::POST,
            signer: None,
            poll_interval: Duration::from_millis(500),
            notify_channel: None,
            deliver_concurrency: 16,
            deliver_timeout: Duration::from_secs(30),
            retry: Backoff {
                initial: Duration::from_secs(1),
                max: Duration::from_secs(600),
            },
            max_attempts: 20,
            max_age: Duration::from_secs(72 * 3600),
            lease: Duration::from_secs(30),
            on_dead: OnDead::Skip,
            keep_delivered: Duration::from_secs(24 * 3600),
            keep_dead: None,
        }
    }

    /// Where an event of `topic` goes: its line in `topics`, else `deliver_to`.
    pub fn destination(&self, topic: &str) -> Option<&Uri> {
        self.topics.get(topic).or(self.deliver_to.as_ref())
    }

    /// The lease a claim takes: `lease`, and never less than an attempt may take plus
    /// [`LEASE_MARGIN`].
    pub fn effective_lease(&self) -> Duration {
        self.lease.max(self.deliver_timeout + LEASE_MARGIN)
    }

    /// Checks what one field alone cannot: the first problem, as `(key, reason)`.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.deliver_to.is_none() && self.topics.is_empty() {
            let reason = "an outbox needs deliver_to, or topics naming where each topic goes";
            return Err(("deliver_to", reason.to_owned()));
        }
        let urls = self.deliver_to.iter().chain(self.topics.values());
        for url in urls {
            destination(&url.to_string()).map_err(|reason| ("deliver_to", reason))?;
        }
        let positive = [
            ("poll_interval", self.poll_interval),
            ("deliver_timeout", self.deliver_timeout),
            ("retry_initial", self.retry.initial),
            ("lease", self.lease),
            ("max_age", self.max_age),
        ];
        if let Some((key, _)) = positive.iter().find(|(_, d)| d.is_zero()) {
            return Err((key, "must be more than zero".to_owned()));
        }
        if self.retry.max < self.retry.initial {
            let reason = "retry_max must be at least retry_initial".to_owned();
            return Err(("retry_max", reason));
        }
        if self.deliver_concurrency == 0 || self.max_attempts == 0 {
            let key = if self.max_attempts == 0 {
                "max_attempts"
            } else {
                "deliver_concurrency"
            };
            return Err((key, "must be at least 1".to_owned()));
        }
        Ok(())
    }
}

/// Checks a destination URL: `http://` or `https://`, with a host, without user info (a
/// password in a URL ends up in logs).
///
/// ```
/// use idempotency_outbox::destination;
/// assert!(destination("https://fulfilment.internal/hooks/payments?v=2").is_ok());
/// assert!(destination("ftp://host/x").is_err() && destination("http://u:p@host/").is_err());
/// ```
pub fn destination(raw: &str) -> Result<Uri, String> {
    let bad = |why: &str| {
        format!("invalid destination URL {raw:?} ({why}): expected http[s]://HOST[:PORT]/path")
    };
    let uri: Uri = raw
        .parse()
        .map_err(|e: http::uri::InvalidUri| bad(&e.to_string()))?;
    let authority = uri
        .authority()
        .map(http::uri::Authority::as_str)
        .unwrap_or_default();
    match () {
        () if !matches!(uri.scheme_str(), Some("http" | "https")) => {
            Err(bad("not http:// or https://"))
        }
        () if uri.host().is_none_or(str::is_empty) => Err(bad("no host")),
        () if authority.contains('@') => Err(bad("user info is not allowed")),
        () => Ok(uri),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> OutboxConfig {
        let mut config = OutboxConfig::new(OutboxName::new("payments").unwrap());
        config.deliver_to = Some("http://127.0.0.1:9/events".parse().unwrap());
        config
    }

    #[test]
    fn a_topic_line_beats_deliver_to() {
        let mut config = config();
        let hooks: Uri = "https://fulfilment.internal/hooks".parse().unwrap();
        config
            .topics
            .insert("payment.confirmed".into(), hooks.clone());
        assert_eq!(config.destination("payment.confirmed"), Some(&hooks));
        assert_eq!(
            config.destination("other").unwrap().path(),
            "/events",
            "the rest go to deliver_to"
        );
        config.deliver_to = None;
        assert_eq!(config.destination("other"), None);
    }

    #[test]
    fn the_lease_outlasts_an_attempt() {
        let mut config = config();
        assert_eq!(config.effective_lease(), Duration::from_secs(35));
        config.lease = Duration::from_secs(120);
        assert_eq!(config.effective_lease(), Duration::from_secs(120));
    }

    #[test]
    fn validation_names_the_key() {
        assert_eq!(config().validate(), Ok(()));
        let mut nowhere = config();
        nowhere.deliver_to = None;
        assert_eq!(nowhere.validate().unwrap_err().0, "deliver_to");
        let mut backwards = config();
        backwards.retry.max = Duration::from_millis(10);
        assert_eq!(backwards.validate().unwrap_err().0, "retry_max");
        let mut none = config();
        none.max_attempts = 0;
        assert_eq!(none.validate().unwrap_err().0, "max_attempts");
    }
}
