//! The `[[outboxes]]` tables (docs/reference.md#outbox-keys): one outbox relay each, read with
//! every key's line, checked as every other table is (an unknown key or a bad value names its
//! file, line and key), and printed back by `--check` with references in place of secrets.

pub(in crate::config) mod keys;
pub(in crate::config) mod restart;
#[cfg(test)]
mod tests;

use std::ops::Range;
use std::time::Duration;

use toml::Spanned;

use crate::config::common::error::{ConfigError, Reason};
use crate::config::common::names::TakenNames;
use crate::config::common::source::Source;
use crate::config::common::values::{duration, method};
use crate::config::file::unspanned;
use crate::config::settings::OutboxSettings;
use crate::config::tls::{apply_keys, UpstreamKeys};
use crate::outbox::OutboxConnection;
use crate::store::DatabaseCa;
use crate::tls::UpstreamTls;
use idempotency_core::proxy::humane_duration;
use idempotency_core::Secret;
use idempotency_delivery::signing::WebhookSigner;
use idempotency_outbox::{
    channel_name, check_destination_concurrency, destination, redacted, OnDead, OutboxConfig,
    OutboxName, TableName,
};
use idempotency_postgres::DatabaseUrl;
use keys::{OnDeadChoice, OutboxTable};

/// Every `[[outboxes]]` table, in file order; two with one name are refused.
pub(in crate::config) fn resolve(
    src: &Source,
    tables: &[Spanned<OutboxTable>],
) -> Result<Vec<OutboxSettings>, ConfigError> {
    let mut names = TakenNames::new("outbox");
    let mut outboxes = Vec::with_capacity(tables.len());
    for table in tables {
        let outbox = outbox(src, table.get_ref(), table.span())?;
        let given = table.get_ref().name.as_ref();
        names.take(src, given, outbox.relay.name.as_str(), table.span().start)?;
        outboxes.push(outbox);
    }
    Ok(outboxes)
}

fn outbox(
    src: &Source,
    table: &OutboxTable,
    span: Range<usize>,
) -> Result<OutboxSettings, ConfigError> {
    let missing = |key: &str| {
        let reason = format!("key {key:?}: every [[outboxes]] table needs a {key}");
        src.at(span.clone(), Some(key), reason)
    };
    let name = table.name.as_ref().ok_or_else(|| missing("name"))?;
    let name = src.check(name, "name", |n| OutboxName::new(n))?;
    let given_database = table.database.as_ref().ok_or_else(|| missing("database"))?;
    let database = src.check(given_database, "database", |d| {
        DatabaseUrl::resolve(d).map_err(|e| e.to_string())
    })?;
    let mut relay = OutboxConfig::new(name);
    src.set("table", &table.table, &mut relay.table, |t| {
        TableName::new(t)
    })?;
    destinations(src, table, &mut relay, &span)?;
    src.set("method", &table.method, &mut relay.method, |m| method(m))?;
    src.set(
        "nats_subject_prefix",
        &table.nats_subject_prefix,
        &mut relay.nats_subject_prefix,
        |p| subject_prefix(p),
    )?;
    src.set(
        "amqp_exchange",
        &table.amqp_exchange,
        &mut relay.amqp_exchange,
        |e| exchange(e),
    )?;
    src.set(
        "signing_secret",
        &table.signing_secret,
        &mut relay.signer,
        |s| {
            let secret = Secret::resolve(s).map_err(Reason::into_reason)?;
            WebhookSigner::new(&secret)
                .map(Some)
                .map_err(Reason::into_reason)
        },
    )?;
    src.set(
        "notify_channel",
        &table.notify_channel,
        &mut relay.notify_channel,
        |c| channel_name(c).map(Some),
    )?;
    durations(src, table, &mut relay)?;
    counts(src, table, &mut relay)?;
    if let Some(choice) = &table.on_dead {
        relay.on_dead = match choice.get_ref() {
            OnDeadChoice::Skip => OnDead::Skip,
            OnDeadChoice::Block => OnDead::Block,
        };
    }
    let upstream_tls = upstream_tls(src, table, &relay, &span)?;
    Ok(OutboxSettings {
        database_reference: reference(given_database.get_ref(), &database),
        relay,
        database,
        upstream_tls,
        connection: connection(src, table)?,
    })
}

