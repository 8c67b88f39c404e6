//! The Postgres store: the record operations of [`Store`], each one statement from a pooled
//! connection (`statements.rs` says how each stays atomic).
//!
//! Connections come from `idempotency-postgres`'s pool: made lazily, dropped when a statement
//! finds them broken, and made again on the next use, so the store reconnects by itself after
//! the database restarts or fails over. Meanwhile each operation fails with
//! `StoreError::Unavailable` (or `Timeout`), which the proxy turns into its `on_store_error`
//! answer. Every operation as a whole (waiting for a connection included) is bounded by the
//! operation time-out, so a hung database never hangs a request.
//!
//! A scoped key is kept as two columns: `scope` (the route, and the client scope's digest when
//! the route has one) and `key` (the key as the client sent it, or its hash under encryption at
//! rest). Statements are prepared once per connection.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use idempotency_core::backend::{
    CompletedRecord, FencingToken, Fingerprint, InFlightRecord, Record, ScopedKey,
};
use idempotency_core::proxy::ErrorChain;
use idempotency_core::{
    backend::{Fenced, Inbox, Removal, Removed, Reservation},
    Store, StoreError,
};
use idempotency_postgres::tokio_postgres::error::SqlState;
use idempotency_postgres::tokio_postgres::types::ToSql;
use idempotency_postgres::tokio_postgres::{self, Row};
use idempotency_postgres::{pool, ConnectOptions, DatabaseUrl, Pool, PoolError};

use crate::batch::Batcher;
use crate::purge::Purger;
use crate::schema::{Tables, DELIVERIES_TABLE, RECORDS_TABLE};
use crate::statements::Statements;

/// How often a reservation that lost a race for a new key is run again (`statements.rs`);
/// the second run sees the winner's record unless it was already released.
const RACE_ATTEMPTS: usize = 4;

/// The planner settings of the store's connections. A prepared statement's plan is made
/// generic after its fifth run and kept: made while the records table was nearly empty, a batch
/// statement's plan scanned the whole table (hashed, or as the outer side of a loop), and kept
/// doing so at any size, its cost growing with the table. Every statement of the store finds
/// its rows by a key (or a page range, for the purge), so with sequential scans and hash and
/// merge joins off every plan looks each key up in an index, which is right at any size for
/// batches of at most `MAX_BATCH` keys.
const PLANNER: [(&str, &str); 3] = [
    ("enable_seqscan", "off"),
    ("enable_hashjoin", "off"),
    ("enable_mergejoin", "off"),
];

/// A store in PostgreSQL, shared by any number of proxy replicas.
#[derive(Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

struct Inner {
    db: Arc<Db>,
    /// Reservations and completions gathered into batches (`batch.rs`).
    reserves: Batcher<Write, Taken>,
    completes: Batcher<Write, Fenced>,
    /// The URL without its password, for `Debug`.
    shown: String,
    /// Purges expired records while the store lives; stopped when it is dropped.
    _purger: Purger,
}

/// The pool and the statements, shared with the batches' tasks.
pub(crate) struct Db {
    pub(crate) pool: Pool,
    pub(crate) sql: Statements,
    op_timeout: Duration,
}

/// A statement's parameters.
pub(crate) type Params<'a> = [&'a (dyn ToSql + Sync)];

/// One reservation or completion: the row it writes.
#[derive(Clone)]
pub(crate) struct Write {
    scope: String,
    key: String,
    token: i64,
    value: Bytes,
    life: f64,
}

/// What a reservation's statement found.
pub(crate) enum Taken {
    /// The record is ours.
    Acquired,
    /// A live record was there: its encoding.
    Existing(Vec<u8>),
    /// Neither: it lost a race for a new key (`statements.rs`), and runs again.
    Raced,
}

