//! Tests of loading, merging, validating and printing the configuration.

use std::path::PathBuf;
use std::time::Duration;

use http::{HeaderName, Method, StatusCode};

use super::*;
use crate::store::StoreSpec;
use idempotency_core::policy::ByteSize;
use idempotency_core::policy::JsonPointer;
use idempotency_core::policy::{AmbiguousPolicy, ConcurrentPolicy, KeySource};
use idempotency_core::Policy;
use idempotency_core::ProblemBase;
use idempotency_core::{backend::RouteName, policy::FingerprintBody};

fn load_text(text: &str) -> Result<Settings, ConfigError> {
    load_str("config.toml", text, &Overrides::default())
}

fn settings(text: &str) -> Settings {
    load_text(text).unwrap_or_else(|e| panic!("config should load: {e}"))
}

fn route<'a>(settings: &'a Settings, name: &str) -> &'a RouteSettings {
    settings
        .routes
        .iter()
        .find(|r| r.policy.route.as_str() == name)
        .unwrap_or_else(|| panic!("no route {name}"))
}

#[test]
fn an_upstream_alone_gives_the_spec_defaults() {
    let cli = Overrides {
        upstream: Some("http://127.0.0.1:9000".into()),
        ..Overrides::default()
    };
    let settings = load(&cli).unwrap();
    assert_eq!(settings.listen, "127.0.0.1:8080".parse().unwrap());
    assert_eq!(settings.admin_listen, None);
    assert_eq!(settings.store, StoreSpec::default());
    assert_eq!(settings.log_format, LogFormat::Text);
    assert_eq!(settings.drain_timeout, Duration::from_secs(30));
    assert_eq!(*settings.problem_base, ProblemBase::default());
    let [default] = settings.routes.as_slice() else {
        panic!("one route expected: {:?}", settings.routes);
    };
    assert_eq!(default.path_prefix, "/");
    assert_eq!(default.host, None);
    assert_eq!(default.upstream, "http://127.0.0.1:9000/");
    assert_eq!(default.upstream_idle_timeout, Duration::from_secs(1));
    let want = Policy::new(RouteName::new("default").unwrap());
    assert_eq!(format!("{:?}", default.policy), format!("{want:?}"));
}

#[test]
fn nothing_to_forward_to_is_refused() {
    let err = load(&Overrides::default()).unwrap_err();
    assert_eq!(err, ConfigError::NoUpstream);
    assert_eq!(
        err.to_string(),
        "no upstream: pass --upstream URL or set upstream/[[routes]] (or [[outboxes]]) in the config"
    );
    assert_eq!(load_text("[defaults]\nttl = \"1h\"\n").unwrap_err(), err);
}

const LAYERED: &str = r#"
upstream = "http://127.0.0.1:9000"
problem_base = "https://api.example.com/docs/idempotency#"

[defaults]
require_key = true
ttl = "1h"
scope_header = "Authorization"
key_header = "X-Request-Key"

[[routes]]
name = "payments"
path_prefix = "/v1/"
host = "API.Example.com"
upstream = "http://127.0.0.1:9001/base"
ttl = "2h"
release_on = [503]

[[routes]]
name = "stripe-events"
path_prefix = "/hooks/stripe"
upstream = "http://127.0.0.1:9002"
key_body_pointer = "/id"
scope_header = ""
concurrent = "wait"
on_ambiguous = "release"
max_cached_body = "64KiB"
"#;

