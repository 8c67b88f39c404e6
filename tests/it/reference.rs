//! The reference (`docs/reference.md`) and the proxy agree. Every flag and variable `--help`
//! prints, every key the config loader accepts (in each kind of table), every metric the proxy
//! exports, every problem type it answers and every admin path it serves has its row there, and
//! every row names one that exists. Where the reference gives a key's default as a literal, `--check` prints that value.
//! So a key, metric or problem added without its row fails here, and so does a row left behind.
//!
//! The lists come from the code itself: the flags from the binary's `--help`, the config keys
//! from the loader's own refusal of an unknown key (which names every key that table accepts),
//! the metrics from `METRICS`, the problem types from `problem_types`, and the admin
//! paths from the admin router's source, each then asked of a running admin listener.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use common::binary::BIN;
use common::markdown::{code_spans, read, Page, Table};
use idempotency_proxy::{problem_types, MetricKind, METRICS};

const REFERENCE: &str = "docs/reference.md";

/// The tables of the reference whose header reads `header`.
fn tables(header: &[&str]) -> Vec<Table> {
    let found: Vec<Table> = Page::parse(&read(REFERENCE))
        .tables()
        .into_iter()
        .filter(|table| table.is(header))
        .collect();
    assert!(!found.is_empty(), "{REFERENCE} has no table {header:?}");
    found
}

/// The first code span of a cell, which is how the reference writes a name.
fn name(cell: &str) -> String {
    code_spans(cell)
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("{REFERENCE}: no `name` in the cell {cell:?}"))
}

fn assert_same(what: &str, in_code: &BTreeSet<String>, in_reference: &BTreeSet<String>) {
    let missing: Vec<_> = in_code.difference(in_reference).collect();
    let stale: Vec<_> = in_reference.difference(in_code).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "{what}: missing from {REFERENCE}: {missing:?}; named there but not in the code: {stale:?}"
    );
}

fn run(args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args(args)
        .output()
        .expect("the binary runs")
}