impl PostgresStore {
    /// Connects to `url`, creates the tables in `schema` (or the connection's current schema)
    /// when they are missing, and checks their layout. Fails with `Open` when a table has
    /// another layout or cannot be created, and with `Unavailable` or `Timeout` when the
    /// database cannot be reached.
    pub async fn connect(
        url: &DatabaseUrl,
        options: &ConnectOptions,
        schema: Option<&str>,
    ) -> Result<Self, StoreError> {
        let mut options = options.clone();
        options
            .settings
            .extend(PLANNER.map(|(k, v)| (k.to_owned(), v.to_owned())));
        let options = &options;
        let pool = pool(url, options).map_err(|e| StoreError::open_from("PostgreSQL", e))?;
        let tables = Tables::new(schema);
        let mut client = pool.get().await.map_err(|e| pool_error(e, options))?;
        tables.prepare(&mut client).await?;
        drop(client);
        let sql = Statements::new(
            &tables.qualified(RECORDS_TABLE),
            &tables.qualified(DELIVERIES_TABLE),
        );
        let purger = Purger::start(pool.clone(), &sql);
        let limit = if options.statement_timeout.is_zero() {
            Duration::from_secs(30)
        } else {
            options.statement_timeout
        };
        let db = Arc::new(Db {
            pool,
            sql,
            op_timeout: options.connect_timeout + limit,
        });
        // A quarter of the pool at most for batches of each kind (measured: 4 slots of 16 served
        // more than 8 or 2), so single statements (renewals,
        // reads, inbox operations) always find a connection.
        let slots = (options.pool_size / 4).max(1);
        let reserves = {
            let db = db.clone();
            Batcher::start(slots, move |batch| {
                let db = db.clone();
                async move { db.reserve_batch(batch).await }
            })
        };
        let completes = {
            let db = db.clone();
            Batcher::start(slots, move |batch| {
                let db = db.clone();
                async move { db.complete_batch(batch).await }
            })
        };
        Ok(Self {
            inner: Arc::new(Inner {
                db,
                reserves,
                completes,
                shown: url.to_string(),
                _purger: purger,
            }),
        })
    }

    /// Deletes every expired record now, as the background purge does every few seconds;
    /// returns how many went.
    pub async fn purge_expired(&self) -> Result<u64, StoreError> {
        crate::purge::pass(&self.inner.db.pool, &self.inner.db.sql).await
    }

    pub(crate) fn sql(&self) -> &Statements {
        &self.inner.db.sql
    }

    pub(crate) async fn query(
        &self,
        sql: &str,
        params: &Params<'_>,
    ) -> Result<Vec<Row>, StoreError> {
        self.inner.db.query(sql, params).await
    }

    pub(crate) async fn query_one(
        &self,
        sql: &str,
        params: &Params<'_>,
    ) -> Result<Row, StoreError> {
        self.inner.db.query_one(sql, params).await
    }

    pub(crate) async fn execute(&self, sql: &str, params: &Params<'_>) -> Result<u64, StoreError> {
        self.inner.db.execute(sql, params).await
    }

    /// Runs a fenced write: applied when it changed the holder's row.
    async fn fenced(&self, sql: &str, params: &Params<'_>) -> Result<Fenced, StoreError> {
        match self.execute(sql, params).await? {
            0 => Ok(Fenced::LeaseLost),
            _ => Ok(Fenced::Applied),
        }
    }
}

impl Db {
    /// Runs `sql` on a pooled connection under the operation time-out, answering its rows.
    pub(crate) async fn query(
        &self,
        sql: &str,
        params: &Params<'_>,
    ) -> Result<Vec<Row>, StoreError> {
        let limit = self.op_timeout;
        let run = async {
            let client = self.pool.get().await.map_err(|e| pool_failure(e, limit))?;
            let statement = client
                .prepare_cached(sql)
                .await
                .map_err(|e| db_error(e, limit))?;
            client
                .query(&statement, params)
                .await
                .map_err(|e| db_error(e, limit))
        };
        tokio::time::timeout(limit, run)
            .await
            .unwrap_or(Err(StoreError::Timeout(limit)))
    }

    /// Like `query`, for a statement that answers exactly one row.
    pub(crate) async fn query_one(
        &self,
        sql: &str,
        params: &Params<'_>,
    ) -> Result<Row, StoreError> {
        let mut rows = self.query(sql, params).await?;
        rows.pop()
            .ok_or_else(|| StoreError::unavailable("a statement answered no row"))
    }

    /// Runs `sql` under the operation time-out, answering how many rows it changed.
    pub(crate) async fn execute(&self, sql: &str, params: &Params<'_>) -> Result<u64, StoreError> {
        let limit = self.op_timeout;
        let run = async {
            let client = self.pool.get().await.map_err(|e| pool_failure(e, limit))?;
            let statement = client
                .prepare_cached(sql)
                .await
                .map_err(|e| db_error(e, limit))?;
            client
                .execute(&statement, params)
                .await
                .map_err(|e| db_error(e, limit))
        };
        tokio::time::timeout(limit, run)
            .await
            .unwrap_or(Err(StoreError::Timeout(limit)))
    }

    /// One reservation, by the single statement.
    async fn reserve_one(&self, write: &Write) -> Result<Taken, StoreError> {
        let value: &[u8] = &write.value;
        let params: [&(dyn ToSql + Sync); 5] =
            [&write.scope, &write.key, &write.token, &value, &write.life];
        let row = self.query_one(&self.sql.reserve, &params).await?;
        Ok(taken(row.get(0), row.get(1)))
    }

