//! The names an outbox is known by: its own ([`OutboxName`], in logs, metrics and admin paths),
//! its table's ([`TableName`]), and each event's ([`EventId`], the `Idempotency-Key` of every
//! attempt).

use std::fmt;

use idempotency_core::backend::{IdempotencyKey, RouteName};
use idempotency_postgres::quote_qualified;

/// An outbox's name: 1 to 64 letters, digits, `-`, `_` or `.`, as a route's.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OutboxName(String);

impl OutboxName {
    /// Checks `name`.
    ///
    /// ```
    /// use idempotency_outbox::OutboxName;
    /// assert!(OutboxName::new("payments").is_ok());
    /// assert!(OutboxName::new("pay ments").is_err());
    /// ```
    pub fn new(name: impl Into<String>) -> Result<Self, NameError> {
        let name = name.into();
        // The same rule as a route's name, and the same words.
        match RouteName::new(name.as_str()) {
            Ok(_) => Ok(Self(name)),
            Err(e) => {
                let reason = e.to_string().replacen("route name", "outbox name", 1);
                Err(NameError::new(NameKind::Outbox, reason).with_source(e))
            }
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for OutboxName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An outbox table, `table` or `schema.table`, each part written as it is (quoted in SQL, so
/// its case is kept).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableName {
    written: String,
    quoted: String,
}

impl TableName {
    /// Checks `name`: one or two non-empty parts joined by a dot.
    ///
    /// ```
    /// use idempotency_outbox::TableName;
    /// let table = TableName::new("app.outbox").unwrap();
    /// assert_eq!(table.quoted(), "\"app\".\"outbox\"");
    /// assert!(TableName::new("a.b.c").is_err() && TableName::new("").is_err());
    /// ```
    pub fn new(name: &str) -> Result<Self, NameError> {
        Self::check(name).map_err(|reason| NameError::new(NameKind::Table, reason))
    }

    fn check(name: &str) -> Result<Self, String> {
        let parts: Vec<&str> = name.split('.').collect();
        if parts.len() > 2 || parts.iter().any(|p| p.is_empty()) {
            return Err(format!(
                "table {name:?} must be \"table\" or \"schema.table\", each part not empty"
            ));
        }
        if name.chars().any(char::is_control) {
            return Err(format!(
                "table {name:?} holds a control character (a name reaches SQL text and comments)"
            ));
        }
        let table = parts[parts.len() - 1];
        if table.len() > MAX_TABLE_LEN {
            return Err(format!(
                "table {table:?} is {} bytes: at most {MAX_TABLE_LEN}, so that the names of its \
                 indexes (the table's, then up to {} more) stay whole and unique within \
                 PostgreSQL's {MAX_IDENTIFIER_LEN} bytes",
                table.len(),
                MAX_IDENTIFIER_LEN - MAX_TABLE_LEN
            ));
        }
        if parts.len() == 2 && parts[0].len() > MAX_IDENTIFIER_LEN {
            return Err(format!(
                "schema {:?} is longer than PostgreSQL's {MAX_IDENTIFIER_LEN} bytes",
                parts[0]
            ));
        }
        Ok(Self {
            written: name.to_owned(),
            quoted: quote_qualified(name),
        })
    }

    /// As written in the config.
    pub fn as_str(&self) -> &str {
        &self.written
    }

    /// As SQL names it: each part quoted.
    pub fn quoted(&self) -> &str {
        &self.quoted
    }

    /// The schema, when the name gives one.
    pub fn schema(&self) -> Option<&str> {
        self.written.split_once('.').map(|(schema, _)| schema)
    }

    /// The table's own name, without its schema.
    pub fn table(&self) -> &str {
        self.written
            .split_once('.')
            .map_or(self.written.as_str(), |(_, table)| table)
    }
}

impl Default for TableName {
    fn default() -> Self {
        Self::new("outbox").expect("a valid table name")
    }
}

impl fmt::Display for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.written)
    }
}

/// The longest name PostgreSQL keeps whole (`NAMEDATALEN - 1`).
const MAX_IDENTIFIER_LEN: usize = 63;
/// The longest table name whose derived names (`_delivered`, the longest suffix, and the
/// identity's `_seq_seq`) stay within [`MAX_IDENTIFIER_LEN`].
const MAX_TABLE_LEN: usize = MAX_IDENTIFIER_LEN - "_delivered".len();

