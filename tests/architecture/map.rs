//! ARCHITECTURE.md's tables point at code that is there. Every path in a table's code spans is
//! a file or folder of the repository, and every name in parentheses right after a path
//! (`flow.rs` (`existing`)), and every `Type::method`, is defined in that path (for a
//! `Type::method` outside parentheses, the path before it in its cell): a function as `fn name`,
//! a type as `struct`, `enum`, `trait` or `type`, a method as an `fn` inside an `impl` block
//! that names its type. Short paths resolve as the document's own sentence says they do.

use std::path::{Path, PathBuf};

use crate::common::markdown::{read, repo, Page};
use crate::matching_brace;

/// How the document's short paths resolve, read from its sentence "Paths under `a/` and `b/`
/// are in `c/`; a file named alone is in the folder of the path before it in its cell, ... or
/// in `c/` when none comes before it": the prefixes, and the folder they are in.
struct ShortPaths {
    prefixes: Vec<String>,
    folder: PathBuf,
}

impl ShortPaths {
    fn of(doc: &str) -> Self {
        let line = doc
            .lines()
            .find(|line| line.starts_with("Paths under "))
            .expect("ARCHITECTURE.md says where its short paths are (\"Paths under ...\")");
        let (under, folder) = line
            .split_once(" are in ")
            .expect("\"... are in `folder`\"");
        let folder = spans(folder)
            .into_iter()
            .next()
            .expect("the folder, in a span");
        Self {
            prefixes: spans(under).into_iter().map(|(span, _)| span).collect(),
            folder: PathBuf::from(folder.0),
        }
    }

    /// The repository path `span` names, `folder` being that of the path before it in its cell.
    fn resolve(&self, span: &str, folder: Option<&Path>) -> PathBuf {
        if self.prefixes.iter().any(|p| span.starts_with(p.as_str())) {
            self.folder.join(span)
        } else if span.contains('/') {
            PathBuf::from(span)
        } else {
            folder.unwrap_or(&self.folder).join(span)
        }
    }
}

/// The code spans of `text`, each with the byte offset just past its closing backtick.
fn spans(text: &str) -> Vec<(String, usize)> {
    let ticks: Vec<usize> = text.match_indices('`').map(|(at, _)| at).collect();
    ticks
        .chunks_exact(2)
        .map(|pair| (text[pair[0] + 1..pair[1]].to_owned(), pair[1] + 1))
        .collect()
}

/// Whether a span names a path: a folder (`a/b/`) or a file with an extension, no spaces. A
/// span that starts with `/` is an HTTP path (`/metrics`), never the repository's.
fn is_path(span: &str) -> bool {
    let file = [".rs", ".html", ".toml", ".md", ".json", ".yml"];
    !span.contains([' ', ':'])
        && !span.starts_with('/')
        && (span.contains('/') || file.iter().any(|e| span.ends_with(e)))
}

/// Whether a span names code: `name`, `Type` or `Type::method`.
fn is_code_name(span: &str) -> bool {
    let ident = |s: &str| {
        s.chars()
            .next()
            .is_some_and(|c| c.is_alphabetic() || c == '_')
            && s.chars().all(|c| c.is_alphanumeric() || c == '_')
    };
    match span.split_once("::") {
        Some((ty, method)) => ident(ty) && ident(method),
        None => ident(span),
    }
}

/// Where the parenthesized group right after offset `end` of `cell` ends, if one starts there.
fn group_after(cell: &str, end: usize) -> Option<usize> {
    let rest = &cell[end..];
    let open = rest.len() - rest.trim_start().len();
    if !rest[open..].starts_with('(') {
        return None;
    }
    let mut depth = 0;
    for (i, c) in rest.char_indices().skip(open) {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(end + i);
                }
            }
            _ => {}
        }
    }
    Some(cell.len())
}

/// What the check of a document found: how many paths and names it checked, and what is wrong.
#[derive(Default)]
struct Findings {
    paths: usize,
    names: usize,
    wrong: Vec<String>,
}

impl Findings {
    /// Checks one cell: its paths exist, its names are defined where it says.
    fn cell(&mut self, short: &ShortPaths, root: &Path, cell: &str) {
        let mut last: Option<(PathBuf, Option<usize>)> = None;
        for (span, end) in spans(cell) {
            if is_path(&span) {
                let folder = last.as_ref().map(|(path, _)| folder_of(root, path));
                let path = short.resolve(&span, folder.as_deref());
                self.paths += 1;
                if !root.join(&path).exists() {
                    self.wrong.push(format!("`{span}`: no {}", path.display()));
                }
                last = Some((path, group_after(cell, end)));
                continue;
            }
            let in_group = last
                .as_ref()
                .is_some_and(|(_, group)| group.is_some_and(|close| end <= close));
            if !is_code_name(&span) || !(in_group || span.contains("::")) {
                continue;
            }
            self.names += 1;
            match &last {
                Some((path, _)) if defines(&root.join(path), &span) => {}
                Some((path, _)) => {
                    let path = path.display();
                    self.wrong
                        .push(format!("`{span}` is not defined in {path}"));
                }
                None => self.wrong.push(format!("`{span}`: no path before it")),
            }
        }
    }
}

