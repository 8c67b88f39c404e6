//! The parsed body the canonical form is written from.

use std::borrow::Cow;

/// A parsed value, its strings borrowed from the body when they hold no escapes, its members
/// already sorted.
pub(super) enum Node<'a> {
    /// `null`, `true`, `false` or a number, already as the canonical form writes it.
    Scalar(Cow<'a, str>),
    String(Cow<'a, str>),
    Array(Vec<Node<'a>>),
    Object(Vec<(Cow<'a, str>, Node<'a>)>),
}
