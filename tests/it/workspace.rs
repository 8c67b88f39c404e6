//! The workspace's crates are what ARCHITECTURE.md says they are: the core compiles none of the
//! proxy's heavy parts, and each library crate packages as a crate of its own.
//!
//! Both ask Cargo itself (`cargo tree`, `cargo package --list`), so they hold for what a user
//! who depends on a crate would really compile and download.

use std::path::Path;
use std::process::Command;

/// The library crates a service may depend on, by package name.
const LIBRARIES: [&str; 7] = [
    "idempotency-core",
    "idempotency-delivery",
    "idempotency-redis-store",
    "idempotency-file-store",
    "idempotency-postgres",
    "idempotency-postgres-store",
    "idempotency-outbox",
];

/// Crates the core must never pull in: store clients, TLS, the command line, the Prometheus
/// exporter, the server side of HTTP, axum itself (the core uses only `axum-core`'s body).
const NOT_IN_THE_CORE: [&str; 11] = [
    "redis",
    "redb",
    "tokio-postgres",
    "deadpool-postgres",
    "rustls",
    "tokio-rustls",
    "clap",
    "metrics-exporter-prometheus",
    "hyper-util",
    "axum",
    "idempotency-proxy",
];

fn cargo(args: &[&str]) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .args(args)
        .current_dir(root)
        .output()
        .expect("cargo runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "cargo {args:?} failed: {stderr}");
    String::from_utf8(output.stdout).unwrap()
}

/// Every package in a crate's normal dependency tree, by name, with the features hyper has.
fn normal_tree(package: &str) -> (Vec<String>, String) {
    let tree = cargo(&["tree", "-p", package, "-e", "normal", "--prefix", "none"]);
    let names = tree
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect();
    let features = cargo(&[
        "tree",
        "-p",
        package,
        "-e",
        "normal,features",
        "--prefix",
        "none",
        "-i",
        "hyper",
    ]);
    (names, features)
}

#[test]
fn the_core_depends_on_no_store_client_server_tls_or_command_line() {
    let (names, hyper_features) = normal_tree("idempotency-core");
    let found: Vec<&str> = NOT_IN_THE_CORE
        .into_iter()
        .filter(|banned| names.iter().any(|n| n == banned))
        .collect();
    assert!(
        found.is_empty(),
        "the core's normal dependencies include {found:?}"
    );
    for side in ["server", "client", "http1", "http2"] {
        let feature = format!("hyper feature \"{side}\"");
        assert!(
            !hyper_features.contains(&feature),
            "the core turns on {feature}"
        );
    }
    // The check can see what it looks for: the proxy's own tree has them all.
    let (proxy, _) = normal_tree("idempotency-proxy");
    for heavy in ["redis", "redb", "rustls", "clap"] {
        assert!(
            proxy.iter().any(|n| n == heavy),
            "{heavy} not seen in the proxy's tree"
        );
    }
}

/// The crates behind each of the core's optional parts (its cargo features).
const FEATURES: [(&str, &str); 2] = [("sealing", "chacha20poly1305"), ("webhooks", "hmac")];

/// The distinct packages of a normal tree, by name and version.
fn packages(args: &[&str]) -> Vec<String> {
    let mut tree = vec!["tree", "-e", "normal", "--prefix", "none"];
    tree.extend_from_slice(args);
    let mut lines: Vec<String> = cargo(&tree)
        .lines()
        .map(|line| line.trim_end_matches(" (*)").to_owned())
        .filter(|line| !line.is_empty())
        .collect();
    lines.sort();
    lines.dedup();
    lines
}