#[test]
fn routes_start_from_the_defaults_and_override_them() {
    let settings = settings(LAYERED);
    let names: Vec<_> = settings
        .routes
        .iter()
        .map(|r| r.policy.route.as_str())
        .collect();
    assert_eq!(names, ["payments", "stripe-events", "default"]);

    let payments = route(&settings, "payments");
    assert_eq!(payments.host.as_deref(), Some("api.example.com"));
    assert_eq!(payments.upstream, "http://127.0.0.1:9001/base");
    assert!(payments.policy.require_key);
    assert_eq!(payments.policy.ttl, Duration::from_secs(7200));
    assert_eq!(
        payments.policy.release_on,
        [StatusCode::SERVICE_UNAVAILABLE]
    );
    assert_eq!(
        payments.policy.key_source,
        KeySource::Header(HeaderName::from_static("x-request-key"))
    );
    assert_eq!(payments.policy.methods, [Method::POST, Method::PATCH]);

    let stripe = route(&settings, "stripe-events");
    assert_eq!(
        stripe.policy.key_source,
        KeySource::BodyPointer("/id".into())
    );
    assert_eq!(stripe.policy.scope_header, None);
    assert_eq!(stripe.policy.ttl, Duration::from_secs(3600));
    assert_eq!(stripe.policy.concurrent, ConcurrentPolicy::Wait);
    assert_eq!(stripe.policy.on_ambiguous, AmbiguousPolicy::Release);
    assert_eq!(stripe.policy.max_cached_body, ByteSize::kib(64));

    let default = route(&settings, "default");
    assert_eq!(default.path_prefix, "/");
    assert_eq!(default.policy.ttl, Duration::from_secs(3600));
    assert_eq!(
        default.policy.scope_header,
        Some(HeaderName::from_static("authorization"))
    );
}

const FINGERPRINTS: &str = r#"
upstream = "http://127.0.0.1:9000"

[defaults]
fingerprint_body = "json"
fingerprint_ignore = ["/metadata/request_time", "/a~1b"]

[[routes]]
name = "orders"
path_prefix = "/orders"
upstream = "http://127.0.0.1:9001"
fingerprint_body = "json"

[[routes]]
name = "files"
path_prefix = "/files"
upstream = "http://127.0.0.1:9001"
fingerprint_body = "bytes"
fingerprint_ignore = []

[[routes]]
name = "events"
path_prefix = "/events"
upstream = "http://127.0.0.1:9001"
fingerprint_ignore = ["/sent_at"]
"#;

/// A route inherits the body mode with its pointers; naming `"json"` again keeps them,
/// `"bytes"` drops them, and new pointers replace them. `--check` prints what loads back.
#[test]
fn fingerprint_body_and_its_pointers_are_inherited_and_printed() {
    let settings = settings(FINGERPRINTS);
    let ignored = |name| match &route(&settings, name).policy.fingerprint_body {
        FingerprintBody::Json { ignore } => Some(ignore.iter().map(JsonPointer::as_str).collect()),
        FingerprintBody::Bytes => None,
    };
    let inherited: Option<Vec<&str>> = Some(vec!["/metadata/request_time", "/a~1b"]);
    assert_eq!(ignored("orders"), inherited);
    assert_eq!(ignored("default"), inherited);
    assert_eq!(ignored("files"), None);
    assert_eq!(ignored("events"), Some(vec!["/sent_at"]));

    let printed = settings.to_toml();
    let again = load_str("check.toml", &printed, &Overrides::default())
        .unwrap_or_else(|e| panic!("{e}\n{printed}"));
    assert_eq!(format!("{settings:?}"), format!("{again:?}"));
    assert!(
        printed.contains("fingerprint_body = \"bytes\""),
        "{printed}"
    );
    assert!(
        printed.contains("fingerprint_ignore = [\"/sent_at\"]"),
        "{printed}"
    );
    let plain = Policy::new(RouteName::new("plain").unwrap());
    assert_eq!(plain.fingerprint_body, FingerprintBody::Bytes);
}

#[test]
fn upstream_idle_timeout_is_inherited_overridden_and_printed() {
    let text = "upstream = \"http://127.0.0.1:9000\"\n\
        [defaults]\nupstream_idle_timeout = \"2s\"\n\
        [[routes]]\nname = \"quick\"\npath_prefix = \"/q\"\nupstream = \"http://127.0.0.1:9001\"\n\
        upstream_idle_timeout = \"300ms\"\n\
        [[routes]]\nname = \"plain\"\npath_prefix = \"/p\"\nupstream = \"http://127.0.0.1:9001\"\n";
    let first = settings(text);
    let idle = |s: &Settings, name| route(s, name).upstream_idle_timeout;
    assert_eq!(idle(&first, "quick"), Duration::from_millis(300));
    assert_eq!(idle(&first, "plain"), Duration::from_secs(2));
    assert_eq!(idle(&first, "default"), Duration::from_secs(2));
    let printed = first.to_toml();
    assert!(
        printed.contains("upstream_idle_timeout = \"300ms\""),
        "{printed}"
    );
    let second = settings(&printed);
    assert_eq!(idle(&second, "quick"), Duration::from_millis(300));
    assert_eq!(idle(&second, "plain"), Duration::from_secs(2));
}

