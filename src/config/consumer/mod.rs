//! The `[[consumers]]` tables (docs/reference.md#consumer-keys): one broker consumer each,
//! read with every key's line and checked as every other table is (an unknown key or a bad
//! value names its file, line and key), and printed back by `--check` with the broker URL's
//! credentials as `***`.

pub(in crate::config) mod keys;

use std::ops::Range;
use std::time::Duration;

use toml::Spanned;

use crate::config::common::error::ConfigError;
use crate::config::common::names::TakenNames;
use crate::config::common::source::Source;
use crate::config::common::values::{duration, method, status, upstream_uri};
use crate::config::file::unspanned;
use crate::config::settings::ConsumerConfig;
use crate::consumer::BrokerSource;
use idempotency_consumer::{BrokerKind, BrokerUrl, ConsumerSettings, KeyFrom};
use keys::ConsumerTable;

/// Every `[[consumers]]` table, in file order; two with one name are refused.
pub(in crate::config) fn resolve(
    src: &Source,
    tables: &[Spanned<ConsumerTable>],
) -> Result<Vec<ConsumerConfig>, ConfigError> {
    let mut names = TakenNames::new("consumer");
    let mut consumers = Vec::with_capacity(tables.len());
    for table in tables {
        let consumer = consumer(src, table.get_ref(), table.span())?;
        let given = table.get_ref().name.as_ref();
        names.take(src, given, &consumer.settings.name, table.span().start)?;
        consumers.push(consumer);
    }
    Ok(consumers)
}

fn consumer(
    src: &Source,
    table: &ConsumerTable,
    span: Range<usize>,
) -> Result<ConsumerConfig, ConfigError> {
    let missing = |key: &str, why: &str| {
        let reason = format!("key {key:?}: {why}");
        src.at(span.clone(), Some(key), reason)
    };
    let need = |key: &str| missing(key, &format!("every [[consumers]] table needs a {key}"));
    let name = table.name.as_ref().ok_or_else(|| need("name"))?;
    let name = src.check(name, "name", consumer_name)?;
    let given = table.source.as_ref().ok_or_else(|| need("source"))?;
    let url = src.check(given, "source", |s| {
        BrokerUrl::resolve(s).map_err(|e| e.to_string())
    })?;
    let broker = match url.kind().expect("resolve checked the scheme") {
        BrokerKind::JetStream => {
            let stream = table.stream.as_ref().ok_or_else(|| {
                missing("stream", "a JetStream consumer (nats://) names its stream")
            })?;
            BrokerSource::JetStream {
                stream: stream.get_ref().clone(),
                durable: table
                    .durable
                    .as_ref()
                    .map_or_else(|| name.clone(), |d| d.get_ref().clone()),
                filter_subject: table.filter_subject.as_ref().map(|f| f.get_ref().clone()),
            }
        }
        BrokerKind::RabbitMq => {
            let queue = table
                .queue
                .as_ref()
                .ok_or_else(|| missing("queue", "a RabbitMQ consumer (amqp://) names its queue"))?;
            BrokerSource::RabbitMq {
                queue: queue.get_ref().clone(),
            }
        }
    };
    let upstream = table.upstream.as_ref().ok_or_else(|| need("upstream"))?;
    let upstream = src.check(upstream, "upstream", |u| {
        let uri = upstream_uri(u)?;
        // A consumer's client has no TLS settings of its own yet.
        (uri.scheme_str() == Some("http"))
            .then_some(uri)
            .ok_or_else(|| format!("{u:?}: a consumer delivers over http:// only"))
    })?;
    let path = table.path.as_ref().ok_or_else(|| need("path"))?;
    let path = src.check(path, "path", |p| {
        let ok = p.starts_with('/') && p.parse::<http::Uri>().is_ok();
        ok.then(|| p.to_owned())
            .ok_or_else(|| format!("{p:?} is not a request target starting with '/'"))
    })?;
    let mut settings = ConsumerSettings::new(name, path);
    src.set("method", &table.method, &mut settings.method, |m| method(m))?;
    src.set("key_from", &table.key_from, &mut settings.key_from, |k| {
        k.parse::<KeyFrom>().map_err(|e| e.to_string())
    })?;
    src.set(
        "dead_letter",
        &table.dead_letter,
        &mut settings.dead_letter,
        |d| Ok::<_, String>(Some(d.clone())),
    )?;
    src.set(
        "deliver_success",
        &table.deliver_success,
        &mut settings.deliver_success,
        |list| list.iter().map(|s| status(*s)).collect(),
    )?;
    durations(src, table, &mut settings)?;
    counts(src, table, &mut settings)?;
    Ok(ConsumerConfig {
        settings,
        url,
        broker,
        upstream,
    })
}

