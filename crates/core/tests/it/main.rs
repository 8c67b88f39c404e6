//! The core's integration tests, one binary for all of them: the layer in process, RFC 8785
//! canonicalization, the store suite over the memory store and its decorators, the README's
//! axum example, the fuzz corpora, and the public API held to its list.

mod example;
mod fuzz_corpus;
mod jcs;
mod layer;
mod public_api;
mod suite;