#[test]
fn the_cores_optional_parts_are_features_the_stores_leave_off() {
    let has =
        |tree: &[String], name: &str| tree.iter().any(|l| l.starts_with(&format!("{name} v")));
    let bare = packages(&["-p", "idempotency-core", "--no-default-features"]);
    let full = packages(&["-p", "idempotency-core"]);
    println!(
        "idempotency-core: {} packages bare, {} with its defaults",
        bare.len(),
        full.len()
    );
    for (feature, dependency) in FEATURES {
        let with = packages(&[
            "-p",
            "idempotency-core",
            "--no-default-features",
            "--features",
            feature,
        ]);
        println!(
            "idempotency-core --features {feature}: {} packages",
            with.len()
        );
        assert!(!has(&bare, dependency), "{dependency} without {feature}");
        assert!(has(&with, dependency), "{feature} brings no {dependency}");
    }
    let stores = [
        "idempotency-file-store",
        "idempotency-redis-store",
        "idempotency-postgres-store",
    ];
    for store in stores {
        // Asked of the core's own features: a store's client may bring the same crates for
        // itself (PostgreSQL's SCRAM brings `hmac`).
        let core = cargo(&[
            "tree",
            "-p",
            store,
            "-e",
            "normal,features",
            "-i",
            "idempotency-core",
        ]);
        for (feature, _) in FEATURES {
            let on = format!("idempotency-core feature \"{feature}\"");
            assert!(!core.contains(&on), "{store} turns on the core's {feature}");
        }
    }
    // The check can see what it looks for: the proxy turns both on.
    let proxy = cargo(&[
        "tree",
        "-p",
        "idempotency-proxy",
        "-e",
        "normal,features",
        "-i",
        "idempotency-core",
    ]);
    for (feature, _) in FEATURES {
        assert!(
            proxy.contains(&format!("idempotency-core feature \"{feature}\"")),
            "{feature}"
        );
    }
}

#[test]
fn the_postgres_store_builds_on_the_core_and_the_connection_crate_only() {
    let (names, _) = normal_tree("idempotency-postgres-store");
    let mut ours: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|n| n.starts_with("idempotency-"))
        .collect();
    ours.sort_unstable();
    ours.dedup();
    assert_eq!(
        ours,
        [
            "idempotency-core",
            "idempotency-delivery",
            "idempotency-postgres",
            "idempotency-postgres-store"
        ]
    );
    for foreign in ["redis", "redb"] {
        assert!(
            !names.iter().any(|n| n == foreign),
            "the Postgres store pulls in {foreign}"
        );
    }
}

#[test]
fn each_library_crate_packages_its_own_sources_and_readme() {
    for crate_name in LIBRARIES {
        let listed = cargo(&["package", "--list", "--allow-dirty", "-p", crate_name]);
        let files: Vec<&str> = listed.lines().collect();
        for needed in ["Cargo.toml", "README.md", "src/lib.rs"] {
            assert!(
                files.contains(&needed),
                "{crate_name} packages no {needed}: {files:?}"
            );
        }
        let foreign: Vec<&&str> = files.iter().filter(|f| f.starts_with("..")).collect();
        assert!(foreign.is_empty(), "{crate_name} packages {foreign:?}");
    }
}

#[test]
fn what_the_senders_share_builds_without_the_layer() {
    // Secrets, backoff and signing: the outbox relay and the connection crate use them, and
    // neither has to compile the layer for them.
    for package in ["idempotency-delivery", "idempotency-postgres"] {
        let tree = cargo(&["tree", "-p", package, "-e", "normal", "--prefix", "none"]);
        let names: Vec<&str> = tree
            .lines()
            .filter_map(|line| line.split_whitespace().next())
            .collect();
        assert!(
            !names.contains(&"idempotency-core"),
            "{package} pulls in the core: {names:?}"
        );
        assert!(names.contains(&"idempotency-delivery"), "{package}");
    }
    // The outbox takes the core only for the names it checks, none of its optional parts.
    let core = cargo(&[
        "tree",
        "-p",
        "idempotency-outbox",
        "-e",
        "normal,features",
        "-i",
        "idempotency-core",
    ]);
    for (feature, _) in FEATURES {
        let on = format!("idempotency-core feature \"{feature}\"");
        assert!(
            !core.contains(&on),
            "the outbox turns on the core's {feature}"
        );
    }
}