    /// A batch of reservations in one statement; a key twice in the batch runs on its own.
    async fn reserve_batch(&self, batch: Vec<Write>) -> Vec<Result<Taken, StoreError>> {
        if let [one] = batch.as_slice() {
            return vec![self.reserve_one(one).await];
        }
        let (together, alone) = distinct(&batch);
        let mut results: Vec<Option<Result<Taken, StoreError>>> = Vec::new();
        results.resize_with(batch.len(), || None);
        let arrays = arrays(&batch, &together);
        let rows = self.query(&self.sql.reserve_many, &arrays.params()).await;
        match rows {
            Ok(rows) => {
                for (row, &i) in rows.iter().zip(&together) {
                    results[i] = Some(Ok(taken(row.get(0), row.get(1))));
                }
            }
            Err(e) => {
                for &i in &together {
                    results[i] = Some(Err(copy(&e)));
                }
            }
        }
        for i in alone {
            results[i] = Some(self.reserve_one(&batch[i]).await);
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or(Ok(Taken::Raced)))
            .collect()
    }

    /// A batch of completions in one statement: each applied when its holder's row changed.
    async fn complete_batch(&self, batch: Vec<Write>) -> Vec<Result<Fenced, StoreError>> {
        if let [one] = batch.as_slice() {
            let value: &[u8] = &one.value;
            let params: [&(dyn ToSql + Sync); 5] =
                [&one.scope, &one.key, &one.token, &value, &one.life];
            let changed = self.execute(&self.sql.complete, &params).await;
            return vec![changed.map(|n| {
                if n == 0 {
                    Fenced::LeaseLost
                } else {
                    Fenced::Applied
                }
            })];
        }
        let all: Vec<usize> = (0..batch.len()).collect();
        let arrays = arrays(&batch, &all);
        match self.query(&self.sql.complete_many, &arrays.params()).await {
            Ok(rows) => {
                let mut applied = vec![Fenced::LeaseLost; batch.len()];
                for row in rows {
                    let ord = usize::try_from(row.get::<_, i64>(0)).unwrap_or(0);
                    if let Some(slot) = ord.checked_sub(1).and_then(|i| applied.get_mut(i)) {
                        *slot = Fenced::Applied;
                    }
                }
                applied.into_iter().map(Ok).collect()
            }
            Err(e) => batch.iter().map(|_| Err(copy(&e))).collect(),
        }
    }
}

/// The positions of a batch's requests whose key is there once, and of the others.
fn distinct(batch: &[Write]) -> (Vec<usize>, Vec<usize>) {
    let mut seen = std::collections::HashSet::new();
    let (mut together, mut alone) = (Vec::new(), Vec::new());
    for (i, write) in batch.iter().enumerate() {
        if seen.insert((write.scope.as_str(), write.key.as_str())) {
            together.push(i);
        } else {
            alone.push(i);
        }
    }
    (together, alone)
}

/// The batch statements' five array parameters, over the requests at `positions`.
fn arrays(batch: &[Write], positions: &[usize]) -> Arrays {
    let pick = |i: &usize| &batch[*i];
    Arrays {
        scopes: positions.iter().map(|i| pick(i).scope.clone()).collect(),
        keys: positions.iter().map(|i| pick(i).key.clone()).collect(),
        tokens: positions.iter().map(|i| pick(i).token).collect(),
        values: positions.iter().map(|i| pick(i).value.to_vec()).collect(),
        lives: positions.iter().map(|i| pick(i).life).collect(),
    }
}

/// Array parameters, one element per request.
struct Arrays {
    scopes: Vec<String>,
    keys: Vec<String>,
    tokens: Vec<i64>,
    values: Vec<Vec<u8>>,
    lives: Vec<f64>,
}

impl Arrays {
    fn params(&self) -> [&(dyn ToSql + Sync); 5] {
        [
            &self.scopes,
            &self.keys,
            &self.tokens,
            &self.values,
            &self.lives,
        ]
    }
}

fn taken(existing: Option<Vec<u8>>, written: bool) -> Taken {
    match (written, existing) {
        (true, _) => Taken::Acquired,
        (false, Some(value)) => Taken::Existing(value),
        (false, None) => Taken::Raced,
    }
}

/// The same failure again, for each request of a batch that failed as a whole.
fn copy(e: &StoreError) -> StoreError {
    match e {
        StoreError::Timeout(limit) => StoreError::Timeout(*limit),
        // The cause is the batch's, and it cannot be copied: each request gets its words.
        other => StoreError::unavailable(ErrorChain(other).to_string()),
    }
}

/// A scoped key as the table's two key columns.
pub(crate) fn columns(key: &ScopedKey) -> (String, &str) {
    let scope = match key.scope() {
        Some(client) => format!("{}/{}", key.route(), client.to_hex()),
        None => key.route().as_str().to_owned(),
    };
    (scope, key.key().as_str())
}

