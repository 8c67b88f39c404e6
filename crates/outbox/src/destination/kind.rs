//! Which kind of destination a URL names, by its scheme, and the URL as logs may show it: a
//! broker URL carries its credentials (`amqp://user:pass@host/vhost`), which never reach a log
//! line, `--check`'s output or an error.

use http::Uri;

/// The kinds of destination, by URL scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DestinationKind {
    /// `http://`, `https://`: a request to a receiver.
    Http,
    /// `nats://`, `tls://`: a publish to a JetStream stream.
    JetStream,
    /// `amqp://`, `amqps://`: a publish to RabbitMQ (AMQP 0-9-1).
    Amqp,
}

impl DestinationKind {
    /// The kind `url`'s scheme names, if any.
    ///
    /// ```
    /// use idempotency_outbox::DestinationKind;
    /// let kind = |url: &str| DestinationKind::of(&url.parse().unwrap());
    /// assert_eq!(kind("tls://nats.internal:4222"), Some(DestinationKind::JetStream));
    /// assert_eq!(kind("amqps://u:p@mq/vh"), Some(DestinationKind::Amqp));
    /// assert_eq!(kind("ftp://host/x"), None);
    /// ```
    pub fn of(url: &Uri) -> Option<Self> {
        match url.scheme_str()? {
            "http" | "https" => Some(Self::Http),
            "nats" | "tls" => Some(Self::JetStream),
            "amqp" | "amqps" => Some(Self::Amqp),
            _ => None,
        }
    }

    /// As logs name it: `http`, `jetstream`, `amqp`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::JetStream => "jetstream",
            Self::Amqp => "amqp",
        }
    }

    /// The cargo feature that builds it in.
    pub fn feature(self) -> &'static str {
        match self {
            Self::Http => "",
            Self::JetStream => "nats",
            Self::Amqp => "amqp",
        }
    }
}

/// `url` with the password of its user info (or the whole user info when it is a token alone)
/// shown as `***`.
///
/// ```
/// use idempotency_outbox::redacted;
/// let shown = |url: &str| redacted(&url.parse().unwrap());
/// assert_eq!(shown("amqp://app:s3cret@mq:5672/orders"), "amqp://app:***@mq:5672/orders");
/// assert_eq!(shown("nats://t0ken@nats:4222"), "nats://***@nats:4222/");
/// assert_eq!(shown("http://127.0.0.1:9/events"), "http://127.0.0.1:9/events");
/// ```
pub fn redacted(url: &Uri) -> String {
    let text = url.to_string();
    let Some(authority) = url.authority().map(http::uri::Authority::as_str) else {
        return text;
    };
    let Some((user_info, host)) = authority.rsplit_once('@') else {
        return text;
    };
    let shown = match user_info.split_once(':') {
        Some((user, _)) => format!("{user}:***@{host}"),
        None => format!("***@{host}"),
    };
    text.replacen(authority, &shown, 1)
}
