//! A top-level value and where it came from: a flag, or a line of the file. Every top-level
//! key that a flag can override is read through it, so an error names the one the operator
//! typed.

use toml::Spanned;

use crate::config::common::error::{ConfigError, Reason};
use crate::config::common::source::Source;

/// A top-level value and where it was given, so an error points at the flag or the line.
pub(in crate::config) enum Given<'a> {
    Flag(&'static str, &'a str),
    File(&'static str, &'a Spanned<String>),
}

impl<'a> Given<'a> {
    /// The flag's value if it was passed, else the file's.
    pub(in crate::config) fn pick(
        flag: (&'static str, Option<&'a String>),
        file: (&'static str, Option<&'a Spanned<String>>),
    ) -> Option<Self> {
        match (flag, file) {
            ((name, Some(value)), _) => Some(Given::Flag(name, value)),
            (_, (key, Some(value))) => Some(Given::File(key, value)),
            _ => None,
        }
    }

    pub(in crate::config) fn parse<T, E: Reason>(
        &self,
        src: &Source,
        parse: impl FnOnce(&str) -> Result<T, E>,
    ) -> Result<T, ConfigError> {
        match self {
            Given::Flag(flag, value) => parse(value).map_err(|reason| ConfigError::Flag {
                flag,
                reason: reason.into_reason(),
            }),
            Given::File(key, value) => {
                parse(value.get_ref()).map_err(|reason| src.bad(value, key, reason))
            }
        }
    }
}
