//! The config text and its name, and turning byte spans into the `file:line: key ...` errors
//! operators see.
//!
//! toml's own error display spans several lines with a source excerpt; a start-up failure must
//! be one line, so the message is rebuilt here from `message()` and `span()`.

use std::ops::Range;

use toml::Spanned;

use crate::config::common::error::{ConfigError, Reason};
use crate::config::file::RawFile;

/// The config text and the name errors call it by.
pub(in crate::config) struct Source<'a> {
    origin: &'a str,
    text: &'a str,
}

impl<'a> Source<'a> {
    pub(in crate::config) fn new(origin: &'a str, text: &'a str) -> Self {
        Self { origin, text }
    }

    /// Deserializes the raw file, reporting syntax and type errors with their line and key.
    pub(in crate::config) fn parse(&self) -> Result<RawFile, ConfigError> {
        toml::from_str(self.text).map_err(|e| self.toml_error(&e))
    }

    /// An error about the value of `key` at `spanned`.
    pub(in crate::config) fn bad<T>(
        &self,
        spanned: &Spanned<T>,
        key: &str,
        reason: impl Reason,
    ) -> ConfigError {
        let reason = format!("key {key:?}: {}", reason.into_reason());
        self.at(spanned.span(), Some(key), reason)
    }

    /// Parses a value the table must give, refusing it with its file, line and key.
    pub(in crate::config) fn check<T, E: Reason>(
        &self,
        value: &Spanned<String>,
        key: &str,
        parse: impl FnOnce(&str) -> Result<T, E>,
    ) -> Result<T, ConfigError> {
        parse(value.get_ref()).map_err(|reason| self.bad(value, key, reason))
    }

    /// Parses the value of `key`, if the table sets it, into `target`; a value `parse` refuses
    /// is an error at its line.
    pub(in crate::config) fn set<T, V, E: Reason>(
        &self,
        key: &str,
        given: &Option<Spanned<T>>,
        target: &mut V,
        parse: impl FnOnce(&T) -> Result<V, E>,
    ) -> Result<(), ConfigError> {
        if let Some(spanned) = given {
            *target = parse(spanned.get_ref()).map_err(|reason| self.bad(spanned, key, reason))?;
        }
        Ok(())
    }

    pub(in crate::config) fn at(
        &self,
        span: Range<usize>,
        key: Option<&str>,
        reason: String,
    ) -> ConfigError {
        ConfigError::File {
            origin: self.origin.to_owned(),
            line: self.line(span.start),
            key: key.map(str::to_owned),
            reason,
        }
    }

    /// The 1-based line holding byte `offset`.
    pub(in crate::config) fn line(&self, offset: usize) -> usize {
        let end = offset.min(self.text.len());
        1 + self.text.as_bytes()[..end]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
    }

    fn toml_error(&self, error: &toml::de::Error) -> ConfigError {
        let span = error.span().unwrap_or(0..0);
        let message = one_line(error.message());
        if let Some(key) = quoted_after(&message, "unknown field") {
            let known = message.split_once("expected").map_or("", |(_, rest)| rest);
            let reason = format!("unknown key {key:?} (expected {})", known.trim());
            return self.at(span, Some(&key), reason.replace('`', ""));
        }
        let key = quoted_after(&message, "missing field").or_else(|| self.key_at(span.start));
        match key {
            Some(key) => {
                let reason = format!("key {key:?}: {}", message.replace('`', "\""));
                self.at(span, Some(&key), reason)
            }
            None => self.at(span, None, message),
        }
    }

    /// The key assigned on the line at `offset`, or on the nearest line above it when the value
    /// is an element of a multi-line array; never across a table header.
    fn key_at(&self, offset: usize) -> Option<String> {
        let end = offset.min(self.text.len());
        let line_start = self.text.get(..end)?.rfind('\n').map_or(0, |i| i + 1);
        let line_end = self
            .text
            .get(end..)?
            .find('\n')
            .map_or(self.text.len(), |i| end + i);
        let current = self.text.get(line_start..line_end)?;
        let above = self.text.get(..line_start)?.lines().rev();
        let lines = std::iter::once(current).chain(above);
        for line in lines.take(64) {
            if is_table_header(line) {
                return None;
            }
            if let Some(key) = assigned_key(line) {
                return Some(key);
            }
        }
        None
    }
}

/// `[table]` or `[[array]]`, even when malformed; a nested array element has quotes or commas.
fn is_table_header(line: &str) -> bool {
    let line = line.trim();
    line.starts_with('[') && !line.contains(['"', '\'', ','])
}

/// `name` from a line `name = value` (the last part of a dotted `a.name = value`).
fn assigned_key(line: &str) -> Option<String> {
    let (key, _) = line.split_once('=')?;
    let key = key.rsplit('.').next()?.trim().trim_matches('"');
    let plain = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    (!key.is_empty() && key.chars().all(plain)).then(|| key.to_owned())
}

/// The first `quoted` word after `marker` in a serde message: "unknown field `tll`, ...".
fn quoted_after(message: &str, marker: &str) -> Option<String> {
    let rest = &message[message.find(marker)? + marker.len()..];
    let start = rest.find('`')? + 1;
    let len = rest[start..].find('`')?;
    Some(rest[start..start + len].to_owned())
}

fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}
