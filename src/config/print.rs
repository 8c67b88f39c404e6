//! Printing the effective configuration (`--check`) in the config file's own vocabulary.
//!
//! The output is built from the same raw structs the file is read into, so it cannot drift
//! from what the file accepts. Every route is printed with every policy key, and the route
//! `default` as an ordinary `[[routes]]` table with prefix `/`, so loading the output gives the
//! same settings without any `[defaults]` or top-level `upstream`.

use super::file::{unspanned, FingerprintBodyMode, PolicyTable, RawFile, RouteHead, RouteTable};
use super::settings::{RouteSettings, Settings};
use idempotency_core::policy::FingerprintBody;
use idempotency_core::policy::Protocol;
use idempotency_core::{policy::KeySource, Policy};
use sha2::{Digest, Sha256};
use toml::Spanned;

impl Settings {
    /// The effective configuration in the config file's own vocabulary, every route with every
    /// policy key spelled out. Loading it back gives the same settings.
    pub fn to_toml(&self) -> String {
        to_toml(self)
    }
}

/// The SHA-256 (hex) of the config as `--check` prints it: two configs with the same effect
/// have the same digest, whatever their layout or comments. `POST /reload` answers the same,
/// and the status page shows it.
pub fn config_digest(settings: &Settings) -> String {
    hex::encode(Sha256::digest(settings.to_toml().as_bytes()))
}

fn to_toml(settings: &Settings) -> String {
    let mut raw = RawFile {
        listen: unspanned(settings.listen.to_string()),
        admin_listen: settings.admin_listen.and_then(|a| unspanned(a.to_string())),
        store: unspanned(settings.store.to_string()),
        upstream: None,
        problem_base: unspanned(settings.problem_base.as_str().to_owned()),
        log_format: unspanned(settings.log_format),
        drain_timeout: unspanned(humane(settings.drain_timeout)),
        workers: unspanned(i64::try_from(settings.workers).unwrap_or(i64::MAX)),
        admin_token: settings
            .admin_token
            .as_ref()
            .and_then(|t| unspanned(t.reference().to_owned())),
        encryption_key: settings
            .encryption
            .as_ref()
            .and_then(|k| unspanned(k.current().reference().to_owned())),
        encryption_old_keys: settings.encryption.as_ref().map_or_else(Vec::new, |k| {
            k.old()
                .iter()
                .map(|o| Spanned::new(0..0, o.reference().to_owned()))
                .collect()
        }),
        tls_cert: settings
            .tls
            .as_ref()
            .and_then(|t| unspanned(t.cert_reference().to_owned())),
        tls_key: settings
            .tls
            .as_ref()
            .and_then(|t| unspanned(t.key_reference().to_owned())),
        defaults: None,
        routes: settings.routes.iter().map(route).collect(),
        outboxes: super::outbox::print(&settings.outboxes),
        consumers: super::consumer::print(&settings.consumers),
        ..RawFile::default()
    };
    super::limits::print(&settings.limits, &mut raw);
    super::store_keys::print(&settings.postgres, &mut raw);
    // Every value is a string, number, bool or array of them, which TOML can always represent.
    toml::to_string(&raw).unwrap_or_else(|e| format!("# cannot print the configuration: {e}\n"))
}

fn route(route: &RouteSettings) -> Spanned<RouteTable> {
    let head = RouteHead {
        name: unspanned(route.policy.route.as_str().to_owned()),
        path_prefix: unspanned(route.path_prefix.clone()),
        host: route.host.clone().and_then(unspanned),
        upstream: unspanned(route.upstream.to_string()),
    };
    let mut keys = policy(&route.policy);
    keys.replay_cache_ttl = unspanned(humane(route.replay_cache_ttl));
    keys.upstream_idle_timeout = unspanned(humane(route.upstream_idle_timeout));
    super::inbox::print(&route.policy, &route.delivery, &mut keys);
    let tls = &route.upstream_tls;
    keys.upstream_ca = tls.ca_reference().and_then(|ca| unspanned(ca.to_owned()));
    if let Some((cert, key)) = tls.identity_references() {
        keys.upstream_client_cert = unspanned(cert.to_owned());
        keys.upstream_client_key = unspanned(key.to_owned());
    }
    Spanned::new(0..0, RouteTable::join(head, keys))
}

