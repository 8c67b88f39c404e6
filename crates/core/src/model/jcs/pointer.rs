//! RFC 6901 JSON pointers (`fingerprint_ignore`), and removing what they name from a parsed
//! body before it is written out.

use std::fmt;

use super::tree::Node;

/// An RFC 6901 JSON pointer to a member or array element, such as `/metadata/request_time`.
///
/// A token names a member of an object, or an element of an array when it is an index written
/// without leading zeros; a pointer that names nothing in a body removes nothing from it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct JsonPointer {
    text: String,
    tokens: Vec<String>,
}

/// Why a text is not a JSON pointer a body can be fingerprinted without.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonPointerError {
    /// The empty pointer, which names the whole body.
    #[error(
        "the empty JSON pointer names the whole body, and ignoring all of it would make every \
         body look alike; name a member, such as \"/metadata/request_time\""
    )]
    Empty,
    /// A pointer that does not start with `/`.
    #[error("JSON pointer {0:?} must start with '/', such as \"/metadata/request_time\"")]
    NotRooted(String),
    /// A `~` not followed by `0` or `1`.
    #[error("JSON pointer {0:?}: '~' must be followed by '0' (for '~') or '1' (for '/')")]
    BadEscape(String),
}

impl JsonPointer {
    /// Parses RFC 6901 syntax (`~0` is `~`, `~1` is `/`). The empty pointer, which names the
    /// whole body, is refused: ignoring it would fingerprint every body alike.
    pub fn parse(text: &str) -> Result<Self, JsonPointerError> {
        if text.is_empty() {
            return Err(JsonPointerError::Empty);
        }
        let Some(rest) = text.strip_prefix('/') else {
            return Err(JsonPointerError::NotRooted(text.to_owned()));
        };
        let tokens = rest
            .split('/')
            .map(|token| unescape_token(token, text))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            text: text.to_owned(),
            tokens,
        })
    }

    /// The pointer as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

/// RFC 6901's unescaping, in its order: `~1` to `/` first, then `~0` to `~`, so `~01` is `~1`.
fn unescape_token(token: &str, pointer: &str) -> Result<String, JsonPointerError> {
    if token
        .split('~')
        .skip(1)
        .any(|after| !after.starts_with(['0', '1']))
    {
        return Err(JsonPointerError::BadEscape(pointer.to_owned()));
    }
    Ok(token.replace("~1", "/").replace("~0", "~"))
}

impl fmt::Display for JsonPointer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Removes from `document` what the pointers name, each resolved against the document as it was
/// sent.
pub(super) fn remove(document: &mut Node<'_>, pointers: &[JsonPointer]) {
    if !pointers.is_empty() {
        let paths: Vec<&[String]> = pointers.iter().map(|p| p.tokens.as_slice()).collect();
        remove_paths(document, &paths);
    }
}

fn remove_paths(node: &mut Node<'_>, paths: &[&[String]]) {
    match node {
        Node::Object(members) => {
            members.retain_mut(|(name, child)| keep(child, paths, |token| token == name.as_ref()));
        }
        Node::Array(elements) => {
            // `retain_mut` visits the elements in order, so this counts their original indices.
            let mut index = 0;
            elements.retain_mut(|child| {
                let this = index;
                index += 1;
                keep(child, paths, |token| array_index(token) == Some(this))
            });
        }
        Node::Scalar(_) | Node::String(_) => {}
    }
}

/// Whether a member or element stays; when it does, what deeper pointers name is removed from it.
fn keep(child: &mut Node<'_>, paths: &[&[String]], names_child: impl Fn(&str) -> bool) -> bool {
    let mut deeper = Vec::new();
    for (first, rest) in paths.iter().filter_map(|path| path.split_first()) {
        if names_child(first) {
            if rest.is_empty() {
                return false;
            }
            deeper.push(rest);
        }
    }
    if !deeper.is_empty() {
        remove_paths(child, &deeper);
    }
    true
}

/// RFC 6901 array indices: `0`, or digits without a leading zero.
fn array_index(token: &str) -> Option<usize> {
    let digits = !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit());
    let leading_zero = token.len() > 1 && token.starts_with('0');
    (digits && !leading_zero).then(|| token.parse().ok())?
}
