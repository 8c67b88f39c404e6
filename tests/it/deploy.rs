//! What ships under `deploy/` agrees with the proxy: every metric the Grafana dashboard and the
//! Prometheus alerts name is one the proxy exports (with labels it has), the rules pass
//! `promtool` where it is installed (and the outbox and consumer alerts fire when they should),
//! and the Kubernetes example's config loads as `--check` loads it, with ports, probes and
//! paths that match it.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::proxy::TestProxy;
use common::temp::TempPath;
use common::upstream::TestUpstream;
use idempotency_proxy::config::{self, Overrides};
use idempotency_proxy::store::{MemoryStore, StoreSpec};
use idempotency_proxy::{MetricKind, METRICS};
use serde_yaml::Value as Yaml;

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every document of a YAML file.
fn yaml_documents(path: &str) -> Vec<Yaml> {
    let text = read(path);
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| serde::Deserialize::deserialize(doc).unwrap_or_else(|e| panic!("{path}: {e}")))
        .collect()
}

/// One use of a metric in a query: its name as written and the label names it selects on.
#[derive(Debug)]
struct Use {
    name: String,
    labels: Vec<String>,
}

/// The `idempotency_*` series a PromQL expression reads, with the labels of their selectors.
fn uses(expr: &str) -> Vec<Use> {
    let mut found = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("idempotency_") {
        let tail = &rest[at..];
        let len = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let name = tail[..len].to_owned();
        let after = &tail[len..];
        let labels = match after.strip_prefix('{') {
            Some(selector) => selector
                .split('}')
                .next()
                .unwrap()
                .split(',')
                .filter_map(|m| m.split(['=', '!']).next())
                .map(|l| l.trim().to_owned())
                .filter(|l| !l.is_empty())
                .collect(),
            None => Vec::new(),
        };
        found.push(Use { name, labels });
        rest = after;
    }
    found
}

/// The exported metric a series name belongs to (a histogram's `_bucket`, `_sum`, `_count`).
fn exported(series: &str) -> Option<&'static idempotency_proxy::Metric> {
    METRICS.iter().find(|m| {
        series == m.name
            || (m.kind == MetricKind::Histogram
                && ["_bucket", "_sum", "_count"]
                    .iter()
                    .any(|suffix| series.strip_suffix(suffix) == Some(m.name)))
    })
}

/// Checks every use names an exported metric and one of its labels; returns the metrics used.
fn check_uses(origin: &str, exprs: &[String]) -> BTreeSet<&'static str> {
    let mut used = BTreeSet::new();
    for expr in exprs {
        for u in uses(expr) {
            let metric = exported(&u.name).unwrap_or_else(|| {
                panic!("{origin}: {} is not a metric the proxy exports", u.name)
            });
            for label in &u.labels {
                let known = metric.labels.contains(&label.as_str())
                    || (label == "le" && metric.kind == MetricKind::Histogram);
                assert!(known, "{origin}: {} has no label {label:?}", metric.name);
            }
            used.insert(metric.name);
        }
    }
    used
}

/// Every string under a key named `key`, anywhere in a JSON document.
fn json_strings(value: &serde_json::Value, key: &str, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                match v {
                    serde_json::Value::String(s) if k == key => out.push(s.clone()),
                    other => json_strings(other, key, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| json_strings(v, key, out)),
        _ => {}
    }
}

#[test]
fn the_dashboard_reads_only_exported_metrics_and_shows_every_one() {
    let path = "deploy/grafana/idempotency-proxy.json";
    let dashboard: serde_json::Value = serde_json::from_str(&read(path)).unwrap();
    let mut exprs = Vec::new();
    json_strings(&dashboard, "expr", &mut exprs);
    json_strings(&dashboard, "definition", &mut exprs);
    assert!(exprs.len() > 10, "{path}: {} queries", exprs.len());
    let used = check_uses(path, &exprs);
    let all: BTreeSet<&str> = METRICS.iter().map(|m| m.name).collect();
    let missing: Vec<_> = all.difference(&used).collect();
    assert!(missing.is_empty(), "{path} shows no panel of {missing:?}");
}

