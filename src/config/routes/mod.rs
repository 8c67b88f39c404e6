//! The `[defaults]` and `[[routes]]` tables: their keys as written (`keys.rs`), a route's head
//! and policy resolved over what it inherits (`resolve.rs`, `policy.rs`, with the inbox keys in
//! `inbox.rs`), and a route printed back for `--check` (`print.rs`).

pub(in crate::config) mod inbox;
pub(in crate::config) mod keys;
pub(in crate::config) mod policy;
pub(in crate::config) mod print;
pub(in crate::config) mod resolve;

#[cfg(test)]
mod inbox_tests;
