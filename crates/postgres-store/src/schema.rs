//! The store's tables: created at start when missing, and refused when a table of the same name
//! has another layout, so the store never writes rows a table of someone else's cannot hold.
//!
//! `idempotency_records` keeps one row per scoped key: the record's model encoding (`value`),
//! and beside it what the statements filter on without decoding anything: the holder's token,
//! whether it is in flight, and when it expires (the database's clock). Its fill factor leaves
//! room on each page, so a completion or renewal is a HOT update (no column it changes is
//! indexed) and writes no index entry. `idempotency_deliveries` keeps inbox deliveries, one row
//! each, with the attempt state a claim or a settlement changes beside the encoding.

use idempotency_core::proxy::ErrorChain;
use idempotency_core::StoreError;
use idempotency_postgres::tokio_postgres::Client;
use idempotency_postgres::{quote_identifier, tokio_postgres};

/// The records' table.
pub const RECORDS_TABLE: &str = "idempotency_records";
/// The inbox deliveries' table.
pub const DELIVERIES_TABLE: &str = "idempotency_deliveries";

/// A column as `information_schema.columns` names it: name, data type, nullable.
type Column = (&'static str, &'static str, bool);

/// Each table's columns.
const LAYOUT: [(&str, &[Column]); 2] = [
    (
        RECORDS_TABLE,
        &[
            ("scope", "text", false),
            ("key", "text", false),
            ("token", "bigint", false),
            ("in_flight", "boolean", false),
            ("expires_at", "timestamp with time zone", false),
            ("value", "bytea", false),
        ],
    ),
    (
        DELIVERIES_TABLE,
        &[
            ("route", "text", false),
            ("id", "bytea", false),
            ("encoded", "bytea", false),
            ("arrived", "bigint", false),
            ("due", "bigint", false),
            ("leased_until", "bigint", true),
            ("token", "bigint", true),
            ("attempts", "integer", false),
            ("last_status", "integer", false),
            ("last_error", "text", true),
            ("dead", "boolean", false),
        ],
    ),
];

/// Where the tables live: a schema the operator named, or the connection's current one.
#[derive(Debug, Clone)]
pub(crate) struct Tables {
    schema: Option<String>,
}

impl Tables {
    pub(crate) fn new(schema: Option<&str>) -> Self {
        Self {
            schema: schema.map(str::to_owned),
        }
    }

    /// `table`, quoted and qualified by the schema when one was named.
    pub(crate) fn qualified(&self, table: &str) -> String {
        match &self.schema {
            Some(schema) => format!("{}.{}", quote_identifier(schema), quote_identifier(table)),
            None => quote_identifier(table),
        }
    }

    /// Creates what is missing, then checks that both tables have the expected layout. With
    /// everything in place no DDL runs: PostgreSQL checks the right to `CREATE` before it looks
    /// whether the object exists, so even `IF NOT EXISTS` would refuse a role that holds only
    /// row rights on tables its owner created.
    pub(crate) async fn prepare(&self, client: &mut Client) -> Result<(), StoreError> {
        let missing = self.missing(client).await?;
        if !missing.is_empty() {
            self.create(client, &missing).await?;
        }
        self.check(client).await
    }

    /// The tables and index not there yet, named.
    async fn missing(&self, client: &Client) -> Result<Vec<String>, StoreError> {
        let objects = [
            self.qualified(RECORDS_TABLE),
            self.qualified(DELIVERIES_TABLE),
            self.qualified(&format!("{DELIVERIES_TABLE}_due")),
        ];
        let mut missing = Vec::new();
        for object in objects {
            let row = client
                .query_one("SELECT to_regclass($1) IS NOT NULL", &[&object])
                .await
                .map_err(unavailable)?;
            if !row.get::<_, bool>(0) {
                missing.push(object);
            }
        }
        Ok(missing)
    }