/// Checks a channel name for `LISTEN`/`NOTIFY` (`notify_channel`, `outbox-schema
/// --notify-channel`): 1 to 63 bytes, no control character (it is written into the printed
/// DDL, in a comment and a string).
///
/// ```
/// use idempotency_outbox::channel_name;
/// assert!(channel_name("outbox").is_ok());
/// assert!(channel_name("out\nbox").is_err() && channel_name(&"c".repeat(64)).is_err());
/// ```
pub fn channel_name(raw: &str) -> Result<String, NameError> {
    check_channel(raw).map_err(|reason| NameError::new(NameKind::Channel, reason))
}

fn check_channel(raw: &str) -> Result<String, String> {
    if raw.is_empty() || raw.len() > MAX_IDENTIFIER_LEN {
        return Err(format!(
            "channel {raw:?} must be 1 to {MAX_IDENTIFIER_LEN} bytes"
        ));
    }
    if raw.chars().any(char::is_control) {
        return Err(format!("channel {raw:?} holds a control character"));
    }
    Ok(raw.to_owned())
}

/// An event's id: what the receiver sees as `Idempotency-Key` (and `webhook-id`) on every
/// attempt, so 1 to 255 visible ASCII characters, not starting with a quote (which a receiver
/// would read as a structured-field string).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventId(String);

impl EventId {
    /// Checks `id`.
    ///
    /// ```
    /// use idempotency_outbox::EventId;
    /// assert!(EventId::new("evt_01J9Z3").is_ok());
    /// assert!(EventId::new("has space").is_err() && EventId::new("\"quoted\"").is_err());
    /// ```
    pub fn new(id: impl Into<String>) -> Result<Self, NameError> {
        let id = id.into();
        if let Err(e) = IdempotencyKey::new(id.as_str()) {
            let reason = format!("the id cannot be an Idempotency-Key: {e}");
            return Err(NameError::new(NameKind::EventId, reason).with_source(e));
        }
        if id.starts_with('"') {
            let reason = "the id cannot be an Idempotency-Key: it starts with a quote";
            return Err(NameError::new(NameKind::EventId, reason));
        }
        Ok(Self(id))
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a refused name was meant to name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NameKind {
    /// An outbox's own name.
    Outbox,
    /// Its table, `table` or `schema.table`.
    Table,
    /// A `LISTEN`/`NOTIFY` channel.
    Channel,
    /// An event's id.
    EventId,
    /// A destination's URL (`deliver_to`, a value of `topics`).
    Destination,
}

/// A name or URL an outbox cannot use, and why, in words fit for a config error; the check
/// that refused it, where it has an error of its own, is its source.
#[derive(Debug, thiserror::Error)]
#[error("{reason}")]
pub struct NameError {
    kind: NameKind,
    reason: String,
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl NameError {
    pub(crate) fn new(kind: NameKind, reason: impl Into<String>) -> Self {
        Self {
            kind,
            reason: reason.into(),
            source: None,
        }
    }

    pub(crate) fn with_source(
        mut self,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// What the refused name was meant to name.
    pub fn kind(&self) -> NameKind {
        self.kind
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_that_could_become_sql_or_collide_are_refused_with_why() {
        let newline = TableName::new("outbox\nDROP TABLE x").unwrap_err();
        assert_eq!(newline.kind(), NameKind::Table);
        let newline = newline.to_string();
        assert!(newline.contains("control character"), "{newline}");
        let longest = "t".repeat(MAX_TABLE_LEN);
        assert!(TableName::new(&longest).is_ok());
        let long = TableName::new(&format!("{longest}x"))
            .unwrap_err()
            .to_string();
        assert!(long.contains("at most 53"), "{long}");
        assert!(TableName::new(&format!("{}.outbox", "s".repeat(64))).is_err());
        assert!(TableName::new(&format!("{}.outbox", "s".repeat(63))).is_ok());
        assert!(TableName::new("app.").is_err() && TableName::new("a.b.c").is_err());
    }
}
