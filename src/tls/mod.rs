//! TLS both ways (SPEC section 9): the HTTPS listener, and `https://` upstreams.
//!
//! - [`ListenerTls`] is the listener's certificate and key as the config names them, checked
//!   at load (readable, PEM, the key matching the certificate); [`TlsListener`] serves
//!   handshakes with it and takes a new pair on a reload without touching open connections.
//! - [`UpstreamTls`] is what a route's upstream connections trust (the platform's roots plus
//!   `upstream_ca`) and present (`upstream_client_cert` and `upstream_client_key`), built into a
//!   `rustls::ClientConfig` when the route's upstream is `https://`; [`connect`] runs the
//!   client handshake over an open TCP stream, and [`HttpsConnector`] plugs that into the
//!   forwarding client.
//!
//! rustls with the `ring` provider, never OpenSSL: ring builds from the crate alone with a C
//! compiler (aws-lc-rs needs CMake and takes several times as long to build), and for what a
//! proxy does here (ECDHE key exchange, AES-GCM or ChaCha20, ECDSA or RSA signatures) the two
//! are within a few percent of each other. The provider is named explicitly wherever a config
//! is built, so no process-wide default has to be installed.

mod client;
mod connector;
mod files;
mod server;

use std::sync::{Arc, OnceLock};

use rustls::crypto::CryptoProvider;

pub use client::UpstreamTls;
pub(crate) use client::{connect, refused_handshake};
pub(crate) use connector::HttpsConnector;
pub(crate) use files::{certificates, private_key};
pub use server::ListenerTls;
pub(crate) use server::TlsListener;

/// The one crypto provider every TLS config of the proxy is built with.
fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| Arc::new(rustls::crypto::ring::default_provider()))
        .clone()
}
