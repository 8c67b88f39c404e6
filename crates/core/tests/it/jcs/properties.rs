//! Properties over generated documents: the canonical form does not depend on member order,
//! whitespace, string escapes or number spelling; it is a fixed point; it agrees with an
//! independent rendering; and the parser accepts what `serde_json` accepts.

use proptest::prelude::*;

use idempotency_core::policy::jcs::{self, NotIJson};

/// Doubles whose ECMAScript form is known, so the expected canonical form can be written
/// without the code under test.
const KNOWN_NUMBERS: [(f64, &str); 14] = [
    (0.5, "0.5"),
    (0.1, "0.1"),
    (-2.5, "-2.5"),
    (1e-7, "1e-7"),
    (1e21, "1e+21"),
    (1e20, "100000000000000000000"),
    (123.456, "123.456"),
    (-1.5e-9, "-1.5e-9"),
    (5e-324, "5e-324"),
    (1.7976931348623157e308, "1.7976931348623157e+308"),
    (9.999999999999997e22, "9.999999999999997e+22"),
    (295147905179352830000.0, "295147905179352830000"),
    (333333333.33333325, "333333333.33333325"),
    (-3.3333333333333333e-6, "-0.0000033333333333333333"),
];

#[derive(Debug, Clone)]
pub(super) enum Json {
    Null,
    Bool(bool),
    Int(i64),
    Known(usize),
    Float(f64),
    Str(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

/// Characters where escaping and UTF-16 order have edge cases, and any character at all.
fn character() -> impl Strategy<Value = char> {
    prop_oneof![
        3 => prop::char::range('a', 'e'),
        1 => prop::char::range('\0', '\u{1f}'),
        1 => prop::sample::select(vec!['"', '\\', '/', '\u{7f}', '\u{2028}', '~']),
        1 => prop::char::range('\u{e000}', '\u{ffff}'),
        1 => prop::char::range('\u{10000}', '\u{10ffff}'),
        1 => any::<char>(),
    ]
}

fn text(max_len: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(character(), 0..max_len).prop_map(|chars| chars.into_iter().collect())
}

/// Values whose canonical form [`oracle`] can write: no arbitrary doubles.
pub(super) fn known_value() -> impl Strategy<Value = Json> {
    let leaf = prop_oneof![
        Just(Json::Null),
        any::<bool>().prop_map(Json::Bool),
        (-(1i64 << 53)..=(1i64 << 53)).prop_map(Json::Int),
        (0..KNOWN_NUMBERS.len()).prop_map(Json::Known),
        text(8).prop_map(Json::Str),
    ];
    containers(leaf.boxed())
}

/// Values with any finite double.
pub(super) fn any_value() -> impl Strategy<Value = Json> {
    let double = any::<f64>().prop_filter("finite", |f| f.is_finite());
    let leaf = prop_oneof![
        (-(1i64 << 53)..=(1i64 << 53)).prop_map(Json::Int),
        double.prop_map(Json::Float),
        text(4).prop_map(Json::Str),
    ];
    containers(leaf.boxed())
}

fn containers(leaf: BoxedStrategy<Json>) -> impl Strategy<Value = Json> {
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Json::Array),
            prop::collection::vec((text(3), inner), 0..6).prop_map(|mut members| {
                let mut seen = std::collections::HashSet::new();
                members.retain(|(name, _)| seen.insert(name.clone()));
                Json::Object(members)
            }),
        ]
    })
}

/// SplitMix64: the choices one rendering makes, from a seed proptest shrinks.
struct Choices(u64);

impl Choices {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) % n as u64) as usize
    }

    fn whitespace(&mut self, out: &mut String) {
        for _ in 0..self.below(3) {
            out.push([' ', '\t', '\n', '\r'][self.below(4)]);
        }
    }
}

/// `value` as JSON text, spelled one of the many ways the choices pick.
fn render(value: &Json, choices: &mut Choices, out: &mut String) {
    choices.whitespace(out);
    match value {
        Json::Null => out.push_str("null"),
        Json::Bool(b) => out.push_str(&b.to_string()),
        Json::Int(i) => out.push_str(&spell_integer(*i, choices)),
        Json::Known(k) => out.push_str(&spell_double(KNOWN_NUMBERS[*k].0, choices)),
        Json::Float(f) => out.push_str(&spell_double(*f, choices)),
        Json::Str(s) => render_string(s, choices, out),
        Json::Array(elements) => {
            out.push('[');
            for (i, element) in elements.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                render(element, choices, out);
            }
            choices.whitespace(out);
            out.push(']');
        }
        Json::Object(members) => render_object(members, choices, out),
    }
    choices.whitespace(out);
}

fn render_object(members: &[(String, Json)], choices: &mut Choices, out: &mut String) {
    let mut order: Vec<&(String, Json)> = members.iter().collect();
    for i in (1..order.len()).rev() {
        order.swap(i, choices.below(i + 1));
    }
    out.push('{');
    for (i, (name, value)) in order.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        choices.whitespace(out);
        render_string(name, choices, out);
        choices.whitespace(out);
        out.push(':');
        render(value, choices, out);
    }
    choices.whitespace(out);
    out.push('}');
}

fn spell_integer(i: i64, choices: &mut Choices) -> String {
    match choices.below(6) {
        0 => format!("{i}.0"),
        1 => format!("{i}e0"),
        2 => format!("{i}0E-1"),
        3 => format!("{:e}", i as f64),
        4 if i == 0 => "-0".to_owned(),
        _ => i.to_string(),
    }
}