#[test]
fn the_alerts_read_only_exported_metrics_and_cover_what_pages_an_operator() {
    let path = "deploy/prometheus/alerts.yml";
    let docs = yaml_documents(path);
    let rules: Vec<&Yaml> = docs[0]["groups"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_sequence().unwrap())
        .collect();
    let mut exprs = Vec::new();
    for rule in &rules {
        let name = rule["alert"].as_str().expect("every rule is an alert");
        assert!(
            rule["labels"]["severity"].as_str().is_some(),
            "{name}: severity"
        );
        assert!(
            rule["annotations"]["summary"].as_str().is_some(),
            "{name}: summary"
        );
        exprs.push(rule["expr"].as_str().unwrap().to_owned());
    }
    let used = check_uses(path, &exprs);
    for needed in [
        "idempotency_store_unavailable_total",
        "idempotency_fail_open_total",
        "idempotency_requests_total",
        "idempotency_inbox_oldest_pending_seconds",
        "idempotency_inbox_attempts_total",
        "idempotency_outbox_oldest_pending_seconds",
        "idempotency_outbox_attempts_total",
        "idempotency_consumer_lag",
        "idempotency_consumer_messages_total",
        "idempotency_config_reloads_total",
    ] {
        assert!(used.contains(needed), "{path}: no alert reads {needed}");
    }
}

/// `promtool`, if on PATH; says SKIPPED when it is not and `REQUIRE_PROMTOOL=1` is not set.
fn promtool() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path)
        .map(|dir| dir.join("promtool"))
        .find(|p| p.is_file());
    if found.is_none() {
        assert!(
            std::env::var("REQUIRE_PROMTOOL").as_deref() != Ok("1"),
            "REQUIRE_PROMTOOL=1 but no promtool on PATH"
        );
        eprintln!("\n*** SKIPPED: no promtool on PATH; the rules were checked by this test's own parser only ***\n");
    }
    found
}