/// `deliver_to` and `topics`: at least one of them, every URL a receiver's (`http[s]://`) or a
/// broker's (`nats://`, `tls://`, `amqp[s]://`), written inline or read from `env:`/`file:`.
fn destinations(
    src: &Source,
    table: &OutboxTable,
    relay: &mut OutboxConfig,
    span: &Range<usize>,
) -> Result<(), ConfigError> {
    src.set(
        "deliver_to",
        &table.deliver_to,
        &mut relay.deliver_to,
        |u| destination(u).map(Some),
    )?;
    src.set("topics", &table.topics, &mut relay.topics, |topics| {
        topics
            .iter()
            .map(|(topic, url)| {
                let url = destination(url).map_err(|e| format!("topic {topic:?}: {e}"))?;
                Ok::<_, String>((topic.clone(), url))
            })
            .collect()
    })?;
    if relay.deliver_to.is_none() && relay.topics.is_empty() {
        let reason = "key \"deliver_to\": an outbox needs deliver_to, or topics naming where each topic goes";
        return Err(src.at(span.clone(), Some("deliver_to"), reason.to_owned()));
    }
    Ok(())
}

fn durations(
    src: &Source,
    table: &OutboxTable,
    relay: &mut OutboxConfig,
) -> Result<(), ConfigError> {
    let positive = |d: &String| duration(d);
    src.set(
        "poll_interval",
        &table.poll_interval,
        &mut relay.poll_interval,
        positive,
    )?;
    src.set(
        "deliver_timeout",
        &table.deliver_timeout,
        &mut relay.deliver_timeout,
        positive,
    )?;
    src.set(
        "retry_initial",
        &table.retry_initial,
        &mut relay.retry.initial,
        positive,
    )?;
    src.set(
        "retry_max",
        &table.retry_max,
        &mut relay.retry.max,
        positive,
    )?;
    src.set("max_age", &table.max_age, &mut relay.max_age, positive)?;
    src.set("lease", &table.lease, &mut relay.lease, positive)?;
    // Zero is allowed here: a row is deleted as soon as it is delivered.
    src.set(
        "keep_delivered",
        &table.keep_delivered,
        &mut relay.keep_delivered,
        |d| humane_duration::parse(d),
    )?;
    src.set("keep_dead", &table.keep_dead, &mut relay.keep_dead, |d| {
        duration(d).map(Some)
    })?;
    if relay.retry.max < relay.retry.initial {
        let (key, given) = match (&table.retry_max, &table.retry_initial) {
            (Some(max), _) => ("retry_max", max),
            (None, Some(initial)) => ("retry_initial", initial),
            (None, None) => return Ok(()),
        };
        return Err(src.bad(given, key, "retry_max must be at least retry_initial"));
    }
    Ok(())
}

fn counts(src: &Source, table: &OutboxTable, relay: &mut OutboxConfig) -> Result<(), ConfigError> {
    let within = |n: i64, max: i64| {
        (1..=max)
            .contains(&n)
            .then_some(n)
            .ok_or_else(|| format!("{n} is outside 1..={max}"))
    };
    src.set(
        "deliver_concurrency",
        &table.deliver_concurrency,
        &mut relay.deliver_concurrency,
        |n| within(*n, 65_536).map(|n| n as usize),
    )?;
    let slots = relay.deliver_concurrency;
    src.set(
        "destination_concurrency",
        &table.destination_concurrency,
        &mut relay.destination_concurrency,
        |n| {
            let n = within(*n, 65_536)? as usize;
            check_destination_concurrency(Some(n), slots).map(|()| Some(n))
        },
    )?;
    src.set(
        "max_attempts",
        &table.max_attempts,
        &mut relay.max_attempts,
        |n| within(*n, u32::MAX.into()).map(|n| n as u32),
    )
}

/// `database_ca`, `pool_size` and `statement_timeout`, read as the store's keys are.
fn connection(src: &Source, table: &OutboxTable) -> Result<OutboxConnection, ConfigError> {
    let mut connection = OutboxConnection::default();
    src.set(
        "pool_size",
        &table.pool_size,
        &mut connection.pool_size,
        |n| {
            usize::try_from(*n)
                .ok()
                .filter(|n| (1..=1024).contains(n))
                .ok_or_else(|| format!("{n} is not a pool size from 1 to 1024"))
        },
    )?;
    src.set(
        "statement_timeout",
        &table.statement_timeout,
        &mut connection.statement_timeout,
        |d| duration(d),
    )?;
    src.set(
        "database_ca",
        &table.database_ca,
        &mut connection.ca,
        |ca| {
            let config = crate::tls::database_client_config(ca)?;
            Ok::<_, String>(Some(DatabaseCa {
                reference: ca.clone(),
                config,
            }))
        },
    )?;
    Ok(connection)
}