/// A token as the `bigint` column keeps it: the same 64 bits.
pub(crate) fn token_column(token: FencingToken) -> i64 {
    i64::from_ne_bytes(token.as_u64().to_ne_bytes())
}

/// A duration as the statements take it, in (fractional) seconds.
pub(crate) fn seconds(span: Duration) -> f64 {
    span.as_secs_f64()
}

/// A failed statement: a cancelled one (the statement time-out) is a time-out; anything else
/// keeps the client's error as its cause (with its own causes: "error performing TLS
/// handshake", then why). None of them quotes the URL.
pub(crate) fn db_error(e: tokio_postgres::Error, limit: Duration) -> StoreError {
    match e.as_db_error().map(|db| db.code().clone()) {
        Some(code) if code == SqlState::QUERY_CANCELED => StoreError::Timeout(limit),
        Some(code) => StoreError::unavailable_from(format!("SQLSTATE {}", code.code()), e),
        None => StoreError::unavailable_from("the statement failed", e),
    }
}

fn pool_failure(e: PoolError, limit: Duration) -> StoreError {
    match e {
        PoolError::Timeout(_) => StoreError::Timeout(limit),
        PoolError::Backend(e) => db_error(e, limit),
        other => StoreError::unavailable_from("no connection from the pool", other),
    }
}

fn pool_error(e: PoolError, options: &ConnectOptions) -> StoreError {
    pool_failure(e, options.connect_timeout)
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("url", &self.inner.shown)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Store for PostgresStore {
    async fn reserve(
        &self,
        key: &ScopedKey,
        fingerprint: Fingerprint,
        lease: Duration,
    ) -> Result<Reservation, StoreError> {
        let (token, record) = InFlightRecord::fresh(fingerprint);
        let (scope, name) = columns(key);
        let write = Write {
            scope,
            key: name.to_owned(),
            token: token_column(token),
            value: record.encode(),
            life: seconds(lease),
        };
        let mut found = self.inner.reserves.submit(write.clone()).await?;
        for _ in 1..RACE_ATTEMPTS {
            if !matches!(found, Taken::Raced) {
                break;
            }
            found = self.inner.db.reserve_one(&write).await?;
        }
        match found {
            Taken::Acquired => Ok(Reservation::Acquired(token)),
            Taken::Existing(value) => Ok(Record::decode(Bytes::from(value))?.into()),
            Taken::Raced => Err(StoreError::unavailable(
                "a reservation kept losing races for its key",
            )),
        }
    }

    async fn renew(
        &self,
        key: &ScopedKey,
        token: FencingToken,
        lease: Duration,
    ) -> Result<Fenced, StoreError> {
        let (scope, name) = columns(key);
        let (held, life) = (token_column(token), seconds(lease));
        self.fenced(&self.sql().renew, &[&scope, &name, &held, &life])
            .await
    }

    async fn complete(
        &self,
        key: &ScopedKey,
        record: &CompletedRecord,
        ttl: Duration,
    ) -> Result<Fenced, StoreError> {
        let (scope, name) = columns(key);
        let write = Write {
            scope,
            key: name.to_owned(),
            token: token_column(record.token),
            value: record.encode(),
            life: seconds(ttl),
        };
        self.inner.completes.submit(write).await
    }

    async fn release(&self, key: &ScopedKey, token: FencingToken) -> Result<Fenced, StoreError> {
        let (scope, name) = columns(key);
        let held = token_column(token);
        self.fenced(&self.sql().release, &[&scope, &name, &held])
            .await
    }

    async fn get(&self, key: &ScopedKey) -> Result<Option<(Record, Duration)>, StoreError> {
        let (scope, name) = columns(key);
        let rows = self.query(&self.sql().get, &[&scope, &name]).await?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let record = Record::decode(Bytes::from(row.get::<_, Vec<u8>>(0)))?;
        let left = u64::try_from(row.get::<_, i64>(1)).unwrap_or(0);
        Ok(Some((record, Duration::from_millis(left))))
    }

    async fn remove(&self, key: &ScopedKey, removal: Removal) -> Result<Removed, StoreError> {
        let (scope, name) = columns(key);
        let forced = removal == Removal::Forced;
        let row = self
            .query_one(&self.sql().remove, &[&scope, &name, &forced])
            .await?;
        match (row.get::<_, Option<bool>>(0), row.get::<_, bool>(1)) {
            (_, true) => Ok(Removed::Removed),
            (None, false) => Ok(Removed::Missing),
            (Some(_), false) => Ok(Removed::KeptInFlight),
        }
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.query("SELECT 1", &[]).await.map(drop)
    }

    fn inbox(&self) -> Option<&dyn Inbox> {
        Some(self)
    }
}
