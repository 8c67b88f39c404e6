//! TLS to the database through rustls: the platform's roots, or the caller's own config.

use std::sync::{Arc, OnceLock};

use rustls::{ClientConfig, RootCertStore};

/// The client config when the caller gives none: the platform's trusted roots, read once. A
/// database with a private CA needs the caller's config (the proxy builds one with `store_ca`).
pub(crate) fn platform() -> Arc<ClientConfig> {
    static CONFIG: OnceLock<Arc<ClientConfig>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let found = rustls_native_certs::load_native_certs();
            let mut roots = RootCertStore::empty();
            let (_, unusable) = roots.add_parsable_certificates(found.certs);
            if roots.is_empty() {
                tracing::warn!(
                    unusable,
                    "no platform root certificates: TLS to the database will fail to verify"
                );
            }
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .expect("ring supports the default protocol versions")
                .with_root_certificates(roots)
                .with_no_client_auth();
            Arc::new(config)
        })
        .clone()
}