/// 1 to 55 letters, digits, `-`, `_` or `.`: the keys are scoped by `consumer.<name>`, which
/// must be a route name (at most 64).
fn consumer_name(name: &str) -> Result<String, String> {
    let ok = (1..=55).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    ok.then(|| name.to_owned())
        .ok_or_else(|| format!("{name:?} must be 1 to 55 letters, digits, '-', '_' or '.'"))
}

fn durations(
    src: &Source,
    table: &ConsumerTable,
    settings: &mut ConsumerSettings,
) -> Result<(), ConfigError> {
    let positive = |d: &String| duration(d);
    src.set(
        "deliver_timeout",
        &table.deliver_timeout,
        &mut settings.deliver_timeout,
        positive,
    )?;
    src.set(
        "retry_initial",
        &table.retry_initial,
        &mut settings.backoff.initial,
        positive,
    )?;
    src.set(
        "retry_max",
        &table.retry_max,
        &mut settings.backoff.max,
        positive,
    )?;
    src.set("ttl", &table.ttl, &mut settings.ttl, positive)?;
    src.set("lease", &table.lease, &mut settings.lease, positive)?;
    if settings.backoff.max < settings.backoff.initial {
        let (key, given) = match (&table.retry_max, &table.retry_initial) {
            (Some(max), _) => ("retry_max", max),
            (None, Some(initial)) => ("retry_initial", initial),
            (None, None) => return Ok(()),
        };
        return Err(src.bad(given, key, "retry_max must be at least retry_initial"));
    }
    Ok(())
}

fn counts(
    src: &Source,
    table: &ConsumerTable,
    settings: &mut ConsumerSettings,
) -> Result<(), ConfigError> {
    let within = |n: i64, max: i64| {
        (1..=max)
            .contains(&n)
            .then_some(n)
            .ok_or_else(|| format!("{n} is outside 1..={max}"))
    };
    src.set(
        "deliver_concurrency",
        &table.deliver_concurrency,
        &mut settings.deliver_concurrency,
        |n| within(*n, 65_535).map(|n| n as usize),
    )?;
    src.set(
        "max_attempts",
        &table.max_attempts,
        &mut settings.max_attempts,
        |n| within(*n, u32::MAX.into()).map(|n| n as u32),
    )
}

/// Every consumer with every key, as the file would write it; the broker URL without its
/// credentials.
pub(in crate::config) fn print(consumers: &[ConsumerConfig]) -> Vec<Spanned<ConsumerTable>> {
    consumers
        .iter()
        .map(|c| Spanned::new(0..0, table(c)))
        .collect()
}

fn table(consumer: &ConsumerConfig) -> ConsumerTable {
    let s = &consumer.settings;
    let humane = |d: Duration| unspanned(humantime::format_duration(d).to_string());
    let mut table = ConsumerTable {
        name: unspanned(s.name.clone()),
        source: unspanned(consumer.url.shown()),
        upstream: unspanned(consumer.upstream.to_string()),
        path: unspanned(s.path.clone()),
        method: unspanned(s.method.to_string()),
        key_from: unspanned(key_from(&s.key_from)),
        deliver_concurrency: unspanned(i64::try_from(s.deliver_concurrency).unwrap_or(i64::MAX)),
        deliver_timeout: humane(s.deliver_timeout),
        deliver_success: (!s.deliver_success.is_empty()).then(|| {
            let list = s.deliver_success.iter().map(|c| i64::from(c.as_u16()));
            Spanned::new(0..0, list.collect())
        }),
        retry_initial: humane(s.backoff.initial),
        retry_max: humane(s.backoff.max),
        max_attempts: unspanned(i64::from(s.max_attempts)),
        dead_letter: s.dead_letter.clone().and_then(unspanned),
        ttl: humane(s.ttl),
        lease: humane(s.lease),
        ..ConsumerTable::default()
    };
    match &consumer.broker {
        BrokerSource::JetStream {
            stream,
            durable,
            filter_subject,
        } => {
            table.stream = unspanned(stream.clone());
            table.durable = unspanned(durable.clone());
            table.filter_subject = filter_subject.clone().and_then(unspanned);
        }
        BrokerSource::RabbitMq { queue } => table.queue = unspanned(queue.clone()),
    }
    table
}

fn key_from(key_from: &KeyFrom) -> String {
    match key_from {
        KeyFrom::MessageId => "message-id".to_owned(),
        KeyFrom::Header(name) => format!("header:{name}"),
        KeyFrom::Pointer(pointer) => format!("pointer:{pointer}"),
    }
}