fn policy(policy: &Policy) -> PolicyTable {
    let names = |headers: &[http::HeaderName]| {
        headers
            .iter()
            .map(std::string::ToString::to_string)
            .collect()
    };
    let (key_header, key_body_pointer) = match &policy.key_source {
        KeySource::Header(name) => (unspanned(name.to_string()), None),
        KeySource::BodyPointer(pointer) => (None, unspanned(pointer.clone())),
    };
    let (fingerprint_body, fingerprint_ignore) = match &policy.fingerprint_body {
        FingerprintBody::Bytes => (FingerprintBodyMode::Bytes, Vec::new()),
        FingerprintBody::Json { ignore } => {
            let pointers = ignore.iter().map(|p| p.as_str().to_owned()).collect();
            (FingerprintBodyMode::Json, pointers)
        }
    };
    let grpc = policy.protocol == Protocol::Grpc;
    PolicyTable {
        methods: unspanned(
            policy
                .methods
                .iter()
                .map(std::string::ToString::to_string)
                .collect(),
        ),
        key_header,
        key_body_pointer,
        require_key: unspanned(policy.require_key),
        // An empty name is the file's way of saying "no scope header".
        scope_header: unspanned(
            policy
                .scope_header
                .as_ref()
                .map(std::string::ToString::to_string)
                .unwrap_or_default(),
        ),
        fingerprint_headers: unspanned(names(&policy.fingerprint_headers)),
        fingerprint_body: unspanned(fingerprint_body),
        fingerprint_ignore: unspanned(fingerprint_ignore),
        ttl: unspanned(humane(policy.ttl)),
        lease: unspanned(humane(policy.lease)),
        concurrent: unspanned(policy.concurrent),
        wait_timeout: unspanned(humane(policy.wait_timeout)),
        upstream_timeout: unspanned(humane(policy.upstream_timeout)),
        // A route key, not a policy one: `route` fills it in.
        upstream_idle_timeout: None,
        max_request_body: unspanned(policy.max_request_body),
        max_cached_body: unspanned(policy.max_cached_body),
        release_on: unspanned(
            policy
                .release_on
                .iter()
                .map(|s| i64::from(s.as_u16()))
                .collect(),
        ),
        on_ambiguous: unspanned(policy.on_ambiguous),
        on_store_error: unspanned(policy.on_store_error),
        replay_exclude_headers: unspanned(names(&policy.replay_exclude_headers)),
        replay_cache_ttl: None,
        verify: policy
            .verify
            .as_ref()
            .and_then(|v| unspanned(super::crypto::verify_table(v))),
        upstream_ca: None,
        upstream_client_cert: None,
        upstream_client_key: None,
        // Route keys printed by `route` (`inbox.rs`).
        mode: None,
        inbox_ack_status: None,
        deliver_success: None,
        deliver_timeout: None,
        retry_initial: None,
        retry_max: None,
        max_attempts: None,
        max_age: None,
        deliver_concurrency: None,
        deliver_rate: None,
        // Printed for gRPC routes only, so an HTTP route's printout and digest are unchanged.
        protocol: grpc.then(|| Spanned::new(0..0, policy.protocol)),
        grpc_release_on: grpc.then(|| {
            let codes = policy.grpc_release_on.iter().map(|c| i64::from(c.as_u32()));
            Spanned::new(0..0, codes.collect())
        }),
        grpc_keyed_streams: grpc.then(|| Spanned::new(0..0, policy.grpc_keyed_streams)),
    }
}

fn humane(duration: std::time::Duration) -> String {
    humantime::format_duration(duration).to_string()
}
