//! Tests that every refused configuration is reported as one line naming the file, the line and
//! the key.

use super::*;

const UPSTREAM: &str = "upstream = \"http://127.0.0.1:9000\"\n";

/// Loads `text` and checks the error names `config.toml:LINE:` and the key.
#[track_caller]
fn refused(text: &str, line: usize, key: &str) -> String {
    let err = match load_str("config.toml", text, &Overrides::default()) {
        Ok(settings) => panic!("should be refused:\n{text}\nbut gave {settings:?}"),
        Err(err) => err,
    };
    let message = err.to_string();
    assert!(
        message.starts_with(&format!("config.toml:{line}: ")),
        "{message}"
    );
    assert!(message.contains(&format!("\"{key}\"")), "{message}");
    assert!(!message.contains('\n'), "{message}");
    if let ConfigError::File { key: Some(k), .. } = &err {
        assert_eq!(k, key);
    }
    message
}

/// `[defaults]` on line 2, then `key = value` on line 3.
#[track_caller]
fn refused_default(assignment: &str, key: &str) -> String {
    refused(&format!("{UPSTREAM}[defaults]\n{assignment}\n"), 3, key)
}

/// A route table starting on line 2, then `key = value` on line 6.
#[track_caller]
fn refused_route(assignment: &str, key: &str) -> String {
    let route =
        "[[routes]]\nname = \"r\"\npath_prefix = \"/r\"\nupstream = \"http://127.0.0.1:9001\"\n";
    refused(&format!("{UPSTREAM}{route}{assignment}\n"), 6, key)
}

#[test]
fn unknown_keys_are_named_wherever_they_are() {
    let message = refused(&format!("{UPSTREAM}\n\ntll = \"1h\"\n"), 4, "tll");
    assert!(message.contains("unknown key"), "{message}");
    refused_default("tll = \"1h\"", "tll");
    refused_route("tll = \"1h\"", "tll");
    let text = format!("{UPSTREAM}[[routes]]\nname = \"r\"\n\n\n\ncolour = \"red\"\n");
    refused(&text, 7, "colour");
}

#[test]
fn bad_units_are_refused() {
    let message = refused_default("ttl = \"5x\"", "ttl");
    assert!(message.contains("invalid duration \"5x\""), "{message}");
    refused_route("lease = \"soon\"", "lease");
    refused_route(
        "upstream_idle_timeout = \"1 fortnight\"",
        "upstream_idle_timeout",
    );
    refused_default("ttl = 5", "ttl");
    let message = refused_default("max_request_body = \"1 parsec\"", "max_request_body");
    assert!(message.contains("invalid size"), "{message}");
    refused_route("max_cached_body = \"-1\"", "max_cached_body");
}

#[test]
fn zero_durations_are_refused() {
    let keys = [
        "ttl",
        "lease",
        "wait_timeout",
        "upstream_timeout",
        "upstream_idle_timeout",
    ];
    for key in keys {
        let message = refused_default(&format!("{key} = \"0s\""), key);
        assert!(message.contains("more than zero"), "{message}");
    }
    refused(
        &format!("drain_timeout = \"0ms\"\n{UPSTREAM}"),
        1,
        "drain_timeout",
    );
}

#[test]
fn bad_choices_are_refused() {
    let message = refused_default("concurrent = \"maybe\"", "concurrent");
    assert!(message.contains("maybe"), "{message}");
    refused_route("on_ambiguous = \"retry\"", "on_ambiguous");
    refused_default("on_store_error = \"fail-open\"", "on_store_error");
    refused(
        &format!("{UPSTREAM}log_format = \"xml\"\n"),
        2,
        "log_format",
    );
    refused_default("require_key = \"yes\"", "require_key");
}

#[test]
fn bad_headers_methods_and_statuses_are_refused() {
    refused_default("key_header = \"Idempotency Key\"", "key_header");
    refused_route("scope_header = \"X:Y\"", "scope_header");
    refused_default(
        "fingerprint_headers = [\"ok\", \"not ok\"]",
        "fingerprint_headers",
    );
    refused_route("replay_exclude_headers = [\"\"]", "replay_exclude_headers");
    refused_default("methods = [\"GET POST\"]", "methods");
    let message = refused_route("methods = [\"post\"]", "methods");
    assert!(message.contains("upper-case"), "{message}");
    for status in ["99", "600", "-1", "70000"] {
        let message = refused_default(&format!("release_on = [503, {status}]"), "release_on");
        assert!(message.contains("100..=599"), "{message}");
    }
}

