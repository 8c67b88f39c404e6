//! The client side, towards `https://` upstreams: what a route trusts and presents, and the
//! handshake over an open TCP stream.
//!
//! Server certificates are verified against the platform's roots (rustls-native-certs: the
//! operating system's store, `/etc/ssl/certs` on Linux) plus the route's `upstream_ca`. The
//! platform's store rather than a list compiled in (webpki-roots), because that is where an
//! operator's private CA already lives and what the distribution keeps current; a container
//! image needs its `ca-certificates` package for it. The store is read once per process.

use std::fmt;
use std::io;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, TrustAnchor};
use rustls::{AlertDescription, ClientConfig, RootCertStore};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use super::crypto::provider;
use super::files::{self, shown};
use super::server::certified_key;

/// How long a handshake with an upstream may take; past it the request is given up as never
/// sent, as a refused connection is.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// What one route's upstream connections trust and present (`upstream_ca`,
/// `upstream_client_cert`, `upstream_client_key`), and the client config built from them
/// when the route's upstream is `https://`.
#[derive(Clone, Default)]
pub struct UpstreamTls {
    ca: Option<(String, Arc<[TrustAnchor<'static>]>)>,
    identity: Option<Identity>,
    config: Option<Arc<ClientConfig>>,
}

/// A client certificate chain and its key, checked to belong together.
#[derive(Clone)]
struct Identity {
    cert: String,
    key: String,
    chain: Arc<[CertificateDer<'static>]>,
    private: Arc<PrivateKeyDer<'static>>,
}

impl UpstreamTls {
    /// Trusts the certificates in the PEM bundle `reference` names, besides the platform's.
    pub(crate) fn set_ca(&mut self, reference: &str) -> Result<(), String> {
        let mut roots = RootCertStore::empty();
        for certificate in files::certificates(reference)? {
            roots.add(certificate).map_err(|e| {
                format!(
                    "{:?} holds a certificate that cannot be a CA: {e}",
                    shown(reference)
                )
            })?;
        }
        self.ca = Some((reference.to_owned(), roots.roots.into()));
        Ok(())
    }

    /// Presents the chain in `cert` with the key in `key`. The error says which of the two
    /// files is at fault: `(true, _)` for the key.
    pub(crate) fn set_identity(&mut self, cert: &str, key: &str) -> Result<(), (bool, String)> {
        let chain = files::certificates(cert).map_err(|e| (false, e))?;
        let private = files::private_key(key).map_err(|e| (true, e))?;
        certified_key(cert, chain.clone(), key, private.clone_key()).map_err(|e| (true, e))?;
        self.identity = Some(Identity {
            cert: cert.to_owned(),
            key: key.to_owned(),
            chain: chain.into(),
            private: Arc::new(private),
        });
        Ok(())
    }

    /// Builds the client config if the upstream is `https://`; for a plain one the files stay
    /// checked but unused, so one `[defaults]` can serve both kinds of route.
    pub(crate) fn for_upstream(mut self, https: bool) -> Result<Self, String> {
        self.config = if https {
            Some(Arc::new(self.client_config()?))
        } else {
            None
        };
        Ok(self)
    }

    fn client_config(&self) -> Result<ClientConfig, String> {
        let mut roots = platform_roots().clone();
        if let Some((_, anchors)) = &self.ca {
            roots.roots.extend(anchors.iter().cloned());
        }
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("the ring provider supports TLS 1.2 and 1.3")
            .with_root_certificates(roots);
        let mut config = match &self.identity {
            Some(id) => builder
                .with_client_auth_cert(id.chain.to_vec(), id.private.clone_key())
                .map_err(|e| format!("cannot use the key in {:?}: {e}", shown(&id.key)))?,
            None => builder.with_no_client_auth(),
        };
        // The upstream is spoken to in HTTP/1.1 only.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }

    /// The client config, for an `https://` upstream.
    pub(crate) fn client_config_for_https(&self) -> Option<&Arc<ClientConfig>> {
        self.config.as_ref()
    }

    /// `upstream_ca` as configured.
    pub fn ca_reference(&self) -> Option<&str> {
        self.ca.as_ref().map(|(reference, _)| reference.as_str())
    }

    /// `upstream_client_cert` and `upstream_client_key` as configured.
    pub fn identity_references(&self) -> Option<(&str, &str)> {
        self.identity
            .as_ref()
            .map(|id| (id.cert.as_str(), id.key.as_str()))
    }
}

impl fmt::Debug for UpstreamTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpstreamTls")
            .field("ca", &self.ca_reference())
            .field("identity", &self.identity_references())
            .field("https", &self.config.is_some())
            .finish()
    }
}

/// The client config of an `https://` upstream that configures nothing: the platform's roots,
/// no client certificate.
pub(crate) fn platform_client_config() -> Arc<ClientConfig> {
    static CONFIG: OnceLock<Arc<ClientConfig>> = OnceLock::new();
    let config = || UpstreamTls::default().client_config().map(Arc::new);
    CONFIG
        .get_or_init(|| config().expect("only a client certificate can be refused"))
        .clone()
}

/// The client config for the Postgres store's TLS (`store_ca`): the platform's roots and the
/// CAs in the PEM bundle `ca` names. No ALPN: the database protocol names none.
pub(crate) fn database_client_config(ca: &str) -> Result<Arc<ClientConfig>, String> {
    let mut tls = UpstreamTls::default();
    tls.set_ca(ca)?;
    let mut config = tls.client_config()?;
    config.alpn_protocols.clear();
    Ok(Arc::new(config))
}

/// The platform's trusted roots, read once. A platform with none (a container image without
/// `ca-certificates`) leaves only `upstream_ca` trusted, which is said once in the log.
fn platform_roots() -> &'static RootCertStore {
    static ROOTS: OnceLock<RootCertStore> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let found = rustls_native_certs::load_native_certs();
        let mut roots = RootCertStore::empty();
        let (_, unusable) = roots.add_parsable_certificates(found.certs);
        if roots.is_empty() || !found.errors.is_empty() {
            let errors: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
            tracing::warn!(
                roots = roots.len(),
                unusable,
                ?errors,
                "platform root certificates: only upstream_ca is trusted beyond these"
            );
        }
        roots
    })
}

