//! The private PostgreSQL server the Postgres store's and the outbox's tests start: it answers,
//! gives each test a database of its own, and keeps what it committed across an immediate stop.

use idempotency_test_support::postgres_server::{PostgresServer, Shutdown};

#[tokio::test]
async fn keeps_what_it_committed_across_an_immediate_stop() {
    let Some(mut server) = PostgresServer::start().await else {
        return;
    };
    let url = server.fresh_database();
    let database = url.rsplit('/').next().unwrap().to_owned();
    server.psql_on(
        &database,
        "CREATE TABLE t (n int); INSERT INTO t VALUES (41), (1)",
    );
    server.stop(Shutdown::Immediate);
    server.restart().await;
    assert_eq!(server.psql_on(&database, "SELECT sum(n) FROM t"), "42");
}

#[tokio::test]
async fn databases_are_apart() {
    let Some(server) = idempotency_test_support::postgres_server::shared_postgres() else {
        return;
    };
    let first = server.fresh_database();
    let second = server.fresh_database();
    assert_ne!(first, second);
    let name = first.rsplit('/').next().unwrap();
    server.psql_on(name, "CREATE TABLE only_here (n int)");
    let other = second.rsplit('/').next().unwrap();
    assert_eq!(
        server.psql_on(
            other,
            "SELECT count(*) FROM pg_tables WHERE tablename = 'only_here'"
        ),
        "0"
    );
}
