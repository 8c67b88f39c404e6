//! A recursive-descent RFC 8259 parser into the tree that is written out canonically, refusing
//! what is JSON but not I-JSON as it reads.

use std::borrow::Cow;
use std::cmp::Ordering;

use super::numbers::canonical_number;
use super::refusal::{NotIJson, MAX_DEPTH};
use super::tree::Node;

/// A recursive-descent RFC 8259 parser. `serde_json` is not used because it forgets what
/// RFC 8785 needs: it keeps the last of duplicate members, and hands over numbers as doubles
/// without the literal, so an integer it rounded cannot be told from one it did not.
pub(super) struct Parser<'a> {
    text: &'a str,
    pos: usize,
    depth: usize,
}

impl<'a> Parser<'a> {
    pub(super) fn new(text: &'a str) -> Self {
        Self {
            text,
            pos: 0,
            depth: 0,
        }
    }

    pub(super) fn document(mut self) -> Result<Node<'a>, NotIJson> {
        let node = self.value()?;
        self.skip_whitespace();
        (self.pos == self.text.len())
            .then_some(node)
            .ok_or(NotIJson::Syntax)
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    /// Steps over `byte` if it is next.
    fn eat(&mut self, byte: u8) -> bool {
        let next = self.peek() == Some(byte);
        self.pos += usize::from(next);
        next
    }

    /// Steps over whitespace and then `byte`, which must be there.
    fn expect(&mut self, byte: u8) -> Result<(), NotIJson> {
        self.skip_whitespace();
        self.eat(byte).then_some(()).ok_or(NotIJson::Syntax)
    }

    fn skip_whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn value(&mut self) -> Result<Node<'a>, NotIJson> {
        self.skip_whitespace();
        match self.peek().ok_or(NotIJson::Syntax)? {
            b'{' => self.object(),
            b'[' => self.array(),
            b'"' => self.string().map(Node::String),
            b't' => self.literal("true"),
            b'f' => self.literal("false"),
            b'n' => self.literal("null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => Err(NotIJson::Syntax),
        }
    }

    fn literal(&mut self, word: &'static str) -> Result<Node<'a>, NotIJson> {
        let found = self.text[self.pos..].starts_with(word);
        self.pos += word.len();
        let scalar = Node::Scalar(Cow::Borrowed(word));
        found.then_some(scalar).ok_or(NotIJson::Syntax)
    }

    /// Steps into an array or object, the cursor on its opening bracket.
    fn enter(&mut self) -> Result<(), NotIJson> {
        if self.depth == MAX_DEPTH {
            return Err(NotIJson::TooDeep);
        }
        self.depth += 1;
        self.pos += 1;
        self.skip_whitespace();
        Ok(())
    }

    /// After an element or member: true past a `,`, false past the closing bracket.
    fn more(&mut self, close: u8) -> Result<bool, NotIJson> {
        self.skip_whitespace();
        if self.eat(b',') {
            return Ok(true);
        }
        self.eat(close).then_some(false).ok_or(NotIJson::Syntax)
    }

    fn array(&mut self) -> Result<Node<'a>, NotIJson> {
        self.enter()?;
        let mut elements = Vec::new();
        if !self.eat(b']') {
            loop {
                elements.push(self.value()?);
                if !self.more(b']')? {
                    break;
                }
            }
        }
        self.depth -= 1;
        Ok(Node::Array(elements))
    }

