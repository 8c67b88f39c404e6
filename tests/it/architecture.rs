//! The proxy's modules keep their order: each module of `src/` (a folder or a file, those of
//! `net/` and `operator/` each on its own) imports only modules of a lower layer, so no two
//! folders reach each other and there is no cycle between them; and the config and the stores
//! never reach the network path. What the crates may use is Cargo's to enforce (each crate's
//! `Cargo.toml`, and `tests/it/workspace.rs` for the core); this is the part Cargo cannot see.
//! ARCHITECTURE.md describes the layers; a module added without a layer here fails.
//!
//! An import is any `crate::NAME` path, and each name of a `use crate::{...}` group, in code
//! outside `#[cfg(test)]` items: tests may look at anything.
//!
//! It also holds ARCHITECTURE.md to the tree: every path the page names is there.

use crate::common;

use common::markdown::{code_spans, read, repo};

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The proxy's modules, bottom layer first. A module may import from any layer below its own.
/// The folders that group modules by part (`net/`, `operator/`) are not modules here: each of
/// their modules is, named with its folder (`net::server`).
const LAYERS: &[&[&str]] = &[
    // Leaves: per-thread slots, the framing guard, logging, TLS files, the store choice.
    &[
        "thread_slot",
        "net::framing",
        "operator::logging",
        "tls",
        "store",
    ],
    // The upstream client; the status page's view of routes and inboxes; gauges read when
    // scraped.
    &["net::upstream", "operator::status", "operator::scraped"],
    // What each request reports; the inbox delivery workers, the outbox relays and the broker
    // consumers; the router
    // over routes.
    &[
        "operator::telemetry",
        "inbox",
        "outbox",
        "consumer",
        "net::router",
    ],
    // The config (which reads inbox delivery and outbox settings); the metric catalog.
    &["config", "operator::metric_catalog"],
    // The listener and connections; the admin endpoints.
    &["net::server", "operator::admin"],
    // One proxy built from a config, rebuilt on reload.
    &["proxy"],
    // The process: worker threads, listeners, signals.
    &["process"],
    // The command line.
    &["cli"],
];

/// The folders that only group modules: their `mod.rs` declares them and imports nothing.
const GROUPS: &[&str] = &["net", "operator"];

/// The network path, which neither the config nor the stores may reach.
const NETWORK_PATH: &[&str] = &[
    "net::framing",
    "net::upstream",
    "net::router",
    "net::server",
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Each module's file and, for a folder, every file under it; a group's modules are named
/// with their group.
fn modules() -> BTreeMap<String, Vec<PathBuf>> {
    let mut modules = BTreeMap::new();
    collect_modules(&src(), "", &mut modules);
    modules
}

fn collect_modules(dir: &Path, group: &str, modules: &mut BTreeMap<String, Vec<PathBuf>>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        if ["lib", "main", "mod"].contains(&stem.as_str()) || stem.ends_with("_tests") {
            continue;
        }
        if group.is_empty() && GROUPS.contains(&stem.as_str()) {
            collect_modules(&path, &stem, modules);
            continue;
        }
        let name = if group.is_empty() {
            stem
        } else {
            format!("{group}::{stem}")
        };
        let files = modules.entry(name).or_default();
        if path.is_dir() {
            collect_files(&path, files);
        } else {
            files.push(path);
        }
    }
}

fn collect_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") && !is_test_file(&path) {
            out.push(path);
        }
    }
}

/// Files that hold only tests, declared from their module under `#[cfg(test)]`.
fn is_test_file(path: &Path) -> bool {
    let stem = path.file_stem().unwrap().to_string_lossy();
    stem == "tests" || stem.ends_with("_tests")
}

/// The code of a file without its `#[cfg(test)]` items.
fn without_tests(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let item = &rest[at..];
        let end = match (item.find('{'), item.find(';')) {
            (Some(open), Some(semi)) if semi < open => semi + 1,
            (Some(open), _) => open + matching_brace(&item[open..]),
            (None, Some(semi)) => semi + 1,
            (None, None) => item.len(),
        };
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// The length of the braced block `code` starts with, through its closing brace.
fn matching_brace(code: &str) -> usize {
    let mut depth = 0usize;
    for (i, c) in code.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
    }
    code.len()
}

/// The modules a piece of code names through `crate::`.
fn imports(code: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let preceded = code[..at].chars().last();
        if preceded.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // `idempotency_core::...` and the like name other crates
        }
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..matching_brace(rest).saturating_sub(2)];
            names.extend(group.split(',').map(first_segment));
        } else {
            names.insert(first_segment(rest));
        }
    }
    names.retain(|n| !n.is_empty() && n.chars().next().is_some_and(char::is_lowercase));
    names
}

