//! What the layer's answer to one delivery makes of the message (SPEC'd step 4): delivered,
//! a duplicate of one delivered before, again later, or dead.
//!
//! The layer answers for the upstream and for itself alike; its own answers are told apart by
//! their problem type (`request-in-flight`, `key-reused`, ...) and a replay by
//! `Idempotent-Replayed`.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use idempotency_delivery::backoff::{random_sample, Backoff};

use crate::settings::ConsumerSettings;

/// The layer's problem types, under the default problem base.
const PROBLEM_BASE: &str = "urn:problem-type:idempotency-proxy:";

/// What happens to a message after one delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The upstream said done, and the record says so: acknowledge.
    Delivered,
    /// A record of an earlier delivery says done: acknowledge, nothing was sent.
    Duplicate,
    /// Ask for it again after `delay`; `counted` when the upstream was asked.
    Retry { delay: Duration, counted: bool },
    /// Never again, for this reason.
    Dead(String),
}

/// An answer of the layer, read whole.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

impl Answer {
    fn replayed(&self) -> bool {
        self.headers
            .get("idempotent-replayed")
            .is_some_and(|v| v.as_bytes() == b"true")
    }

    /// The layer's own problem type, if this is one of its problem documents.
    fn problem(&self) -> Option<String> {
        let is_problem = self
            .headers
            .get(http::header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"application/problem+json"));
        if !is_problem {
            return None;
        }
        let document: serde_json::Value = serde_json::from_slice(&self.body).ok()?;
        let kind = document.get("type")?.as_str()?;
        kind.strip_prefix(PROBLEM_BASE).map(str::to_owned)
    }

    /// `Retry-After` in seconds, when the answer has one.
    fn retry_after(&self) -> Option<Duration> {
        let value = self.headers.get(http::header::RETRY_AFTER)?.to_str().ok()?;
        value.trim().parse::<u64>().ok().map(Duration::from_secs)
    }
}

/// The verdict on `answer` for the delivery numbered `attempt`.
pub(crate) fn judge(settings: &ConsumerSettings, answer: &Answer, attempt: u32) -> Verdict {
    let status = answer.status;
    if answer.replayed() {
        return if settings.is_success(status) {
            Verdict::Duplicate
        } else {
            Verdict::Dead(format!("an earlier delivery was answered {status}"))
        };
    }
    match answer.problem().as_deref() {
        // Running elsewhere, or the store is away: wait, without spending an attempt.
        Some("request-in-flight" | "store-unavailable") => {
            let delay = later(settings.backoff, attempt, answer.retry_after());
            return Verdict::Retry {
                delay,
                counted: false,
            };
        }
        // Delivered before, its answer too large to keep.
        Some("response-not-kept") => return Verdict::Duplicate,
        Some("key-reused") => {
            return Verdict::Dead("the key was used before by a message with another body".into())
        }
        _ => {}
    }
    if settings.is_success(status) {
        return Verdict::Delivered;
    }
    if !is_transient(status) {
        return Verdict::Dead(format!("the upstream answered {status}"));
    }
    if attempt >= settings.max_attempts {
        return Verdict::Dead(format!(
            "{attempt} attempts; the last was answered {status}"
        ));
    }
    let delay = later(settings.backoff, attempt, answer.retry_after());
    Verdict::Retry {
        delay,
        counted: true,
    }
}

/// Statuses that say "not now": the reservation was released and the message comes again.
pub(crate) fn is_transient(status: StatusCode) -> bool {
    matches!(status.as_u16(), 408 | 425 | 429) || status.is_server_error()
}

/// The backoff after `failed` attempts, or the answer's `Retry-After` when that is later.
fn later(backoff: Backoff, failed: u32, retry_after: Option<Duration>) -> Duration {
    let wait = backoff.wait(failed.max(1), random_sample());
    retry_after.map_or(wait, |after| after.max(wait))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, headers: &[(&'static str, &str)], body: &str) -> Answer {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.insert(*name, value.parse().unwrap());
        }
        Answer {
            status: StatusCode::from_u16(status).unwrap(),
            headers: map,
            body: Bytes::from(body.to_owned()),
        }
    }

    fn settings() -> ConsumerSettings {
        let mut settings = ConsumerSettings::new("c", "/events");
        settings.max_attempts = 3;
        settings.deliver_success = vec![StatusCode::CONFLICT];
        settings
    }

    #[test]
    fn success_duplicate_dead_and_retry_are_told_apart() {
        let s = settings();
        assert_eq!(judge(&s, &answer(200, &[], ""), 1), Verdict::Delivered);
        assert_eq!(judge(&s, &answer(409, &[], ""), 1), Verdict::Delivered);
        let replay = answer(201, &[("idempotent-replayed", "true")], "");
        assert_eq!(judge(&s, &replay, 1), Verdict::Duplicate);
        assert!(matches!(
            judge(&s, &answer(404, &[], ""), 1),
            Verdict::Dead(_)
        ));
        assert!(matches!(
            judge(&s, &answer(503, &[], ""), 1),
            Verdict::Retry { counted: true, .. }
        ));
        assert!(matches!(
            judge(&s, &answer(503, &[], ""), 3),
            Verdict::Dead(_)
        ));
    }

    #[test]
    fn the_layers_own_answers_are_read_by_their_problem_type() {
        let s = settings();
        let body = r#"{"type":"urn:problem-type:idempotency-proxy:request-in-flight"}"#;
        let in_flight = answer(409, &[("content-type", "application/problem+json")], body);
        assert!(matches!(
            judge(&s, &in_flight, 3),
            Verdict::Retry { counted: false, .. }
        ));
    }

    #[test]
    fn retry_after_wins_when_later_than_the_backoff() {
        let s = settings();
        let slow = answer(429, &[("retry-after", "7200")], "");
        assert_eq!(
            judge(&s, &slow, 1),
            Verdict::Retry {
                delay: Duration::from_secs(7200),
                counted: true
            }
        );
    }
}
