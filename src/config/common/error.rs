//! Why a configuration was refused, as one line an operator can act on: the file, the line and
//! the key, or the flag.

use std::fmt;

/// Why the configuration was refused. Its `Display` is a single line, fit for stderr.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// The config file could not be read.
    Read {
        /// The file, as named.
        path: String,
        /// Why it could not be read.
        reason: String,
    },
    /// A problem at a line of the file. `reason` already names the key; `key` is for callers
    /// that want it separately, and is `None` for a TOML syntax error.
    File {
        /// The file, as named.
        origin: String,
        /// The line, from 1.
        line: usize,
        /// The key, when the problem is with one.
        key: Option<String>,
        /// What is wrong, naming the key.
        reason: String,
    },
    /// A bad command-line value.
    Flag {
        /// The flag, e.g. `--listen`.
        flag: &'static str,
        /// What is wrong with its value.
        reason: String,
    },
    /// Neither routes nor a top-level upstream: the proxy would have nowhere to send anything.
    NoUpstream,
    /// A valid config the running proxy cannot serve as it is (a reload making a route an
    /// inbox on a store that keeps no inbox queues): why, in one line.
    Unservable(String),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Read { path, reason } => write!(f, "{path}: cannot read: {reason}"),
            ConfigError::File {
                origin,
                line,
                reason,
                ..
            } => write!(f, "{origin}:{line}: {reason}"),
            ConfigError::Flag { flag, reason } => write!(f, "{flag}: {reason}"),
            ConfigError::NoUpstream => f.write_str(
                "no upstream: pass --upstream URL or set upstream/[[routes]] (or [[outboxes]]) in the config",
            ),
            ConfigError::Unservable(reason) => f.write_str(reason),
        }
    }
}

impl std::error::Error for ConfigError {}

/// What a value is refused with, written as the reason of a [`ConfigError`]: the loader's own
/// words, or a typed error of the crates below with its causes (`a: b`), the one line an
/// operator reads.
pub(in crate::config) trait Reason {
    /// The reason, in one line.
    fn into_reason(self) -> String;
}

impl Reason for String {
    fn into_reason(self) -> String {
        self
    }
}

/// A parse that cannot fail.
impl Reason for std::convert::Infallible {
    fn into_reason(self) -> String {
        match self {}
    }
}

impl Reason for &str {
    fn into_reason(self) -> String {
        self.to_owned()
    }
}

/// An outbox's refused name already says why in its own words; its source (the route-name or
/// key rule it broke) would only repeat them.
impl Reason for idempotency_outbox::NameError {
    fn into_reason(self) -> String {
        self.to_string()
    }
}

/// Typed errors read as their chain of causes.
macro_rules! reasons {
    ($($error:ty),* $(,)?) => {
        $(impl Reason for $error {
            fn into_reason(self) -> String {
                idempotency_core::proxy::ErrorChain(&self).to_string()
            }
        })*
    };
}

reasons!(
    idempotency_core::SecretError,
    idempotency_core::proxy::humane_duration::DurationError,
    idempotency_core::backend::SealingKeyError,
    idempotency_core::backend::RouteNameError,
    idempotency_core::policy::VerifierError,
    idempotency_core::policy::JsonPointerError,
    idempotency_core::ProblemBaseError,
    idempotency_delivery::signing::WebhookKeyError,
);
