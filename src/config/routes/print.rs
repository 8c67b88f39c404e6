//! Printing a route (`--check`) as a `[[routes]]` table with every policy key spelled out.

use toml::Spanned;

use crate::config::file::print::humane;
use crate::config::file::unspanned;
use crate::config::routes::keys::{FingerprintBodyMode, PolicyTable, RouteHead, RouteTable};
use crate::config::settings::RouteSettings;

use idempotency_core::policy::FingerprintBody;
use idempotency_core::policy::Protocol;
use idempotency_core::{policy::KeySource, Policy};

pub(in crate::config) fn route(route: &RouteSettings) -> Spanned<RouteTable> {
    let head = RouteHead {
        name: unspanned(route.policy.route.as_str().to_owned()),
        path_prefix: unspanned(route.path_prefix.clone()),
        host: route.host.clone().and_then(unspanned),
        upstream: unspanned(route.upstream.to_string()),
    };
    let mut keys = policy(&route.policy);
    keys.replay_cache_ttl = unspanned(humane(route.replay_cache_ttl));
    keys.upstream_idle_timeout = unspanned(humane(route.upstream_idle_timeout));
    crate::config::routes::inbox::print(&route.policy, &route.delivery, &mut keys);
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
            .and_then(|v| unspanned(crate::config::crypto::verify_table(v))),
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
