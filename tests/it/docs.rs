//! What the README, ARCHITECTURE.md, SECURITY.md and the pages under `docs/` tell a reader to run or open
//! is there: every `cargo test --test NAME`, `cargo bench --bench NAME` and
//! `cargo run --example NAME` names a target Cargo knows, every repository path they name
//! exists, every link between them lands on a file and a heading, and the README's test command
//! is the one CI runs: a script that installs what the tests need and lets none of them skip.
//! A link in a code comment to an anchor of a page (`docs/reference.md#…`) must land too.
//! The performance page stays short: its older runs go to its history.

use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
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

/// Every Rust source file under `dir`, with its text.
fn rust_files(dir: &Path, found: &mut Vec<(PathBuf, String)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            found.push((path, text));
        }
    }
}

/// The Rust source files of the code and its tests, benches and examples, with their text.
fn code() -> Vec<(PathBuf, String)> {
    let mut found = Vec::new();
    for dir in ["src", "crates", "tests", "benches", "examples"] {
        rust_files(&repo().join(dir), &mut found);
    }
    found
}

/// Every link to a heading of a page under `docs/` written in `text` (the page's path, `#`,
/// the heading's anchor).
fn anchors_in(text: &str) -> Vec<String> {
    let mut found = Vec::new();
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
            found.push(link);
        }
    }
    found
}

#[test]
fn every_link_from_the_code_to_a_heading_of_the_docs_lands() {
    let links = code().into_iter().flat_map(|(path, text)| {
        let file = path.strip_prefix(repo()).unwrap().display().to_string();
        anchors_in(&text)
            .into_iter()
            .map(move |link| (file.clone(), link))
    });
    for (file, link) in links {
        let (page, anchor) = link.split_once('#').unwrap();
        assert!(repo().join(page).exists(), "{file}: {link}: no such page");
        let anchors = Page::parse(&read(page)).anchors();
        assert!(anchors.contains(anchor), "{file}: {link}: no such heading");
    }
}

/// The README's test command: the first line of its block under "Test it".
fn readme_test_command() -> String {
    let readme = Page::parse(&read("README.md"));
    let block = readme
        .blocks
        .iter()
        .find(|block| block.heading == "Test it")
        .expect("the README has a block under \"Test it\"");
    block.lines.first().expect("a command").trim().to_owned()
}

/// The lines of a shell script that run something: neither blank nor comments.
fn script_lines(path: &str) -> Vec<String> {
    read(path)
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_readme_tests_with_the_command_ci_runs_and_ci_tests_nothing_else() {
    let command = readme_test_command();
    let ci = script_lines(".ci/run");
    assert!(
        ci.contains(&command),
        ".ci/run does not run the README's test command {command:?}"
    );
    let others: Vec<&String> = ci
        .iter()
        .filter(|line| line.contains("cargo test") || line.contains("cargo nextest"))
        .collect();
    assert!(
        others.is_empty(),
        ".ci/run runs tests beside the README's command: {others:?}"
    );
}

/// Every `REQUIRE_` variable the code and its tests read (named in a string literal, as
/// `std::env::var` is given it), which turns a missing server or tool from SKIPPED into a
/// failure.
fn require_variables() -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (_, text) in code() {
        for (at, _) in text.match_indices("\"REQUIRE_") {
            let name: String = text[at + 1..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || *c == '_')
                .collect();
            let closed = text[at + 1 + name.len()..].starts_with('"');
            if closed && name.len() > "REQUIRE_".len() {
                found.insert(name);
            }
        }
    }
    found
}

#[test]
fn the_readme_test_command_sets_up_and_requires_everything_the_tests_can_skip() {
    let command = readme_test_command();
    let script = command.strip_prefix("./").unwrap_or(&command);
    assert!(
        repo().join(script).is_file(),
        "the README's test command {command:?} is not a script of the repository"
    );
    let lines = script_lines(script);
    assert!(
        lines.iter().any(|line| line == "source .ci/setup"),
        "{script} does not install what the tests need first (source .ci/setup)"
    );
    let test = lines
        .iter()
        .find(|line| line.contains("cargo test --workspace"))
        .unwrap_or_else(|| panic!("{script} runs no cargo test --workspace"));
    let required = require_variables();
    assert!(required.len() >= 7, "only {required:?}");
    for name in required {
        assert!(
            test.split_whitespace()
                .any(|word| word == format!("{name}=1")),
            "{script} runs the tests without {name}=1, so those tests may say SKIPPED: {test}"
        );
    }
}

/// `docs/performance.md` stays under this many lines: the method, the latest runs and Sizing fit
/// in them; older runs and each change's before and after go to `docs/performance-history.md`.
const PERFORMANCE_PAGE_MAX_LINES: usize = 400;

#[test]
fn the_performance_page_keeps_to_the_latest_runs() {
    let lines = read("docs/performance.md").lines().count();
    assert!(
        lines < PERFORMANCE_PAGE_MAX_LINES,
        "docs/performance.md has {lines} lines, not under {PERFORMANCE_PAGE_MAX_LINES}: move \
         older runs to docs/performance-history.md"
    );
}
