//! The real binary: config errors exit 2 naming file, line and key; `--check` prints the
//! effective config; a running proxy drains and exits 0 on SIGTERM.

use crate::common;

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::binary::{exit_code, sigterm, start_binary, start_binary_logging, BIN};
use common::upstream::TestUpstream;

fn config_file(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("idempotency-proxy-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::File::create(&path)
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    path
}

fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .output()
        .expect("the binary runs")
}

fn stderr_line(output: &Output) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr).trim().to_owned();
    assert_eq!(stderr.lines().count(), 1, "one line, got: {stderr}");
    stderr
}

#[test]
fn bad_configs_exit_2_with_file_line_and_key() {
    let cases = [
        ("unknown.toml", "upstream = \"http://127.0.0.1:9\"\n\n[defaults]\ntll = \"1h\"\n", ":4:", "tll"),
        ("duration.toml", "upstream = \"http://127.0.0.1:9\"\n[defaults]\nttl = \"5 parsecs\"\n", ":3:", "ttl"),
        ("size.toml", "upstream = \"http://127.0.0.1:9\"\n[defaults]\nmax_request_body = \"1 tonne\"\n", ":3:", "max_request_body"),
        (
            "dup.toml",
            "[[routes]]\nname = \"a\"\npath_prefix = \"/\"\nupstream = \"http://127.0.0.1:9\"\n[[routes]]\nname = \"a\"\npath_prefix = \"/b\"\nupstream = \"http://127.0.0.1:9\"\n",
            ":6:",
            "name",
        ),
        ("noupstream.toml", "[[routes]]\nname = \"a\"\npath_prefix = \"/\"\n", ":", "upstream"),
    ];
    for (file, text, line, key) in cases {
        let path = config_file(file, text);
        let output = run(&["--config", path.to_str().unwrap(), "--check"]);
        assert_eq!(output.status.code(), Some(2), "{file}");
        let message = stderr_line(&output);
        assert!(message.contains(file), "{file}: {message}");
        assert!(
            message.contains(line),
            "{file}: expected line {line} in {message}"
        );
        assert!(
            message.contains(key),
            "{file}: expected key {key} in {message}"
        );
    }
}