/// The module a path names: its first segment, or its first two for a group's module.
fn first_segment(path: &str) -> String {
    let ident = |path: &str| -> String {
        path.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let path = path.trim_start();
    let first = ident(path);
    match path[first.len()..].strip_prefix("::") {
        Some(rest) if GROUPS.contains(&first.as_str()) => format!("{first}::{}", ident(rest)),
        _ => first,
    }
}

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

/// Every import of every module, outside tests.
fn edges() -> BTreeMap<String, BTreeSet<String>> {
    let mut edges = BTreeMap::new();
    for (module, files) in modules() {
        let mut targets = BTreeSet::new();
        for file in files {
            let code = std::fs::read_to_string(&file).unwrap();
            targets.extend(imports(&without_tests(&code)));
        }
        targets.remove(&module);
        edges.insert(module, targets);
    }
    edges
}

#[test]
fn every_module_has_a_layer() {
    let unplaced: Vec<String> = modules()
        .into_keys()
        .filter(|m| layer_of(m).is_none())
        .collect();
    assert!(
        unplaced.is_empty(),
        "modules without a layer in tests/it/architecture.rs (see ARCHITECTURE.md): {unplaced:?}"
    );
}

#[test]
fn modules_import_only_from_layers_below_their_own() {
    let mut wrong = Vec::new();
    for (module, targets) in edges() {
        let Some(own) = layer_of(&module) else {
            continue;
        };
        for target in targets {
            if layer_of(&target).is_none_or(|theirs| theirs >= own) {
                wrong.push(format!("{module} -> {target}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the module order (ARCHITECTURE.md, \"The proxy's folders\"): {wrong:?}"
    );
}

#[test]
fn the_config_and_the_stores_never_reach_the_network_path() {
    let edges = edges();
    for module in ["config", "store", "tls"] {
        let reached: Vec<&String> = edges[module]
            .iter()
            .filter(|target| NETWORK_PATH.contains(&target.as_str()))
            .collect();
        assert!(reached.is_empty(), "{module} imports {reached:?}");
    }
}

#[test]
fn group_folders_only_declare_their_modules() {
    for group in GROUPS {
        let code = std::fs::read_to_string(src().join(group).join("mod.rs")).unwrap();
        let imports = imports(&code);
        assert!(imports.is_empty(), "src/{group}/mod.rs imports {imports:?}");
        let declared = code
            .lines()
            .filter(|l| l.starts_with("pub(crate) mod ") || l.starts_with("mod "))
            .count();
        let modules = modules();
        let named = modules
            .keys()
            .filter(|m| m.starts_with(&format!("{group}::")))
            .count();
        assert_eq!(declared, named, "src/{group}/mod.rs");
    }
}

#[test]
fn the_reader_sees_imports_and_leaves_tests_out() {
    let code = "use crate::{config::Settings, operator::status};\nfn f() { crate::store::open(); \
                crate::net::router::x(); idempotency_core::backend::Record::x(); }\n\
                #[cfg(test)]\nmod tests { use crate::proxy; }";
    let seen: Vec<String> = imports(&without_tests(code)).into_iter().collect();
    assert_eq!(seen, ["config", "net::router", "operator::status", "store"]);
    let edges = edges();
    assert!(
        edges["proxy"].contains("net::server"),
        "{:?}",
        edges["proxy"]
    );
    assert!(
        edges["net::server"].contains("net::upstream"),
        "{:?}",
        edges["net::server"]
    );
    assert!(edges["process"].contains("proxy"), "{:?}", edges["process"]);
}

/// Whether a code span names a path: a folder (`src/net/`) or a file with an extension, no
/// spaces. A span that starts with `/` is an HTTP path (`/metrics`), never the repository's.
fn is_path(span: &str) -> bool {
    let file = [".rs", ".md", ".toml", ".txt", ".html", ".json", ".yml"];
    !span.contains([' ', ':', '*', '<'])
        && !span.starts_with(['/', '.'])
        && (span.ends_with('/') || file.iter().any(|e| span.ends_with(e)))
}

/// Every path ARCHITECTURE.md names is there. A path from the repository's root
/// (`src/net/server/`) must exist as written; a short one (`flow.rs`, `routes/`) must exist
/// at the root or under one of the folders the page names in full.
#[test]
fn every_path_architecture_md_names_is_there() {
    let page = read("ARCHITECTURE.md");
    let root = repo();
    let top: BTreeSet<String> = std::fs::read_dir(&root)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let spans: Vec<String> = code_spans(&page)
        .into_iter()
        .filter(|s| is_path(s))
        .collect();
    let (full, short): (Vec<&String>, Vec<&String>) = spans
        .iter()
        .partition(|span| top.contains(span.split('/').next().unwrap()));
    let folders: Vec<PathBuf> = full
        .iter()
        .filter(|span| span.ends_with('/'))
        .map(|span| root.join(span.as_str()))
        .collect();
    let mut missing: Vec<&str> = full
        .iter()
        .filter(|span| !root.join(span.as_str()).exists())
        .map(|span| span.as_str())
        .collect();
    missing.extend(
        short
            .iter()
            .filter(|span| !root.join(span.as_str()).exists())
            .filter(|span| !folders.iter().any(|f| has_under(f, span)))
            .map(|span| span.as_str()),
    );
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names what is not there: {missing:?}"
    );
    assert!(full.len() >= 30, "only {} full paths found", full.len());
}

/// Whether `path` is in `folder` or in a folder under it.
fn has_under(folder: &Path, path: &str) -> bool {
    if folder.join(path).exists() {
        return true;
    }
    let Ok(entries) = std::fs::read_dir(folder) else {
        return false;
    };
    entries
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.is_dir() && !p.ends_with("target") && !p.ends_with(".git"))
        .any(|dir| has_under(&dir, path))
}

#[test]
fn the_path_check_tells_paths_from_other_spans() {
    let spans = [
        "src/net/",
        "flow.rs",
        "/metrics",
        "Store::reserve",
        "POST",
        "a b.rs",
    ];
    let paths: Vec<&str> = spans.into_iter().filter(|s| is_path(s)).collect();
    assert_eq!(paths, ["src/net/", "flow.rs"]);
    assert!(has_under(&repo().join("crates/core/"), "flow.rs"));
    assert!(!has_under(&repo().join("src/"), "no_such_file.rs"));
}
