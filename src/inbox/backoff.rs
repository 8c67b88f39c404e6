//! When a failed delivery is tried again: the exponential backoff with full jitter the outbox
//! relay uses too (`idempotency_delivery::backoff`), between the route's `retry_initial` and
//! `retry_max`.

use std::time::Duration;

pub(crate) use idempotency_delivery::backoff::random_sample;
use idempotency_delivery::backoff::Backoff;

use super::policy::DeliveryPolicy;

/// The wait before the next attempt, after `failed` failed attempts.
pub(crate) fn backoff(policy: &DeliveryPolicy, failed: u32, sample: u64) -> Duration {
    let bounds = Backoff {
        initial: policy.retry_initial,
        max: policy.retry_max,
    };
    bounds.wait(failed, sample)
}
