//! The start-up check of an outbox table: every column the relay reads or writes is there with
//! a type it can use, and the ones the application leaves out have defaults. A table that is
//! not so is refused with every problem named, before any row is claimed.

use std::fmt;

use crate::names::TableName;

/// The type of the `payload` column, which decides how a body is read and its default
/// `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadKind {
    /// `jsonb`: `application/json`.
    Json,
    /// `text`: `text/plain; charset=utf-8`.
    Text,
    /// `bytea`: `application/octet-stream`.
    Bytes,
}

impl PayloadKind {
    /// The `Content-Type` a body of this kind is sent with, unless the row's headers name one.
    pub fn content_type(self) -> &'static str {
        match self {
            PayloadKind::Json => "application/json",
            PayloadKind::Text => "text/plain; charset=utf-8",
            PayloadKind::Bytes => "application/octet-stream",
        }
    }
}

/// What the check found in a table the relay can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableLayout {
    /// The `payload` column's type.
    pub payload: PayloadKind,
    /// Whether the order trigger is on the table (without it, two transactions of one aggregate
    /// that commit out of `seq` order may be delivered out of order).
    pub ordered: bool,
}

/// Why a table was refused: each missing or mistyped column, one line each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableProblems {
    /// The table, as configured.
    pub table: String,
    /// One line per problem.
    pub problems: Vec<String>,
}

impl fmt::Display for TableProblems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "table {:?}: {}", self.table, self.problems.join("; "))?;
        write!(
            f,
            " (`idempotency-proxy outbox-schema --table {}` prints the expected DDL)",
            self.table
        )
    }
}

/// One column as the catalog describes it.
#[derive(Debug, Clone)]
pub(crate) struct Column {
    pub(crate) name: String,
    /// `format_type`'s spelling: `text`, `timestamp with time zone`, ...
    pub(crate) type_name: String,
    pub(crate) has_default: bool,
}

/// The SQL that lists a table's columns; `$1` is the quoted table name.
pub(crate) const COLUMNS_SQL: &str =
    "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), \
     a.atthasdef OR a.attidentity <> '' FROM pg_attribute a \
     WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped";

const TEXT: &[&str] = &["text", "character varying"];
const TIMESTAMP: &[&str] = &["timestamp with time zone"];

/// Every column and the types it may have; `true` where the application leaves it out, so it
/// needs a default.
const EXPECTED: &[(&str, &[&str], bool)] = &[
    ("id", TEXT, false),
    ("topic", TEXT, false),
    ("aggregate_id", TEXT, false),
    ("payload", &["jsonb", "text", "bytea"], false),
    ("headers", &["jsonb"], false),
    ("created_at", TIMESTAMP, true),
    ("seq", &["bigint"], true),
    ("attempts", &["integer"], true),
    ("next_attempt_at", TIMESTAMP, true),
    ("lease_owner", TEXT, false),
    ("lease_until", TIMESTAMP, false),
    ("delivered_at", TIMESTAMP, false),
    ("dead_at", TIMESTAMP, false),
    ("last_status", &["integer"], false),
    ("last_error", TEXT, false),
];

/// Checks `columns` (none: the table does not exist) against what the relay needs.
pub(crate) fn check(
    table: &TableName,
    columns: &[Column],
    ordered: bool,
) -> Result<TableLayout, TableProblems> {
    let refused = |problems| TableProblems {
        table: table.as_str().to_owned(),
        problems,
    };
    if columns.is_empty() {
        return Err(refused(vec!["the table does not exist".to_owned()]));
    }
    let mut problems = Vec::new();
    for (name, types, needs_default) in EXPECTED {
        let Some(column) = columns.iter().find(|c| c.name == *name) else {
            problems.push(format!("column {name} is missing"));
            continue;
        };
        let base = column.type_name.split('(').next().unwrap_or_default();
        if !types.contains(&base) {
            let expected = types.join(" or ");
            problems.push(format!(
                "column {name} is {}, expected {expected}",
                column.type_name
            ));
        } else if *needs_default && !column.has_default {
            problems.push(format!(
                "column {name} has no default (the application does not write it)"
            ));
        }
    }
    if !problems.is_empty() {
        return Err(refused(problems));
    }
    let payload = match columns.iter().find(|c| c.name == "payload") {
        Some(c) if c.type_name == "text" => PayloadKind::Text,
        Some(c) if c.type_name == "bytea" => PayloadKind::Bytes,
        _ => PayloadKind::Json,
    };
    Ok(TableLayout { payload, ordered })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn columns(changed: &[(&str, &str)], dropped: &[&str]) -> Vec<Column> {
        EXPECTED
            .iter()
            .filter(|(name, _, _)| !dropped.contains(name))
            .map(|(name, types, _)| {
                let type_name = changed
                    .iter()
                    .find(|(n, _)| n == name)
                    .map_or(types[0], |(_, t)| *t);
                Column {
                    name: (*name).to_owned(),
                    type_name: type_name.to_owned(),
                    has_default: true,
                }
            })
            .collect()
    }

    #[test]
    fn the_printed_layout_passes_and_says_its_payload() {
        let table = TableName::default();
        let layout = check(&table, &columns(&[], &[]), true).unwrap();
        assert_eq!(layout.payload, PayloadKind::Json);
        let text = check(&table, &columns(&[("payload", "text")], &[]), false).unwrap();
        assert_eq!((text.payload, text.ordered), (PayloadKind::Text, false));
        let varchar = columns(&[("id", "character varying(64)")], &[]);
        assert!(check(&table, &varchar, true).is_ok());
    }

    #[test]
    fn every_missing_or_mistyped_column_is_named() {
        let table = TableName::default();
        let bad = columns(&[("attempts", "bigint")], &["lease_until", "dead_at"]);
        let refused = check(&table, &bad, true).unwrap_err();
        assert_eq!(
            refused.problems,
            [
                "column attempts is bigint, expected integer",
                "column lease_until is missing",
                "column dead_at is missing",
            ]
        );
        let message = refused.to_string();
        assert!(
            message.starts_with("table \"outbox\": column attempts"),
            "{message}"
        );
        let none = check(&table, &[], true).unwrap_err();
        assert_eq!(none.problems, ["the table does not exist"]);
    }
}
