//! Tests of the inbox keys (docs/reference.md#inbox-routes): defaults, inheritance, `--check`, and refusals
//! naming the file, line and key.

use std::num::NonZeroU32;
use std::time::Duration;

use http::StatusCode;

use crate::config::*;
use crate::inbox::policy::DeliveryPolicy;
use idempotency_core::policy::RouteMode;

const UPSTREAM: &str = "upstream = \"http://127.0.0.1:9000\"\n";

fn load_text(text: &str) -> Result<Settings, ConfigError> {
    load_str("config.toml", text, &Overrides::default())
}

fn route<'a>(settings: &'a Settings, name: &str) -> &'a RouteSettings {
    let found = settings
        .routes
        .iter()
        .find(|r| r.policy.route.as_str() == name);
    found.unwrap_or_else(|| panic!("no route {name}"))
}

const INBOX: &str = r#"
[defaults]
retry_max = "5m"
deliver_concurrency = 4

[[routes]]
name = "github"
path_prefix = "/hooks/github"
upstream = "http://127.0.0.1:9001"
mode = "inbox"
inbox_ack_status = 200
deliver_success = [409]
deliver_timeout = "10s"
retry_initial = "500ms"
max_attempts = 8
max_age = "24h"
deliver_rate = 50

[[routes]]
name = "plain"
path_prefix = "/v1/"
upstream = "http://127.0.0.1:9000"
"#;

#[test]
fn routes_are_proxies_with_the_spec_delivery_defaults_unless_told() {
    let settings = load_text(UPSTREAM).unwrap();
    let default = route(&settings, "default");
    assert_eq!(default.policy.mode, RouteMode::Proxy);
    assert_eq!(default.policy.inbox_ack_status, StatusCode::ACCEPTED);
    assert_eq!(default.delivery, DeliveryPolicy::default());
    assert_eq!(default.delivery.retry_max, Duration::from_secs(600));
    assert_eq!(default.delivery.max_attempts, 20);
    assert_eq!(default.delivery.deliver_concurrency, 16);
    assert_eq!(default.delivery.deliver_rate, None);
}

#[test]
fn inbox_keys_are_read_and_inherited() {
    let settings = load_text(INBOX).unwrap();
    let github = route(&settings, "github");
    assert_eq!(github.policy.mode, RouteMode::Inbox);
    assert_eq!(github.policy.inbox_ack_status, StatusCode::OK);
    let want = DeliveryPolicy {
        deliver_success: vec![StatusCode::CONFLICT],
        deliver_timeout: Duration::from_secs(10),
        retry_initial: Duration::from_millis(500),
        retry_max: Duration::from_secs(300),
        max_attempts: 8,
        max_age: Duration::from_secs(24 * 3600),
        deliver_concurrency: 4,
        deliver_rate: NonZeroU32::new(50),
    };
    assert_eq!(github.delivery, want);
    let plain = route(&settings, "plain");
    assert_eq!(plain.policy.mode, RouteMode::Proxy);
    assert_eq!(plain.delivery.deliver_concurrency, 4, "from [defaults]");
}

#[test]
fn check_prints_the_inbox_keys_and_they_load_back() {
    let settings = load_text(INBOX).unwrap();
    let printed = settings.to_toml();
    for line in [
        "mode = \"inbox\"",
        "inbox_ack_status = 200",
        "deliver_success = [409]",
        "deliver_timeout = \"10s\"",
        "retry_initial = \"500ms\"",
        "retry_max = \"5m\"",
        "max_attempts = 8",
        "max_age = \"1day\"",
        "deliver_concurrency = 4",
        "deliver_rate = 50",
        "mode = \"proxy\"",
    ] {
        assert!(printed.contains(line), "{line} missing from\n{printed}");
    }
    let again = load_text(&printed).unwrap_or_else(|e| panic!("{e}\n{printed}"));
    assert_eq!(again.to_toml(), printed);
    assert_eq!(
        route(&again, "github").delivery,
        route(&settings, "github").delivery
    );
}

/// A route table starting on line 2, then `key = value` on line 6.
#[track_caller]
fn refused_route(assignment: &str, key: &str) -> String {
    let route =
        "[[routes]]\nname = \"r\"\npath_prefix = \"/r\"\nupstream = \"http://127.0.0.1:9001\"\n";
    let text = format!("{UPSTREAM}{route}{assignment}\n");
    let message = load_text(&text).expect_err(&text).to_string();
    assert!(message.starts_with("config.toml:6: "), "{message}");
    assert!(message.contains(&format!("\"{key}\"")), "{message}");
    message
}

#[test]
fn bad_inbox_values_name_their_line_and_key() {
    refused_route("mode = \"mailbox\"", "mode");
    let message = refused_route("inbox_ack_status = 500", "inbox_ack_status");
    assert!(message.contains("not a 2xx"), "{message}");
    refused_route("inbox_ack_status = 1000", "inbox_ack_status");
    refused_route("deliver_success = [200, 700]", "deliver_success");
    refused_route("deliver_timeout = \"0s\"", "deliver_timeout");
    refused_route("retry_initial = \"soon\"", "retry_initial");
    refused_route("retry_max = \"1 fortnight\"", "retry_max");
    refused_route("max_age = \"-1h\"", "max_age");
    refused_route("max_attempts = 0", "max_attempts");
    refused_route("deliver_concurrency = -3", "deliver_concurrency");
    refused_route("deliver_rate = 0", "deliver_rate");
    let message = refused_route("retry_max = \"100ms\"", "retry_max");
    assert!(message.contains("at least retry_initial"), "{message}");
    refused_route("retry_initial = \"1h\"", "retry_initial");
}
