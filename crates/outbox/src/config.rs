//! What one outbox relay does: where its events go, how they are signed, how fast and how long
//! it tries, what a dead row does to the rows after it, and how long delivered rows are kept.

use std::collections::BTreeMap;
use std::time::Duration;

use http::{Method, Uri};
use idempotency_delivery::backoff::Backoff;
use idempotency_delivery::signing::WebhookSigner;

use crate::destination::DestinationKind;
use crate::names::{NameError, NameKind, OutboxName, TableName};

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
    /// Put before a topic to make its JetStream subject (`nats_subject_prefix`, default "").
    pub nats_subject_prefix: String,
    /// The exchange RabbitMQ destinations publish to, the topic as the routing key
    /// (`amqp_exchange`, default "": the default exchange).
    pub amqp_exchange: String,
    /// The method of every HTTP attempt (`method`, default `POST`).
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
    /// The most attempts in flight to one destination URL (`destination_concurrency`; `None`,
    /// the default, is `deliver_concurrency`): a destination that stops answering holds at most
    /// this many of the slots, and the others' rows keep flowing. See
    /// [`OutboxConfig::destination_limit`].
    pub destination_concurrency: Option<usize>,
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
            nats_subject_prefix: String::new(),
            amqp_exchange: String::new(),
            method: Method::POST,
            signer: None,
            poll_interval: Duration::from_millis(500),
            notify_channel: None,
            deliver_concurrency: 16,
            destination_concurrency: None,
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

    /// The most attempts in flight to one destination URL: `destination_concurrency`, never
    /// more than `deliver_concurrency` (its default).
    pub fn destination_limit(&self) -> usize {
        self.destination_concurrency
            .unwrap_or(self.deliver_concurrency)
            .min(self.deliver_concurrency)
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
            check_destination(&url.to_string()).map_err(|reason| ("deliver_to", reason))?;
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
        check_destination_concurrency(self.destination_concurrency, self.deliver_concurrency)
            .map_err(|reason| ("destination_concurrency", reason))
    }
}

/// `destination_concurrency` beside `deliver_concurrency`: at least 1, and no more than
/// `deliver_concurrency`, which already bounds every destination (a larger value would promise
/// what the relay never does).
pub fn check_destination_concurrency(
    destination: Option<usize>,
    deliver_concurrency: usize,
) -> Result<(), String> {
    match destination {
        Some(0) => Err("must be at least 1".to_owned()),
        Some(n) if n > deliver_concurrency => Err(format!(
            "{n} is more than deliver_concurrency ({deliver_concurrency}), the attempts in \
             flight to all destinations together: set it to at most that"
        )),
        _ => Ok(()),
    }
}

/// Checks a destination URL: `http://` or `https://` (a receiver), `nats://` or `tls://`
/// (JetStream), `amqp://` or `amqps://` (RabbitMQ), with a host; or reads one from `env:NAME`
/// or `file:PATH`. An HTTP URL takes no user info
/// (a receiver's URL is logged as it is); a broker URL may carry its credentials, which are
/// shown as `***` ([`redacted`](crate::redacted)) wherever the URL is shown, this error
/// included.
///
/// ```
/// use idempotency_outbox::destination;
/// assert!(destination("https://fulfilment.internal/hooks/payments?v=2").is_ok());
/// assert!(destination("amqp://app:s3cret@mq:5672/orders").is_ok());
/// assert!(destination("nats://127.0.0.1:4222").is_ok());
/// assert!(destination("ftp://host/x").is_err() && destination("http://u:p@host/").is_err());
/// ```
pub fn destination(raw: &str) -> Result<Uri, NameError> {
    check_destination(raw).map_err(|reason| NameError::new(NameKind::Destination, reason))
}

