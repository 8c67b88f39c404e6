//! Certificates made for one test (a private CA and the leaves it signs, as PEM files), and a
//! TLS client that speaks HTTP/1.1 or h2 to the proxy over one connection.

use std::path::PathBuf;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, Version};
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::answer::Answer;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A private CA and a directory for the files it signs.
pub(crate) struct Pki {
    pub(crate) dir: PathBuf,
    ca: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate and its key, as files.
#[derive(Debug, Clone)]
pub(crate) struct Pair {
    pub(crate) cert: String,
    pub(crate) key: String,
}

impl Pki {
    pub(crate) fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "idempotency-proxy-pki-{name}-{}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, format!("test CA {name}"));
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        let pki = Self { dir, ca };
        pki.write("ca.pem", &pki.ca.pem());
        pki
    }

    /// The CA's certificate file.
    pub(crate) fn ca_file(&self) -> String {
        self.path("ca.pem")
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    pub(crate) fn write(&self, name: &str, text: &str) -> String {
        std::fs::write(self.dir.join(name), text).unwrap();
        self.path(name)
    }

    /// A server certificate for `localhost` and 127.0.0.1, signed by the CA.
    pub(crate) fn server(&self, name: &str) -> Pair {
        self.leaf(name, ExtendedKeyUsagePurpose::ServerAuth)
    }

    /// A client certificate, signed by the CA.
    pub(crate) fn client(&self, name: &str) -> Pair {
        self.leaf(name, ExtendedKeyUsagePurpose::ClientAuth)
    }

    fn leaf(&self, name: &str, usage: ExtendedKeyUsagePurpose) -> Pair {
        let mut params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![usage];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca).unwrap();
        Pair {
            cert: self.write(&format!("{name}.crt"), &cert.pem()),
            key: self.write(&format!("{name}.key"), &key.serialize_pem()),
        }
    }

    fn roots(&self) -> RootCertStore {
        let mut roots = RootCertStore::empty();
        roots.add(self.ca.der().clone()).unwrap();
        roots
    }

    /// A client config trusting this CA only, offering `alpn`.
    pub(crate) fn client_config(&self, alpn: &[&[u8]]) -> Arc<ClientConfig> {
        let mut config = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(self.roots())
            .with_no_client_auth();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Arc::new(config)
    }

    /// A server config presenting `pair`; with `require_client_cert`, only clients with a
    /// certificate this CA signed get through the handshake.
    pub(crate) fn server_config(
        &self,
        pair: &Pair,
        require_client_cert: bool,
    ) -> Arc<ServerConfig> {
        let builder = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap();
        let builder = if require_client_cert {
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(self.roots()), provider())
                    .build()
                    .unwrap();
            builder.with_client_cert_verifier(verifier)
        } else {
            builder.with_no_client_auth()
        };
        let chain = CertificateDer::pem_file_iter(&pair.cert)
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_file(&pair.key).unwrap();
        Arc::new(builder.with_single_cert(chain, key).unwrap())
    }
}

/// One TLS connection to the proxy, HTTP/1.1 or h2 as ALPN decided.
pub(crate) enum TlsClient {
    Http1(http1::SendRequest<Body>),
    Http2(http2::SendRequest<Body>),
}

/// What the handshake showed: the protocol, the certificate the server presented, and whether
/// an earlier session was resumed.
pub(crate) struct Handshake {
    pub(crate) client: TlsClient,
    pub(crate) alpn: Option<Vec<u8>>,
    pub(crate) server_cert: CertificateDer<'static>,
    pub(crate) resumed: bool,
}

/// Connects to `addr` over TLS with `config`, naming `localhost`.
pub(crate) async fn connect(addr: std::net::SocketAddr, config: Arc<ClientConfig>) -> Handshake {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let tls = TlsConnector::from(config).connect(name, tcp).await.unwrap();
    let (_, session) = tls.get_ref();
    let alpn = session.alpn_protocol().map(<[u8]>::to_vec);
    let server_cert = session.peer_certificates().unwrap()[0].clone();
    let resumed = session.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
    let io = TokioIo::new(tls);
    let client = if alpn.as_deref() == Some(b"h2") {
        let (sender, connection) = http2::handshake(TokioExecutor::new(), io).await.unwrap();
        tokio::spawn(connection);
        TlsClient::Http2(sender)
    } else {
        let (sender, connection) = http1::handshake(io).await.unwrap();
        tokio::spawn(connection);
        TlsClient::Http1(sender)
    };
    Handshake {
        client,
        alpn,
        server_cert,
        resumed,
    }
}

impl TlsClient {
    /// A keyed POST to `path`, read whole.
    pub(crate) async fn post(&mut self, path: &str, key: &str, body: &'static str) -> Answer {
        let version = match self {
            TlsClient::Http1(_) => Version::HTTP_11,
            TlsClient::Http2(_) => Version::HTTP_2,
        };
        let request = Request::post(format!("https://localhost{path}"))
            .version(version)
            .header("host", "localhost")
            .header("idempotency-key", key)
            .body(Body::from(body))
            .unwrap();
        let response = match self {
            TlsClient::Http1(sender) => {
                let mut request = request;
                *request.uri_mut() = path.parse().unwrap();
                sender.send_request(request).await
            }
            TlsClient::Http2(sender) => {
                let mut request = request;
                request.headers_mut().remove("host");
                sender.send_request(request).await
            }
        };
        Answer::read(response.expect("the proxy answers")).await
    }
}
