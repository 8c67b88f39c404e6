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

use std::borrow::Cow;
use std::cmp::Ordering;
use std::fmt;

/// How deep arrays and objects may nest: as deep as `serde_json` reads them (its recursion
/// limit of 128 lets 127 levels through).
pub const MAX_DEPTH: usize = 127;

/// The RFC 8785 form of `body` with the members `ignore` names left out, or `None` when the body
/// is not I-JSON (see the module documentation), in which case its bytes are what counts.
pub fn canonicalize(body: &[u8], ignore: &[JsonPointer]) -> Option<Vec<u8>> {
    try_canonicalize(body, ignore).ok()
}

/// [`canonicalize`], saying why a body has no canonical form.
pub fn try_canonicalize(body: &[u8], ignore: &[JsonPointer]) -> Result<Vec<u8>, NotIJson> {
    let text = std::str::from_utf8(body).map_err(|_| NotIJson::Syntax)?;
    let mut document = Parser {
        text,
        pos: 0,
        depth: 0,
    }
    .document()?;
    if !ignore.is_empty() {
        let paths: Vec<&[String]> = ignore.iter().map(|p| p.tokens.as_slice()).collect();
        remove(&mut document, &paths);
    }
    let mut canonical = Vec::with_capacity(body.len());
    write_node(&document, &mut canonical);
    Ok(canonical)
}

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

/// An RFC 6901 JSON pointer to a member or array element, such as `/metadata/request_time`.
///
/// A token names a member of an object, or an element of an array when it is an index written
/// without leading zeros; a pointer that names nothing in a body removes nothing from it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct JsonPointer {
    text: String,
    tokens: Vec<String>,
}

