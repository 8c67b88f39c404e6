//! The layout keeps its promises: no file of `src/` reaches, through its imports, back to
//! itself, and the stores never reach up into the idempotency layer.
//!
//! Every `use` (re-exports included) and every `crate::`/`super::`/`self::` path is an edge
//! from the file it is written in to the file of the module it names; `#[cfg(test)]` code is
//! left out, as tests may look at anything. A cycle is reported with the files on it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path, `[]` for the crate root.
type ModPath = Vec<String>;

struct Crate {
    /// Every module that is a file of its own, with its file and its code without tests.
    files: BTreeMap<ModPath, (PathBuf, String)>,
}

impl Crate {
    fn read(src: &Path) -> Self {
        let mut files = BTreeMap::new();
        let root = std::fs::read_to_string(src.join("lib.rs")).unwrap();
        files.insert(vec![], (src.join("lib.rs"), without_tests(&root)));
        let mut pending = vec![(vec![], src.to_path_buf(), root)];
        while let Some((path, dir, code)) = pending.pop() {
            for name in declared_modules(&code) {
                let (file, child_dir) = module_file(&dir, &name);
                let text = std::fs::read_to_string(&file).unwrap();
                let mut child = path.clone();
                child.push(name);
                files.insert(child.clone(), (file, without_tests(&text)));
                pending.push((child, child_dir, without_tests(&text)));
            }
        }
        Self { files }
    }

    /// The deepest file module that `path`, written in module `from`, names.
    fn resolve(&self, from: &ModPath, path: &[&str]) -> Option<ModPath> {
        let (mut at, rest) = match path.first().copied()? {
            "crate" => (vec![], &path[1..]),
            "self" => (from.clone(), &path[1..]),
            "super" => {
                let ups = path.iter().take_while(|s| **s == "super").count();
                let at = from[..from.len().checked_sub(ups)?].to_vec();
                (at, &path[ups..])
            }
            first => {
                // A plain path starts at a child module, or it names another crate.
                let mut child = from.clone();
                child.push(first.to_owned());
                if !self.files.contains_key(&child) {
                    return None;
                }
                (from.clone(), path)
            }
        };
        // An inline module (`mod x { ... }`) lives in its parent's file.
        while !self.files.contains_key(&at) {
            at.pop()?;
        }
        for segment in rest {
            let mut next = at.clone();
            next.push((*segment).to_owned());
            if !self.files.contains_key(&next) {
                break;
            }
            at = next;
        }
        Some(at)
    }

    /// Every file's edges to the files it imports from.
    fn edges(&self) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
        let mut edges = BTreeMap::new();
        for (module, (_, code)) in &self.files {
            let mut targets = BTreeSet::new();
            for (inline, text) in inline_modules(code) {
                let from: ModPath = module.iter().chain(&inline).cloned().collect();
                for path in paths_in(&text) {
                    let segments: Vec<&str> = path.split("::").collect();
                    targets.extend(self.resolve(&from, &segments));
                }
            }
            targets.remove(module);
            edges.insert(module.clone(), targets);
        }
        edges
    }

    fn name(&self, module: &ModPath) -> String {
        let file = &self.files[module].0;
        let at = file.components().position(|c| c.as_os_str() == "src");
        let shown: PathBuf = file.components().skip(at.unwrap_or(0)).collect();
        shown.display().to_string()
    }
}

/// A file's code split by inline modules: the code outside them, and each one's own code with
/// its module path inside the file.
fn inline_modules(code: &str) -> Vec<(ModPath, String)> {
    let mut pieces = vec![(vec![], String::new())];
    let mut rest = code;
    while let Some(at) = rest.find("mod ") {
        let before = &rest[..at];
        let after = &rest[at + 4..];
        let name: String = after
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let opens = after[name.len()..].trim_start().starts_with('{');
        let starts_item = before
            .chars()
            .last()
            .is_none_or(|c| !c.is_alphanumeric() && c != '_');
        if name.is_empty() || !opens || !starts_item {
            pieces[0].1.push_str(&rest[..at + 4]);
            rest = after;
            continue;
        }
        pieces[0].1.push_str(before);
        let brace = at + 4 + after.find('{').unwrap_or(0);
        let end = brace + matching_brace(&rest[brace..]);
        let inner = &rest[brace + 1..end.saturating_sub(1)];
        for (path, text) in inline_modules(inner) {
            let full = std::iter::once(name.clone()).chain(path).collect();
            pieces.push((full, text));
        }
        rest = &rest[end..];
    }
    pieces[0].1.push_str(rest);
    pieces
}