#[test]
fn bad_flags_exit_2() {
    assert_eq!(
        run(&[
            "--upstream",
            "http://127.0.0.1:9",
            "--store",
            "mysql://x",
            "--check"
        ])
        .status
        .code(),
        Some(2)
    );
    assert_eq!(
        run(&["--listen", "not-an-address", "--check"])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(
        run(&["--check"]).status.code(),
        Some(2),
        "no upstream at all"
    );
}

#[test]
fn check_prints_the_effective_config_with_flags_over_the_file() {
    let path = config_file("check.toml", "upstream = \"http://127.0.0.1:9000\"\nlisten = \"127.0.0.1:1111\"\n[defaults]\nttl = \"1h\"\n");
    let output = run(&[
        "--config",
        path.to_str().unwrap(),
        "--listen",
        "127.0.0.1:2222",
        "--store",
        "memory",
        "--check",
    ]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let printed = String::from_utf8(output.stdout).unwrap();
    assert!(printed.contains("127.0.0.1:2222"), "{printed}");
    assert!(!printed.contains("127.0.0.1:1111"));
    assert!(printed.contains("memory"));
    assert!(printed.contains("1h"));
    let reprinted = config_file("reprinted.toml", &printed);
    let again = run(&["--config", reprinted.to_str().unwrap(), "--check"]);
    assert_eq!(
        String::from_utf8(again.stdout).unwrap(),
        printed,
        "the printed config loads to itself"
    );
}

#[tokio::test]
async fn the_binary_proxies_and_exits_0_on_sigterm() {
    let upstream = TestUpstream::start().await;
    let (child, client) = start_binary(&upstream.url(), &["--store", "memory"]).await;
    let first = client.post("/v1/x", "bin-1", "{}").await;
    let again = client.post("/v1/x", "bin-1", "{}").await;
    assert_eq!(first.status, 201);
    assert!(again.replayed());
    sigterm(&child);
    assert_eq!(exit_code(child).await, Some(0));
}

#[tokio::test]
async fn a_second_proxy_on_a_running_ones_address_does_not_start() {
    let upstream = TestUpstream::start().await;
    let (first, client) = start_binary(&upstream.url(), &["--store", "memory"]).await;
    let listen = client.addr().to_string();
    let second = tokio::process::Command::new(BIN)
        .args(["--upstream", &upstream.url(), "--store", "memory"])
        .args(["--listen", &listen])
        .output();
    let second = tokio::time::timeout(Duration::from_secs(10), second)
        .await
        .expect("the second proxy exits rather than serving")
        .unwrap();
    assert!(!second.status.success());
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(stderr.contains(&listen), "{stderr}");
    assert_eq!(client.post("/v1/x", "first-serves", "{}").await.status, 201);
    sigterm(&first);
    assert_eq!(exit_code(first).await, Some(0));
}

#[tokio::test]
async fn sigterm_lets_a_request_in_flight_finish_before_exiting() {
    let upstream = TestUpstream::start().await;
    let (child, client) = start_binary(&upstream.url(), &["--store", "memory"]).await;
    let in_flight =
        tokio::spawn(async move { client.post("/v1/x?delay_ms=700", "drained", "{}").await });
    upstream.until_executed("drained").await;
    sigterm(&child);
    let answer = in_flight.await.unwrap();
    assert_eq!(answer.status, 201, "the request in flight got its answer");
    assert_eq!(exit_code(child).await, Some(0));
    assert_eq!(upstream.executions_of("drained"), 1);
}

#[tokio::test]
async fn log_lines_name_route_and_outcome_but_never_a_key_a_secret_or_a_body() {
    let upstream = TestUpstream::start().await;
    let args = ["--store", "memory", "--log-format", "json"];
    let (child, client) = start_binary_logging(&upstream.url(), &args, Stdio::piped).await;
    let key = "customer-4242-key-do-not-log";
    let headers = [
        ("idempotency-key", key),
        ("authorization", "Bearer sk_live_do_not_log"),
    ];
    client
        .send("POST", "/v1/charges", &headers, "card=4242424242424242")
        .await;
    client
        .send("POST", "/v1/charges", &headers, "card=4242424242424242")
        .await;
    sigterm(&child);
    let output = tokio::time::timeout(Duration::from_secs(10), child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let log = String::from_utf8(output.stderr).unwrap();

    for secret in [key, "sk_live_do_not_log", "4242424242424242"] {
        assert!(!log.contains(secret), "the log holds {secret:?}:\n{log}");
    }
    let requests: Vec<serde_json::Value> = log
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|line| line["message"] == "request")
        .collect();
    assert_eq!(requests.len(), 2, "one line per request:\n{log}");
    assert_eq!(requests[0]["outcome"], "forwarded");
    assert_eq!(requests[1]["outcome"], "replayed");
    for line in &requests {
        assert_eq!(line["route"], "default");
        assert_eq!(line["status"], 201);
        assert!(line["latency_ms"].is_number());
        assert_eq!(
            line["key"].as_str().map(str::len),
            Some(12),
            "a short hash stands for the key"
        );
    }
    assert_eq!(
        requests[0]["key"], requests[1]["key"],
        "the hash correlates the retry with the first"
    );
}

#[tokio::test]
async fn the_admin_listener_serves_probes_and_metrics_beside_the_proxy() {
    let upstream = TestUpstream::start().await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let admin_addr = format!("127.0.0.1:{port}");
    let args = ["--store", "memory", "--admin-listen", &admin_addr];
    let (child, client) = start_binary(&upstream.url(), &args).await;
    client.post("/v1/x", "admin-bin", "{}").await;
    let admin = common::client::TestClient::new(admin_addr.parse().unwrap());
    assert_eq!(admin.send("GET", "/healthz", &[], "").await.status, 200);
    assert_eq!(admin.send("GET", "/readyz", &[], "").await.status, 200);
    let metrics = admin.send("GET", "/metrics", &[], "").await;
    let text = String::from_utf8_lossy(&metrics.body);
    assert!(
        text.contains("idempotency_requests_total{route=\"default\",outcome=\"forwarded\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("idempotency_upstream_seconds_bucket"),
        "latency is a histogram: {text}"
    );
    sigterm(&child);
    assert_eq!(exit_code(child).await, Some(0));
}

#[tokio::test]
async fn text_logs_written_to_a_file_carry_no_terminal_colour_codes() {
    let upstream = TestUpstream::start().await;
    let (child, client) =
        start_binary_logging(&upstream.url(), &["--store", "memory"], Stdio::piped).await;
    client.post("/v1/x", "plain-text-log", "{}").await;
    sigterm(&child);
    let output = tokio::time::timeout(Duration::from_secs(10), child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let log = String::from_utf8(output.stderr).unwrap();
    assert!(log.contains("outcome=\"forwarded\""), "{log}");
    assert!(
        !log.contains('\u{1b}'),
        "escape codes in a piped log: {log:?}"
    );
}

#[test]
fn environment_variables_stand_in_for_flags_and_flags_beat_them() {
    let check = |flags: &[&str]| {
        let output = Command::new(BIN)
            .args(["--upstream", "http://127.0.0.1:9000", "--check"])
            .args(flags)
            .env("IDEMPOTENCY_PROXY_LISTEN", "0.0.0.0:8181")
            .env("IDEMPOTENCY_PROXY_STORE", "memory")
            .output()
            .unwrap();
        assert_eq!(
            output.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    };
    let from_env = check(&[]);
    assert!(from_env.contains("listen = \"0.0.0.0:8181\""), "{from_env}");
    assert!(from_env.contains("store = \"memory\""), "{from_env}");
    let flagged = check(&["--listen", "127.0.0.1:8282"]);
    assert!(flagged.contains("listen = \"127.0.0.1:8282\""), "{flagged}");
}

/// A store URL may carry its password inline; `--check` prints it masked, never as written,
/// and so does the refusal of a store value it cannot use.
#[test]
fn check_never_prints_a_store_password() {
    let postgres = config_file(
        "postgres-password.toml",
        "upstream = \"http://127.0.0.1:9\"\nstore = \"postgres://app:hunter2@db.internal:5432/app?sslmode=require\"\n",
    );
    let output = run(&["--config", postgres.to_str().unwrap(), "--check"]);
    let printed = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(!printed.contains("hunter2"), "{printed}");
    assert!(
        printed.contains("store = \"postgres://app:***@db.internal:5432/app?sslmode=require\""),
        "{printed}"
    );

    let redis = ["--upstream", "http://127.0.0.1:9", "--check", "--store"];
    let output = run(&[&redis[..], &["redis://:hunter2@127.0.0.1:6379/2"]].concat());
    let printed = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(!printed.contains("hunter2"), "{printed}");
    assert!(
        printed.contains("store = \"redis://:***@127.0.0.1:6379/2\""),
        "{printed}"
    );

    let refused = run(&[&redis[..], &["mysql://app:hunter2@db/app"]].concat());
    let message = stderr_line(&refused);
    assert_eq!(refused.status.code(), Some(2), "{message}");
    assert!(!message.contains("hunter2"), "{message}");
    assert!(message.contains("mysql://app:***@db/app"), "{message}");
}