    /// Runs the DDL for what is missing; a role that may not is refused with the statements.
    async fn create(&self, client: &mut Client, missing: &[String]) -> Result<(), StoreError> {
        let transaction = client.transaction().await.map_err(unavailable)?;
        // Replicas starting together would otherwise race on `CREATE TABLE IF NOT EXISTS`,
        // which is not safe against a concurrent creator.
        transaction
            .batch_execute(&format!(
                "SELECT pg_advisory_xact_lock(hashtextextended('idempotency-proxy schema', 0)); {}",
                self.ddl()
            ))
            .await
            .map_err(|e| {
                // The database's words go inside the sentence, before the DDL to run: the
                // cause is written in, not kept behind it.
                StoreError::open(format!(
                    "{} missing, and this role cannot create them ({}); run as a role that may:\n{}",
                    missing.join(", "),
                    ErrorChain(&e),
                    self.ddl()
                ))
            })?;
        transaction.commit().await.map_err(unavailable)
    }

    fn ddl(&self) -> String {
        let records = self.qualified(RECORDS_TABLE);
        let deliveries = self.qualified(DELIVERIES_TABLE);
        let due = quote_identifier(&format!("{DELIVERIES_TABLE}_due"));
        let schema = match &self.schema {
            Some(schema) => format!("CREATE SCHEMA IF NOT EXISTS {};", quote_identifier(schema)),
            None => String::new(),
        };
        format!(
            "{schema}
            CREATE TABLE IF NOT EXISTS {records} (
                scope text NOT NULL, key text NOT NULL, token bigint NOT NULL,
                in_flight boolean NOT NULL, expires_at timestamptz NOT NULL, value bytea NOT NULL,
                PRIMARY KEY (scope, key)
            ) WITH (fillfactor = 70);
            CREATE TABLE IF NOT EXISTS {deliveries} (
                route text NOT NULL, id bytea NOT NULL, encoded bytea NOT NULL,
                arrived bigint NOT NULL, due bigint NOT NULL, leased_until bigint, token bigint,
                attempts integer NOT NULL, last_status integer NOT NULL, last_error text,
                dead boolean NOT NULL,
                PRIMARY KEY (route, id)
            );
            CREATE INDEX IF NOT EXISTS {due} ON {deliveries} (route, due) WHERE NOT dead;"
        )
    }

    /// Refuses a table whose columns are not the expected ones, naming what differs.
    async fn check(&self, client: &Client) -> Result<(), StoreError> {
        let schema = if let Some(schema) = &self.schema {
            schema.clone()
        } else {
            let row = client
                .query_one("SELECT current_schema()", &[])
                .await
                .map_err(unavailable)?;
            row.get(0)
        };
        for (table, expected) in LAYOUT {
            let rows = client
                .query(
                    "SELECT column_name::text, data_type::text, is_nullable = 'YES' \
                     FROM information_schema.columns \
                     WHERE table_schema::text = $1 AND table_name::text = $2 ORDER BY ordinal_position",
                    &[&schema, &table],
                )
                .await
                .map_err(unavailable)?;
            let found: Vec<(String, String, bool)> = rows
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2)))
                .collect();
            let wanted: Vec<(String, String, bool)> = expected
                .iter()
                .map(|(n, t, null)| ((*n).to_owned(), (*t).to_owned(), *null))
                .collect();
            if found != wanted {
                return Err(StoreError::open(format!(
                    "table {schema}.{table} has another layout than this proxy's store: {}; \
                     name another schema with store_schema, or move that table away",
                    difference(&wanted, &found)
                )));
            }
        }
        Ok(())
    }
}

/// What a found layout lacks or has beyond the wanted one, in words.
fn difference(wanted: &[(String, String, bool)], found: &[(String, String, bool)]) -> String {
    let describe = |(name, kind, null): &(String, String, bool)| {
        format!("{name} {kind}{}", if *null { "" } else { " not null" })
    };
    let missing: Vec<String> = wanted
        .iter()
        .filter(|c| !found.contains(c))
        .map(describe)
        .collect();
    let extra: Vec<String> = found
        .iter()
        .filter(|c| !wanted.contains(c))
        .map(describe)
        .collect();
    match (missing.is_empty(), extra.is_empty()) {
        (true, true) => "its columns are in another order".to_owned(),
        (false, true) => format!("it lacks {}", missing.join(", ")),
        (true, false) => format!("it has {} besides", extra.join(", ")),
        (false, false) => format!(
            "it lacks {}, and has {}",
            missing.join(", "),
            extra.join(", ")
        ),
    }
}

fn unavailable(e: tokio_postgres::Error) -> StoreError {
    StoreError::unavailable_from("the store's tables could not be read", e)
}
