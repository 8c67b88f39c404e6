//! The TLS keys (docs/reference.md#tls): the listener's `tls_cert` and `tls_key` (or `--tls-cert` and
//! `--tls-key`), and a route's `upstream_ca`, `upstream_client_cert` and `upstream_client_key`.
//!
//! Every file is read and checked here, at load, so a missing, unreadable or mismatched file
//! stops the start (and fails `--check`, and a reload) naming the file, instead of failing the
//! first handshake.

use toml::Spanned;

use crate::config::common::error::ConfigError;
use crate::config::common::given::Given;
use crate::config::common::source::Source;
use crate::config::routes::keys::PolicyTable;
use crate::config::settings::Overrides;
use crate::tls::{self, ListenerTls, UpstreamTls};

/// The listener's pair, if either half is given; one half alone is refused.
pub(super) fn listener(
    src: &Source,
    cli: &Overrides,
    (cert, key): (Option<&Spanned<String>>, Option<&Spanned<String>>),
) -> Result<Option<ListenerTls>, ConfigError> {
    let cert = Given::pick(("--tls-cert", cli.tls_cert.as_ref()), ("tls_cert", cert));
    let key = Given::pick(("--tls-key", cli.tls_key.as_ref()), ("tls_key", key));
    match (cert, key) {
        (None, None) => Ok(None),
        (Some(cert), None) => Err(half(src, &cert, "tls_key", "--tls-key")),
        (None, Some(key)) => Err(half(src, &key, "tls_cert", "--tls-cert")),
        (Some(cert), Some(key)) => pair(src, &cert, &key).map(Some),
    }
}

/// The refusal of a pair given by half: it names the missing key, at the given half.
fn half(src: &Source, given: &Given, missing: &str, flag: &str) -> ConfigError {
    let reason = format!("the listener needs both tls_cert and tls_key; set {missing} (or {flag})");
    match given {
        Given::Flag(flag, _) => ConfigError::Flag { flag, reason },
        Given::File(_, value) => src.bad(value, missing, reason),
    }
}

fn pair(src: &Source, cert: &Given, key: &Given) -> Result<ListenerTls, ConfigError> {
    let (cert_file, key_file) = (reference(cert), reference(key));
    let chain = cert.parse(src, |_| tls::certificates(&cert_file))?;
    let private = key.parse(src, |_| tls::private_key(&key_file))?;
    key.parse(src, |_| {
        ListenerTls::new(&cert_file, chain, &key_file, private)
    })
}

/// The file a given value names, as `file:PATH`: a flag may give a bare path, the file may not
/// (there every file is written `file:PATH`, like every secret).
fn reference(given: &Given) -> String {
    match given {
        Given::Flag(_, value) if !value.starts_with("file:") => format!("file:{value}"),
        Given::Flag(_, value) => (*value).to_owned(),
        Given::File(_, value) => value.get_ref().clone(),
    }
}

/// Applies a `[defaults]` or `[[routes]]` table's upstream TLS keys over what the route
/// inherits.
pub(super) fn apply(
    src: &Source,
    inherited: &mut UpstreamTls,
    table: &PolicyTable,
) -> Result<(), ConfigError> {
    let keys = UpstreamKeys {
        ca: table.upstream_ca.as_ref(),
        cert: table.upstream_client_cert.as_ref(),
        key: table.upstream_client_key.as_ref(),
    };
    apply_keys(src, inherited, &keys)
}

/// A table's `upstream_ca`, `upstream_client_cert` and `upstream_client_key`.
pub(super) struct UpstreamKeys<'a> {
    pub(super) ca: Option<&'a Spanned<String>>,
    pub(super) cert: Option<&'a Spanned<String>>,
    pub(super) key: Option<&'a Spanned<String>>,
}

/// Applies the upstream TLS keys a table sets over `inherited`. A client certificate and its
/// key are set together, in one table, so that each table's pair can be checked to match
/// where it is written.
pub(super) fn apply_keys(
    src: &Source,
    inherited: &mut UpstreamTls,
    keys: &UpstreamKeys<'_>,
) -> Result<(), ConfigError> {
    if let Some(ca) = keys.ca {
        inherited
            .set_ca(ca.get_ref())
            .map_err(|reason| src.bad(ca, "upstream_ca", reason))?;
    }
    let alone = "set upstream_client_cert and upstream_client_key together, in one table";
    match (keys.cert, keys.key) {
        (None, None) => Ok(()),
        (Some(cert), None) => Err(src.bad(cert, "upstream_client_key", alone)),
        (None, Some(key)) => Err(src.bad(key, "upstream_client_cert", alone)),
        (Some(cert), Some(key)) => inherited
            .set_identity(cert.get_ref(), key.get_ref())
            .map_err(|(key_at_fault, reason)| {
                if key_at_fault {
                    src.bad(key, "upstream_client_key", reason)
                } else {
                    src.bad(cert, "upstream_client_cert", reason)
                }
            }),
    }
}