#[test]
fn a_multi_line_array_is_reported_at_its_bad_element_with_its_key() {
    let text = format!("{UPSTREAM}[defaults]\nrelease_on = [\n  503,\n  \"x\",\n]\n");
    refused(&text, 5, "release_on");
    let text = format!("{UPSTREAM}[defaults]\nrelease_on = [\n503,\n\"x\",\n]\n");
    refused(&text, 5, "release_on");
}

#[test]
fn key_sources_are_checked() {
    let text = "key_body_pointer = \"/id\"\nkey_header = \"X-Key\"";
    let message = refused_route(text, "key_body_pointer");
    assert!(message.contains("line 7"), "{message}");
    let message = refused_default("key_body_pointer = \"id\"", "key_body_pointer");
    assert!(message.contains("JSON pointer"), "{message}");
}

/// Pointers are checked one by one, and refused where the body is fingerprinted by its bytes:
/// in the table that says so, or inherits it.
#[test]
fn fingerprint_ignore_needs_valid_pointers_and_a_json_body() {
    let json = "fingerprint_body = \"json\"";
    let message = refused_route(
        &format!("fingerprint_ignore = [\"/ok\", \"sent_at\"]\n{json}"),
        "fingerprint_ignore",
    );
    assert!(message.contains("must start with '/'"), "{message}");
    let message = refused_default(
        &format!("fingerprint_ignore = [\"\"]\n{json}"),
        "fingerprint_ignore",
    );
    assert!(message.contains("whole body"), "{message}");
    refused_route(
        &format!("fingerprint_ignore = [\"/a~2\"]\n{json}"),
        "fingerprint_ignore",
    );
    let message = refused_default("fingerprint_ignore = [\"/sent_at\"]", "fingerprint_ignore");
    assert!(message.contains("fingerprint_body = \"json\""), "{message}");
    refused_route("fingerprint_ignore = [\"/sent_at\"]", "fingerprint_ignore");
    refused_route(
        "fingerprint_ignore = [\"/sent_at\"]\nfingerprint_body = \"bytes\"",
        "fingerprint_ignore",
    );
    let message = refused_route("fingerprint_body = \"xml\"", "fingerprint_body");
    assert!(message.contains("xml"), "{message}");
}

#[test]
fn route_names_must_be_valid_and_unique() {
    let route = |name: &str| {
        format!("[[routes]]\nname = \"{name}\"\npath_prefix = \"/\"\nupstream = \"http://a:1\"\n")
    };
    let text = format!("{}{}", route("one"), route("one"));
    let message = refused(&text, 6, "name");
    assert!(message.contains("line 2"), "{message}");
    refused(&route("a:b"), 2, "name");
    refused(&format!("{UPSTREAM}\n{}", route("default")), 4, "name");
    let message = refused("[[routes]]\npath_prefix = \"/\"\n", 1, "name");
    assert!(message.contains("needs a name"), "{message}");
}

#[test]
fn routes_need_a_valid_prefix_host_and_upstream() {
    let message = refused(
        "[[routes]]\nname = \"r\"\npath_prefix = \"/\"\n",
        1,
        "upstream",
    );
    assert!(message.contains("route \"r\" has no upstream"), "{message}");
    let head = "[[routes]]\nname = \"r\"\n";
    let upstream = "upstream = \"http://127.0.0.1:9001\"\n";
    refused(&format!("{head}{upstream}"), 1, "path_prefix");
    refused(
        &format!("{head}path_prefix = \"v1/\"\n{upstream}"),
        3,
        "path_prefix",
    );
    refused(
        &format!("{head}host = \"a b\"\npath_prefix = \"/\"\n{upstream}"),
        3,
        "host",
    );
    let message = refused(
        &format!("{head}host = \"api.example.com:8443\"\npath_prefix = \"/\"\n{upstream}"),
        3,
        "host",
    );
    assert!(message.contains("has a port"), "{message}");
}

