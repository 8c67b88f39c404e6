//! What the Postgres store does beyond the shared suites: its tables (made in the schema it is
//! given, refused when they have another layout) and the purge of expired records.

use std::time::Duration;

use idempotency_core::{backend::Reservation, Store, StoreError};
use idempotency_postgres::{ConnectOptions, DatabaseUrl};
use idempotency_postgres_store::PostgresStore;
use idempotency_test_support::poll;
use idempotency_test_support::postgres_server::{shared_postgres, PostgresServer};
use idempotency_test_support::records::{fp, key};

/// A fresh database on the shared server, and its name.
fn database() -> Option<(&'static PostgresServer, String)> {
    let server = tokio::task::block_in_place(shared_postgres)?;
    let url = server.fresh_database();
    let name = url.rsplit('/').next().unwrap().to_owned();
    Some((server, name))
}

async fn connect(
    server: &PostgresServer,
    database: &str,
    schema: Option<&str>,
) -> Result<PostgresStore, StoreError> {
    let url = DatabaseUrl::resolve(&server.url_of(database)).unwrap();
    PostgresStore::connect(&url, &ConnectOptions::default(), schema).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn makes_its_tables_in_the_schema_it_is_given_and_opens_them_again() {
    let Some((server, db)) = database() else {
        return;
    };
    let store = connect(server, &db, Some("proxy")).await.unwrap();
    let reserved = store
        .reserve(&key("k"), fp(1), Duration::from_secs(30))
        .await;
    assert!(matches!(reserved.unwrap(), Reservation::Acquired(_)));
    let again = connect(server, &db, Some("proxy")).await.unwrap();
    let seen = again
        .reserve(&key("k"), fp(1), Duration::from_secs(30))
        .await;
    assert!(matches!(seen.unwrap(), Reservation::InFlight(_)));
    let tables = server.psql_on(
        &db,
        "SELECT string_agg(table_name, ',' ORDER BY table_name) FROM information_schema.tables \
         WHERE table_schema = 'proxy'",
    );
    assert_eq!(tables, "idempotency_deliveries,idempotency_records");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_of_another_layout_is_refused_with_what_differs() {
    let Some((server, db)) = database() else {
        return;
    };
    server.psql_on(
        &db,
        "CREATE TABLE idempotency_records (scope text, key text, payload jsonb)",
    );
    let refused = connect(server, &db, None).await.unwrap_err();
    let StoreError::Open { context: why, .. } = &refused else {
        panic!("{refused}");
    };
    assert!(why.contains("public.idempotency_records"), "{why}");
    assert!(why.contains("payload jsonb"), "{why}");
    assert!(
        why.contains("lacks") && why.contains("token bigint"),
        "{why}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_purge_deletes_expired_records_and_keeps_live_ones() {
    let Some((server, db)) = database() else {
        return;
    };
    let store = connect(server, &db, None).await.unwrap();
    for name in ["short-1", "short-2"] {
        store
            .reserve(&key(name), fp(1), Duration::from_millis(1))
            .await
            .unwrap();
    }
    let live = store
        .reserve(&key("live"), fp(1), Duration::from_secs(60))
        .await;
    assert!(matches!(live.unwrap(), Reservation::Acquired(_)));
    let purged = async || {
        let n = store.purge_expired().await.unwrap();
        (n > 0).then_some(n)
    };
    let first = poll::until(Duration::from_secs(30), "expired records purged", purged).await;
    let rest = store.purge_expired().await.unwrap();
    assert_eq!(first + rest, 2);
    let left = server.psql_on(&db, "SELECT string_agg(key, ',') FROM idempotency_records");
    assert_eq!(left, "live");
}

/// Many keys at once, so reservations and completions share statements (`batch.rs`): each
/// key is acquired once, each holder's completion applies, a stranger's never does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_keys_at_once_are_each_reserved_and_completed_by_their_holder() {
    use idempotency_core::backend::{Fenced, FencingToken, Record};
    use idempotency_test_support::records::{outcome, small_body};
    use std::sync::Arc;

    let Some((server, db)) = database() else {
        return;
    };
    let store = Arc::new(connect(server, &db, None).await.unwrap());
    let tasks: Vec<_> = (0..96)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let name = key(&format!("many-{i}"));
                let lease = Duration::from_secs(30);
                let Reservation::Acquired(token) = store.reserve(&name, fp(1), lease).await? else {
                    panic!("many-{i} was not free");
                };
                let ttl = Duration::from_secs(60);
                let stranger = outcome(FencingToken::from_u64(token.as_u64() ^ 1), small_body());
                assert_eq!(
                    store.complete(&name, &stranger, ttl).await?,
                    Fenced::LeaseLost
                );
                let mine = outcome(token, small_body());
                assert_eq!(store.complete(&name, &mine, ttl).await?, Fenced::Applied);
                Ok::<_, StoreError>(mine)
            })
        })
        .collect();
    for (i, task) in tasks.into_iter().enumerate() {
        let stored = task.await.unwrap().unwrap();
        let (record, _) = store
            .get(&key(&format!("many-{i}")))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(record, Record::Completed(stored), "many-{i}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_with_only_row_rights_opens_tables_its_owner_made_and_is_told_what_is_missing() {
    let Some((server, db)) = database() else {
        return;
    };
    let tables = ["idempotency_records", "idempotency_deliveries"];
    let rows_only = server.row_only_role(&db, &[], &[]);
    let open_as = |url: String| async move {
        let url = DatabaseUrl::resolve(&url).unwrap();
        PostgresStore::connect(&url, &ConnectOptions::default(), None).await
    };
    // Nothing made yet, and this role may not make it: refused, naming what and how.
    let Err(StoreError::Open { context: why, .. }) = open_as(rows_only).await else {
        panic!("refused");
    };
    assert!(why.contains("idempotency_records"), "{why}");
    assert!(why.contains("CREATE TABLE IF NOT EXISTS"), "{why}");

    // The owner makes them; a role with row rights only opens them and serves.
    drop(connect(server, &db, None).await.unwrap());
    let granted = server.row_only_role(&db, &tables, &[]);
    let store = open_as(granted).await.unwrap();
    let reserved = store
        .reserve(&key("k"), fp(1), Duration::from_secs(30))
        .await;
    assert!(matches!(reserved.unwrap(), Reservation::Acquired(_)));
}