/// Runs the TLS handshake with an upstream over `tcp`, naming `host` (the upstream URL's host)
/// for SNI and for the certificate check, within a bounded time.
pub(crate) async fn connect(
    config: &Arc<ClientConfig>,
    tcp: TcpStream,
    host: &str,
) -> io::Result<TlsStream<TcpStream>> {
    // A URI writes an IPv6 literal in brackets; a server name is the bare address.
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let name = ServerName::try_from(host.to_owned())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let handshake = TlsConnector::from(config.clone()).connect(name, tcp);
    tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake)
        .await
        .unwrap_or_else(|_| {
            Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the TLS handshake with the upstream timed out",
            ))
        })
}

/// Whether `error` is the upstream refusing the handshake with an alert. In TLS 1.3 a server
/// checks the client's certificate after the client has finished its side, so a refused (or
/// missing) client certificate is only heard of on the first read, after the request was
/// written into the connection. The server never reads application data from a connection
/// whose handshake it refused, so such a request was never received: safe to run again.
pub(crate) fn refused_handshake(error: &(dyn std::error::Error + 'static)) -> bool {
    let chain = std::iter::successors(Some(error), |e| e.source());
    chain.filter_map(tls_error).any(|e| {
        matches!(
            e,
            rustls::Error::AlertReceived(
                AlertDescription::HandshakeFailure
                    | AlertDescription::BadCertificate
                    | AlertDescription::UnsupportedCertificate
                    | AlertDescription::CertificateRevoked
                    | AlertDescription::CertificateExpired
                    | AlertDescription::CertificateUnknown
                    | AlertDescription::UnknownCA
                    | AlertDescription::AccessDenied
                    | AlertDescription::CertificateRequired
            )
        )
    })
}

/// The rustls error `error` is or carries. An `io::Error` hides what it wraps from `source()`.
fn tls_error<'e>(error: &'e (dyn std::error::Error + 'static)) -> Option<&'e rustls::Error> {
    if let Some(tls) = error.downcast_ref::<rustls::Error>() {
        return Some(tls);
    }
    let io = error.downcast_ref::<io::Error>()?;
    io.get_ref()?.downcast_ref::<rustls::Error>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_client_certificate_is_read_through_io_errors() {
        let alert = rustls::Error::AlertReceived(AlertDescription::CertificateRequired);
        let io = io::Error::new(io::ErrorKind::InvalidData, alert);
        assert!(refused_handshake(&io));
        let other = rustls::Error::AlertReceived(AlertDescription::DecodeError);
        assert!(!refused_handshake(&io::Error::new(
            io::ErrorKind::InvalidData,
            other
        )));
        let reset = io::Error::from(io::ErrorKind::ConnectionReset);
        assert!(!refused_handshake(&reset));
    }

    #[test]
    fn a_plain_upstream_gets_no_client_config() {
        let plain = UpstreamTls::default().for_upstream(false).unwrap();
        assert!(plain.client_config_for_https().is_none());
        let https = UpstreamTls::default().for_upstream(true).unwrap();
        let config = https.client_config_for_https().unwrap();
        assert_eq!(config.alpn_protocols, vec![b"http/1.1".to_vec()]);
    }
}
