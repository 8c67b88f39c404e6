//! Purging expired records: a background task that walks the records table a range of pages at
//! a time and deletes what has expired there.
//!
//! A range of pages is read by a TID range scan (PostgreSQL 14 and later), so the table needs
//! no index on `expires_at`: such an index would change on every completion and renewal, and
//! those would no longer be HOT updates. Each range is its own short statement, taking only rows
//! nobody holds (`FOR UPDATE SKIP LOCKED`): the purge never waits for a request, and a request
//! waits at most for one range's delete. An expired row the purge has not reached yet is no
//! harm: every statement treats it as absent, and a reservation takes it over in place.

use idempotency_core::proxy::ErrorChain;
use std::time::Duration;

use idempotency_core::StoreError;
use idempotency_postgres::Pool;
use tokio::task::JoinHandle;

use crate::statements::Statements;
use crate::store::db_error;

/// How often a pass starts.
const EVERY: Duration = Duration::from_secs(10);
/// Pages per statement: 2 MiB of table with the default 8 KiB pages.
const RANGE: i64 = 256;
/// Bounds each statement of a pass.
const LIMIT: Duration = Duration::from_secs(10);

/// The background purge, stopped when dropped.
pub(crate) struct Purger(JoinHandle<()>);

impl Purger {
    pub(crate) fn start(pool: Pool, sql: &Statements) -> Self {
        let (purge, pages) = (sql.purge.clone(), sql.pages.clone());
        Self(tokio::spawn(async move {
            loop {
                tokio::time::sleep(EVERY).await;
                match walk(&pool, &purge, &pages).await {
                    Ok(0) => {}
                    Ok(n) => tracing::debug!(purged = n, "expired records purged"),
                    Err(e) => {
                        tracing::debug!(error = %ErrorChain(&e), "purging expired records failed; the next pass tries again");
                    }
                }
            }
        }))
    }
}

impl Drop for Purger {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One pass over the whole table now; how many records went.
pub(crate) async fn pass(pool: &Pool, sql: &Statements) -> Result<u64, StoreError> {
    walk(pool, &sql.purge, &sql.pages).await
}

async fn walk(pool: &Pool, purge: &str, pages: &str) -> Result<u64, StoreError> {
    let total: i64 = run(pool, |client| async move {
        let row = client.query_one(pages, &[]).await?;
        Ok(row.get::<_, i64>(0))
    })
    .await?;
    let (mut start, mut purged) = (0_i64, 0_u64);
    while start <= total {
        let end = start + RANGE;
        purged += run(pool, |client| async move {
            let statement = client.prepare_cached(purge).await?;
            client.execute(&statement, &[&start, &end]).await
        })
        .await?;
        start = end;
    }
    Ok(purged)
}

/// Runs one statement on its own pooled connection, so a long pass never keeps one from the
/// requests.
async fn run<T, F, Fut>(pool: &Pool, statement: F) -> Result<T, StoreError>
where
    F: FnOnce(idempotency_postgres::Object) -> Fut,
    Fut: std::future::Future<Output = Result<T, idempotency_postgres::tokio_postgres::Error>>,
{
    let call = async {
        let client = pool
            .get()
            .await
            .map_err(|e| StoreError::unavailable_from("no connection from the pool", e))?;
        statement(client).await.map_err(|e| db_error(e, LIMIT))
    };
    tokio::time::timeout(LIMIT, call)
        .await
        .unwrap_or(Err(StoreError::Timeout(LIMIT)))
}
