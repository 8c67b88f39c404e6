//! TLS both ways (docs/reference.md#tls): the HTTPS listener, and `https://` upstreams.
//!
//! - [`ListenerTls`] is the listener's certificate and key as the config names them, checked
//!   at load (readable, PEM, the key matching the certificate); [`TlsListener`] serves
//!   handshakes with it and takes a new pair on a reload without touching open connections.
//! - [`UpstreamTls`] is what a route's upstream connections trust (the platform's roots plus
//!   `upstream_ca`) and present (`upstream_client_cert` and `upstream_client_key`), built into a
//!   `rustls::ClientConfig` when the route's upstream is `https://`; [`connect`] runs the
//!   client handshake over an open TCP stream, which the upstream connection pool calls.
//!
//! rustls with the `ring` provider, never OpenSSL: ring builds from the crate alone with a C
//! compiler (aws-lc-rs needs CMake and takes several times as long to build), and for what a
//! proxy does here (ECDHE key exchange, AES-GCM or ChaCha20, ECDSA or RSA signatures) the two
//! are within a few percent of each other. The provider is named explicitly wherever a config
//! is built, so no process-wide default has to be installed.

mod client;
mod crypto;
mod files;
mod server;

pub use client::UpstreamTls;
pub(crate) use client::{
    connect, database_client_config, platform_client_config, refused_handshake,
};
pub(crate) use files::{certificates, private_key};
pub use server::ListenerTls;
pub(crate) use server::TlsListener;