/// `mod name;` declarations that are not test-only.
fn declared_modules(code: &str) -> Vec<String> {
    let mut names = Vec::new();
    for line in code.lines().map(str::trim) {
        let line = line.strip_prefix("pub(crate) ").unwrap_or(line);
        let line = line.strip_prefix("pub ").unwrap_or(line);
        if let Some(name) = line.strip_prefix("mod ").and_then(|l| l.strip_suffix(';')) {
            names.push(name.trim().to_owned());
        }
    }
    names
}

fn module_file(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let flat = dir.join(format!("{name}.rs"));
    if flat.exists() {
        return (flat, dir.join(name));
    }
    (dir.join(name).join("mod.rs"), dir.join(name))
}

/// The code without comments, with string and character literals emptied, so that neither a
/// doc link nor a URL reads as an import.
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        match (chars[i], chars.get(i + 1).copied()) {
            ('/', Some('/')) => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            ('/', Some('*')) => {
                while i + 1 < chars.len() && !(chars[i] == '*' && chars[i + 1] == '/') {
                    i += 1;
                }
                i += 2;
            }
            ('"', _) => i = skip_string(&chars, i, 0),
            ('r', Some('"' | '#')) if !is_ident(chars.get(i.wrapping_sub(1))) => {
                let hashes = chars[i + 1..].iter().take_while(|c| **c == '#').count();
                i = skip_string(&chars, i + 1 + hashes, hashes);
            }
            ('\'', Some('\\')) => {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            }
            ('\'', _) if chars.get(i + 2) == Some(&'\'') => i += 3,
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

fn is_ident(c: Option<&char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric() || *c == '_')
}

/// The index just past the string literal whose opening quote is at `start`, closed by a
/// quote and `hashes` `#` (raw strings take no escapes).
fn skip_string(chars: &[char], start: usize, hashes: usize) -> usize {
    let mut i = start + 1;
    while i < chars.len() {
        if hashes == 0 && chars[i] == '\\' {
            i += 2;
            continue;
        }
        if chars[i] == '"' && chars[i + 1..].iter().take(hashes).all(|c| *c == '#') {
            return i + 1 + hashes;
        }
        i += 1;
    }
    i
}

/// The code with every `#[cfg(test)]` item removed (a `mod x { ... }` block or a `mod x;`),
/// and without comments and literals.
fn without_tests(code: &str) -> String {
    let code = code_only(code);
    let mut out = String::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let item = &rest[at..];
        let end = match (item.find(';'), item.find('{')) {
            (Some(semi), Some(brace)) if semi < brace => semi + 1,
            (_, Some(brace)) => brace + matching_brace(&item[brace..]),
            (Some(semi), None) => semi + 1,
            (None, None) => item.len(),
        };
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// The length up to and including the brace that closes the one `code` starts with.
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

/// Every path a file names: expanded `use` trees, and `crate::`/`super::`/`self::` paths.
fn paths_in(code: &str) -> Vec<String> {
    let mut paths = Vec::new();
    let mut rest = code;
    while let Some(at) = find_use(rest) {
        let tree = &rest[at..];
        let end = tree.find(';').unwrap_or(tree.len());
        expand_tree("", &tree[4..end], &mut paths);
        rest = &tree[end..];
    }
    let words: Vec<&str> = code
        .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
        .collect();
    for word in words {
        let word = word.trim_end_matches(':');
        let qualified = ["crate::", "super::", "self::"]
            .iter()
            .any(|p| word.starts_with(p));
        // `crate::{a, b}` leaves `crate` alone here: its tree was expanded above.
        if qualified {
            paths.push(word.to_owned());
        }
    }
    paths
}

/// Where the next `use ` item starts (at the start of a line, maybe after `pub ...`).
fn find_use(code: &str) -> Option<usize> {
    let mut offset = 0;
    for line in code.split_inclusive('\n') {
        let trimmed = line.trim_start();
        let item = trimmed
            .strip_prefix("pub(crate) ")
            .or_else(|| trimmed.strip_prefix("pub(super) "))
            .or_else(|| trimmed.strip_prefix("pub "))
            .unwrap_or(trimmed);
        if item.starts_with("use ") {
            return Some(offset + (line.len() - item.len()));
        }
        offset += line.len();
    }
    None
}

/// Expands a use tree such as `a::{b, c::{d, e as f}}` into `a::b`, `a::c::d`, `a::c::e`.
fn expand_tree(prefix: &str, tree: &str, out: &mut Vec<String>) {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let item = tree.split(" as ").next().unwrap_or(tree).trim();
        let item = item.trim_end_matches("::*");
        if !item.is_empty() {
            out.push(format!("{prefix}{item}").replace("::self", ""));
        }
        return;
    };
    let head = format!("{prefix}{}", &tree[..open]);
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                expand_tree(&head, &inner[start..i], out);
                start = i + 1;
            }
            _ => {}
        }
    }
    expand_tree(&head, &inner[start..], out);
}

