//! The HTTPS listener's side: its certificate and key, and the handshake of each connection.
//!
//! The `rustls::ServerConfig` is built once per listener and never replaced: a reload swaps only
//! the certified key its resolver hands out, so new handshakes get the new pair while open
//! connections keep theirs, and the session ticket keys (and so resumption) survive the reload.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, ServerSessionMemoryCache};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use super::crypto::provider;
use super::files::shown;

/// The listener's certificate chain and key (`tls_cert`, `tls_key`), read and checked.
#[derive(Clone)]
pub struct ListenerTls {
    cert: String,
    key: String,
    certified: Arc<CertifiedKey>,
}

impl ListenerTls {
    /// The pair read from the files `cert` and `key` name; refused if the key does not match the
    /// chain's first certificate, or is not a key the provider can sign with.
    pub(crate) fn new(
        cert: &str,
        chain: Vec<CertificateDer<'static>>,
        key: &str,
        private: PrivateKeyDer<'static>,
    ) -> Result<Self, String> {
        let certified = certified_key(cert, chain, key, private)?;
        Ok(Self {
            cert: cert.to_owned(),
            key: key.to_owned(),
            certified: Arc::new(certified),
        })
    }

    /// The certificate chain's file, as configured (`file:PATH`).
    pub fn cert_reference(&self) -> &str {
        &self.cert
    }

    /// The key's file, as configured (`file:PATH`).
    pub fn key_reference(&self) -> &str {
        &self.key
    }
}

impl fmt::Debug for ListenerTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ListenerTls")
            .field("cert", &self.cert)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

/// A chain and its key as one signing identity, checked to belong together.
pub(super) fn certified_key(
    cert: &str,
    chain: Vec<CertificateDer<'static>>,
    key: &str,
    private: PrivateKeyDer<'static>,
) -> Result<CertifiedKey, String> {
    CertifiedKey::from_der(chain, private, &provider()).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => format!(
            "the key in {:?} does not match the certificate in {:?}",
            shown(key),
            shown(cert)
        ),
        e => format!("cannot use the key in {:?}: {e}", shown(key)),
    })
}

/// Hands every handshake the pair in force when it starts.
#[derive(Debug)]
struct CurrentPair(ArcSwap<CertifiedKey>);

impl ResolvesServerCert for CurrentPair {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.load_full())
    }
}

/// A connection whose handshake is done, and whether its client chose HTTP/2 by ALPN.
pub(crate) struct Accepted {
    pub(crate) stream: TlsStream<TcpStream>,
    pub(crate) http2: bool,
}

/// What the listener accepts TLS connections with.
pub(crate) struct TlsListener {
    acceptor: TlsAcceptor,
    pair: Arc<CurrentPair>,
}

/// TLS 1.2 session ids remembered for resumption; tickets (TLS 1.2 and 1.3) need no memory.
const SESSION_CACHE_ENTRIES: usize = 4096;

impl TlsListener {
    /// Offers ALPN `h2` and `http/1.1`, and resumption by session tickets (keys rotated by
    /// rustls every six hours) and by a session cache. 0-RTT stays off: early data can be
    /// replayed by anyone who saw it, which is what this proxy exists to prevent.
    pub(crate) fn new(tls: &ListenerTls) -> Self {
        let pair = Arc::new(CurrentPair(ArcSwap::new(tls.certified.clone())));
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("the ring provider supports TLS 1.2 and 1.3")
            .with_no_client_auth()
            .with_cert_resolver(pair.clone());
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        config.session_storage = ServerSessionMemoryCache::new(SESSION_CACHE_ENTRIES);
        match rustls::crypto::ring::Ticketer::new() {
            Ok(ticketer) => config.ticketer = ticketer,
            Err(e) => {
                tracing::warn!(error = %e, "no TLS session tickets; resumption by session cache only");
            }
        }
        Self {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            pair,
        }
    }

    /// New handshakes present `tls` from now on; open connections are left as they are.
    pub(crate) fn replace(&self, tls: &ListenerTls) {
        self.pair.0.store(tls.certified.clone());
    }

    /// Runs the handshake on `tcp`, for at most `timeout`: a client that connects and never
    /// finishes its handshake must not hold its connection slot.
    pub(crate) async fn accept(&self, tcp: TcpStream, timeout: Duration) -> Option<Accepted> {
        let peer = tcp.peer_addr().ok();
        match tokio::time::timeout(timeout, self.acceptor.accept(tcp)).await {
            Ok(Ok(stream)) => {
                let http2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
                Some(Accepted { stream, http2 })
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, ?peer, "TLS handshake failed");
                None
            }
            Err(_) => {
                tracing::debug!(?peer, "no TLS handshake within the header read time-out");
                None
            }
        }
    }
}
