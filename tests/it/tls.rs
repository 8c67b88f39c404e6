//! TLS both ways (docs/reference.md#tls), over real sockets with certificates made for each test: the
//! proxy's HTTPS listener (HTTP/1.1 and h2 by ALPN, its limits and its smuggling defence kept),
//! and `https://` upstreams behind a private CA, with and without a client certificate.

use crate::common;

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use idempotency_proxy::store::MemoryStore;
use idempotency_proxy::Proxy;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use common::binary::{start_binary, BIN};
use common::proxy::TestProxy;
use common::tls::{connect, Pair, Pki};
use common::upstream::TestUpstream;

fn listener_lines(pair: &Pair) -> String {
    format!(
        "tls_cert = \"file:{}\"\ntls_key = \"file:{}\"\n",
        pair.cert, pair.key
    )
}

/// A proxy listening over HTTPS with `pair`, in front of `upstream`.
async fn https_proxy(upstream: &str, pair: &Pair, lines: &str) -> TestProxy {
    let toml = format!("upstream = \"{upstream}\"\n{}{lines}", listener_lines(pair));
    TestProxy::start(&toml, Arc::new(MemoryStore::new())).await
}

#[tokio::test]
async fn a_keyed_post_over_https_replays_on_http1_and_on_h2() {
    let pki = Pki::new("listener");
    let upstream = TestUpstream::start().await;
    let proxy = https_proxy(&upstream.url(), &pki.server("proxy"), "").await;
    // What the client offers by ALPN, what it gets, and the key it sends.
    type Case<'a> = (&'a [&'a [u8]], Option<&'a [u8]>, &'a str);
    let cases: [Case; 3] = [
        (&[b"http/1.1"], Some(b"http/1.1"), "over-http1"),
        (&[b"h2", b"http/1.1"], Some(b"h2"), "over-h2"),
        (&[], None, "no-alpn"),
    ];
    for (offered, agreed, key) in cases {
        let mut handshake = connect(proxy.addr, pki.client_config(offered)).await;
        assert_eq!(handshake.alpn.as_deref(), agreed, "{key}");
        let first = handshake.client.post("/v1/charges", key, "{}").await;
        let retry = handshake.client.post("/v1/charges", key, "{}").await;
        assert_eq!(first.status, StatusCode::CREATED, "{key}: {first:?}");
        assert!(!first.replayed() && retry.replayed(), "{key}");
        assert_eq!(first.body, retry.body, "{key}");
        assert_eq!(upstream.executions_of(key), 1, "{key}");
    }
    let seen = upstream.seen();
    assert_eq!(seen.len(), 3);
    assert!(seen
        .iter()
        .all(|s| s.headers["x-forwarded-proto"] == "https"));
}

#[tokio::test]
async fn with_tls_on_the_listener_speaks_https_only() {
    let pki = Pki::new("https-only");
    let upstream = TestUpstream::start().await;
    let proxy = https_proxy(&upstream.url(), &pki.server("proxy"), "").await;
    let plain = proxy
        .client
        .send_raw("POST", "/v1/charges", &[], "{}")
        .await;
    assert!(plain.is_err(), "plain HTTP was answered: {plain:?}");
    assert!(upstream.seen().is_empty());
}

/// Reads until the peer closes; `None` if it has not within `limit`.
async fn closed_within<S: AsyncReadExt + Unpin>(stream: &mut S, limit: Duration) -> Option<()> {
    let mut buf = [0u8; 512];
    tokio::time::timeout(limit, async {
        while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
    })
    .await
    .ok()
}

#[tokio::test]
async fn silent_clients_are_dropped_before_and_after_the_handshake() {
    let pki = Pki::new("silent");
    let upstream = TestUpstream::start().await;
    let lines = "header_read_timeout = \"300ms\"\nmax_connections = 1\n";
    let proxy = https_proxy(&upstream.url(), &pki.server("proxy"), lines).await;
    let mut no_handshake = TcpStream::connect(proxy.addr).await.unwrap();
    let limit = Duration::from_secs(30);
    assert!(closed_within(&mut no_handshake, limit).await.is_some());
    for alpn in [b"http/1.1".as_slice(), b"h2"] {
        let tcp = TcpStream::connect(proxy.addr).await.unwrap();
        let name = ServerName::try_from("localhost").unwrap();
        let config = pki.client_config(&[alpn]);
        let mut silent = TlsConnector::from(config).connect(name, tcp).await.unwrap();
        assert_eq!(silent.get_ref().1.alpn_protocol(), Some(alpn));
        assert!(closed_within(&mut silent, limit).await.is_some());
    }
    // Every slot (one allowed at a time) was given back.
    let mut handshake = connect(proxy.addr, pki.client_config(&[b"h2"])).await;
    let answer = handshake.client.post("/v1/charges", "after", "{}").await;
    assert_eq!(answer.status, StatusCode::CREATED);
}

#[tokio::test]
async fn ambiguous_framing_over_tls_is_refused_before_the_upstream() {
    let pki = Pki::new("framing");
    let upstream = TestUpstream::start().await;
    let proxy = https_proxy(&upstream.url(), &pki.server("proxy"), "").await;
    let tcp = TcpStream::connect(proxy.addr).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let config = pki.client_config(&[b"http/1.1"]);
    let mut tls = TlsConnector::from(config).connect(name, tcp).await.unwrap();
    let smuggled = "POST /v1/charges HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
    tls.write_all(smuggled.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(30), tls.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("bad-request"), "{answer}");
    assert!(upstream.seen().is_empty());
}

/// A config file for one test, and a proxy that reloads from it.
struct Reloadable {
    file: std::path::PathBuf,
    proxy: TestProxy,
    handle: Proxy,
}

impl Reloadable {
    async fn start(pki: &Pki, toml: &str) -> Self {
        let file = pki.dir.join("proxy.toml");
        std::fs::write(&file, toml).unwrap();
        let (proxy, handle) = TestProxy::from_file(&file, Arc::new(MemoryStore::new())).await;
        Self {
            file,
            proxy,
            handle,
        }
    }

    fn reload(&self, toml: &str) {
        std::fs::write(&self.file, toml).unwrap();
        self.handle
            .reload()
            .unwrap_or_else(|e| panic!("reload refused: {e}"));
    }

    /// Whether the store holds a record for `key` on the route `default`.
    async fn has_record(&self, key: &str) -> bool {
        let path = format!("/keys/default/{key}");
        let answer = self.proxy.admin.send("GET", &path, &[], "").await;
        answer.status == StatusCode::OK
    }
}

#[tokio::test]
async fn a_private_ca_upstream_needs_upstream_ca_and_a_failed_handshake_frees_the_key() {
    let pki = Pki::new("upstream-ca");
    let upstream = TestUpstream::start_tls(pki.server_config(&pki.server("upstream"), false)).await;
    let without_ca = format!(
        "upstream = \"{}\"\nstore = \"memory\"\n",
        upstream.https_url()
    );
    let proxy = Reloadable::start(&pki, &without_ca).await;
    let refused = proxy.proxy.client.post("/v1/charges", "ca-1", "{}").await;
    assert_eq!(refused.status, StatusCode::BAD_GATEWAY);
    assert_eq!(refused.problem_type(), "upstream-unavailable");
    assert!(upstream.seen().is_empty());
    assert!(!proxy.has_record("ca-1").await, "the key was not freed");

    let with_ca = format!(
        "{without_ca}[defaults]\nupstream_ca = \"file:{}\"\n",
        pki.ca_file()
    );
    proxy.reload(&with_ca);
    let answered = proxy.proxy.client.post("/v1/charges", "ca-1", "{}").await;
    assert_eq!(answered.status, StatusCode::CREATED, "{answered:?}");
    assert_eq!(upstream.executions_of("ca-1"), 1);
    let seen = &upstream.seen()[0];
    assert_eq!(seen.headers["x-forwarded-proto"], "http");
    // Addressed by the name in its certificate; the client's name is passed beside it.
    assert_eq!(
        seen.headers["host"],
        upstream.https_url()["https://".len()..]
    );
    let client_host = proxy.proxy.addr.to_string();
    assert_eq!(seen.headers["x-forwarded-host"], client_host.as_str());
}

#[tokio::test]
async fn an_upstream_requiring_a_client_certificate_answers_only_when_one_is_configured() {
    let pki = Pki::new("mtls");
    let server = pki.server("psp");
    let upstream = TestUpstream::start_tls(pki.server_config(&server, true)).await;
    let route = format!(
        "store = \"memory\"\n[[routes]]\nname = \"default\"\npath_prefix = \"/\"\nupstream = \"{}\"\nupstream_ca = \"file:{}\"\n",
        upstream.https_url(),
        pki.ca_file()
    );
    let proxy = Reloadable::start(&pki, &route).await;
    let refused = proxy.proxy.client.post("/v1/payouts", "mtls-1", "{}").await;
    assert_eq!(refused.status, StatusCode::BAD_GATEWAY, "{refused:?}");
    assert!(upstream.seen().is_empty());
    assert!(
        !proxy.has_record("mtls-1").await,
        "a refused handshake kept the key"
    );

    let client = pki.client("proxy-client");
    let with_cert = format!(
        "{route}upstream_client_cert = \"file:{}\"\nupstream_client_key = \"file:{}\"\n",
        client.cert, client.key
    );
    proxy.reload(&with_cert);
    let answered = proxy.proxy.client.post("/v1/payouts", "mtls-1", "{}").await;
    assert_eq!(answered.status, StatusCode::CREATED, "{answered:?}");
    let replayed = proxy.proxy.client.post("/v1/payouts", "mtls-1", "{}").await;
    assert!(replayed.replayed());
    assert_eq!(upstream.executions_of("mtls-1"), 1);
}

#[tokio::test]
async fn a_reload_gives_new_handshakes_the_new_pair_and_keeps_open_connections() {
    let pki = Pki::new("rotate");
    let upstream = TestUpstream::start().await;
    let (old, new) = (pki.server("old"), pki.server("new"));
    let head = format!("upstream = \"{}\"\nstore = \"memory\"\n", upstream.url());
    let proxy = Reloadable::start(&pki, &format!("{head}{}", listener_lines(&old))).await;
    let config = pki.client_config(&[b"http/1.1"]);
    let mut before = connect(proxy.proxy.addr, config.clone()).await;
    proxy.reload(&format!("{head}{}", listener_lines(&new)));
    let after = connect(proxy.proxy.addr, config).await;
    assert_ne!(before.server_cert, after.server_cert);
    let new_der = std::fs::read_to_string(&new.cert).unwrap();
    let new_der = rustls::pki_types::pem::PemObject::from_pem_slice(new_der.as_bytes());
    let new_der: rustls::pki_types::CertificateDer = new_der.unwrap();
    assert_eq!(after.server_cert, new_der);
    let answer = before.client.post("/v1/charges", "kept-open", "{}").await;
    assert_eq!(answer.status, StatusCode::CREATED);
}

#[tokio::test]
async fn sessions_resume_on_new_connections_and_after_a_reload() {
    let pki = Pki::new("resume");
    let upstream = TestUpstream::start().await;
    let toml = format!(
        "upstream = \"{}\"\nstore = \"memory\"\n{}",
        upstream.url(),
        listener_lines(&pki.server("proxy"))
    );
    let proxy = Reloadable::start(&pki, &toml).await;
    for alpn in [b"http/1.1".as_slice(), b"h2"] {
        // The client keeps the tickets the proxy sends with its first answer.
        let config = pki.client_config(&[alpn]);
        let mut first = connect(proxy.proxy.addr, config.clone()).await;
        assert!(!first.resumed);
        first.client.post("/v1/charges", "resume", "{}").await;
        let mut second = connect(proxy.proxy.addr, config.clone()).await;
        assert!(second.resumed);
        second.client.post("/v1/charges", "resume", "{}").await;
        proxy.reload(&toml);
        assert!(connect(proxy.proxy.addr, config).await.resumed);
    }
}

#[tokio::test]
async fn the_binary_serves_https_with_bare_path_flags() {
    let pki = Pki::new("binary");
    let pair = pki.server("proxy");
    let upstream = TestUpstream::start().await;
    let flags = [
        "--store",
        "memory",
        "--tls-cert",
        &pair.cert,
        "--tls-key",
        &pair.key,
    ];
    let (_child, client) = start_binary(&upstream.url(), &flags).await;
    let addr = client.addr();
    let mut handshake = connect(addr, pki.client_config(&[b"h2"])).await;
    let answer = handshake.client.post("/v1/charges", "binary", "{}").await;
    assert_eq!(answer.status, StatusCode::CREATED);
    assert_eq!(upstream.seen()[0].headers["x-forwarded-proto"], "https");
}

#[test]
fn check_validates_the_tls_files_and_names_the_one_at_fault() {
    let pki = Pki::new("check");
    let (one, two) = (pki.server("one"), pki.server("two"));
    let check = |lines: &str| {
        let file = pki.write(
            "check.toml",
            &format!("upstream = \"http://127.0.0.1:9\"\n{lines}"),
        );
        let output = Command::new(BIN)
            .args(["--config", &file, "--check"])
            .output()
            .unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (code, _) = check(&listener_lines(&one));
    assert_eq!(code, Some(0));
    let missing = Pair {
        cert: pki.dir.join("gone.crt").display().to_string(),
        key: one.key.clone(),
    };
    let (code, stderr) = check(&listener_lines(&missing));
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("key \"tls_cert\": cannot read") && stderr.contains(&missing.cert),
        "{stderr}"
    );
    let mismatched = Pair {
        cert: one.cert.clone(),
        key: two.key.clone(),
    };
    let (code, stderr) = check(&listener_lines(&mismatched));
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("does not match") && stderr.contains(&two.key),
        "{stderr}"
    );
    let (code, stderr) = check(&format!("[defaults]\nupstream_ca = \"file:{}\"\n", two.key));
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("upstream_ca") && stderr.contains(&two.key),
        "{stderr}"
    );
}
