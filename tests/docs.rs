//! What the README, ARCHITECTURE.md, SECURITY.md and the pages under `docs/` tell a reader to run or open
//! is there: every `cargo test --test NAME`, `cargo bench --bench NAME` and
//! `cargo run --example NAME` names a target Cargo knows, every repository path they name
//! exists, every link between them lands on a file and a heading, and the README's test command
//! is the one CI runs. A link in a code comment to an anchor of a page (`docs/reference.md#…`)
//! must land too.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use common::markdown::{code_spans, link_targets, read, repo, resolve, Page};

/// The pages a reader is sent to: the README, the map of the code, and the book.
fn pages() -> Vec<String> {
    let mut pages = common::markdown::pages();
    pages.insert(1, "ARCHITECTURE.md".to_owned());
    pages.insert(2, "SECURITY.md".to_owned());
    pages
}

/// The package a command without `-p` runs in: the one at the top of the workspace.
const TOP_PACKAGE: &str = "idempotency-proxy";

/// A target as a command names it: its package, kind (`test`, `bench`, `example`) and name.
type Target = (String, &'static str, String);

/// The targets Cargo knows, from `cargo metadata`.
fn targets() -> BTreeSet<Target> {
    let output = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--no-deps",
            "--offline",
            "--format-version",
            "1",
        ])
        .current_dir(repo())
        .output()
        .expect("cargo runs");
    assert!(output.status.success(), "{output:?}");
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let mut targets = BTreeSet::new();
    for package in metadata["packages"].as_array().unwrap() {
        let package_name = package["name"].as_str().unwrap();
        for target in package["targets"].as_array().unwrap() {
            for kind in target["kind"].as_array().unwrap() {
                let Some(kind) = ["test", "bench", "example"].into_iter().find(|k| kind == k)
                else {
                    continue;
                };
                let name = target["name"].as_str().unwrap().to_owned();
                targets.insert((package_name.to_owned(), kind, name));
            }
        }
    }
    targets
}

/// Each `cargo test [-p PKG] --test NAME` (and bench, example) of a page, as the target it
/// runs: without `-p`, one of the package at the top. Whitespace is folded first, as prose may
/// break a command across lines; a name in capitals (`NAME`, `MODULE`) is a placeholder.
fn commands(text: &str) -> Vec<Target> {
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let forms = [
        ("test", "cargo test ", "--test"),
        ("bench", "cargo bench ", "--bench"),
        ("example", "cargo run ", "--example"),
    ];
    let mut found = Vec::new();
    for (kind, command, flag) in forms {
        for (at, _) in text.match_indices(command) {
            let words: Vec<&str> = text[at + command.len()..].split(' ').take(6).collect();
            if let Some(target) = target_of(&words, kind, flag) {
                found.push(target);
            }
        }
    }
    found
}

/// The target a command's words name, if they name one: `[-p PKG] FLAG NAME`, in either order.
fn target_of(words: &[&str], kind: &'static str, flag: &str) -> Option<Target> {
    let after = |option: &str| {
        let at = words.iter().position(|w| *w == option)?;
        let value: String = words
            .get(at + 1)?
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
            .collect();
        Some(value)
    };
    let name =
        after(flag).filter(|n| !n.is_empty() && !n.chars().any(|c| c.is_ascii_uppercase()))?;
    let package = after("-p").unwrap_or_else(|| TOP_PACKAGE.to_owned());
    Some((package, kind, name))
}

#[test]
fn every_cargo_command_in_the_docs_names_a_target_cargo_knows() {
    let targets = targets();
    let mut checked = 0;
    for page in pages() {
        for target in commands(&read(&page)) {
            let (package, kind, name) = &target;
            assert!(
                targets.contains(&target),
                "{page}: no {kind} target named {name:?} in package {package}"
            );
            checked += 1;
        }
    }
    assert!(checked >= 10, "only {checked} commands found");
}

