//! RFC 8785 JSON canonicalization (JCS), so that a fingerprint sees what a JSON body says rather
//! than how the client spelled it.
//!
//! A route with `fingerprint_body = "json"` hashes [`canonicalize`]'s output instead of the
//! body's bytes. A retry whose JSON was rebuilt with another member order, other whitespace,
//! other string escapes or another spelling of the same number (`1`, `1.0`, `1e0`) is then the
//! same request. The canonical form is RFC 8785's: members sorted by the UTF-16 code units of
//! their names, no insignificant whitespace, numbers as ECMAScript prints them, strings with the
//! fewest escapes.
//!
//! The members and elements named by the route's `fingerprint_ignore` ([`JsonPointer`], RFC 6901)
//! are removed first, so that a field a client rewrites on every attempt (a send time, a trace
//! id) does not turn a retry into another request. Every pointer names a place in the body as
//! the client sent it: all of them are resolved before anything is removed, so `/items/0` and
//! `/items/1` together remove the first two elements, in whichever order they are listed.
//!
//! RFC 8785 is defined over I-JSON (RFC 7493). A body that is not I-JSON has no canonical form:
//! [`canonicalize`] answers `None` and the caller fingerprints the body's bytes, which can only
//! tell two bodies apart, never merge two different ones. A body is refused ([`NotIJson`]) when
//! it is not UTF-8 JSON text; when an object names a member twice (`serde_json` would keep the
//! last one, another parser the first: the two readers would see different requests); when a
//! string escapes a lone surrogate, which has no UTF-8 form; when a number is beyond a double's
//! range; when an integer written without fraction or exponent is one a double cannot hold, such
//! as `9007199254740993`, which RFC 8785 would round to `9007199254740992` so that two account
//! numbers differing in their last digits would fingerprint alike (a number written with a
//! fraction or an exponent was floating point when it was written, and rounds to the nearest
//! double as RFC 8785 says); and when arrays and objects nest deeper than `serde_json` (and so
//! the rest of the proxy) reads them, a limit that also bounds this parser's recursion.
//!
//! The work is split by what it knows about: `parser.rs` reads RFC 8259 text into the tree of
//! `tree.rs`, its members already sorted, refusing what `refusal.rs` lists; `numbers.rs` writes
//! a number literal as ECMAScript would; `pointer.rs` parses RFC 6901 pointers and removes what
//! they name; and `write.rs` writes the tree in canonical form. The tree costs about 32 bytes
//! per value, its strings borrowed from the body unless they hold escapes.

mod numbers;
mod parser;
mod pointer;
mod refusal;
mod tree;
mod write;

pub use pointer::{JsonPointer, JsonPointerError};
pub use refusal::{NotIJson, MAX_DEPTH};

use parser::Parser;

/// The RFC 8785 form of `body` with the members `ignore` names left out, or `None` when the body
/// is not I-JSON (see the module documentation), in which case its bytes are what counts.
pub fn canonicalize(body: &[u8], ignore: &[JsonPointer]) -> Option<Vec<u8>> {
    try_canonicalize(body, ignore).ok()
}

/// [`canonicalize`], saying why a body has no canonical form.
pub fn try_canonicalize(body: &[u8], ignore: &[JsonPointer]) -> Result<Vec<u8>, NotIJson> {
    let text = std::str::from_utf8(body).map_err(|_| NotIJson::Syntax)?;
    let mut document = Parser::new(text).document()?;
    pointer::remove(&mut document, ignore);
    let mut canonical = Vec::with_capacity(body.len());
    write::value(&document, &mut canonical);
    Ok(canonical)
}