/// Runs `promtool` with `args` in `dir`, which must succeed.
fn promtool_run(promtool: &Path, args: &[&std::ffi::OsStr], dir: &Path) {
    let out = std::process::Command::new(promtool)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn promtool_check_rules(promtool: &Path, rules: &Path) {
    let args = ["check".as_ref(), "rules".as_ref(), rules.as_os_str()];
    promtool_run(promtool, &args, &std::env::temp_dir());
}

#[test]
fn promtool_accepts_the_alert_rules_and_the_dashboard_queries() {
    let Some(promtool) = promtool() else { return };
    promtool_check_rules(&promtool, &repo("deploy/prometheus/alerts.yml"));

    // The dashboard's queries, with Grafana's variables filled in, as recording rules: promtool
    // parses each one as Prometheus would.
    let dashboard: serde_json::Value =
        serde_json::from_str(&read("deploy/grafana/idempotency-proxy.json")).unwrap();
    let mut exprs = Vec::new();
    json_strings(&dashboard, "expr", &mut exprs);
    let rules: Vec<serde_json::Value> = exprs
        .iter()
        .enumerate()
        .map(|(i, expr)| {
            let expr = expr
                .replace("$__rate_interval", "5m")
                .replace("$__range", "1h")
                .replace("$route", ".*")
                .replace("$outbox", ".*")
                .replace("$consumer", ".*");
            serde_json::json!({ "record": format!("dashboard:query_{i}"), "expr": expr })
        })
        .collect();
    let file = std::env::temp_dir().join(format!("dashboard-rules-{}.yml", std::process::id()));
    let groups = serde_json::json!({ "groups": [{ "name": "dashboard", "rules": rules }] });
    std::fs::write(&file, serde_yaml::to_string(&groups).unwrap()).unwrap();
    promtool_check_rules(&promtool, &file);
    std::fs::remove_file(&file).unwrap();
}

/// The outbox alerts, evaluated by `promtool test rules` over made-up series: quiet while the
/// oldest row is young and no row has died, firing on a backlog older than 15 minutes (for 5)
/// and on a new dead row, and quiet again once no row has died for 15 minutes. Annotations are
/// left out of the copy under test: promtool compares them whole, and `check rules` has
/// parsed their templates already.
const OUTBOX_ALERT_TESTS: &str = r#"
rule_files: [rules.yml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'idempotency_outbox_oldest_pending_seconds{job="proxy",instance="a",outbox="payments"}'
        values: '0+60x40'
      - series: 'idempotency_outbox_attempts_total{job="proxy",instance="a",outbox="payments",result="dead"}'
        values: '0x4 1x30'
    alert_rule_test:
      - eval_time: 15m
        alertname: IdempotencyOutboxBacklogOld
        exp_alerts: []
      - eval_time: 25m
        alertname: IdempotencyOutboxBacklogOld
        exp_alerts:
          - exp_labels: {severity: warning, job: proxy, outbox: payments}
      - eval_time: 3m
        alertname: IdempotencyOutboxDeadRows
        exp_alerts: []
      - eval_time: 8m
        alertname: IdempotencyOutboxDeadRows
        exp_alerts:
          - exp_labels: {severity: critical, job: proxy, outbox: payments}
      - eval_time: 25m
        alertname: IdempotencyOutboxDeadRows
        exp_alerts: []
"#;

/// The consumer alerts, evaluated as the outbox ones are. `fulfilment` falls behind for good
/// and has a message go dead; `billing` has a five-minute burst of lag and delivers, retries
/// and settles duplicates, but nothing of it dies: it raises neither alert.
const CONSUMER_ALERT_TESTS: &str = r#"
rule_files: [rules.yml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'idempotency_consumer_lag{job="proxy",instance="a",consumer="fulfilment"}'
        values: '0x4 5000x30'
      - series: 'idempotency_consumer_lag{job="proxy",instance="a",consumer="billing"}'
        values: '200x5 3000x4 100x25'
      - series: 'idempotency_consumer_messages_total{job="proxy",instance="a",consumer="fulfilment",result="dead"}'
        values: '0x4 1x30'
      - series: 'idempotency_consumer_messages_total{job="proxy",instance="a",consumer="billing",result="dead"}'
        values: '0x35'
      - series: 'idempotency_consumer_messages_total{job="proxy",instance="a",consumer="billing",result="delivered"}'
        values: '0+10x35'
      - series: 'idempotency_consumer_messages_total{job="proxy",instance="a",consumer="billing",result="retried"}'
        values: '0+3x35'
      - series: 'idempotency_consumer_messages_total{job="proxy",instance="a",consumer="billing",result="duplicate"}'
        values: '0+1x35'
    alert_rule_test:
      - eval_time: 9m
        alertname: IdempotencyConsumerLagHigh
        exp_alerts: []
      - eval_time: 14m
        alertname: IdempotencyConsumerLagHigh
        exp_alerts: []
      - eval_time: 16m
        alertname: IdempotencyConsumerLagHigh
        exp_alerts:
          - exp_labels: {severity: warning, job: proxy, consumer: fulfilment}
      - eval_time: 30m
        alertname: IdempotencyConsumerLagHigh
        exp_alerts:
          - exp_labels: {severity: warning, job: proxy, consumer: fulfilment}
      - eval_time: 3m
        alertname: IdempotencyConsumerDeadMessages
        exp_alerts: []
      - eval_time: 8m
        alertname: IdempotencyConsumerDeadMessages
        exp_alerts:
          - exp_labels: {severity: critical, job: proxy, consumer: fulfilment}
      - eval_time: 25m
        alertname: IdempotencyConsumerDeadMessages
        exp_alerts: []
"#;

/// Has `promtool test rules` run `tests` against the alerts, without their annotations.
fn promtool_test_alerts(promtool: &Path, what: &str, tests: &str) {
    let mut rules: Yaml = yaml_documents("deploy/prometheus/alerts.yml").remove(0);
    for group in rules["groups"].as_sequence_mut().unwrap() {
        for rule in group["rules"].as_sequence_mut().unwrap() {
            rule.as_mapping_mut().unwrap().remove("annotations");
        }
    }
    let dir = std::env::temp_dir().join(format!("{what}-alert-tests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("rules.yml"),
        serde_yaml::to_string(&rules).unwrap(),
    )
    .unwrap();
    std::fs::write(dir.join("tests.yml"), tests).unwrap();
    let args = ["test", "rules", "tests.yml"].map(std::ffi::OsStr::new);
    promtool_run(promtool, &args, &dir);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn promtool_fires_the_outbox_alerts_on_an_old_backlog_and_on_dead_rows() {
    let Some(promtool) = promtool() else { return };
    promtool_test_alerts(&promtool, "outbox", OUTBOX_ALERT_TESTS);
}

#[test]
fn promtool_fires_the_consumer_alerts_on_lasting_lag_and_on_dead_messages() {
    let Some(promtool) = promtool() else { return };
    promtool_test_alerts(&promtool, "consumer", CONSUMER_ALERT_TESTS);
}

#[tokio::test]
async fn every_metric_the_proxy_exports_is_in_the_table() {
    let upstream = TestUpstream::start().await;
    let proxy = TestProxy::start(
        &format!("upstream = \"{}\"\n", upstream.url()),
        Arc::new(MemoryStore::new()),
    )
    .await;
    proxy.client.post("/v1/x", "catalogued", "{}").await;
    proxy.client.post("/v1/x", "catalogued", "{}").await;
    let metrics = proxy.admin.send("GET", "/metrics", &[], "").await;
    let text = String::from_utf8_lossy(&metrics.body).into_owned();
    let series: BTreeSet<&str> = text
        .lines()
        .filter(|l| l.starts_with("idempotency_"))
        .filter_map(|l| l.split(['{', ' ']).next())
        .collect();
    assert!(series.contains("idempotency_requests_total"), "{text}");
    assert!(
        series.contains("idempotency_store_operation_seconds_bucket"),
        "{text}"
    );
    for name in series {
        assert!(
            exported(name).is_some(),
            "{name} is exported but not in METRICS"
        );
    }
}

/// The Kubernetes example's documents by kind (and name, for those that have several).
struct Example {
    docs: Vec<Yaml>,
}

impl Example {
    fn load() -> Self {
        let kustomization = yaml_documents("deploy/kubernetes/kustomization.yaml");
        let files = kustomization[0]["resources"].as_sequence().unwrap();
        let docs = files
            .iter()
            .flat_map(|f| yaml_documents(&format!("deploy/kubernetes/{}", f.as_str().unwrap())))
            .collect();
        Self { docs }
    }

    fn one(&self, kind: &str, name: &str) -> &Yaml {
        self.docs
            .iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name}"))
    }

    fn kind(&self, kind: &str) -> &Yaml {
        let mut all = self.docs.iter().filter(|d| d["kind"] == kind);
        let first = all.next().unwrap_or_else(|| panic!("no {kind}"));
        assert!(all.next().is_none(), "one {kind}");
        first
    }
}

fn named<'a>(list: &'a Yaml, name: &str) -> &'a Yaml {
    list.as_sequence()
        .unwrap()
        .iter()
        .find(|item| item["name"] == name)
        .unwrap_or_else(|| panic!("nothing named {name}"))
}

fn port(container: &Yaml, name: &str) -> u16 {
    let port = named(&container["ports"], name)["containerPort"]
        .as_u64()
        .unwrap();
    u16::try_from(port).unwrap()
}

/// The `IDEMPOTENCY_PROXY_*` defaults the image sets with `ENV`.
fn image_env() -> BTreeMap<String, String> {
    let dockerfile = read("Dockerfile");
    dockerfile
        .split_whitespace()
        .filter_map(|word| word.split_once('='))
        .filter(|(name, _)| name.starts_with("IDEMPOTENCY_PROXY_"))
        .map(|(n, v)| (n.to_owned(), v.to_owned()))
        .collect()
}

/// The proxy container's environment: the image's defaults, then the pod's plain values; and
/// the values it takes from Secrets of the example.
fn container_env(example: &Example, container: &Yaml) -> BTreeMap<String, String> {
    let mut env = image_env();
    for var in container["env"].as_sequence().unwrap() {
        let name = var["name"].as_str().unwrap().to_owned();
        let value = var["value"].as_str().map_or_else(
            || {
                let from = &var["valueFrom"]["secretKeyRef"];
                let secret = example.one("Secret", from["name"].as_str().unwrap());
                let key = from["key"].as_str().unwrap();
                secret["stringData"][key].as_str().unwrap().to_owned()
            },
            str::to_owned,
        );
        env.insert(name, value);
    }
    env
}

/// `toml` with each secret it reads from the environment (`"env:NAME"`) read from a file that
/// holds the container's value of NAME instead, and those files. The tests of this binary share
/// one process environment, which the binaries they start inherit, so none of them sets a
/// variable in it.
fn secrets_in_files(toml: &str, env: &BTreeMap<String, String>) -> (String, Vec<TempPath>) {
    let (mut toml, mut files) = (toml.to_owned(), Vec::new());
    while let Some(at) = toml.find("\"env:") {
        let start = at + "\"env:".len();
        let end = start + toml[start..].find('"').expect("a closed string");
        let name = toml[start..end].to_owned();
        let value = env
            .get(&name)
            .unwrap_or_else(|| panic!("the config reads {name}, which the container does not set"));
        let file = TempPath::new(&format!("deploy-secret-{name}"));
        std::fs::write(file.path(), value).unwrap();
        toml.replace_range(at + 1..end, &format!("file:{}", file.path().display()));
        files.push(file);
    }
    (toml, files)
}

/// Where the pod mounts the volume that `volume` (a predicate on its source) selects.
fn mount_path(pod: &Yaml, container: &Yaml, volume: impl Fn(&Yaml) -> bool) -> String {
    let volumes = pod["volumes"].as_sequence().unwrap();
    let name = volumes.iter().find(|v| volume(v)).expect("the volume")["name"].clone();
    let mounts = container["volumeMounts"].as_sequence().unwrap();
    let mount = mounts.iter().find(|m| m["name"] == name).expect("mounted");
    mount["mountPath"].as_str().unwrap().to_owned()
}

#[test]
fn the_kubernetes_example_loads_as_check_loads_it_and_agrees_with_its_config() {
    let example = Example::load();
    let deployment = example.kind("Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    let proxy = named(&pod["containers"], "idempotency-proxy");
    let config_map = example.kind("ConfigMap");
    let toml = config_map["data"]["config.toml"].as_str().unwrap();

    // The config file is where the container is told to read it.
    let args: Vec<&str> = proxy["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let config_dir = mount_path(pod, proxy, |v| {
        v["configMap"]["name"] == config_map["metadata"]["name"]
    });
    assert_eq!(args, ["--config", &format!("{config_dir}/config.toml")]);

    // Loaded as the container loads it: the file, under the image's and the pod's variables.
    let env = container_env(&example, proxy);
    let (toml, _secrets) = secrets_in_files(toml, &env);
    let overrides = Overrides {
        listen: env.get("IDEMPOTENCY_PROXY_LISTEN").cloned(),
        store: env.get("IDEMPOTENCY_PROXY_STORE").cloned(),
        admin_listen: env.get("IDEMPOTENCY_PROXY_ADMIN_LISTEN").cloned(),
        upstream: env.get("IDEMPOTENCY_PROXY_UPSTREAM").cloned(),
        ..Overrides::default()
    };
    let settings = config::load_str("configmap config.toml", &toml, &overrides)
        .unwrap_or_else(|e| panic!("the ConfigMap's config is refused: {e}"));
    assert!(
        settings.admin_token.is_some(),
        "the admin listener is guarded"
    );

    // Ports and probes agree with what the proxy listens on.
    assert_eq!(settings.listen.port(), port(proxy, "http"));
    assert_eq!(
        settings.admin_listen.expect("admin listener").port(),
        port(proxy, "admin")
    );
    for (probe, path) in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")] {
        assert_eq!(proxy[probe]["httpGet"]["path"], path, "{probe}");
        assert_eq!(proxy[probe]["httpGet"]["port"], "admin", "{probe}");
    }
    let service = example.kind("Service");
    let target = service["spec"]["ports"][0]["targetPort"].as_str().unwrap();
    port(proxy, target);

    // Every route goes to the app beside the proxy, on loopback.
    let app = named(&pod["containers"], "app");
    for route in &settings.routes {
        assert_eq!(
            route.upstream.host(),
            Some("127.0.0.1"),
            "{}",
            route.policy.route
        );
        assert_eq!(
            route.upstream.port_u16(),
            Some(port(app, "app")),
            "{}",
            route.policy.route
        );
    }

    // A file store lives on the claimed volume, and only one pod may hold it.
    if let StoreSpec::File(path) = &settings.store {
        let claim = example.kind("PersistentVolumeClaim")["metadata"]["name"].clone();
        let data = mount_path(pod, proxy, |v| {
            v["persistentVolumeClaim"]["claimName"] == claim
        });
        assert!(
            path.starts_with(&data),
            "{} is not on the volume at {data}",
            path.display()
        );
        assert_eq!(deployment["spec"]["replicas"], 1, "one pod per store file");
        assert_eq!(deployment["spec"]["strategy"]["type"], "Recreate");
    }

    // And the binary's own `--check` accepts it under the same environment.
    let file = std::env::temp_dir().join(format!("deploy-configmap-{}.toml", std::process::id()));
    std::fs::write(&file, toml).unwrap();
    let check = std::process::Command::new(common::binary::BIN)
        .arg("--config")
        .arg(&file)
        .arg("--check")
        .envs(&env)
        .output()
        .unwrap();
    std::fs::remove_file(&file).unwrap();
    assert!(
        check.status.success(),
        "--check: {}",
        String::from_utf8_lossy(&check.stderr)
    );
}
