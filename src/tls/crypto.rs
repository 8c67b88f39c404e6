//! The crypto provider every TLS config of the proxy is built with: rustls' `ring` (see the
//! module above for why).

use std::sync::{Arc, OnceLock};

use rustls::crypto::CryptoProvider;

/// The one provider, named explicitly wherever a config is built, so no process-wide default
/// has to be installed.
pub(super) fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| Arc::new(rustls::crypto::ring::default_provider()))
        .clone()
}
