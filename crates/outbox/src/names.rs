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
    pub fn new(name: impl Into<String>) -> Result<Self, String> {
        let name = name.into();
        // The same rule as a route's name, and the same words.
        RouteName::new(name.as_str())
            .map_err(|e| e.to_string().replacen("route name", "outbox name", 1))?;
        Ok(Self(name))
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
    pub fn new(name: &str) -> Result<Self, String> {
        let parts: Vec<&str> = name.split('.').collect();
        let valid = parts.len() <= 2
            && parts
                .iter()
                .all(|p| !p.is_empty() && p.len() <= 63 && !p.contains('\0'));
        if !valid {
            return Err(format!(
                "table {name:?} must be \"table\" or \"schema.table\", each part 1 to 63 bytes"
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
    pub fn new(id: impl Into<String>) -> Result<Self, String> {
        let id = id.into();
        if let Err(e) = IdempotencyKey::new(id.as_str()) {
            return Err(format!("the id cannot be an Idempotency-Key: {e}"));
        }
        if id.starts_with('"') {
            return Err("the id cannot be an Idempotency-Key: it starts with a quote".to_owned());
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
