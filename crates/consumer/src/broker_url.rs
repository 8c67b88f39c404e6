//! A broker's URL as the config gives it: inline, or by reference (`env:NAME`, `file:PATH`),
//! and shown everywhere with its credentials as `***`.

use std::fmt;

/// Which broker a URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokerKind {
    /// NATS JetStream: `nats://`, `tls://`.
    JetStream,
    /// RabbitMQ over AMQP 0-9-1: `amqp://`, `amqps://`.
    RabbitMq,
}

/// A broker URL, resolved, with what may be shown of it.
#[derive(Clone, PartialEq, Eq)]
pub struct BrokerUrl {
    url: String,
    /// The `env:`/`file:` reference it came from, when it came from one.
    reference: Option<String>,
}

/// A broker URL that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0}")]
pub struct BadBrokerUrl(String);

impl BrokerUrl {
    /// Reads `value`: a URL, or `env:NAME` / `file:PATH` holding one.
    pub fn resolve(value: &str) -> Result<Self, BadBrokerUrl> {
        let (url, reference) = if let Some(name) = value.strip_prefix("env:") {
            let url = std::env::var(name)
                .map_err(|_| BadBrokerUrl(format!("environment variable {name:?} is not set")))?;
            (url, Some(value.to_owned()))
        } else if let Some(path) = value.strip_prefix("file:") {
            let text = std::fs::read_to_string(path)
                .map_err(|e| BadBrokerUrl(format!("cannot read {path:?}: {e}")))?;
            (text.trim().to_owned(), Some(value.to_owned()))
        } else {
            (value.to_owned(), None)
        };
        let parsed = Self { url, reference };
        parsed.kind()?;
        Ok(parsed)
    }

    /// Which broker it names.
    pub fn kind(&self) -> Result<BrokerKind, BadBrokerUrl> {
        let scheme = self.url.split_once("://").map(|(s, _)| s);
        match scheme {
            Some("nats" | "tls") => Ok(BrokerKind::JetStream),
            Some("amqp" | "amqps") => Ok(BrokerKind::RabbitMq),
            _ => Err(BadBrokerUrl(format!(
                "{} is neither nats://, tls://, amqp:// nor amqps://",
                masked(&self.url)
            ))),
        }
    }

    /// The URL itself, credentials included: for connecting, never for showing.
    pub fn expose(&self) -> &str {
        &self.url
    }

    /// What `--check` and the logs show: the reference as written, or the URL with `***` for
    /// its credentials.
    pub fn shown(&self) -> String {
        self.reference.clone().unwrap_or_else(|| masked(&self.url))
    }
}

impl fmt::Display for BrokerUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&masked(&self.url))
    }
}

impl fmt::Debug for BrokerUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BrokerUrl({})", self.shown())
    }
}

/// The URL with its password (or a lone token) as `***`.
fn masked(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_owned();
    };
    let userinfo = &rest[..at];
    let shown = match userinfo.split_once(':') {
        Some((user, _)) => format!("{user}:***"),
        None => "***".to_owned(),
    };
    format!("{scheme}://{shown}{}", &rest[at..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_never_shown() {
        let url = BrokerUrl::resolve("amqp://fulfil:s3cret@rabbit:5672/orders").unwrap();
        assert_eq!(url.shown(), "amqp://fulfil:***@rabbit:5672/orders");
        assert_eq!(url.kind(), Ok(BrokerKind::RabbitMq));
        let token = BrokerUrl::resolve("nats://t0ken@127.0.0.1:4222").unwrap();
        assert_eq!(token.to_string(), "nats://***@127.0.0.1:4222");
        assert!(!format!("{token:?}").contains("t0ken"));
        assert!(BrokerUrl::resolve("http://x").is_err());
    }
}