#[test]
fn the_problem_base_is_read() {
    let settings = settings(LAYERED);
    assert_eq!(
        settings.problem_base.as_str(),
        "https://api.example.com/docs/idempotency#"
    );
}

#[test]
fn replay_cache_ttl_is_inherited_and_overridden_per_route() {
    let text = r#"
[defaults]
replay_cache_ttl = "5s"
[[routes]]
name = "a"
path_prefix = "/a"
upstream = "http://127.0.0.1:9000"
[[routes]]
name = "b"
path_prefix = "/b"
upstream = "http://127.0.0.1:9000"
replay_cache_ttl = "0s"
"#;
    let routes = settings(text).routes;
    assert_eq!(routes[0].replay_cache_ttl, Duration::from_secs(5));
    assert_eq!(routes[1].replay_cache_ttl, Duration::ZERO);
    let printed = settings(text).to_toml();
    let again = settings(&printed).routes;
    assert_eq!(again[1].replay_cache_ttl, Duration::ZERO);
    let none = settings("upstream = \"http://127.0.0.1:9000\"").routes;
    assert_eq!(
        none[0].replay_cache_ttl,
        RouteSettings::DEFAULT_REPLAY_CACHE_TTL
    );
}

#[test]
fn flags_override_the_file() {
    let text = r#"
listen = "127.0.0.1:1000"
admin_listen = "127.0.0.1:1001"
store = "memory"
upstream = "http://127.0.0.1:1002"
log_format = "text"
"#;
    let cli = Overrides {
        listen: Some("0.0.0.0:2000".into()),
        admin_listen: Some("127.0.0.1:2001".into()),
        store: Some("redis://127.0.0.1:6379".into()),
        upstream: Some("http://127.0.0.1:2002".into()),
        log_format: Some(LogFormat::Json),
        ..Overrides::default()
    };
    let settings = load_str("config.toml", text, &cli).unwrap();
    assert_eq!(settings.listen, "0.0.0.0:2000".parse().unwrap());
    assert_eq!(
        settings.admin_listen,
        Some("127.0.0.1:2001".parse().unwrap())
    );
    assert_eq!(
        settings.store,
        StoreSpec::Redis("redis://127.0.0.1:6379".into())
    );
    assert_eq!(settings.log_format, LogFormat::Json);
    assert_eq!(
        route(&settings, "default").upstream,
        "http://127.0.0.1:2002/"
    );
}

#[test]
fn the_file_applies_where_no_flag_is_given() {
    let text = "listen = \"127.0.0.1:1000\"\nstore = \"memory\"\nlog_format = \"json\"\n";
    let cli = Overrides {
        upstream: Some("http://127.0.0.1:2002".into()),
        ..Overrides::default()
    };
    let settings = load_str("config.toml", text, &cli).unwrap();
    assert_eq!(settings.listen, "127.0.0.1:1000".parse().unwrap());
    assert_eq!(settings.store, StoreSpec::Memory);
    assert_eq!(settings.log_format, LogFormat::Json);
}

#[test]
fn the_upstream_flag_cannot_share_its_name_with_a_route() {
    let text = "[[routes]]\nname = \"default\"\npath_prefix = \"/\"\nupstream = \"http://a:1\"\n";
    let cli = Overrides {
        upstream: Some("http://127.0.0.1:9000".into()),
        ..Overrides::default()
    };
    let message = load_str("config.toml", text, &cli).unwrap_err().to_string();
    assert!(message.starts_with("config.toml:2: "), "{message}");
    assert!(message.contains("--upstream"), "{message}");
    // Without a top-level upstream, a route may be called `default`.
    assert!(load_text(text).is_ok());
}

