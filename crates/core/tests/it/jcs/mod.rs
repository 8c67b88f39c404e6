//! RFC 8785 canonicalization ([`idempotency_core::policy::jcs`]): the RFC's own examples and
//! the reference implementation's test data, the ECMAScript number test sequence, JSON
//! pointers, what is refused, and properties over generated documents, with and without
//! members ignored.

mod ignoring;
mod numbers;
mod pointers;
mod properties;
mod refusals;
mod vectors;

use idempotency_core::policy::{
    jcs::{self, NotIJson},
    JsonPointer,
};

/// The canonical form of `body` as text, with nothing ignored.
fn canon(body: &str) -> Result<String, NotIJson> {
    canon_ignoring(body, &[])
}

fn canon_ignoring(body: &str, ignore: &[&str]) -> Result<String, NotIJson> {
    let pointers: Vec<JsonPointer> = ignore
        .iter()
        .map(|p| JsonPointer::parse(p).expect("test pointers are valid"))
        .collect();
    let canonical = jcs::try_canonicalize(body.as_bytes(), &pointers)?;
    Ok(String::from_utf8(canonical).expect("canonical JSON is UTF-8"))
}
