//! An outbox: its config, its table and the pool that reaches it. What the relay runs on, and
//! what an operator's tools ask: the counts, the dead rows, a retry, a delete.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use idempotency_postgres::{pool, ConnectOptions, DatabaseUrl, Object, Pool};

use crate::config::OutboxConfig;
use crate::migrate;
use crate::names::OutboxName;
use crate::relay::Relay;
use crate::sql::AdminSql;
use crate::table::{self, Column, TableLayout};
use crate::transport::Transport;
use crate::OutboxError;

/// Added to a statement's own timeout in a call's client-side deadline.
const CALL_MARGIN: Duration = Duration::from_secs(1);

/// One outbox table and the way to its database. Clones share the pool.
#[derive(Clone, Debug)]
pub struct Outbox {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: OutboxConfig,
    url: DatabaseUrl,
    options: ConnectOptions,
    pool: Pool,
    sql: AdminSql,
}

/// The table's counts, as `GET /outbox/{name}`, the status page and the gauges show them;
/// serialized as that endpoint answers (`oldest_pending_seconds`, fractional).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct OutboxCounts {
    /// Rows waiting for an attempt: neither delivered, dead nor held by a live lease.
    pub pending: u64,
    /// Rows held by a live lease: being attempted now.
    pub in_flight: u64,
    /// Dead rows.
    pub dead: u64,
    /// Rows delivered in the last hour (and not yet deleted by `keep_delivered`).
    pub delivered_last_hour: u64,
    /// The age of the oldest row neither delivered nor dead (zero when there is none).
    #[serde(
        rename = "oldest_pending_seconds",
        serialize_with = "idempotency_delivery::fractional_seconds::serialize"
    )]
    pub oldest_pending: Duration,
    /// Aggregates whose later rows wait behind a dead row (only under `on_dead = "block"` do
    /// they wait).
    pub blocked_aggregates: u64,
}

/// A dead row, as the dead list shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadRow {
    /// The event's id.
    pub id: String,
    /// Its topic.
    pub topic: String,
    /// Its aggregate, if any.
    pub aggregate_id: Option<String>,
    /// Attempts made (zero for a row that could not be sent at all).
    pub attempts: u32,
    /// The last answer's status, if there was one.
    pub last_status: Option<u16>,
    /// Why it died.
    pub last_error: Option<String>,
    /// When the application inserted it.
    pub created_at: SystemTime,
}

impl Outbox {
    /// An outbox on the database at `url`. Nothing connects yet: the pool connects on first
    /// use, so a database that is down now delays the relay rather than failing this.
    pub fn new(
        config: OutboxConfig,
        url: DatabaseUrl,
        options: ConnectOptions,
    ) -> Result<Self, OutboxError> {
        let pool = pool(&url, &options).map_err(OutboxError::Connect)?;
        let sql = AdminSql::new(&config.table);
        Ok(Self {
            inner: Arc::new(Inner {
                config,
                url,
                options,
                pool,
                sql,
            }),
        })
    }

    /// Its settings.
    pub fn config(&self) -> &OutboxConfig {
        &self.inner.config
    }

    /// Its name.
    pub fn name(&self) -> &OutboxName {
        &self.inner.config.name
    }

    /// Its database, shown without a password.
    pub fn database(&self) -> &DatabaseUrl {
        &self.inner.url
    }

    pub(crate) fn admin_sql(&self) -> &AdminSql {
        &self.inner.sql
    }

    pub(crate) fn connect_options(&self) -> &ConnectOptions {
        &self.inner.options
    }

    pub(crate) async fn client(&self) -> Result<Object, OutboxError> {
        self.inner.pool.get().await.map_err(OutboxError::from)
    }

    /// Starts delivering: see [`Relay`].
    pub fn start_relay(&self, transport: Arc<dyn Transport>) -> Relay {
        Relay::start(self.clone(), transport)
    }

