//! Reading the README and the pages under `docs/` as the tests that keep them true need to:
//! tables, code spans, fenced blocks, links and heading anchors, as much of Markdown as those
//! files use.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// The repository's root: the proxy's package.
pub(crate) fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A file of the repository, read whole.
pub(crate) fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The README and every page under `docs/`, as repository paths, in a fixed order.
pub(crate) fn pages() -> Vec<String> {
    let mut pages: Vec<String> = std::fs::read_dir(repo().join("docs"))
        .expect("docs/ is there")
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .map(|path| format!("docs/{}", path.file_name().unwrap().to_string_lossy()))
        .collect();
    pages.sort();
    pages.insert(0, "README.md".to_owned());
    pages
}

/// A fenced code block: its info string (`sh`, `console`, ...), its lines, and the heading it
/// comes under.
#[derive(Debug, Clone)]
pub(crate) struct Block {
    pub(crate) info: String,
    pub(crate) lines: Vec<String>,
    pub(crate) heading: String,
}

/// A page split into its prose (fenced blocks left out, one entry per line) and its blocks.
pub(crate) struct Page {
    pub(crate) prose: Vec<String>,
    pub(crate) blocks: Vec<Block>,
}

impl Page {
    pub(crate) fn parse(text: &str) -> Self {
        let mut page = Page {
            prose: Vec::new(),
            blocks: Vec::new(),
        };
        let mut heading = String::new();
        let mut open: Option<Block> = None;
        for line in text.lines() {
            match (&mut open, line.trim_start().strip_prefix("```")) {
                (Some(_), Some(_)) => page.blocks.push(open.take().unwrap()),
                (Some(block), None) => block.lines.push(line.to_owned()),
                (None, Some(info)) => {
                    open = Some(Block {
                        info: info.trim().to_owned(),
                        lines: Vec::new(),
                        heading: heading.clone(),
                    });
                }
                (None, None) => {
                    if let Some(title) = heading_title(line) {
                        heading = title.to_owned();
                    }
                    page.prose.push(line.to_owned());
                }
            }
        }
        page
    }

    /// The tables of the prose, each with its header row's cells and its rows' cells.
    pub(crate) fn tables(&self) -> Vec<Table> {
        let mut tables = Vec::new();
        let mut lines = self.prose.iter().peekable();
        while let Some(line) = lines.next() {
            let separator = lines.peek().is_some_and(|next| next.starts_with("|---"));
            if !line.starts_with('|') || !separator {
                continue;
            }
            lines.next();
            let mut table = Table {
                header: cells(line),
                rows: Vec::new(),
            };
            while let Some(row) = lines.next_if(|row| row.starts_with('|')) {
                table.rows.push(cells(row));
            }
            tables.push(table);
        }
        tables
    }

    /// The anchors of the page's headings, as GitHub makes them.
    pub(crate) fn anchors(&self) -> HashSet<String> {
        let mut anchors = HashSet::new();
        for title in self.prose.iter().filter_map(|line| heading_title(line)) {
            let slug = slug(title);
            // A heading that repeats one gets the first free `-1`, `-2`, ... suffix.
            let mut anchor = slug.clone();
            for n in 1.. {
                if anchors.insert(anchor.clone()) {
                    break;
                }
                anchor = format!("{slug}-{n}");
            }
        }
        anchors
    }
}

/// A table: the header's cells, and each row's.
pub(crate) struct Table {
    pub(crate) header: Vec<String>,
    pub(crate) rows: Vec<Vec<String>>,
}

impl Table {
    /// Whether the header reads exactly `names`.
    pub(crate) fn is(&self, names: &[&str]) -> bool {
        self.header
            .iter()
            .map(String::as_str)
            .eq(names.iter().copied())
    }
}

/// The cells of a table row, trimmed: split on `|` outside code spans.
fn cells(row: &str) -> Vec<String> {
    let inner = row.trim().trim_start_matches('|').trim_end_matches('|');
    let mut cells = vec![String::new()];
    let mut in_code = false;
    for c in inner.chars() {
        match c {
            '`' => in_code = !in_code,
            '|' if !in_code => {
                cells.push(String::new());
                continue;
            }
            _ => {}
        }
        cells.last_mut().unwrap().push(c);
    }
    cells
        .into_iter()
        .map(|cell| cell.trim().to_owned())
        .collect()
}

/// The code spans of a piece of text, without their backticks.
pub(crate) fn code_spans(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// The targets of the inline links (`[text](target)`) of a piece of text.
pub(crate) fn link_targets(text: &str) -> Vec<String> {
    text.match_indices("](")
        .filter_map(|(at, _)| {
            let rest = &text[at + 2..];
            rest.find(')').map(|end| rest[..end].to_owned())
        })
        .collect()
}

/// The title of a heading line, if the line is one.
fn heading_title(line: &str) -> Option<&str> {
    let title = line.trim_start_matches('#');
    let level = line.len() - title.len();
    ((1..=6).contains(&level) && title.starts_with(' ')).then(|| title.trim())
}

/// A heading's anchor as GitHub makes it: lower case, punctuation other than `-` and `_`
/// dropped, spaces made `-`.
pub(crate) fn slug(title: &str) -> String {
    title
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

/// Resolves a link target written in `page` to a repository path and its anchor, if any.
/// External links (`https://`, `mailto:`) resolve to `None`.
pub(crate) fn resolve(page: &str, target: &str) -> Option<(PathBuf, Option<String>)> {
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (path, anchor) = match target.split_once('#') {
        Some((path, anchor)) => (path, Some(anchor.to_owned())),
        None => (target, None),
    };
    let file = if path.is_empty() {
        PathBuf::from(page)
    } else {
        normalize(&Path::new(page).parent().unwrap().join(path))
    };
    Some((file, anchor))
}

/// `a/../b` as `b`, without touching the file system; a path that climbs out of where it
/// started keeps its leading `..`.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                let climbed = out.components().next_back() == Some(std::path::Component::ParentDir);
                if climbed || !out.pop() {
                    out.push("..");
                }
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}
