//! Writing the parsed tree in RFC 8785 form: no insignificant whitespace, members in the order
//! the parser sorted them, strings with the fewest escapes.

use super::tree::Node;

/// Appends `node` in canonical form to `out`.
pub(super) fn value(node: &Node<'_>, out: &mut Vec<u8>) {
    match node {
        Node::Scalar(text) => out.extend_from_slice(text.as_bytes()),
        Node::String(text) => write_string(text, out),
        Node::Array(elements) => {
            out.push(b'[');
            for element in elements {
                value(element, out);
                out.push(b',');
            }
            close(out, b']');
        }
        Node::Object(members) => {
            out.push(b'{');
            for (name, member) in members {
                write_string(name, out);
                out.push(b':');
                value(member, out);
                out.push(b',');
            }
            close(out, b'}');
        }
    }
}

/// Closes an array or object written with a comma after every element: no value ends in a
/// comma, so a comma last is the one after the last element.
fn close(out: &mut Vec<u8>, bracket: u8) {
    if out.last() == Some(&b',') {
        out.pop();
    }
    out.push(bracket);
}

/// A string with RFC 8785's escapes: `"`, `\`, and the control characters, the five with short
/// forms by them and the others as lowercase `\u00xx`; everything else as its UTF-8 bytes.
fn write_string(text: &str, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = text.as_bytes();
    out.push(b'"');
    let mut run = 0;
    for (i, &byte) in bytes.iter().enumerate() {
        if byte >= 0x20 && byte != b'"' && byte != b'\\' {
            continue;
        }
        out.extend_from_slice(&bytes[run..i]);
        run = i + 1;
        match byte {
            b'"' | b'\\' => out.extend_from_slice(&[b'\\', byte]),
            b'\x08' => out.extend_from_slice(b"\\b"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\x0c' => out.extend_from_slice(b"\\f"),
            b'\r' => out.extend_from_slice(b"\\r"),
            _ => {
                let (high, low) = (HEX[usize::from(byte >> 4)], HEX[usize::from(byte & 0xf)]);
                out.extend_from_slice(&[b'\\', b'u', b'0', b'0', high, low]);
            }
        }
    }
    out.extend_from_slice(&bytes[run..]);
    out.push(b'"');
}