fn check_destination(raw: &str) -> Result<Uri, String> {
    if let Some(text) = referenced(raw)? {
        let text = text.trim();
        if text.starts_with("env:") || text.starts_with("file:") {
            return Err(format!("{raw} holds another reference, not a URL"));
        }
        return check_destination(text).map_err(|why| format!("{why} (read from {raw})"));
    }
    let expected = "expected http[s]://HOST[:PORT]/path, nats://HOST:PORT, tls://HOST:PORT \
                    or amqp[s]://USER:PASS@HOST:PORT/VHOST";
    let uri: Uri = raw
        .parse()
        .map_err(|e: http::uri::InvalidUri| format!("invalid destination URL ({e}): {expected}"))?;
    let bad = |why: &str| {
        let shown = crate::redacted(&uri);
        format!("invalid destination URL {shown:?} ({why}): {expected}")
    };
    let authority = uri
        .authority()
        .map(http::uri::Authority::as_str)
        .unwrap_or_default();
    let Some(kind) = DestinationKind::of(&uri) else {
        return Err(bad("an unknown scheme"));
    };
    match () {
        () if uri.host().is_none_or(str::is_empty) => Err(bad("no host")),
        () if kind == DestinationKind::Http && authority.contains('@') => {
            Err(bad("user info is not allowed"))
        }
        () if !built_in(kind) => Err(bad(&format!(
            "{} destinations are not built in (cargo feature {:?})",
            kind.as_str(),
            kind.feature()
        ))),
        () => Ok(uri),
    }
}

/// The URL an `env:NAME` or `file:PATH` reference holds (a file's trailing newline dropped);
/// `None` for a URL written inline.
fn referenced(raw: &str) -> Result<Option<String>, String> {
    if let Some(name) = raw.strip_prefix("env:") {
        let value =
            std::env::var(name).map_err(|_| format!("environment variable {name:?} is not set"))?;
        return Ok(Some(value));
    }
    if let Some(path) = raw.strip_prefix("file:") {
        let text =
            std::fs::read_to_string(path).map_err(|e| format!("cannot read {path:?}: {e}"))?;
        return Ok(Some(text.trim_end_matches(['\r', '\n']).to_owned()));
    }
    Ok(None)
}

/// Whether this build publishes to `kind`.
fn built_in(kind: DestinationKind) -> bool {
    match kind {
        DestinationKind::Http => true,
        DestinationKind::JetStream => cfg!(feature = "nats"),
        DestinationKind::Amqp => cfg!(feature = "amqp"),
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
    fn brokers_are_destinations_and_their_credentials_never_shown() {
        assert!(destination("amqp://app:s3cret@mq:5672/orders").is_ok());
        assert!(destination("tls://nats.internal:4222").is_ok());
        let refused = destination("http://app:s3cret@host/events")
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("user info") && !refused.contains("s3cret"),
            "{refused}"
        );
        // A file, not a variable: the environment is shared by every test thread.
        let path = std::env::temp_dir().join(format!("outbox-config-url-{}", std::process::id()));
        std::fs::write(&path, "amqps://app:s3cret@mq:5671/orders\n").unwrap();
        let read = destination(&format!("file:{}", path.display())).unwrap();
        assert_eq!(crate::redacted(&read), "amqps://app:***@mq:5671/orders");
        let missing = destination("env:OUTBOX_CONFIG_TEST_UNSET").unwrap_err();
        assert_eq!(missing.kind(), crate::NameKind::Destination);
        let missing = missing.to_string();
        assert!(missing.contains("is not set"), "{missing}");
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
        for refused in [0, 17] {
            let mut share = config();
            share.destination_concurrency = Some(refused);
            assert_eq!(
                share.validate().unwrap_err().0,
                "destination_concurrency",
                "{refused}"
            );
        }
    }

    #[test]
    fn a_destination_may_take_every_slot_unless_told_otherwise() {
        let mut config = config();
        assert_eq!(config.destination_limit(), 16);
        config.destination_concurrency = Some(2);
        assert_eq!(config.destination_limit(), 2);
        config.deliver_concurrency = 1;
        assert_eq!(config.destination_limit(), 1, "never more than all of them");
    }
}
