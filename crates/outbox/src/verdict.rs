//! What an attempt's [`Delivery`] makes of its row: delivered when the destination took it;
//! dead when it said never, or once `max_attempts` or `max_age` is spent; otherwise due again
//! after the backoff, or after the wait the destination asked for when that is later (never
//! past `retry_max`).

use std::time::Duration;

use http::StatusCode;

use crate::config::OutboxConfig;
use crate::destination::Delivery;

/// What an attempt came to, as the attempt metric's `result` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The destination took it.
    Delivered { status: Option<StatusCode> },
    /// Tried again after `wait`.
    Retry {
        wait: Duration,
        status: Option<StatusCode>,
        error: String,
    },
    /// Never tried again (unless an operator retries it).
    Dead {
        status: Option<StatusCode>,
        error: String,
    },
}

impl Verdict {
    /// `delivered`, `failed` or `dead`.
    pub(crate) fn result(&self) -> &'static str {
        match self {
            Verdict::Delivered { .. } => "delivered",
            Verdict::Retry { .. } => "failed",
            Verdict::Dead { .. } => "dead",
        }
    }
}

/// Judges attempt number `attempt` of a row `age` old; `sample` draws the jitter.
pub(crate) fn judge(
    config: &OutboxConfig,
    attempt: u32,
    age: Duration,
    delivery: Delivery,
    sample: u64,
) -> Verdict {
    match delivery {
        Delivery::Delivered { status } => Verdict::Delivered { status },
        Delivery::Dead { status, reason } => Verdict::Dead {
            status,
            error: reason,
        },
        Delivery::Failed {
            status,
            retry_after,
            reason,
        } => exhausted_or_retry(config, attempt, age, status, reason, retry_after, sample),
    }
}

fn exhausted_or_retry(
    config: &OutboxConfig,
    attempt: u32,
    age: Duration,
    status: Option<StatusCode>,
    error: String,
    asked: Option<Duration>,
    sample: u64,
) -> Verdict {
    if attempt >= config.max_attempts {
        let error = format!(
            "{error} (attempt {attempt} of max_attempts {})",
            config.max_attempts
        );
        return Verdict::Dead { status, error };
    }
    if age >= config.max_age {
        let max_age = humantime::format_duration(config.max_age);
        let error = format!("{error} (the row is older than max_age {max_age})");
        return Verdict::Dead { status, error };
    }
    let backoff = config.retry.wait(attempt, sample);
    let wait = match asked {
        Some(asked) if asked > backoff => asked.min(config.retry.max),
        _ => backoff,
    };
    Verdict::Retry {
        wait,
        status,
        error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::OutboxName;

    fn config() -> OutboxConfig {
        let mut config = OutboxConfig::new(OutboxName::new("payments").unwrap());
        config.max_attempts = 5;
        config.max_age = Duration::from_secs(3600);
        config
    }

    fn failed(status: u16, retry_after: Option<u64>) -> Delivery {
        Delivery::Failed {
            status: Some(StatusCode::from_u16(status).unwrap()),
            retry_after: retry_after.map(Duration::from_secs),
            reason: format!("the receiver answered {status}"),
        }
    }

    const MINUTE: Duration = Duration::from_secs(60);

    #[test]
    fn delivered_dead_and_the_budget() {
        let judge = |attempt, age, delivery| judge(&config(), attempt, age, delivery, u64::MAX);
        let delivered = Delivery::Delivered { status: None };
        assert_eq!(judge(5, MINUTE, delivered).result(), "delivered");
        let dead = judge(1, MINUTE, Delivery::dead("payload too large"));
        assert!(
            matches!(dead, Verdict::Dead { status: None, .. }),
            "{dead:?}"
        );
        let Verdict::Retry {
            wait,
            status,
            error,
        } = judge(3, MINUTE, failed(503, None))
        else {
            panic!("retried")
        };
        assert_eq!(
            (wait, status),
            (
                Duration::from_secs(4),
                Some(StatusCode::SERVICE_UNAVAILABLE)
            )
        );
        assert_eq!(error, "the receiver answered 503");
        let Verdict::Dead { error, .. } = judge(5, MINUTE, failed(500, None)) else {
            panic!("out of attempts")
        };
        assert!(error.ends_with("(attempt 5 of max_attempts 5)"), "{error}");
        let old = judge(
            1,
            Duration::from_secs(3600),
            Delivery::failed("connection refused"),
        );
        assert!(matches!(old, Verdict::Dead { status: None, .. }), "{old:?}");
    }

    #[test]
    fn an_asked_wait_counts_when_later_and_never_past_retry_max() {
        let judge = |delivery| judge(&config(), 1, MINUTE, delivery, 0);
        let wait = |verdict: Verdict| match verdict {
            Verdict::Retry { wait, .. } => wait,
            other => panic!("{other:?}"),
        };
        assert_eq!(wait(judge(failed(429, Some(7)))), Duration::from_secs(7));
        assert_eq!(
            wait(judge(failed(429, Some(86400)))),
            Duration::from_secs(600)
        );
        assert_eq!(wait(judge(failed(503, None))), Duration::ZERO);
    }
}
