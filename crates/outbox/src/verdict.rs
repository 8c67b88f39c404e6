//! What an attempt's outcome makes of its row: delivered on a `2xx`; dead on `410 Gone` or once
//! `max_attempts` or `max_age` is spent; otherwise due again after the backoff, or after the
//! answer's `Retry-After` when that is later (never past `retry_max`).

use std::time::{Duration, SystemTime};

use http::header::RETRY_AFTER;
use http::{HeaderMap, StatusCode};

use crate::config::OutboxConfig;

/// What an attempt came to, as the attempt metric's `result` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The receiver said yes.
    Delivered { status: StatusCode },
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

/// The receiver's answer (its status and headers), or why there was none.
pub(crate) type Outcome = Result<(StatusCode, HeaderMap), String>;

/// Judges attempt number `attempt` of a row `age` old; `sample` draws the jitter.
pub(crate) fn judge(
    config: &OutboxConfig,
    attempt: u32,
    age: Duration,
    outcome: Outcome,
    sample: u64,
    now: SystemTime,
) -> Verdict {
    let (status, headers) = match outcome {
        Ok((status, _)) if status.is_success() => return Verdict::Delivered { status },
        Ok((StatusCode::GONE, _)) => {
            let error = "the receiver answered 410 Gone".to_owned();
            let status = Some(StatusCode::GONE);
            return Verdict::Dead { status, error };
        }
        Ok((status, headers)) => (Some(status), headers),
        Err(error) => {
            return exhausted_or_retry(config, attempt, age, None, error, None, sample);
        }
    };
    let error = format!("the receiver answered {}", status.map_or(0, |s| s.as_u16()));
    let asked = retry_after(&headers, now);
    exhausted_or_retry(config, attempt, age, status, error, asked, sample)
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

/// `Retry-After` as a wait from `now`: delay-seconds, or an HTTP date.
fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;
    use crate::names::OutboxName;

    fn config() -> OutboxConfig {
        let mut config = OutboxConfig::new(OutboxName::new("payments").unwrap());
        config.max_attempts = 5;
        config.max_age = Duration::from_secs(3600);
        config
    }

    fn answer(status: u16, retry_after: Option<&str>) -> Outcome {
        let mut headers = HeaderMap::new();
        if let Some(value) = retry_after {
            headers.insert(RETRY_AFTER, HeaderValue::from_str(value).unwrap());
        }
        Ok((StatusCode::from_u16(status).unwrap(), headers))
    }

    const MINUTE: Duration = Duration::from_secs(60);

    #[test]
    fn success_gone_and_the_budget() {
        let now = SystemTime::now();
        let judge = |attempt, age, outcome| judge(&config(), attempt, age, outcome, u64::MAX, now);
        assert_eq!(judge(5, MINUTE, answer(204, None)).result(), "delivered");
        let gone = judge(1, MINUTE, answer(410, None));
        assert!(
            matches!(
                gone,
                Verdict::Dead {
                    status: Some(StatusCode::GONE),
                    ..
                }
            ),
            "{gone:?}"
        );
        let Verdict::Retry {
            wait,
            status,
            error,
        } = judge(3, MINUTE, answer(503, None))
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
        let Verdict::Dead { error, .. } = judge(5, MINUTE, answer(500, None)) else {
            panic!("out of attempts")
        };
        assert!(error.ends_with("(attempt 5 of max_attempts 5)"), "{error}");
        let old = judge(
            1,
            Duration::from_secs(3600),
            Err("connection refused".into()),
        );
        assert!(matches!(old, Verdict::Dead { status: None, .. }), "{old:?}");
    }

    #[test]
    fn retry_after_counts_when_later_and_never_past_retry_max() {
        let now = SystemTime::now();
        let judge = |outcome| judge(&config(), 1, MINUTE, outcome, 0, now);
        let wait = |verdict: Verdict| match verdict {
            Verdict::Retry { wait, .. } => wait,
            other => panic!("{other:?}"),
        };
        assert_eq!(wait(judge(answer(429, Some("7")))), Duration::from_secs(7));
        assert_eq!(
            wait(judge(answer(429, Some("86400")))),
            Duration::from_secs(600)
        );
        let date = httpdate::fmt_http_date(now + Duration::from_secs(30));
        let waited = wait(judge(answer(503, Some(&date))));
        assert!(
            waited <= Duration::from_secs(30) && waited >= Duration::from_secs(28),
            "{waited:?}"
        );
        assert_eq!(
            wait(judge(answer(503, Some("soon")))),
            Duration::ZERO,
            "unreadable: ignored"
        );
    }
}
