//! How an inbox route delivers (docs/reference.md#inbox-routes): what counts as delivered, how long an attempt
//! may take, how retries back off and when they stop, and how fast deliveries may go.

use std::num::NonZeroU32;
use std::time::Duration;

use http::StatusCode;

/// The delivery keys of one inbox route, resolved: defaults merged, units parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryPolicy {
    /// Statuses besides `2xx` that end a delivery (`deliver_success`).
    pub deliver_success: Vec<StatusCode>,
    /// How long one attempt may take, the answer's body included (`deliver_timeout`).
    pub deliver_timeout: Duration,
    /// The backoff after the first failed attempt, before jitter (`retry_initial`).
    pub retry_initial: Duration,
    /// The longest backoff, before jitter (`retry_max`).
    pub retry_max: Duration,
    /// Attempts before a delivery is dead (`max_attempts`).
    pub max_attempts: u32,
    /// Age (since it was acknowledged) past which a failed delivery is dead (`max_age`).
    pub max_age: Duration,
    /// Attempts of the route in flight at once (`deliver_concurrency`).
    pub deliver_concurrency: usize,
    /// Attempts a second, sent at least `1/deliver_rate` apart, when set (`deliver_rate`).
    pub deliver_rate: Option<NonZeroU32>,
}

impl Default for DeliveryPolicy {
    /// The defaults of docs/reference.md#inbox-keys.
    fn default() -> Self {
        Self {
            deliver_success: Vec::new(),
            deliver_timeout: Duration::from_secs(30),
            retry_initial: Duration::from_secs(1),
            retry_max: Duration::from_secs(600),
            max_attempts: 20,
            max_age: Duration::from_secs(72 * 3600),
            deliver_concurrency: 16,
            deliver_rate: None,
        }
    }
}

impl DeliveryPolicy {
    /// Whether an upstream answer with `status` ends the delivery.
    pub fn delivered(&self, status: StatusCode) -> bool {
        status.is_success() || self.deliver_success.contains(&status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn success_is_2xx_or_a_listed_status() {
        let policy = DeliveryPolicy {
            deliver_success: vec![StatusCode::CONFLICT],
            ..DeliveryPolicy::default()
        };
        assert!(policy.delivered(StatusCode::OK));
        assert!(policy.delivered(StatusCode::NO_CONTENT));
        assert!(policy.delivered(StatusCode::CONFLICT));
        assert!(!policy.delivered(StatusCode::INTERNAL_SERVER_ERROR));
        assert!(!policy.delivered(StatusCode::MOVED_PERMANENTLY));
    }
}
