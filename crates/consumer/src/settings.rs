//! What one consumer promises: where its key comes from, where it delivers, how it retries.
//! The proxy's config reads `[[consumers]]` into these; a Rust service can build them itself.

use std::str::FromStr;
use std::time::Duration;

use http::{Method, StatusCode};
use idempotency_core::backend::{IdempotencyKey, KeyError};
use idempotency_delivery::backoff::Backoff;

use crate::source::Message;

/// Where a message's idempotency key comes from (`key_from`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyFrom {
    /// `message-id`: the broker's id (`Nats-Msg-Id`, AMQP `message_id`).
    MessageId,
    /// `header:NAME`: a header of the message.
    Header(String),
    /// `pointer:/json/pointer`: a member of the JSON body.
    Pointer(String),
}

/// A `key_from` value that is none of the three forms.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0}")]
pub struct BadKeyFrom(String);

impl FromStr for KeyFrom {
    type Err = BadKeyFrom;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        if value == "message-id" {
            return Ok(Self::MessageId);
        }
        if let Some(name) = value.strip_prefix("header:") {
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_graphic() && b != b':') {
                return Err(BadKeyFrom(format!("{value:?} does not name a header")));
            }
            return Ok(Self::Header(name.to_owned()));
        }
        if let Some(pointer) = value.strip_prefix("pointer:") {
            if !pointer.starts_with('/') {
                return Err(BadKeyFrom(format!(
                    "{value:?}: a JSON pointer starts with '/'"
                )));
            }
            return Ok(Self::Pointer(pointer.to_owned()));
        }
        Err(BadKeyFrom(format!(
            "{value:?} is none of \"message-id\", \"header:NAME\", \"pointer:/json/pointer\""
        )))
    }
}

/// Why a message has no usable key.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NoKey {
    /// The message has no key where `key_from` looks.
    #[error("the message has no key ({0})")]
    Missing(&'static str),
    /// The key breaks the rules of keys.
    #[error("the message's key is not valid: {0}")]
    Invalid(#[source] KeyError),
}

impl KeyFrom {
    /// The message's key, validated as a request's would be.
    pub fn key_of(&self, message: &Message) -> Result<IdempotencyKey, NoKey> {
        match self {
            Self::MessageId => {
                let id = message
                    .id
                    .as_deref()
                    .ok_or(NoKey::Missing("no message id"))?;
                IdempotencyKey::new(id).map_err(NoKey::Invalid)
            }
            Self::Header(name) => {
                let value = message
                    .header(name)
                    .ok_or(NoKey::Missing("no such header"))?;
                IdempotencyKey::from_header_value(value.as_bytes()).map_err(NoKey::Invalid)
            }
            Self::Pointer(pointer) => IdempotencyKey::from_json_body(&message.body, pointer)
                .map_err(NoKey::Invalid)?
                .ok_or(NoKey::Missing("no such member in the JSON body")),
        }
    }
}

/// One consumer's delivery settings (the keys of `[[consumers]]` that are not the broker's).
#[derive(Debug, Clone)]
pub struct ConsumerSettings {
    /// Names logs, metrics, admin paths, and scopes the keys.
    pub name: String,
    /// The request target on the upstream (`path`).
    pub path: String,
    /// The request method (`method`, default `POST`).
    pub method: Method,
    /// Where the key comes from (`key_from`).
    pub key_from: KeyFrom,
    /// At most this many messages in flight (`deliver_concurrency`).
    pub deliver_concurrency: usize,
    /// How long one request may take (`deliver_timeout`).
    pub deliver_timeout: Duration,
    /// The backoff between attempts (`retry_initial`, `retry_max`).
    pub backoff: Backoff,
    /// Attempts before a message is dead (`max_attempts`).
    pub max_attempts: u32,
    /// Where dead messages are published (`dead_letter`).
    pub dead_letter: Option<String>,
    /// Statuses beyond `2xx` that mean delivered (`deliver_success`).
    pub deliver_success: Vec<StatusCode>,
    /// How long a key is remembered (`ttl`).
    pub ttl: Duration,
    /// How long an in-flight reservation lives without renewal (`lease`).
    pub lease: Duration,
    /// How long a drain waits for messages in flight (`drain_timeout`).
    pub drain_timeout: Duration,
}

impl ConsumerSettings {
    /// The defaults of SPEC'd keys for a consumer of this name delivering to `path`.
    pub fn new(name: impl Into<String>, path: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            path: path.into(),
            method: Method::POST,
            key_from: KeyFrom::MessageId,
            deliver_concurrency: 16,
            deliver_timeout: Duration::from_secs(30),
            backoff: Backoff {
                initial: Duration::from_secs(1),
                max: Duration::from_secs(600),
            },
            max_attempts: 20,
            dead_letter: None,
            deliver_success: Vec::new(),
            ttl: Duration::from_secs(24 * 60 * 60),
            lease: Duration::from_secs(30),
            drain_timeout: Duration::from_secs(30),
        }
    }

    /// Whether the upstream's answer means delivered.
    pub fn is_success(&self, status: StatusCode) -> bool {
        status.is_success() || self.deliver_success.contains(&status)
    }

    /// The route name the keys are scoped by: the consumer's name, marked as a consumer's so it
    /// never meets an HTTP route of the same name in a shared store.
    pub fn scope(&self) -> String {
        format!("consumer.{}", self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_from_reads_the_three_forms_and_refuses_others() {
        assert_eq!("message-id".parse(), Ok(KeyFrom::MessageId));
        assert_eq!(
            "header:Event-Id".parse(),
            Ok(KeyFrom::Header("Event-Id".into()))
        );
        assert_eq!("pointer:/id".parse(), Ok(KeyFrom::Pointer("/id".into())));
        assert!("pointer:id".parse::<KeyFrom>().is_err());
        assert!("header:".parse::<KeyFrom>().is_err());
        assert!("id".parse::<KeyFrom>().is_err());
    }
}