#[test]
fn load_reads_the_named_file_and_names_it_in_errors() {
    let path = std::env::temp_dir().join(format!("idempotency-proxy-{}.toml", std::process::id()));
    std::fs::write(
        &path,
        "upstream = \"http://127.0.0.1:9000\"\nttl = \"1h\"\n",
    )
    .unwrap();
    let cli = Overrides {
        config: Some(path.clone()),
        ..Overrides::default()
    };
    let message = load(&cli).unwrap_err().to_string();
    let _ = std::fs::remove_file(&path);
    assert!(
        message.starts_with(&format!("{}:2: ", path.display())),
        "{message}"
    );
    assert!(message.contains("\"ttl\""), "{message}");

    let missing = Overrides {
        config: Some(PathBuf::from("/nonexistent/idempotency-proxy.toml")),
        ..Overrides::default()
    };
    assert!(matches!(load(&missing), Err(ConfigError::Read { .. })));
}

#[test]
fn to_toml_loads_back_to_the_same_settings() {
    let cli = Overrides {
        admin_listen: Some("127.0.0.1:9090".into()),
        ..Overrides::default()
    };
    let text = format!(
        "{LAYERED}\nmethods = [\"POST\", \"PUT\"]\nfingerprint_headers = [\"X-Tenant\"]\n\
         replay_exclude_headers = [\"X-Trace\"]\nwait_timeout = \"1500ms\"\n"
    );
    let first = load_str("config.toml", &text, &cli).unwrap();
    let printed = first.to_toml();
    let second = load_str("check.toml", &printed, &Overrides::default())
        .unwrap_or_else(|e| panic!("{e}\n{printed}"));
    assert_eq!(format!("{first:?}"), format!("{second:?}"));
    assert_eq!(second.to_toml(), printed);
    assert!(printed.contains("max_cached_body = \"64KiB\""), "{printed}");
    assert!(printed.contains("release_on = [503]"), "{printed}");
    assert!(printed.contains("wait_timeout = \"1s 500ms\""), "{printed}");
}

#[test]
fn the_example_file_loads() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config.example.toml");
    let cli = Overrides {
        config: Some(path),
        ..Overrides::default()
    };
    let settings = load(&cli).unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<_> = settings
        .routes
        .iter()
        .map(|r| r.policy.route.as_str())
        .collect();
    assert_eq!(
        names,
        [
            "payments",
            "github",
            "stripe-events",
            "shopify",
            "standard-webhooks",
            "slack-events",
            "payments-grpc",
            "default"
        ]
    );
    let header = |name: &'static str| KeySource::Header(HeaderName::from_static(name));
    let recipes = [
        ("github", header("x-github-delivery")),
        ("stripe-events", KeySource::BodyPointer("/id".into())),
        ("shopify", header("x-shopify-event-id")),
        ("standard-webhooks", header("webhook-id")),
        ("slack-events", KeySource::BodyPointer("/event_id".into())),
        ("payments", header("idempotency-key")),
    ];
    for (name, source) in recipes {
        assert_eq!(route(&settings, name).policy.key_source, source, "{name}");
    }
    let payments = &route(&settings, "payments").policy;
    assert!(payments.require_key);
    assert_eq!(
        payments.scope_header,
        Some(HeaderName::from_static("authorization"))
    );
}

#[test]
fn workers_default_to_one_per_cpu_and_are_printed() {
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let plain = settings("upstream = \"http://127.0.0.1:9000\"");
    assert_eq!(plain.workers, cpus);
    let three = settings("upstream = \"http://127.0.0.1:9000\"\nworkers = 3");
    assert_eq!(three.workers, 3);
    assert!(three.to_toml().contains("workers = 3"));
    assert_eq!(settings(&three.to_toml()).workers, 3);
}

#[test]
fn a_value_the_policy_refuses_is_refused_in_the_builders_words_at_its_line() {
    let text = "upstream = \"http://127.0.0.1:9000\"\n[defaults]\nlease = \"0s\"\n";
    let refused = load_text(text).unwrap_err();
    let builder = Policy::builder("default")
        .with_lease(std::time::Duration::ZERO)
        .build()
        .unwrap_err();
    assert_eq!(refused.to_string(), format!("config.toml:3: {builder}"));
}