#[test]
fn upstreams_must_be_http_with_a_port_or_https() {
    let message = refused("upstream = \"ftp://127.0.0.1:9000\"\n", 1, "upstream");
    assert!(message.contains("not http:// or https://"), "{message}");
    for bad in [
        "not a url",
        "http://127.0.0.1",
        "ftp://h:1",
        "http://u@h:1",
        "http://h:1/?q",
        "https://u@h",
        "https://h/?q",
    ] {
        refused(&format!("\nupstream = \"{bad}\"\n"), 2, "upstream");
    }
    let route = "[[routes]]\nname = \"r\"\npath_prefix = \"/\"\nupstream = \"/relative\"\n";
    refused(route, 4, "upstream");
}

#[test]
fn top_level_values_are_checked() {
    refused(&format!("{UPSTREAM}listen = \"localhost\"\n"), 2, "listen");
    refused(
        &format!("{UPSTREAM}admin_listen = \"9090\"\n"),
        2,
        "admin_listen",
    );
    refused(&format!("{UPSTREAM}store = \"mysql://db\"\n"), 2, "store");
    refused(
        &format!("{UPSTREAM}problem_base = \"a\\nb\"\n"),
        2,
        "problem_base",
    );
}

#[test]
fn a_bad_flag_value_names_the_flag() {
    let cases = [
        (
            Overrides {
                listen: Some("nowhere".into()),
                ..Overrides::default()
            },
            "--listen: ",
        ),
        (
            Overrides {
                upstream: Some("ftp://127.0.0.1:9000".into()),
                ..Overrides::default()
            },
            "--upstream: ",
        ),
        (
            Overrides {
                store: Some("mysql://x".into()),
                ..Overrides::default()
            },
            "--store: ",
        ),
    ];
    for (mut cli, prefix) in cases {
        cli.upstream
            .get_or_insert_with(|| "http://127.0.0.1:9000".into());
        let message = load(&cli).unwrap_err().to_string();
        assert!(message.starts_with(prefix), "{message}");
        assert!(!message.contains('\n'), "{message}");
    }
}

#[test]
fn syntax_errors_name_the_line() {
    let message = load_str(
        "config.toml",
        "upstream = \"http://a:1\"\n[defaults\n",
        &Overrides::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(message.starts_with("config.toml:2: "), "{message}");
    assert!(!message.contains('\n'), "{message}");
    assert!(
        !message.contains("upstream"),
        "a key on another line is not to blame: {message}"
    );
}

#[test]
fn dotted_keys_are_named_by_their_last_part() {
    refused(&format!("{UPSTREAM}defaults.ttl = \"5x\"\n"), 2, "ttl");
}

#[test]
fn no_input_panics() {
    let inputs = [
        "\u{0}",
        "=",
        "[[routes]]",
        "[[routes]]\n[[routes]]",
        "routes = 1",
        "defaults = []",
        "upstream = \"é\"",
        "\"\u{e9}\" = 1",
        "[defaults]\nrelease_on = [1e9]",
    ];
    for text in inputs {
        let _ = load_str("config.toml", text, &Overrides::default());
    }
}

#[test]
fn a_number_of_workers_outside_1_to_1024_is_refused() {
    for value in ["0", "-1", "1025"] {
        let text = format!("{UPSTREAM}workers = {value}\n");
        refused(&text, 2, "workers");
    }
}

#[test]
fn a_grpc_route_refuses_json_fingerprints_and_unknown_grpc_codes() {
    let message = refused_route(
        "fingerprint_body = \"json\"\nprotocol = \"grpc\"",
        "fingerprint_body",
    );
    assert!(message.contains("binary protobuf"), "{message}");
    refused_route("grpc_release_on = [17]", "grpc_release_on");
    refused_route("protocol = \"smtp\"", "protocol");
    let text = format!(
        "{UPSTREAM}[[routes]]\nname = \"r\"\npath_prefix = \"/r\"\nupstream = \"http://127.0.0.1:9001\"\nprotocol = \"grpc\"\ngrpc_release_on = [14, 8]\ngrpc_keyed_streams = true\n"
    );
    let settings = load_str("config.toml", &text, &Overrides::default()).unwrap();
    let policy = &settings.routes[0].policy;
    assert_eq!(policy.protocol, idempotency_core::policy::Protocol::Grpc);
    assert!(policy.grpc_keyed_streams);
    assert_eq!(policy.grpc_release_on.len(), 2);
}
