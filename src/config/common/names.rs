//! The names the tables of one array (`[[outboxes]]`, `[[consumers]]`) have taken, so a second
//! table with a name already used is refused at its `name` key, naming the line of the first.

use std::collections::HashMap;

use toml::Spanned;

use crate::config::common::error::ConfigError;
use crate::config::common::source::Source;

/// Each name taken so far, with the line of the table that took it.
pub(in crate::config) struct TakenNames {
    /// What the tables are called in a refusal: "outbox", "consumer".
    what: &'static str,
    lines: HashMap<String, usize>,
}

impl TakenNames {
    pub(in crate::config) fn new(what: &'static str) -> Self {
        Self {
            what,
            lines: HashMap::new(),
        }
    }

    /// Takes `name` for the table starting at byte `table_start`, whose `name` key is `given`;
    /// a name already taken is refused there.
    pub(in crate::config) fn take(
        &mut self,
        src: &Source,
        given: Option<&Spanned<String>>,
        name: &str,
        table_start: usize,
    ) -> Result<(), ConfigError> {
        if let Some(line) = self.lines.get(name) {
            let given = given.expect("a resolved table has a name");
            let reason = format!("{} name {name:?} is already used on line {line}", self.what);
            return Err(src.bad(given, "name", reason));
        }
        self.lines.insert(name.to_owned(), src.line(table_start));
        Ok(())
    }
}
