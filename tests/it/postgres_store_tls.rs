//! The proxy binary over a Postgres store that speaks TLS (`sslmode=require`): with `store_ca`
//! naming the private CA that signed the server's certificate it serves and replays; without
//! it the certificate is not trusted and the proxy does not start. A private PostgreSQL offering
//! TLS (test-support's `PostgresServer::start_tls`); without PostgreSQL's programs the tests
//! report `SKIPPED`, unless `REQUIRE_POSTGRES=1`.

use crate::common;

use std::process::Stdio;
use std::time::Duration;

use common::binary::{start_binary, BIN};
use common::postgres_server::PostgresServer;
use common::temp::TempPath;
use common::upstream::TestUpstream;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};

const BODY: &str = r#"{"amount":42}"#;
/// Long enough for the proxy to give up on an untrusted database and exit.
const START_BOUND: Duration = Duration::from_secs(60);

/// A private CA's certificate, and a server certificate for 127.0.0.1 it signed with its key,
/// as PEM.
struct Certificates {
    ca: String,
    server: String,
    server_key: String,
}

fn certificates() -> Certificates {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
    let key = KeyPair::generate().unwrap();
    let server = leaf.signed_by(&key, &ca).unwrap();
    Certificates {
        ca: ca.pem(),
        server: server.pem(),
        server_key: key.serialize_pem(),
    }
}

/// A config file holding `text`.
fn config(name: &str, text: &str) -> TempPath {
    let file = TempPath::new(name);
    std::fs::write(file.path(), text).unwrap();
    file
}

fn required(server: &PostgresServer) -> String {
    format!("{}?sslmode=require", server.url())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_over_tls_trusted_through_store_ca_serves_and_replays() {
    let certificates = certificates();
    let Some(server) =
        PostgresServer::start_tls(&certificates.server, &certificates.server_key).await
    else {
        return;
    };
    let ca = config("postgres-ca.pem", &certificates.ca);
    let file = config(
        "postgres-tls.toml",
        &format!("store_ca = \"file:{}\"\n", ca.path().display()),
    );
    let upstream = TestUpstream::start().await;
    let config_path = file.path().to_str().unwrap().to_owned();
    let store = required(&server);
    let (_child, client) = start_binary(
        &upstream.url(),
        &["--config", &config_path, "--store", &store],
    )
    .await;

    let first = client.post("/v1/charges", "over-tls", BODY).await;
    assert_eq!(first.status, 201, "{first:?}");
    assert!(!first.replayed(), "{first:?}");
    let again = client.post("/v1/charges", "over-tls", BODY).await;
    assert!(again.replayed(), "{again:?}");
    assert_eq!(again.body, first.body);
    assert_eq!(upstream.executions_of("over-tls"), 1);
    // The proxy's own connections are the encrypted ones.
    let encrypted = server.psql(
        "SELECT bool_and(s.ssl) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
         WHERE a.application_name <> 'psql' AND a.backend_type = 'client backend' \
         AND a.pid <> pg_backend_pid()",
    );
    assert_eq!(encrypted, "t");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_store_ca_an_untrusted_certificate_stops_the_start() {
    let certificates = certificates();
    let Some(server) =
        PostgresServer::start_tls(&certificates.server, &certificates.server_key).await
    else {
        return;
    };
    let store = required(&server);
    let run = tokio::process::Command::new(BIN)
        .args([
            "--upstream",
            "http://127.0.0.1:9",
            "--listen",
            "127.0.0.1:0",
        ])
        .args(["--store", &store])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(START_BOUND, run)
        .await
        .unwrap_or_else(|_| panic!("the proxy neither started nor exited in {START_BOUND:?}"))
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    // An unreachable store stops the start with 1 (a bad config is 2); the message says the
    // handshake failed and why: the certificate's issuer is not trusted.
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    for said in [
        "cannot open the store",
        "TLS handshake",
        "invalid peer certificate",
        "UnknownIssuer",
    ] {
        assert!(stderr.contains(said), "{said:?} in {stderr}");
    }
}
