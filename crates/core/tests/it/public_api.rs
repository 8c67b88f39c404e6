//! The crate's public API, held: every name the root and its four modules export, compared with
//! `tests/public_api.txt`, so the API changes only on purpose (update the list in the same
//! change). All other modules are private, so these files are the whole surface; a type's
//! methods are documented on it.
//!
//! The variants of [`Problem`](idempotency_core::Problem) are listed too (`Problem::NoRoute`):
//! what the layer answers by itself is part of its contract, and only its own answers belong
//! there.
//!
//! It also holds that no library crate of the workspace has a `#[doc(hidden)]` back door.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The files that say what is public, and the path each one's names are under.
const FACADES: &[(&str, &str)] = &[
    ("lib.rs", ""),
    ("backend.rs", "backend::"),
    ("observe.rs", "observe::"),
    ("policy.rs", "policy::"),
    ("proxy.rs", "proxy::"),
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The names a `pub use` tree brings in: the last segment of each leaf (or its alias).
fn leaves(tree: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut depth = 0;
    let mut leaf = String::new();
    for c in tree.chars().chain(std::iter::once(',')) {
        match c {
            '{' => {
                depth += 1;
                leaf.clear();
            }
            '}' | ',' => {
                let name = leaf
                    .trim()
                    .rsplit("::")
                    .next()
                    .unwrap_or("")
                    .trim()
                    .to_owned();
                let name = name.rsplit(" as ").next().unwrap_or("").trim().to_owned();
                if !name.is_empty() && name != "self" {
                    names.push(name);
                }
                leaf.clear();
                if c == '}' {
                    depth -= 1;
                }
            }
            _ => leaf.push(c),
        }
    }
    assert_eq!(depth, 0, "unbalanced braces in {tree:?}");
    names
}

/// Every public name of one file, under `prefix`: re-exports, inline modules' re-exports, and
/// items defined in the file itself. A name behind a cargo feature is marked with it.
fn public_names(code: &str, prefix: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut module = String::new();
    let mut feature = None;
    // An item only `cargo test --doc` compiles (the README's example) is no API.
    let mut doctest = false;
    let mut statement = String::new();
    for line in code.lines().map(str::trim) {
        if line.starts_with("//") || line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("#[cfg(feature = \"") {
            feature = rest.split('"').next().map(str::to_owned);
            continue;
        }
        if line == "}" {
            module.clear();
            continue;
        }
        if !statement.is_empty() || line.starts_with("pub use ") {
            statement.push_str(line);
            if line.ends_with(';') {
                let tree = statement
                    .trim_start_matches("pub use ")
                    .trim_end_matches(';');
                for name in leaves(tree) {
                    out.insert(named(prefix, &module, &name, feature.as_deref()));
                }
                statement.clear();
                feature = None;
            }
            continue;
        }
        if line == "#[cfg(doctest)]" {
            doctest = true;
            continue;
        }
        let words: Vec<&str> = line.split([' ', '(', '<', ':', ';', '{']).collect();
        if let ["pub", kind, name, ..] = words[..] {
            let item = [
                "mod", "fn", "struct", "enum", "trait", "type", "const", "static",
            ];
            if item.contains(&kind) && !doctest {
                let name = format!("{module}{name}");
                out.insert(named(prefix, "", &name, feature.as_deref()));
            }
            if kind == "mod" && line.ends_with('{') {
                module = format!("{name}::");
            }
        }
        feature = None;
        doctest = false;
    }
    out
}

fn named(prefix: &str, module: &str, name: &str, feature: Option<&str>) -> String {
    match feature {
        Some(feature) => format!("{prefix}{module}{name} (feature {feature})"),
        None => format!("{prefix}{module}{name}"),
    }
}

fn api() -> Vec<String> {
    let mut all = BTreeSet::new();
    for (file, prefix) in FACADES {
        let code = std::fs::read_to_string(src().join(file)).unwrap();
        all.extend(public_names(&code, prefix));
    }
    all.extend(problem_variants());
    all.into_iter().collect()
}

/// `Problem::Variant` for each variant of the enum, read from its definition.
fn problem_variants() -> Vec<String> {
    let code = std::fs::read_to_string(src().join("error.rs")).unwrap();
    let (_, body) = code
        .split_once("pub enum Problem {\n")
        .expect("Problem is defined in error.rs");
    let (body, _) = body.split_once("\n}\n").expect("the enum ends");
    let variants: Vec<String> = body
        .lines()
        .filter(|line| line.starts_with("    ") && !line.starts_with("     "))
        .map(str::trim)
        .filter(|line| line.starts_with(|c: char| c.is_ascii_uppercase()))
        .filter_map(|line| line.split(['(', ' ', ',', '{']).next())
        .map(|name| format!("Problem::{name}"))
        .collect();
    assert!(variants.len() > 5, "{variants:?}");
    variants
}

#[test]
fn the_public_api_is_the_list() {
    let listed = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/public_api.txt");
    let want = std::fs::read_to_string(&listed).unwrap();
    let want: Vec<&str> = want.lines().filter(|l| !l.starts_with('#')).collect();
    let have = api();
    let at_root = have.iter().filter(|n| !n.contains("::")).count();
    println!("{} public names, {at_root} at the root", have.len());
    if have != want {
        let added: Vec<_> = have
            .iter()
            .filter(|n| !want.contains(&n.as_str()))
            .collect();
        let gone: Vec<_> = want
            .iter()
            .filter(|n| !have.contains(&n.to_string()))
            .collect();
        panic!(
            "the public API changed: added {added:?}, gone {gone:?}; if on purpose, update {}",
            listed.display()
        );
    }
}

#[test]
fn only_the_facades_declare_public_modules_of_their_own_files() {
    let mut files = Vec::new();
    collect(&src(), &mut files);
    for path in files {
        let name = path
            .strip_prefix(src())
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let code = std::fs::read_to_string(&path).unwrap();
        // A public module of its own file: its names would be API no facade lists.
        let public_mod = code.lines().any(|l| {
            let l = l.trim_start();
            l.starts_with("pub mod ") && l.ends_with(';')
        });
        let facade = FACADES.iter().any(|(file, _)| *file == name);
        assert!(!public_mod || facade, "{name} declares a public module");
    }
}

#[test]
fn no_library_crate_has_a_doc_hidden_back_door() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut dirs = vec![root.join("src")];
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        dirs.push(entry.unwrap().path().join("src"));
    }
    for dir in dirs {
        let mut files = Vec::new();
        collect(&dir, &mut files);
        for path in files {
            let code = std::fs::read_to_string(&path).unwrap();
            assert!(
                !code.contains(concat!("#[doc(", "hidden)]")),
                "{} hides a public item from its docs",
                path.display()
            );
        }
    }
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn the_reader_sees_trees_features_and_inline_modules() {
    let code =
        "pub use crate::a::{b, c::{D, E as F}};\n#[cfg(feature = \"x\")]\npub use crate::g::H;\n\
                pub mod jcs {\n    pub use crate::j::{k, L};\n}\npub fn serve() {}\n";
    let names: Vec<_> = public_names(code, "p::").into_iter().collect();
    assert_eq!(
        names,
        [
            "p::D",
            "p::F",
            "p::H (feature x)",
            "p::b",
            "p::jcs",
            "p::jcs::L",
            "p::jcs::k",
            "p::serve"
        ]
    );
}