impl JsonPointer {
    /// Parses RFC 6901 syntax (`~0` is `~`, `~1` is `/`). The empty pointer, which names the
    /// whole body, is refused: ignoring it would fingerprint every body alike.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.is_empty() {
            return Err(
                "the empty JSON pointer names the whole body, and ignoring all of it \
                        would make every body look alike; name a member, such as \
                        \"/metadata/request_time\""
                    .to_owned(),
            );
        }
        let Some(rest) = text.strip_prefix('/') else {
            return Err(format!(
                "JSON pointer {text:?} must start with '/', such as \"/metadata/request_time\""
            ));
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
fn unescape_token(token: &str, pointer: &str) -> Result<String, String> {
    if token
        .split('~')
        .skip(1)
        .any(|after| !after.starts_with(['0', '1']))
    {
        return Err(format!(
            "JSON pointer {pointer:?}: '~' must be followed by '0' (for '~') or '1' (for '/')"
        ));
    }
    Ok(token.replace("~1", "/").replace("~0", "~"))
}

impl fmt::Display for JsonPointer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A parsed value, its strings borrowed from the body when they hold no escapes, its members
/// already sorted.
enum Node<'a> {
    /// `null`, `true`, `false` or a number, already as the canonical form writes it.
    Scalar(Cow<'a, str>),
    String(Cow<'a, str>),
    Array(Vec<Node<'a>>),
    Object(Vec<(Cow<'a, str>, Node<'a>)>),
}

/// A recursive-descent RFC 8259 parser. `serde_json` is not used because it forgets what
/// RFC 8785 needs: it keeps the last of duplicate members, and hands over numbers as doubles
/// without the literal, so an integer it rounded cannot be told from one it did not.
struct Parser<'a> {
    text: &'a str,
    pos: usize,
    depth: usize,
}

impl<'a> Parser<'a> {
    fn document(mut self) -> Result<Node<'a>, NotIJson> {
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

/// The canonical form of a number literal of the JSON grammar; `integer` when it was written
/// without fraction or exponent.
fn canonical_number(literal: &str, integer: bool) -> Result<Cow<'_, str>, NotIJson> {
    if integer && literal.trim_start_matches('-').len() <= 15 {
        // Below 2^53: a double holds it exactly, and ECMAScript prints it digit for digit.
        return Ok(Cow::Borrowed(if literal == "-0" { "0" } else { literal }));
    }
    let value: f64 = literal.parse().map_err(|_| NotIJson::Syntax)?;
    if !value.is_finite() {
        return Err(NotIJson::NumberOutOfRange);
    }
    let canonical = ecmascript_number(value);
    if integer && Decimal::parse(literal) != Decimal::parse(&canonical) {
        return Err(NotIJson::InexactInteger);
    }
    Ok(Cow::Owned(canonical))
}

/// ECMAScript's `Number::toString` of a finite double (ECMA-262, Number::toString): the fewest
/// digits that read back as the same double, nearest to it and even on a tie, laid out in plain
/// decimal from 1e-6 up to 1e21 and in exponent form outside.
///
/// The digits are Ryu's: Rust's own `{:e}` also writes the fewest digits, but breaks a tie
/// upwards (`1424953923781206.3` where ECMAScript, and RFC 8785 Appendix B, want `.2`).
fn ecmascript_number(value: f64) -> String {
    if value == 0.0 {
        return "0".to_owned();
    }
    let mut ryu = ryu::Buffer::new();
    let Decimal { digits, power, .. } = Decimal::parse(ryu.format_finite(value.abs()));
    let k = digits.len() as i64;
    // The value is 0.d1d2...dk times 10^n.
    let n = power + k;
    let zeros = |count: i64| "0".repeat(count as usize);
    let magnitude = if k <= n && n <= 21 {
        digits + &zeros(n - k)
    } else if 0 < n && n <= 21 {
        let (whole, fraction) = digits.split_at(n as usize);
        format!("{whole}.{fraction}")
    } else if -6 < n && n <= 0 {
        format!("0.{}{digits}", zeros(-n))
    } else {
        let (first, rest) = digits.split_at(1);
        let point = if rest.is_empty() { "" } else { "." };
        format!("{first}{point}{rest}e{:+}", n - 1)
    };
    let sign = if value < 0.0 { "-" } else { "" };
    format!("{sign}{magnitude}")
}

/// A decimal number's exact value: `-12.50e3` is negative, digits `125` and power 2. Every zero
/// is the same: not negative, no digits, power 0.
#[derive(Default, PartialEq, Eq)]
struct Decimal {
    negative: bool,
    /// The significant digits, without leading or trailing zeros.
    digits: String,
    /// The power of ten of the last digit.
    power: i64,
}

impl Decimal {
    /// Reads a number in the JSON grammar, or as Ryu writes one.
    fn parse(literal: &str) -> Self {
        let (mantissa, exponent) = literal.split_once(['e', 'E']).unwrap_or((literal, ""));
        let exponent = match exponent.strip_prefix('-') {
            Some(digits) => -clamped_integer(digits),
            None => clamped_integer(exponent.trim_start_matches('+')),
        };
        let negative = mantissa.starts_with('-');
        let mantissa = mantissa.trim_start_matches('-');
        let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        let all_digits = format!("{whole}{fraction}");
        let significant = all_digits.trim_start_matches('0');
        let digits = significant.trim_end_matches('0');
        if digits.is_empty() {
            return Self::default();
        }
        let trailing_zeros = (significant.len() - digits.len()) as i64;
        Self {
            negative,
            power: exponent - fraction.len() as i64 + trailing_zeros,
            digits: digits.to_owned(),
        }
    }
}

/// The value of a string of decimal digits, clamped far beyond any double's exponent, so that
/// an absurd exponent cannot overflow the arithmetic.
fn clamped_integer(digits: &str) -> i64 {
    let clamp = |value: i64| value.min(1 << 40);
    digits
        .bytes()
        .fold(0, |acc, d| clamp(acc * 10 + i64::from(d - b'0')))
}

/// Removes what the pointers name, each resolved against the document as it was sent.
fn remove(node: &mut Node<'_>, paths: &[&[String]]) {
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
        remove(child, &deeper);
    }
    true
}

/// RFC 6901 array indices: `0`, or digits without a leading zero.
fn array_index(token: &str) -> Option<usize> {
    let digits = !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit());
    let leading_zero = token.len() > 1 && token.starts_with('0');
    (digits && !leading_zero).then(|| token.parse().ok())?
}

fn write_node(node: &Node<'_>, out: &mut Vec<u8>) {
    match node {
        Node::Scalar(text) => out.extend_from_slice(text.as_bytes()),
        Node::String(text) => write_string(text, out),
        Node::Array(elements) => {
            out.push(b'[');
            for element in elements {
                write_node(element, out);
                out.push(b',');
            }
            close(out, b']');
        }
        Node::Object(members) => {
            out.push(b'{');
            for (name, value) in members {
                write_string(name, out);
                out.push(b':');
                write_node(value, out);
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