    /// Runs `call` within the deadline of one database call: a database that stops answering
    /// (frozen, or dropping packets) fails it with [`OutboxError::Deadline`] rather than
    /// holding it for as long as TCP takes to give up.
    pub(crate) async fn within<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, OutboxError>>,
    ) -> Result<T, OutboxError> {
        let deadline = self.call_deadline();
        tokio::time::timeout(deadline, call)
            .await
            .unwrap_or(Err(OutboxError::Deadline(deadline)))
    }

    /// The server's statement timeout and a margin for the round trip; with no statement
    /// timeout, the connect timeout's worth of waiting for a connection and a generous bound.
    pub(crate) fn call_deadline(&self) -> Duration {
        let options = &self.inner.options;
        match options.statement_timeout {
            t if t.is_zero() => options.connect_timeout + Duration::from_secs(30),
            t => t.max(options.connect_timeout) + CALL_MARGIN,
        }
    }

    /// Checks the table: [`OutboxError::Table`] names every missing or mistyped column. It
    /// runs no DDL: see [`Outbox::prepare_table`].
    pub async fn check_table(&self) -> Result<TableLayout, OutboxError> {
        self.within(async {
            let client = self.client().await?;
            Ok(self.inspect(&client).await?.0)
        })
        .await
    }

    /// Checks the table and adds what it lacks of the current layout (the columns, indexes and
    /// trigger argument that keep waiting rows off the claim's path), in one transaction;
    /// nothing is run when everything is there. A role that may not add what is missing is
    /// refused ([`OutboxError::Table`]) with the statements to run.
    pub async fn prepare_table(&self) -> Result<TableLayout, OutboxError> {
        let client = self.client().await?;
        let (layout, found) = self.within(self.inspect(&client)).await?;
        let table = &self.inner.config.table;
        if let Some(missing) = migrate::missing(table, &found, self.inner.config.on_dead) {
            // Not within the call deadline: a backfill of a large table takes its time.
            migrate::apply(&client, table, &missing).await?;
        }
        Ok(layout)
    }

    async fn inspect(&self, client: &Object) -> Result<(TableLayout, migrate::Found), OutboxError> {
        let table = &self.inner.config.table;
        let rows = client.query(table::COLUMNS_SQL, &[&table.quoted()]).await?;
        let columns: Vec<Column> = rows
            .iter()
            .map(|row| Column {
                name: row.get(0),
                type_name: row.get(1),
                has_default: row.get(2),
            })
            .collect();
        let trigger: Option<i32> = client
            .query_opt(&migrate::trigger_sql(), &[&table.quoted()])
            .await?
            .map(|row| row.get(0));
        let layout =
            table::check(table, &columns, trigger.is_some()).map_err(OutboxError::Table)?;
        let indexes = client
            .query(migrate::INDEXES_SQL, &[&table.quoted()])
            .await?;
        let found = migrate::Found {
            columns: ["holding", "waiting", "retried_at"]
                .iter()
                .all(|name| columns.iter().any(|c| c.name == *name)),
            indexes: indexes.iter().map(|row| row.get(0)).collect(),
            trigger: trigger.map(|args| args > 0),
        };
        Ok((layout, found))
    }

    /// Counts the table's rows by state.
    pub async fn counts(&self) -> Result<OutboxCounts, OutboxError> {
        self.within(self.count()).await
    }

    async fn count(&self) -> Result<OutboxCounts, OutboxError> {
        let client = self.client().await?;
        let row = client.query_one(&self.inner.sql.counts, &[]).await?;
        let count = |i: usize| u64::try_from(row.get::<_, i64>(i)).unwrap_or(0);
        let oldest: f64 = row.get(4);
        let blocked = match self.inner.config.on_dead {
            crate::OnDead::Block => count(5),
            crate::OnDead::Skip => 0,
        };
        Ok(OutboxCounts {
            pending: count(0),
            in_flight: count(1),
            dead: count(2),
            delivered_last_hour: count(3),
            oldest_pending: Duration::try_from_secs_f64(oldest.max(0.0)).unwrap_or_default(),
            blocked_aggregates: blocked,
        })
    }

    /// At most `limit` dead rows in `seq` order, after the row `after` when given; `None` when
    /// `after` names no row of the table (deleted since, or never there), whose place in the
    /// order is then unknown.
    pub async fn dead(
        &self,
        limit: u32,
        after: Option<&str>,
    ) -> Result<Option<Vec<DeadRow>>, OutboxError> {
        self.within(self.dead_page(limit, after)).await
    }

    async fn dead_page(
        &self,
        limit: u32,
        after: Option<&str>,
    ) -> Result<Option<Vec<DeadRow>>, OutboxError> {
        let client = self.client().await?;
        let rows = client
            .query(&self.inner.sql.dead, &[&i64::from(limit), &after])
            .await?;
        // An empty page after a row that is not there says nothing: tell the two apart.
        if let (Some(after), true) = (after, rows.is_empty()) {
            let there: bool = client
                .query_one(&self.inner.sql.exists, &[&after])
                .await?
                .get(0);
            if !there {
                return Ok(None);
            }
        }
        let rows: Result<Vec<DeadRow>, OutboxError> = rows
            .iter()
            .map(|row| {
                Ok(DeadRow {
                    id: row.try_get(0)?,
                    topic: row.try_get(1)?,
                    aggregate_id: row.try_get(2)?,
                    attempts: u32::try_from(row.try_get::<_, i32>(3)?).unwrap_or(0),
                    last_status: row
                        .try_get::<_, Option<i32>>(4)?
                        .and_then(|s| u16::try_from(s).ok()),
                    last_error: row.try_get(5)?,
                    created_at: row.try_get(6)?,
                })
            })
            .collect();
        rows.map(Some)
    }

    /// Makes the dead row `id` pending again with a fresh attempt budget (`max_age` counts
    /// from now on, `retried_at`); `false` when there is no such dead row.
    pub async fn retry_dead(&self, id: &str) -> Result<bool, OutboxError> {
        self.within(self.change_dead(&self.inner.sql.retry, id))
            .await
    }

    /// Deletes the dead row `id`; `false` when there is no such dead row. Under `on_dead =
    /// "block"` its aggregate's next row may then be attempted.
    pub async fn delete_dead(&self, id: &str) -> Result<bool, OutboxError> {
        self.within(self.change_dead(&self.inner.sql.delete, id))
            .await
    }

    /// Runs a retry or a delete of one dead row, and passes its aggregate's turn under the
    /// aggregate's lock (waited for: an operator's call may wait for an application's insert).
    async fn change_dead(&self, sql: &str, id: &str) -> Result<bool, OutboxError> {
        let mut client = self.client().await?;
        let transaction = client.transaction().await?;
        let Some(row) = transaction.query_opt(sql, &[&id]).await? else {
            return Ok(false);
        };
        if let Some(aggregate) = row.get::<_, Option<String>>(0) {
            let table = self.inner.config.table.quoted();
            transaction
                .execute(crate::sql::WAIT_FOR_AGGREGATE, &[&table, &aggregate])
                .await?;
            transaction
                .execute(&self.inner.sql.promote, &[&vec![aggregate]])
                .await?;
        }
        transaction.commit().await?;
        Ok(true)
    }
}