/// The folder a path's neighbours are in: the folder itself, or a file's.
fn folder_of(root: &Path, path: &Path) -> PathBuf {
    if root.join(path).is_dir() {
        path.to_owned()
    } else {
        path.parent().map(Path::to_owned).unwrap_or_default()
    }
}

/// Checks every table of `doc` against the files under `root`.
fn check(doc: &str, root: &Path) -> Findings {
    let short = ShortPaths::of(doc);
    let mut findings = Findings::default();
    for table in Page::parse(doc).tables() {
        for cell in table.rows.iter().flatten() {
            findings.cell(&short, root, cell);
        }
    }
    findings
}

/// Whether the file at `path`, or a Rust file under the folder at `path`, defines `name`.
fn defines(path: &Path, name: &str) -> bool {
    let mut files = Vec::new();
    if path.is_dir() {
        crate::collect_files(path, &mut files);
    } else {
        files.push(path.to_owned());
    }
    files.iter().any(|file| {
        let code = std::fs::read_to_string(file).unwrap_or_default();
        match name.split_once("::") {
            Some((ty, method)) => impl_defines(&code, ty, method),
            None if name.starts_with(char::is_uppercase) => ["struct", "enum", "trait", "type"]
                .iter()
                .any(|kind| declares(&code, kind, name)),
            None => declares(&code, "fn", name),
        }
    })
}

/// Whether `code` declares `keyword name` (`fn classify`, `enum UpstreamFailure`), the name
/// whole.
fn declares(code: &str, keyword: &str, name: &str) -> bool {
    let declaration = format!("{keyword} {name}");
    code.match_indices(&declaration).any(|(at, _)| {
        let before = code[..at].chars().next_back();
        let after = code[at + declaration.len()..].chars().next();
        before.is_none_or(char::is_whitespace)
            && after.is_none_or(|c| !(c.is_alphanumeric() || c == '_'))
    })
}

/// Whether an `impl` block of `code` whose header names `ty` (`impl Proxy`, `impl Store for
/// MemoryStore`) holds `fn method`.
fn impl_defines(code: &str, ty: &str, method: &str) -> bool {
    code.match_indices("impl").any(|(at, _)| {
        let rest = &code[at..];
        let Some(open) = rest.find('{') else {
            return false;
        };
        let header = &rest[..open];
        let words = header.split(|c: char| !(c.is_alphanumeric() || c == '_'));
        let starts_item = code[..at]
            .chars()
            .next_back()
            .is_none_or(char::is_whitespace);
        starts_item
            && header.starts_with("impl")
            && words.clone().any(|word| word == ty)
            && declares(
                &rest[open..open + matching_brace(&rest[open..])],
                "fn",
                method,
            )
    })
}

#[test]
fn every_file_and_function_the_architecture_tables_name_is_there() {
    let findings = check(&read("ARCHITECTURE.md"), &repo());
    assert!(
        findings.wrong.is_empty(),
        "ARCHITECTURE.md points at what is not there:\n{}",
        findings.wrong.join("\n")
    );
    assert!(findings.paths >= 60, "only {} paths found", findings.paths);
    assert!(findings.names >= 10, "only {} names found", findings.names);
}

#[test]
fn the_map_reader_resolves_short_paths_and_finds_what_is_missing() {
    let doc = "\
| behaviour | where |
|---|---|
| the flow | `idempotency/flow.rs` (`wait_for_first`, `existing`), `waiters.rs` |
| reload | `src/proxy/mod.rs` (`Proxy::reload`), `src/net/server/live.rs` |
| problems | `crates/core/src/error.rs` (`UpstreamFailure`), `problem.rs` (`render_grpc`) |
| a file named alone | `error.rs` (`Problem::grpc_code`) |
| gone | `idempotency/flow.rs` (`in_flight`), `model/nowhere.rs`, `Proxy::vanish` |
| no file before | `Proxy::reload` in `src/proxy/mod.rs` |

Paths under `idempotency/` and `model/` are in `crates/core/src/`; a file named alone is in the folder of the path before it, or in `crates/core/src/`.
";
    let findings = check(doc, &repo());
    assert_eq!(
        findings.wrong,
        [
            "`in_flight` is not defined in crates/core/src/idempotency/flow.rs",
            "`model/nowhere.rs`: no crates/core/src/model/nowhere.rs",
            "`Proxy::vanish` is not defined in crates/core/src/model/nowhere.rs",
            "`Proxy::reload`: no path before it",
        ]
    );
    assert_eq!((findings.paths, findings.names), (10, 9));
}
