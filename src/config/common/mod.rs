//! What every subject of the config shares: the text and its positions (`source.rs`), the one
//! line an operator reads when a config is refused (`error.rs`), checks on single values and
//! their units (`values.rs`), the names a table array has taken (`names.rs`), and whether a value came from a flag or the file (`given.rs`).

pub(in crate::config) mod error;
pub(in crate::config) mod given;
pub(in crate::config) mod names;
pub(in crate::config) mod source;
pub(in crate::config) mod values;
