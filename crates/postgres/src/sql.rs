//! Names written into SQL: a table, schema or channel an operator names is always quoted as an
//! identifier, so no name can change what a statement does.

/// `name` as a quoted SQL identifier.
///
/// ```
/// assert_eq!(idempotency_postgres::quote_identifier("outbox"), "\"outbox\"");
/// assert_eq!(idempotency_postgres::quote_identifier("a\"b"), "\"a\"\"b\"");
/// ```
pub fn quote_identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `schema.table` (or a bare `table`) as a quoted, qualified name: each part quoted on its own.
///
/// ```
/// assert_eq!(idempotency_postgres::quote_qualified("app.outbox"), "\"app\".\"outbox\"");
/// assert_eq!(idempotency_postgres::quote_qualified("outbox"), "\"outbox\"");
/// ```
pub fn quote_qualified(name: &str) -> String {
    name.split('.')
        .map(quote_identifier)
        .collect::<Vec<_>>()
        .join(".")
}