/// Strongly connected components of more than one file (Tarjan's algorithm, iterative enough
/// for a crate of this size).
fn cycles(edges: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<Vec<ModPath>> {
    struct State<'a> {
        edges: &'a BTreeMap<ModPath, BTreeSet<ModPath>>,
        index: BTreeMap<&'a ModPath, usize>,
        low: BTreeMap<&'a ModPath, usize>,
        stack: Vec<&'a ModPath>,
        found: Vec<Vec<ModPath>>,
    }
    fn visit<'a>(s: &mut State<'a>, node: &'a ModPath) {
        let n = s.index.len();
        s.index.insert(node, n);
        s.low.insert(node, n);
        s.stack.push(node);
        for next in s.edges.get(node).into_iter().flatten() {
            if !s.index.contains_key(next) {
                visit(s, next);
                let low = s.low[node].min(s.low[next]);
                s.low.insert(node, low);
            } else if s.stack.contains(&next) {
                let low = s.low[node].min(s.index[next]);
                s.low.insert(node, low);
            }
        }
        if s.low[node] == s.index[node] {
            let mut component = Vec::new();
            while let Some(top) = s.stack.pop() {
                component.push(top.clone());
                if top == node {
                    break;
                }
            }
            if component.len() > 1 {
                s.found.push(component);
            }
        }
    }
    let mut state = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for node in edges.keys() {
        if !state.index.contains_key(node) {
            visit(&mut state, node);
        }
    }
    state.found
}

fn the_crate() -> Crate {
    Crate::read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

#[test]
fn no_file_imports_its_way_back_to_itself() {
    let krate = the_crate();
    let found = cycles(&krate.edges());
    let shown: Vec<String> = found
        .iter()
        .map(|cycle| {
            let names: Vec<String> = cycle.iter().map(|m| krate.name(m)).collect();
            names.join(" <-> ")
        })
        .collect();
    assert!(shown.is_empty(), "import cycles:\n{}", shown.join("\n"));
}

#[test]
fn the_stores_never_reach_up_into_the_layer() {
    let krate = the_crate();
    let edges = krate.edges();
    let up: Vec<String> = edges
        .iter()
        .filter(|(from, _)| from.first().is_some_and(|m| m == "store"))
        .flat_map(|(from, targets)| targets.iter().map(move |to| (from, to)))
        .filter(|(_, to)| to.first().is_some_and(|m| m == "idempotency"))
        .map(|(from, to)| format!("{} -> {}", krate.name(from), krate.name(to)))
        .collect();
    assert!(up.is_empty(), "{}", up.join("\n"));
}

#[test]
fn the_reader_sees_every_module_and_its_imports() {
    // The checks above are only as good as this reading: it must find the layout's files and
    // the edges it is known to have.
    let krate = the_crate();
    let store_api = vec!["store".to_owned(), "api".to_owned()];
    let memory = vec!["store".to_owned(), "memory".to_owned()];
    assert!(krate.files.contains_key(&store_api));
    let edges = krate.edges();
    assert!(edges[&memory].contains(&store_api), "{:?}", edges[&memory]);
    let mut paths = Vec::new();
    expand_tree("", "super::{a, b::{c, d as e}, f::*}", &mut paths);
    assert_eq!(
        paths,
        ["super::a", "super::b::c", "super::b::d", "super::f"]
    );
    let edges = BTreeMap::from([
        (vec!["a".to_owned()], BTreeSet::from([vec!["b".to_owned()]])),
        (vec!["b".to_owned()], BTreeSet::from([vec!["a".to_owned()]])),
    ]);
    assert_eq!(cycles(&edges).len(), 1, "a known cycle is found");
}
