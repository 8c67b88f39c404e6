//! Connections to a real PostgreSQL: the pool's timeouts, its recovery from a restart, `LISTEN`,
//! and TLS verified through rustls.

use std::sync::Arc;
use std::time::Duration;

use idempotency_postgres::{pool, ConnectOptions, DatabaseUrl, Listener};
use idempotency_test_support::poll;
use idempotency_test_support::postgres_server::{shared_postgres, PostgresServer, Shutdown};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::{ClientConfig, RootCertStore};

fn url(text: &str) -> DatabaseUrl {
    DatabaseUrl::resolve(text).unwrap()
}

#[tokio::test]
async fn a_statement_past_the_timeout_is_cancelled_by_the_server() {
    let Some(server) = shared_postgres() else {
        return;
    };
    let options = ConnectOptions {
        statement_timeout: Duration::from_millis(200),
        ..ConnectOptions::default()
    };
    let pool = pool(&url(&server.url()), &options).unwrap();
    let client = pool.get().await.unwrap();
    let quick: i32 = client.query_one("SELECT 7", &[]).await.unwrap().get(0);
    assert_eq!(quick, 7);
    let slow = client
        .batch_execute("SELECT pg_sleep(5)")
        .await
        .unwrap_err();
    let code = slow.code().expect("a server error");
    assert_eq!(code.code(), "57014", "query_canceled: {slow}");
    let name: String = client
        .query_one("SHOW application_name", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(name, "idempotency-proxy");
}

#[tokio::test]
async fn the_pool_serves_again_after_the_database_restarts() {
    let Some(mut server) = PostgresServer::start().await else {
        return;
    };
    let pool = pool(&url(&server.url()), &ConnectOptions::default()).unwrap();
    let answer = |pool: deadpool_postgres::Pool| async move {
        let client = pool.get().await.ok()?;
        client
            .query_one("SELECT 1", &[])
            .await
            .ok()
            .map(|r| r.get::<_, i32>(0))
    };
    assert_eq!(answer(pool.clone()).await, Some(1));
    server.stop(Shutdown::Immediate);
    assert_eq!(answer(pool.clone()).await, None);
    server.restart().await;
    poll::until(
        Duration::from_secs(30),
        "the pool serves again",
        async || answer(pool.clone()).await == Some(1),
    )
    .await;
}

#[tokio::test]
async fn a_listener_hears_notify_and_says_when_its_connection_is_gone() {
    let Some(mut server) = PostgresServer::start().await else {
        return;
    };
    let options = ConnectOptions::default();
    let mut listener = Listener::start(&url(&server.url()), &options, "Outbox Channel")
        .await
        .unwrap();
    server.psql(r#"NOTIFY "Outbox Channel", 'row 1'"#);
    let heard = tokio::time::timeout(Duration::from_secs(10), listener.notified()).await;
    assert_eq!(heard.unwrap().as_deref(), Some("row 1"));
    server.stop(Shutdown::Immediate);
    let ended = tokio::time::timeout(Duration::from_secs(10), listener.notified()).await;
    assert_eq!(ended.unwrap(), None);
}

/// A private CA and a server certificate for 127.0.0.1 it signed, as PEM, and the CA's roots.
fn certificates() -> (String, String, RootCertStore) {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = leaf.signed_by(&key, &ca).unwrap();
    let mut roots = RootCertStore::empty();
    roots.add(ca.der().clone()).unwrap();
    (cert.pem(), key.serialize_pem(), roots)
}

#[tokio::test]
async fn sslmode_require_speaks_tls_verified_against_the_given_roots() {
    let (cert, key, roots) = certificates();
    let Some(server) = PostgresServer::start_tls(&cert, &key).await else {
        return;
    };
    let required = url(&format!("{}?sslmode=require", server.url()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let trusting = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let options = ConnectOptions {
        tls: Some(Arc::new(trusting)),
        ..ConnectOptions::default()
    };
    let client = pool(&required, &options).unwrap().get().await.unwrap();
    let ssl: bool = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(ssl, "the session is encrypted");
    // The platform's roots do not hold the private CA: the handshake is refused, never
    // downgraded to plain text.
    let untrusting = pool(&required, &ConnectOptions::default()).unwrap();
    let refused = untrusting.get().await.map(|_| ()).unwrap_err();
    let mut chain = refused.to_string();
    let mut source = std::error::Error::source(&refused);
    while let Some(cause) = source {
        chain.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    assert!(chain.contains("UnknownIssuer"), "{chain}");
}

#[tokio::test]
async fn connections_are_read_committed_whatever_the_databases_default() {
    let Some(server) = shared_postgres() else {
        return;
    };
    let database = server.fresh_database();
    let name = database.rsplit('/').next().unwrap().to_owned();
    let name = name.split('?').next().unwrap();
    for default in ["serializable", "repeatable read"] {
        server.psql(&format!(
            "ALTER DATABASE \"{name}\" SET default_transaction_isolation = '{default}'"
        ));
        let pool = pool(&url(&database), &ConnectOptions::default()).unwrap();
        let client = pool.get().await.unwrap();
        let isolation: String = client
            .query_one("SHOW transaction_isolation", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(isolation, "read committed", "with {default} as the default");
    }
}