/// Spellings that all read back as `value`: the shortest, more digits than that, plain
/// decimal (an integer with many digits for large values), upper-case exponent.
fn spell_double(value: f64, choices: &mut Choices) -> String {
    match choices.below(4) {
        0 => format!("{value:e}"),
        1 => format!("{value:.17e}"),
        2 => format!("{value}"),
        _ => format!("{value:E}").replace("E", "E+").replace("E+-", "E-"),
    }
}

fn render_string(text: &str, choices: &mut Choices, out: &mut String) {
    out.push('"');
    for c in text.chars() {
        let short = match c {
            '"' => Some('"'),
            '\\' => Some('\\'),
            '/' => Some('/'),
            '\u{8}' => Some('b'),
            '\u{c}' => Some('f'),
            '\n' => Some('n'),
            '\r' => Some('r'),
            '\t' => Some('t'),
            _ => None,
        };
        let must_escape = c < ' ' || c == '"' || c == '\\';
        match (choices.below(3), short) {
            (0, Some(letter)) => {
                out.push('\\');
                out.push(letter);
            }
            (0 | 1, _) => unicode_escape(c, choices.below(2) == 0, out),
            _ if must_escape => unicode_escape(c, false, out),
            _ => out.push(c),
        }
    }
    out.push('"');
}

fn unicode_escape(c: char, upper: bool, out: &mut String) {
    for unit in c.encode_utf16(&mut [0; 2]) {
        match upper {
            true => out.push_str(&format!("\\u{unit:04X}")),
            false => out.push_str(&format!("\\u{unit:04x}")),
        }
    }
}

/// The canonical form written independently: names sorted by UTF-16 code units, strings as
/// `serde_json` escapes them (the same minimal set), numbers from the known table.
pub(super) fn oracle(value: &Json) -> String {
    match value {
        Json::Null => "null".to_owned(),
        Json::Bool(b) => b.to_string(),
        Json::Int(i) => i.to_string(),
        Json::Known(k) => KNOWN_NUMBERS[*k].1.to_owned(),
        Json::Float(_) => unreachable!("the oracle has no ECMAScript formatter"),
        Json::Str(s) => serde_json::to_string(s).unwrap(),
        Json::Array(elements) => {
            let elements: Vec<String> = elements.iter().map(oracle).collect();
            format!("[{}]", elements.join(","))
        }
        Json::Object(members) => {
            let mut sorted: Vec<&(String, Json)> = members.iter().collect();
            sorted.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            let members: Vec<String> = sorted
                .into_iter()
                .map(|(name, value)| {
                    format!("{}:{}", oracle(&Json::Str(name.clone())), oracle(value))
                })
                .collect();
            format!("{{{}}}", members.join(","))
        }
    }
}

pub(super) fn rendered(value: &Json, seed: u64) -> String {
    let mut out = String::new();
    render(value, &mut Choices(seed), &mut out);
    out
}

fn canonical(body: &str) -> Result<String, NotIJson> {
    jcs::try_canonicalize(body.as_bytes(), &[]).map(|c| String::from_utf8(c).unwrap())
}

/// JSON-shaped fragments, so that some concatenations are JSON and most are nearly JSON.
fn fragment_soup() -> impl Strategy<Value = String> {
    let fragments = vec![
        "{", "}", "[", "]", ",", ":", " ", "\"a\"", "\"b\"", "\"", "\\", "\\u00", "\\ud83d", "41",
        "1", "-", "0", ".", "e", "E+", "true", "nul", "null", "\u{e9}", "\t", "x",
    ];
    prop::collection::vec(prop::sample::select(fragments), 0..16).prop_map(|f| f.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_spelling_canonicalizes_to_the_independent_rendering(
        value in known_value(),
        seed in any::<u64>(),
    ) {
        let body = rendered(&value, seed);
        prop_assert_eq!(canonical(&body), Ok(oracle(&value)), "body: {}", body);
    }

    #[test]
    fn member_order_whitespace_and_spelling_do_not_matter(
        value in any_value(),
        seeds in any::<(u64, u64)>(),
    ) {
        let first = rendered(&value, seeds.0);
        let second = rendered(&value, seeds.1);
        let canonical_first = canonical(&first);
        prop_assert!(canonical_first.is_ok(), "{:?}: {}", canonical_first, first);
        prop_assert_eq!(&canonical_first, &canonical(&second), "{} / {}", first, second);
    }

    #[test]
    fn the_canonical_form_is_a_fixed_point(value in any_value(), seed in any::<u64>()) {
        let once = canonical(&rendered(&value, seed)).unwrap();
        prop_assert_eq!(canonical(&once), Ok(once.clone()));
    }

    #[test]
    fn what_serde_json_refuses_is_refused(body in fragment_soup()) {
        let serde = serde_json::from_str::<serde_json::Value>(&body);
        match canonical(&body) {
            Ok(once) => {
                prop_assert!(serde.is_ok(), "accepted {:?}, serde_json: {:?}", body, serde);
                prop_assert_eq!(canonical(&once), Ok(once.clone()));
            }
            Err(NotIJson::Syntax) => {
                prop_assert!(serde.is_err(), "refused {:?}, serde_json read it", body);
            }
            // Duplicates and lone surrogates: JSON, but not I-JSON.
            Err(_) => {}
        }
    }
}
