//! What has no canonical form: the ways a body can fail to be I-JSON, and how deep it may nest.

use std::fmt;

/// How deep arrays and objects may nest: as deep as `serde_json` reads them (its recursion
/// limit of 128 lets 127 levels through).
pub const MAX_DEPTH: usize = 127;

/// Why a body has no RFC 8785 form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotIJson {
    /// Not UTF-8, or not JSON text (RFC 8259).
    Syntax,
    /// Arrays and objects nested deeper than [`MAX_DEPTH`].
    TooDeep,
    /// An object with the same member name twice.
    DuplicateName,
    /// A `\u` escape of a surrogate that is not half of a pair.
    LoneSurrogate,
    /// A number too large for a double.
    NumberOutOfRange,
    /// An integer, written without fraction or exponent, that a double cannot hold exactly.
    InexactInteger,
}

impl fmt::Display for NotIJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Syntax => "not UTF-8 JSON text",
            Self::TooDeep => "arrays and objects nested deeper than 127",
            Self::DuplicateName => "an object names the same member twice",
            Self::LoneSurrogate => "a string escapes a lone UTF-16 surrogate",
            Self::NumberOutOfRange => "a number beyond the range of a double",
            Self::InexactInteger => "an integer that a double cannot hold exactly",
        })
    }
}

impl std::error::Error for NotIJson {}