/// The words of a page that name a repository path: those whose first part is one of the
/// repository's top-level folders (`src/…`, `benches/…`), in code spans and code blocks.
/// Placeholders (`<target>`, `…`) and build output are left out.
fn repository_paths(text: &str) -> Vec<String> {
    let folders: BTreeSet<String> = std::fs::read_dir(repo())
        .unwrap()
        .map(|entry| entry.unwrap())
        .filter(|entry| entry.path().is_dir())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name != "target" && name != ".git")
        .collect();
    let page = Page::parse(text);
    let spans = page.prose.iter().flat_map(|line| code_spans(line));
    let block_lines = page.blocks.into_iter().flat_map(|block| block.lines);
    let words: Vec<String> = spans
        .chain(block_lines)
        .flat_map(|text| {
            let words: Vec<String> = text.split_whitespace().map(str::to_owned).collect();
            words
        })
        .collect();
    words
        .into_iter()
        .map(|word| {
            word.trim_matches(|c: char| "()[],.;:'\"`".contains(c))
                .to_owned()
        })
        .filter(|word| !word.contains(['<', '…', '*', '{', '$', '=']))
        .filter(|word| {
            word.split_once('/')
                .is_some_and(|(first, _)| folders.contains(first))
        })
        .collect()
}

#[test]
fn every_repository_path_the_docs_name_exists() {
    let mut checked = 0;
    for page in pages() {
        for path in repository_paths(&read(&page)) {
            assert!(repo().join(&path).exists(), "{page}: {path} does not exist");
            checked += 1;
        }
    }
    assert!(checked >= 30, "only {checked} paths found");
}

#[test]
fn every_link_between_the_docs_lands_on_a_file_and_a_heading() {
    let mut checked = 0;
    for page in pages() {
        let prose = Page::parse(&read(&page)).prose.join("\n");
        for target in link_targets(&prose) {
            let Some((file, anchor)) = resolve(&page, &target) else {
                continue;
            };
            // A fresh clone has nothing beside the repository: a link must stay inside it.
            let inside = file.components().next() != Some(std::path::Component::ParentDir);
            assert!(inside, "{page}: {target}: outside the repository");
            assert!(
                repo().join(&file).exists(),
                "{page}: {target}: no such file"
            );
            if let Some(anchor) = anchor.filter(|_| file.extension().is_some_and(|e| e == "md")) {
                let anchors = Page::parse(&read(file.to_str().unwrap())).anchors();
                assert!(
                    anchors.contains(&anchor),
                    "{page}: {target}: no such heading"
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 30, "only {checked} links found");
}

/// Every link to a heading of a page under `docs/` written in a source file under `dir` (the
/// page's path, `#`, the heading's anchor), with the file it is in.
fn anchors_in_code(dir: &Path, found: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            anchors_in_code(&path, found);
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for (at, _) in text.match_indices("docs/") {
            let link: String = text[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || "/._#-".contains(*c))
                .collect();
            // A sentence may end right after the link.
            let link = link.trim_end_matches('.').to_owned();
            if link
                .split_once(".md#")
                .is_some_and(|(_, anchor)| !anchor.is_empty())
            {
                let file = path.strip_prefix(repo()).unwrap_or(&path);
                found.push((file.display().to_string(), link));
            }
        }
    }
}

#[test]
fn every_link_from_the_code_to_a_heading_of_the_docs_lands() {
    let mut found = Vec::new();
    for dir in ["src", "crates", "tests", "benches", "examples"] {
        anchors_in_code(&repo().join(dir), &mut found);
    }
    for (file, link) in found {
        let (page, anchor) = link.split_once('#').unwrap();
        assert!(repo().join(page).exists(), "{file}: {link}: no such page");
        let anchors = Page::parse(&read(page)).anchors();
        assert!(anchors.contains(anchor), "{file}: {link}: no such heading");
    }
}

#[test]
fn the_readme_tests_with_the_command_ci_runs() {
    let readme = Page::parse(&read("README.md"));
    let block = readme
        .blocks
        .iter()
        .find(|block| block.heading == "Test it")
        .expect("the README has a block under \"Test it\"");
    let command = block.lines.first().expect("a command").trim();
    let ci = read(".ci/run");
    assert!(
        ci.lines().any(|line| line.trim() == command),
        ".ci/run does not run the README's test command {command:?}"
    );
}