/// The TLS keys; the client config is built when any destination is `https://`.
fn upstream_tls(
    src: &Source,
    table: &OutboxTable,
    relay: &OutboxConfig,
    span: &Range<usize>,
) -> Result<UpstreamTls, ConfigError> {
    let mut tls = UpstreamTls::default();
    let keys = UpstreamKeys {
        ca: table.upstream_ca.as_ref(),
        cert: table.upstream_client_cert.as_ref(),
        key: table.upstream_client_key.as_ref(),
    };
    apply_keys(src, &mut tls, &keys)?;
    let mut urls = relay.deliver_to.iter().chain(relay.topics.values());
    let https = urls.any(|u| u.scheme_str() == Some("https"));
    tls.for_upstream(https)
        .map_err(|reason| src.at(span.clone(), Some("upstream_client_key"), reason))
}

/// `nats_subject_prefix`: put before a topic to make a subject, so no spaces or wildcards.
fn subject_prefix(raw: &str) -> Result<String, String> {
    if raw
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == '*' || c == '>')
    {
        return Err(format!(
            "subject prefix {raw:?} may hold no spaces, control characters or wildcards"
        ));
    }
    Ok(raw.to_owned())
}

/// `amqp_exchange`: an AMQP short string, at most 255 bytes.
fn exchange(raw: &str) -> Result<String, String> {
    if raw.len() > 255 || raw.chars().any(char::is_control) {
        return Err(format!(
            "exchange {raw:?} must be at most 255 bytes, without control characters"
        ));
    }
    Ok(raw.to_owned())
}

/// What `--check` prints for the database: the reference as written, or the URL without its
/// password.
fn reference(written: &str, url: &DatabaseUrl) -> String {
    if written.starts_with("env:") || written.starts_with("file:") {
        written.to_owned()
    } else {
        url.to_string()
    }
}

/// Every outbox with every key, as the file would write it; secrets by reference.
pub(in crate::config) fn print(outboxes: &[OutboxSettings]) -> Vec<Spanned<OutboxTable>> {
    outboxes
        .iter()
        .map(|o| Spanned::new(0..0, table(o)))
        .collect()
}

fn table(outbox: &OutboxSettings) -> OutboxTable {
    let relay = &outbox.relay;
    let humane = |d: Duration| unspanned(humantime::format_duration(d).to_string());
    let tls = &outbox.upstream_tls;
    let identity = tls.identity_references();
    OutboxTable {
        name: unspanned(relay.name.as_str().to_owned()),
        database: unspanned(outbox.database_reference.clone()),
        table: unspanned(relay.table.as_str().to_owned()),
        deliver_to: relay
            .deliver_to
            .as_ref()
            .and_then(|u| unspanned(redacted(u))),
        topics: (!relay.topics.is_empty()).then(|| {
            let topics = relay.topics.iter().map(|(t, u)| (t.clone(), redacted(u)));
            Spanned::new(0..0, topics.collect())
        }),
        nats_subject_prefix: unspanned(relay.nats_subject_prefix.clone()),
        amqp_exchange: unspanned(relay.amqp_exchange.clone()),
        method: unspanned(relay.method.to_string()),
        signing_secret: relay
            .signer
            .as_ref()
            .and_then(|s| unspanned(s.reference().to_owned())),
        poll_interval: humane(relay.poll_interval),
        notify_channel: relay.notify_channel.clone().and_then(unspanned),
        deliver_concurrency: unspanned(
            i64::try_from(relay.deliver_concurrency).unwrap_or(i64::MAX),
        ),
        destination_concurrency: unspanned(
            i64::try_from(relay.destination_limit()).unwrap_or(i64::MAX),
        ),
        deliver_timeout: humane(relay.deliver_timeout),
        retry_initial: humane(relay.retry.initial),
        retry_max: humane(relay.retry.max),
        max_attempts: unspanned(i64::from(relay.max_attempts)),
        max_age: humane(relay.max_age),
        lease: humane(relay.lease),
        on_dead: unspanned(match relay.on_dead {
            OnDead::Skip => OnDeadChoice::Skip,
            OnDead::Block => OnDeadChoice::Block,
        }),
        keep_delivered: humane(relay.keep_delivered),
        keep_dead: relay.keep_dead.and_then(humane),
        upstream_ca: tls.ca_reference().and_then(|ca| unspanned(ca.to_owned())),
        upstream_client_cert: identity.and_then(|(cert, _)| unspanned(cert.to_owned())),
        upstream_client_key: identity.and_then(|(_, key)| unspanned(key.to_owned())),
        database_ca: outbox
            .connection
            .ca
            .as_ref()
            .and_then(|ca| unspanned(ca.reference.clone())),
        pool_size: unspanned(i64::try_from(outbox.connection.pool_size).unwrap_or(i64::MAX)),
        statement_timeout: humane(outbox.connection.statement_timeout),
    }
}