    fn object(&mut self) -> Result<Node<'a>, NotIJson> {
        self.enter()?;
        let mut members = Vec::new();
        if !self.eat(b'}') {
            loop {
                let name = self.string()?;
                self.expect(b':')?;
                members.push((name, self.value()?));
                if !self.more(b'}')? {
                    break;
                }
            }
        }
        self.depth -= 1;
        members.sort_unstable_by(|a, b| utf16_order(&a.0, &b.0));
        if members.windows(2).any(|pair| pair[0].0 == pair[1].0) {
            return Err(NotIJson::DuplicateName);
        }
        Ok(Node::Object(members))
    }

    /// A string, borrowed from the body unless it has escapes.
    fn string(&mut self) -> Result<Cow<'a, str>, NotIJson> {
        self.expect(b'"')?;
        let mut unescaped: Option<String> = None;
        loop {
            let run = self.pos;
            while matches!(self.peek(), Some(byte) if byte >= 0x20 && byte != b'"' && byte != b'\\')
            {
                self.pos += 1;
            }
            // The run stops on an ASCII byte or at the end, so it ends on a char boundary.
            let piece = &self.text[run..self.pos];
            if self.eat(b'"') {
                return Ok(match unescaped {
                    None => Cow::Borrowed(piece),
                    Some(text) => Cow::Owned(text + piece),
                });
            }
            if !self.eat(b'\\') {
                return Err(NotIJson::Syntax);
            }
            let escaped = self.escape()?;
            let text = unescaped.get_or_insert_with(String::new);
            text.push_str(piece);
            text.push(escaped);
        }
    }

    /// The character an escape stands for, the cursor just past its backslash.
    fn escape(&mut self) -> Result<char, NotIJson> {
        let byte = self.peek().ok_or(NotIJson::Syntax)?;
        self.pos += 1;
        Ok(match byte {
            b'"' | b'\\' | b'/' => char::from(byte),
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => return self.unicode_escape(),
            _ => return Err(NotIJson::Syntax),
        })
    }

    /// A `\u` escape, or a surrogate pair of them, the cursor just past the first `u`.
    fn unicode_escape(&mut self) -> Result<char, NotIJson> {
        let unit = u32::from(self.hex4()?);
        let code = match unit {
            0xD800..=0xDBFF => {
                if !self.text[self.pos..].starts_with("\\u") {
                    return Err(NotIJson::LoneSurrogate);
                }
                self.pos += 2;
                let low = u32::from(self.hex4()?);
                if !(0xDC00..=0xDFFF).contains(&low) {
                    return Err(NotIJson::LoneSurrogate);
                }
                0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)
            }
            0xDC00..=0xDFFF => return Err(NotIJson::LoneSurrogate),
            _ => unit,
        };
        char::from_u32(code).ok_or(NotIJson::LoneSurrogate)
    }

    fn hex4(&mut self) -> Result<u16, NotIJson> {
        let digits = self.text.get(self.pos..self.pos + 4);
        // `from_str_radix` alone would take a leading `+`.
        let digits = digits
            .filter(|d| d.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or(NotIJson::Syntax)?;
        self.pos += 4;
        u16::from_str_radix(digits, 16).map_err(|_| NotIJson::Syntax)
    }

    fn number(&mut self) -> Result<Node<'a>, NotIJson> {
        let start = self.pos;
        self.eat(b'-');
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => self.skip_digits(),
            _ => return Err(NotIJson::Syntax),
        }
        let integer = !matches!(self.peek(), Some(b'.' | b'e' | b'E'));
        if self.eat(b'.') {
            self.required_digits()?;
        }
        if self.eat(b'e') || self.eat(b'E') {
            let _sign = self.eat(b'+') || self.eat(b'-');
            self.required_digits()?;
        }
        canonical_number(&self.text[start..self.pos], integer).map(Node::Scalar)
    }

    fn skip_digits(&mut self) {
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.pos += 1;
        }
    }

    fn required_digits(&mut self) -> Result<(), NotIJson> {
        let start = self.pos;
        self.skip_digits();
        (self.pos > start).then_some(()).ok_or(NotIJson::Syntax)
    }
}

/// RFC 8785 orders member names by their UTF-16 code units, which is not the order of their
/// UTF-8 bytes: U+E000..U+FFFF sort after the surrogates that encode U+10000 and above.
fn utf16_order(a: &str, b: &str) -> Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}