/// A config file for one probe, in a directory of this test's own.
fn config_file(name: &str, text: &str) -> String {
    let dir = std::env::temp_dir().join(format!(
        "idempotency-proxy-reference-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

#[test]
fn every_flag_and_variable_help_prints_is_in_the_reference_and_no_other() {
    let help = run(&["--help"]);
    assert!(help.status.success());
    let help = String::from_utf8(help.stdout).unwrap();
    let flag_lines = help.lines().filter(|l| l.trim_start().starts_with('-'));
    let flags: BTreeSet<String> = flag_lines
        .flat_map(|line| line.split([' ', ',']).filter(|w| w.starts_with("--")))
        .map(str::to_owned)
        .collect();
    let variables: BTreeSet<String> = help
        .split("[env: ")
        .skip(1)
        .map(|rest| rest.split('=').next().unwrap().to_owned())
        .collect();
    assert!(flags.contains("--upstream") && variables.contains("IDEMPOTENCY_PROXY_UPSTREAM"));

    let rows: Vec<Vec<String>> = tables(&["flag", "variable", "default", "meaning"])
        .into_iter()
        .flat_map(|table| table.rows)
        .collect();
    let named_flags = rows
        .iter()
        .flat_map(|row| code_spans(&row[0]))
        .flat_map(|span| span.split(' ').next().map(str::to_owned))
        .filter(|flag| flag.starts_with("--"))
        .collect();
    let named_variables = rows.iter().flat_map(|row| code_spans(&row[1])).collect();
    assert_same("flags", &flags, &named_flags);
    assert_same("environment variables", &variables, &named_variables);
}

/// The keys a table of the config file accepts, as the loader lists them when it refuses an
/// unknown one: `unknown key "…" (expected one of a, b, c)`.
fn accepted_keys(probe: &str, table: &str) -> BTreeSet<String> {
    let text = format!("upstream = \"http://127.0.0.1:9\"\n{table}\nzzz_not_a_key = 1\n");
    let output = run(&["--config", &config_file(probe, &text), "--check"]);
    assert_eq!(output.status.code(), Some(2), "{probe}");
    let message = String::from_utf8(output.stderr).unwrap();
    let expected = message
        .split_once("(expected ")
        .map(|(_, list)| list.trim().trim_end_matches(')'))
        .unwrap_or_else(|| panic!("{probe}: no list of keys in {message}"));
    expected
        .trim_start_matches("one of ")
        .split(", ")
        .flat_map(|part| part.split(" or "))
        .map(|key| key.trim().to_owned())
        .collect()
}

/// The reference's config keys by where they may be written: `top level`, `defaults`, `route`,
/// `verify table` or `outbox`, as its column `in` says.
fn named_keys() -> BTreeMap<&'static str, BTreeSet<String>> {
    let header = ["key", "in", "type", "default", "reload", "meaning"];
    let mut keys: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for row in tables(&header).into_iter().flat_map(|table| table.rows) {
        let placed = ["top level", "defaults", "route", "verify table", "outbox"]
            .into_iter()
            .filter(|place| row[1].split(", ").any(|written| written == *place));
        let mut placed = placed.peekable();
        assert!(placed.peek().is_some(), "{REFERENCE}: where is {row:?}?");
        for place in placed {
            keys.entry(place).or_default().insert(name(&row[0]));
        }
    }
    keys
}

#[test]
fn every_config_key_the_loader_accepts_is_in_the_reference_and_no_other() {
    let named = named_keys();
    let probes = [
        ("top level", "top.toml", ""),
        ("defaults", "defaults.toml", "[defaults]"),
        ("route", "route.toml", "[[routes]]"),
        (
            "verify table",
            "verify.toml",
            "[defaults.verify]\nscheme = \"github\"\nsecret = \"env:HOME\"",
        ),
        ("outbox", "outbox.toml", "[[outboxes]]"),
    ];
    for (place, probe, table) in probes {
        let accepted = accepted_keys(probe, table);
        assert!(accepted.len() > 2, "{probe}: {accepted:?}");
        let none = BTreeSet::new();
        assert_same(
            &format!("config keys ({place})"),
            &accepted,
            named.get(place).unwrap_or(&none),
        );
    }
}

/// A value as `--check` prints it and as the reference writes it: strings that name the same
/// duration, or differ only in case (header names), are the same.
fn same_value(printed: &toml::Value, written: &toml::Value) -> bool {
    use toml::Value::{Array, String as Text};
    match (printed, written) {
        (Text(a), Text(b)) => {
            let duration = |s: &str| humantime::parse_duration(s).ok();
            a.eq_ignore_ascii_case(b) || duration(a).is_some_and(|d| Some(d) == duration(b))
        }
        (Array(a), Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| same_value(a, b))
        }
        (a, b) => a == b,
    }
}

#[test]
fn the_defaults_the_reference_gives_are_what_check_prints() {
    // One inbox route, so that the inbox keys are printed too; the route `default` has nothing
    // set but its upstream, so every policy key it prints is a default. One outbox with only
    // what it needs, for the outbox keys.
    let text = "upstream = \"http://127.0.0.1:9\"\n[[routes]]\nname = \"probe\"\npath_prefix = \"/probe\"\nupstream = \"http://127.0.0.1:9\"\nmode = \"inbox\"\n[[outboxes]]\nname = \"probe\"\ndatabase = \"postgres://u@h/d\"\ndeliver_to = \"http://127.0.0.1:9/\"\n";
    let output = run(&[
        "--config",
        &config_file("defaults-printed.toml", text),
        "--check",
    ]);
    assert!(output.status.success(), "{output:?}");
    let printed: toml::Table = String::from_utf8(output.stdout).unwrap().parse().unwrap();
    let routes = printed["routes"].as_array().unwrap();
    let route = |name: &str| {
        let found = routes.iter().find(|r| r["name"].as_str() == Some(name));
        found.unwrap().as_table().unwrap().clone()
    };
    let (default_route, inbox_route) = (route("default"), route("probe"));
    let outbox = printed["outboxes"][0].as_table().unwrap().clone();
    let header = ["key", "in", "type", "default", "reload", "meaning"];
    let mut compared = 0;
    for row in tables(&header).into_iter().flat_map(|table| table.rows) {
        let key = name(&row[0]);
        // A literal default is a code span that opens the cell and parses as a TOML value.
        let literal = row[3]
            .starts_with('`')
            .then(|| code_spans(&row[3])[0].clone());
        let Some(written) = literal.and_then(|l| format!("v = {l}").parse::<toml::Table>().ok())
        else {
            continue;
        };
        let value = if row[1] == "top level" {
            printed.get(&key)
        } else if row[1] == "outbox" {
            outbox.get(&key)
        } else {
            default_route.get(&key).or(inbox_route.get(&key))
        };
        if let Some(value) = value {
            assert!(
                same_value(value, &written["v"]),
                "{key}: {REFERENCE} says the default is {}, --check prints {value}",
                written["v"]
            );
            compared += 1;
        }
    }
    assert!(compared >= 45, "only {compared} defaults were compared");
}

#[test]
fn every_metric_is_in_the_reference_with_its_type_and_labels() {
    let mut in_code = BTreeMap::new();
    for metric in METRICS {
        let kind = match metric.kind {
            MetricKind::Counter => "counter",
            MetricKind::Gauge => "gauge",
            MetricKind::Histogram => "histogram",
        };
        let labels: Vec<String> = metric.labels.iter().map(|l| (*l).to_owned()).collect();
        in_code.insert(metric.name.to_owned(), (kind.to_owned(), labels));
    }
    let mut named = BTreeMap::new();
    for row in tables(&["metric", "type", "labels", "meaning"])
        .into_iter()
        .flat_map(|table| table.rows)
    {
        named.insert(name(&row[0]), (row[1].clone(), code_spans(&row[2])));
    }
    let names = |m: &BTreeMap<String, _>| m.keys().cloned().collect::<BTreeSet<_>>();
    assert_same("metrics", &names(&in_code), &names(&named));
    for (metric, exported) in &in_code {
        assert_eq!(&named[metric], exported, "{metric}: type and labels");
    }
}

#[test]
fn every_problem_type_is_in_the_reference_with_its_status_and_title() {
    let in_code: BTreeSet<String> = problem_types()
        .iter()
        .map(|meta| format!("{} {} {}", meta.kind, meta.status.as_u16(), meta.title))
        .collect();
    let named: BTreeSet<String> = tables(&["type", "status", "title", "when"])
        .into_iter()
        .flat_map(|table| table.rows)
        .map(|row| format!("{} {} {}", name(&row[0]), row[1], row[2]))
        .collect();
    assert_same("problem types", &in_code, &named);
}

/// The admin router's `(method, path)` pairs, read from its source: each `.route("PATH", …)`
/// call with the methods (`get(`, `post(`, `delete(`) it chains.
fn served_admin_paths() -> BTreeSet<(String, String)> {
    let source = read("src/operator/admin/mod.rs");
    let mut served = BTreeSet::new();
    for (at, _) in source.match_indices(".route(") {
        let call = &source[at + ".route(".len()..];
        // The call ends where its parentheses balance.
        let mut depth = 1;
        let end = call
            .char_indices()
            .find_map(|(i, c)| {
                depth += match c {
                    '(' => 1,
                    ')' => -1,
                    _ => 0,
                };
                (depth == 0).then_some(i)
            })
            .expect("a closed .route( call");
        let call = &call[..end];
        let path = call.split('"').nth(1).expect("a path literal").to_owned();
        let handlers = call.split_once(',').expect("a handler").1;
        for method in ["get", "post", "delete", "put", "patch"] {
            let called = handlers
                .match_indices(&format!("{method}("))
                .any(|(i, _)| i == 0 || !handlers.as_bytes()[i - 1].is_ascii_alphanumeric());
            if called {
                served.insert((method.to_ascii_uppercase(), path.clone()));
            }
        }
    }
    served
}

#[tokio::test]
async fn every_admin_path_is_in_the_reference_and_served() {
    let named: BTreeSet<(String, String)> = tables(&["method and path", "token", "answer"])
        .into_iter()
        .flat_map(|table| table.rows)
        .map(|row| {
            let (method, path) = name(&row[0]).split_once(' ').map_or_else(
                || panic!("{REFERENCE}: {:?} is no `METHOD /path`", row[0]),
                |(m, p)| (m.to_owned(), p.to_owned()),
            );
            (method, path)
        })
        .collect();
    let served = served_admin_paths();
    assert!(served.len() >= 15, "only {} admin paths read", served.len());
    let as_text = |set: &BTreeSet<(String, String)>| {
        set.iter()
            .map(|(m, p)| format!("{m} {p}"))
            .collect::<BTreeSet<_>>()
    };
    assert_same("admin paths", &as_text(&served), &as_text(&named));

    // And a running admin listener answers each one: a problem, a page or data, never the
    // empty `404` of a path it does not know.
    let upstream = common::upstream::TestUpstream::start().await;
    let toml = format!("upstream = \"{}\"\n", upstream.url());
    let store = std::sync::Arc::new(idempotency_proxy::store::MemoryStore::new());
    let proxy = common::proxy::TestProxy::start(&toml, store).await;
    for (method, path) in &named {
        let path = path
            .replace("{route}", "default")
            .replace("{key}", "k")
            .replace("{name}", "payments")
            .replace("{id}", "evt-1");
        let answer = proxy.admin.send(method, &path, &[], "").await;
        let unknown = answer.status == 404 && answer.body.is_empty();
        assert!(!unknown, "{method} {path}: not served");
    }
}
