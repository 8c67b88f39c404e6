//! The inbox keys of a `[defaults]` or `[[routes]]` table (docs/reference.md#inbox-routes): `mode`,
//! `inbox_ack_status` and the delivery keys, read over what a route inherits, checked as
//! every other key is (a bad value names its file, line and key), and printed by `--check`.

use std::num::NonZeroU32;

use crate::config::common::error::ConfigError;
use crate::config::common::source::Source;
use crate::config::common::values::{duration, status};
use crate::config::file::unspanned;
use crate::config::routes::keys::PolicyTable;
use crate::inbox::policy::DeliveryPolicy;
use idempotency_core::{policy::RouteMode, Policy};

/// Sets every inbox key the table names; the others keep their inherited value.
pub(in crate::config) fn apply(
    src: &Source,
    policy: &mut Policy,
    delivery: &mut DeliveryPolicy,
    table: &PolicyTable,
) -> Result<(), ConfigError> {
    if let Some(mode) = &table.mode {
        policy.mode = *mode.get_ref();
    }
    src.set(
        "inbox_ack_status",
        &table.inbox_ack_status,
        &mut policy.inbox_ack_status,
        |s| status(*s),
    )?;
    src.set(
        "deliver_success",
        &table.deliver_success,
        &mut delivery.deliver_success,
        |v| v.iter().map(|s| status(*s)).collect(),
    )?;
    apply_durations(src, delivery, table)?;
    src.set(
        "max_attempts",
        &table.max_attempts,
        &mut delivery.max_attempts,
        |n| positive(*n, u32::MAX.into()).map(|n| n as u32),
    )?;
    let concurrency = &mut delivery.deliver_concurrency;
    src.set(
        "deliver_concurrency",
        &table.deliver_concurrency,
        concurrency,
        |n| positive(*n, 65_536).map(|n| n as usize),
    )?;
    src.set(
        "deliver_rate",
        &table.deliver_rate,
        &mut delivery.deliver_rate,
        |n| {
            let rate = positive(*n, 100_000)? as u32;
            Ok::<_, String>(NonZeroU32::new(rate))
        },
    )
}

fn apply_durations(
    src: &Source,
    delivery: &mut DeliveryPolicy,
    table: &PolicyTable,
) -> Result<(), ConfigError> {
    let timeout = &mut delivery.deliver_timeout;
    src.set("deliver_timeout", &table.deliver_timeout, timeout, |d| {
        duration(d)
    })?;
    let initial = &mut delivery.retry_initial;
    src.set("retry_initial", &table.retry_initial, initial, |d| {
        duration(d)
    })?;
    src.set(
        "retry_max",
        &table.retry_max,
        &mut delivery.retry_max,
        |d| duration(d),
    )?;
    src.set("max_age", &table.max_age, &mut delivery.max_age, |d| {
        duration(d)
    })?;
    if delivery.retry_max < delivery.retry_initial {
        // Named at whichever of the two this table set, the later one if both.
        let (key, given) = match (&table.retry_max, &table.retry_initial) {
            (Some(max), _) => ("retry_max", max),
            (None, Some(initial)) => ("retry_initial", initial),
            (None, None) => return Ok(()),
        };
        let reason = "retry_max must be at least retry_initial".to_owned();
        return Err(src.bad(given, key, reason));
    }
    Ok(())
}

fn positive(raw: i64, max: i64) -> Result<i64, String> {
    if !(1..=max).contains(&raw) {
        return Err(format!("{raw} is outside 1..={max}"));
    }
    Ok(raw)
}

/// Prints a route's mode, and on an inbox route every inbox key (`deliver_rate` where set).
pub(in crate::config) fn print(policy: &Policy, delivery: &DeliveryPolicy, keys: &mut PolicyTable) {
    keys.mode = unspanned(policy.mode);
    if policy.mode != RouteMode::Inbox {
        return;
    }
    let humane = |d| humantime::format_duration(d).to_string();
    keys.inbox_ack_status = unspanned(i64::from(policy.inbox_ack_status.as_u16()));
    let success = delivery
        .deliver_success
        .iter()
        .map(|s| i64::from(s.as_u16()));
    keys.deliver_success = unspanned(success.collect());
    keys.deliver_timeout = unspanned(humane(delivery.deliver_timeout));
    keys.retry_initial = unspanned(humane(delivery.retry_initial));
    keys.retry_max = unspanned(humane(delivery.retry_max));
    keys.max_attempts = unspanned(i64::from(delivery.max_attempts));
    keys.max_age = unspanned(humane(delivery.max_age));
    let concurrency = i64::try_from(delivery.deliver_concurrency).unwrap_or(i64::MAX);
    keys.deliver_concurrency = unspanned(concurrency);
    keys.deliver_rate = delivery
        .deliver_rate
        .and_then(|r| unspanned(i64::from(r.get())));
}
