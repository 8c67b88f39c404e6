//! RFC 8785's examples and the reference implementation's test files.

use std::path::Path;

use super::canon;
use idempotency_core::policy::jcs;

/// RFC 8785 section 3.2.2, and its UTF-8 bytes as section 3.2.4 lists them.
#[test]
fn rfc_sample() {
    let input = r#"{
  "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}"#;
    let expected = concat!(
        r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"#,
        r#""string":"€$\u000f\nA'B\"\\\\\"/"}"#
    );
    assert_eq!(canon(input).unwrap(), expected);
    let hex = "7b226c69746572616c73223a5b6e756c6c2c747275652c66616c73655d2c226e756d62657273223a5b\
               3333333333333333332e333333333333332c31652b33302c342e352c302e3030322c31652d32375d2c\
               22737472696e67223a22e282ac245c75303030665c6e4127425c225c5c5c5c5c222f227d";
    assert_eq!(hex::encode(canon(input).unwrap()), hex);
}

/// RFC 8785 section 3.2.3: names sort by UTF-16 code units, so U+1F600 (a surrogate pair
/// starting 0xD83D) comes before U+FB33, although its UTF-8 bytes and code point are greater.
#[test]
fn rfc_sorting_example() {
    let input = r#"{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}"#;
    let expected = concat!(
        "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u{80}\":\"Control\",",
        "\"\u{f6}\":\"Latin Small Letter O With Diaeresis\",\"\u{20ac}\":\"Euro Sign\",",
        "\"\u{1f600}\":\"Emoji: Grinning Face\",\"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}"
    );
    assert_eq!(canon(input).unwrap(), expected);
}

/// RFC 8785 Appendix B, less NaN and Infinity, which JSON cannot write. Each double is given
/// to the parser twice: in the shortest exponent form and in Rust's plain decimal form, which
/// for the large ones is an integer with many digits.
#[test]
fn rfc_number_table() {
    let table: [(u64, &str); 24] = [
        (0x0000000000000000, "0"),
        (0x8000000000000000, "0"),
        (0x0000000000000001, "5e-324"),
        (0x8000000000000001, "-5e-324"),
        (0x7fefffffffffffff, "1.7976931348623157e+308"),
        (0xffefffffffffffff, "-1.7976931348623157e+308"),
        (0x4340000000000000, "9007199254740992"),
        (0xc340000000000000, "-9007199254740992"),
        (0x4430000000000000, "295147905179352830000"),
        (0x44b52d02c7e14af5, "9.999999999999997e+22"),
        (0x44b52d02c7e14af6, "1e+23"),
        (0x44b52d02c7e14af7, "1.0000000000000001e+23"),
        (0x444b1ae4d6e2ef4e, "999999999999999700000"),
        (0x444b1ae4d6e2ef4f, "999999999999999900000"),
        (0x444b1ae4d6e2ef50, "1e+21"),
        (0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"),
        (0x3eb0c6f7a0b5ed8d, "0.000001"),
        (0x41b3de4355555553, "333333333.3333332"),
        (0x41b3de4355555554, "333333333.33333325"),
        (0x41b3de4355555555, "333333333.3333333"),
        (0x41b3de4355555556, "333333333.3333334"),
        (0x41b3de4355555557, "333333333.33333343"),
        (0xbecbf647612f3696, "-0.0000033333333333333333"),
        (0x43143ff3c1cb0959, "1424953923781206.2"),
    ];
    for (bits, expected) in table {
        let value = f64::from_bits(bits);
        for literal in [format!("{value:e}"), format!("{value}")] {
            assert_eq!(
                canon(&literal).as_deref(),
                Ok(expected),
                "{bits:016x} as {literal}"
            );
        }
    }
}

/// github.com/cyberphone/json-canonicalization `testdata/`: each input canonicalizes to the
/// output file of the same name, byte for byte.
#[test]
fn reference_test_data() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/jcs");
    let names = [
        "arrays",
        "french",
        "structures",
        "unicode",
        "values",
        "weird",
    ];
    for name in names {
        let file = format!("{name}.json");
        let input = std::fs::read(root.join("input").join(&file)).unwrap();
        let output = std::fs::read(root.join("output").join(&file)).unwrap();
        let canonical = jcs::canonicalize(&input, &[]).unwrap_or_else(|| panic!("{file}"));
        assert_eq!(
            String::from_utf8_lossy(&canonical),
            String::from_utf8_lossy(&output),
            "{file}"
        );
    }
}

/// Strings keep every character but the ones RFC 8785 escapes, whatever escapes they came in.
#[test]
fn strings_take_the_fewest_escapes() {
    let input = r#""\u0041\/\u2028\u007f\u00e9\b\f\n\r\t\u0000\u001F\"\\""#;
    let expected = "\"A/\u{2028}\u{7f}\u{e9}\\b\\f\\n\\r\\t\\u0000\\u001f\\\"\\\\\"";
    assert_eq!(canon(input).unwrap(), expected);
}

/// Scalars are documents too, and whitespace around the document is not part of it.
#[test]
fn top_level_scalars() {
    assert_eq!(canon(" \t\r\n true \n").unwrap(), "true");
    assert_eq!(canon("null").unwrap(), "null");
    assert_eq!(canon(r#" "x" "#).unwrap(), r#""x""#);
    assert_eq!(canon("  -12.50e1 ").unwrap(), "-125");
}
