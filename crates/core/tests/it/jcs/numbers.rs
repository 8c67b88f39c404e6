//! Numbers: the ECMAScript formatting test sequence of RFC 8785's reference implementation,
//! and what happens to integers a double cannot hold.

use sha2::{Digest, Sha256};

use super::canon;
use idempotency_core::policy::jcs::NotIJson;

/// The doubles `testdata/numgen.js` of github.com/cyberphone/json-canonicalization (Apache-2.0,
/// Copyright 2006-2021 WebPKI.org) generates: these edge cases, then the 2000 doubles above the
/// smallest normal one, then the doubles in a chain of SHA-256 digests.
const EDGE_CASES: [u64; 168] = [
    0x0000000000000000,
    0x8000000000000000,
    0x0000000000000001,
    0x8000000000000001,
    0xc46696695dbd1cc3,
    0xc43211ede4974a35,
    0xc3fce97ca0f21056,
    0xc3c7213080c1a6ac,
    0xc39280f39a348556,
    0xc35d9b1f5d20d557,
    0xc327af4c4a80aaac,
    0xc2f2f2a36ecd5556,
    0xc2be51057e155558,
    0xc28840d131aaaaac,
    0xc253670dc1555557,
    0xc21f0b4935555557,
    0xc1e8d5d42aaaaaac,
    0xc1b3de4355555556,
    0xc17fca0555555556,
    0xc1496e6aaaaaaaab,
    0xc114585555555555,
    0xc0e046aaaaaaaaab,
    0xc0aa0aaaaaaaaaaa,
    0xc074d55555555555,
    0xc040aaaaaaaaaaab,
    0xc00aaaaaaaaaaaab,
    0xbfd5555555555555,
    0xbfa1111111111111,
    0xbf6b4e81b4e81b4f,
    0xbf35d867c3ece2a5,
    0xbf0179ec9cbd821e,
    0xbecbf647612f3696,
    0xbe965e9f80f29212,
    0xbe61e54c672874db,
    0xbe2ca213d840baf8,
    0xbdf6e80fe033c8c6,
    0xbdc2533fe68fd3d2,
    0xbd8d51ffd74c861c,
    0xbd5774ccac3d3817,
    0xbd22c3d6f030f9ac,
    0xbcee0624b3818f79,
    0xbcb804ea293472c7,
    0xbc833721ba905bd3,
    0xbc4ebe9c5db3c61e,
    0xbc18987d17c304e5,
    0xbbe3ad30dfcf371d,
    0xbbaf7b816618582f,
    0xbb792f9ab81379bf,
    0xbb442615600f9499,
    0xbb101e77800c76e1,
    0xbad9ca58cce0be35,
    0xbaa4a1e0a3e6fe90,
    0xba708180831f320d,
    0xba3a68cd9e985016,
    0x446696695dbd1cc3,
    0x443211ede4974a35,
    0x43fce97ca0f21056,
    0x43c7213080c1a6ac,
    0x439280f39a348556,
    0x435d9b1f5d20d557,
    0x4327af4c4a80aaac,
    0x42f2f2a36ecd5556,
    0x42be51057e155558,
    0x428840d131aaaaac,
    0x4253670dc1555557,
    0x421f0b4935555557,
    0x41e8d5d42aaaaaac,
    0x41b3de4355555556,
    0x417fca0555555556,
    0x41496e6aaaaaaaab,
    0x4114585555555555,
    0x40e046aaaaaaaaab,
    0x40aa0aaaaaaaaaaa,
    0x4074d55555555555,
    0x4040aaaaaaaaaaab,
    0x400aaaaaaaaaaaab,
    0x3fd5555555555555,
    0x3fa1111111111111,
    0x3f6b4e81b4e81b4f,
    0x3f35d867c3ece2a5,
    0x3f0179ec9cbd821e,
    0x3ecbf647612f3696,
    0x3e965e9f80f29212,
    0x3e61e54c672874db,
    0x3e2ca213d840baf8,
    0x3df6e80fe033c8c6,
    0x3dc2533fe68fd3d2,
    0x3d8d51ffd74c861c,
    0x3d5774ccac3d3817,
    0x3d22c3d6f030f9ac,
    0x3cee0624b3818f79,
    0x3cb804ea293472c7,
    0x3c833721ba905bd3,
    0x3c4ebe9c5db3c61e,
    0x3c18987d17c304e5,
    0x3be3ad30dfcf371d,
    0x3baf7b816618582f,
    0x3b792f9ab81379bf,
    0x3b442615600f9499,
    0x3b101e77800c76e1,
    0x3ad9ca58cce0be35,
    0x3aa4a1e0a3e6fe90,
    0x3a708180831f320d,
    0x3a3a68cd9e985016,
    0x4024000000000000,
    0x4014000000000000,
    0x3fe0000000000000,
    0x3fa999999999999a,
    0x3f747ae147ae147b,
    0x3f40624dd2f1a9fc,
    0x3f0a36e2eb1c432d,
    0x3ed4f8b588e368f1,
    0x3ea0c6f7a0b5ed8d,
    0x3e6ad7f29abcaf48,
    0x3e35798ee2308c3a,
    0x3ed539223589fa95,
    0x3ed4ff26cd5a7781,
    0x3ed4f95a762283ff,
    0x3ed4f8c60703520c,
    0x3ed4f8b72f19cd0d,
    0x3ed4f8b5b31c0c8d,
    0x3ed4f8b58d1c461a,
    0x3ed4f8b5894f7f0e,
    0x3ed4f8b588ee37f3,
    0x3ed4f8b588e47da4,
    0x3ed4f8b588e3849c,
    0x3ed4f8b588e36bb5,
    0x3ed4f8b588e36937,
    0x3ed4f8b588e368f8,
    0x3ed4f8b588e368f1,
    0x3ff0000000000000,
    0xbff0000000000000,
    0xbfeffffffffffffa,
    0xbfeffffffffffffb,
    0x3feffffffffffffa,
    0x3feffffffffffffb,
    0x3feffffffffffffc,
    0x3feffffffffffffe,
    0xbfefffffffffffff,
    0xbfefffffffffffff,
    0x3fefffffffffffff,
    0x3fefffffffffffff,
    0x3fd3333333333332,
    0x3fd3333333333333,
    0x3fd3333333333334,
    0x0010000000000000,
    0x000ffffffffffffd,
    0x000fffffffffffff,
    0x7fefffffffffffff,
    0xffefffffffffffff,
    0x4340000000000000,
    0xc340000000000000,
    0x4430000000000000,
    0x44b52d02c7e14af5,
    0x44b52d02c7e14af6,
    0x44b52d02c7e14af7,
    0x444b1ae4d6e2ef4e,
    0x444b1ae4d6e2ef4f,
    0x444b1ae4d6e2ef50,
    0x3eb0c6f7a0b5ed8c,
    0x3eb0c6f7a0b5ed8d,
    0x41b3de4355555553,
    0x41b3de4355555554,
    0x41b3de4355555555,
    0x41b3de4355555556,
    0x41b3de4355555557,
    0xbecbf647612f3696,
    0x43143ff3c1cb0959,
];

/// The sequence's doubles, in order.
fn sequence() -> impl Iterator<Item = f64> {
    let serial = (0..2000u64).map(|i| f64::from_bits(0x0010_0000_0000_0000 + i));
    let edge_cases = EDGE_CASES.iter().map(|&bits| f64::from_bits(bits));
    let mut block = [0u8; 32];
    let random = std::iter::from_fn(move || {
        block = Sha256::digest(block).into();
        let doubles = block
            .chunks_exact(8)
            .map(|bytes| f64::from_le_bytes(bytes.try_into().unwrap()))
            .collect::<Vec<_>>();
        Some(doubles)
    })
    .flatten()
    .filter(|f| *f != 0.0 && f.is_finite());
    edge_cases.chain(serial).chain(random)
}

/// The SHA-256 of the sequence's first `lines` lines, `<hex of the double>,<ECMAScript
/// Number.prototype.toString of it>\n`, with the canonical form in place of the latter.
fn sequence_digest(lines: usize) -> String {
    let mut digest = Sha256::new();
    for value in sequence().take(lines) {
        let canonical = canon(&format!("{value:e}")).unwrap();
        digest.update(format!("{:x},{canonical}\n", value.to_bits()));
    }
    hex::encode(digest.finalize())
}

/// The digests are the ones the reference implementation's `testdata/README.md` publishes,
/// computed there from V8's output.
#[test]
fn ecmascript_sequence_first_100_000() {
    assert_eq!(
        sequence_digest(100_000),
        "22776e6d4b49fa294a0d0f349268e5c28808fe7e0cb2bcbe28f63894e494d4c7"
    );
}

/// `cargo test --release --test jcs -- --ignored ecmascript`: ten million doubles.
#[test]
#[ignore = "minutes in a debug build"]
fn ecmascript_sequence_first_10_000_000() {
    assert_eq!(
        sequence_digest(10_000_000),
        "b9f8a44a91d46813b21b9602e72f112613c91408db0b8341fb94603d9db135e0"
    );
}

/// A plain integer beyond 2^53 is kept only when it is the integer the canonical form writes:
/// RFC 8785 would round `9007199254740993` to `9007199254740992`, and two identifiers differing
/// in their last digits would fingerprint alike.
#[test]
fn integers_a_double_cannot_hold_are_refused() {
    for literal in [
        "9007199254740993",
        "-9007199254740993",
        "1152921504606846976",
        "123456789012345678901234567890",
        "[1, {\"id\": 12345678901234567891}]",
    ] {
        assert_eq!(canon(literal), Err(NotIJson::InexactInteger), "{literal}");
    }
}

#[test]
fn integers_a_double_holds_are_kept() {
    for (literal, expected) in [
        ("9007199254740992", "9007199254740992"),
        ("-9007199254740992", "-9007199254740992"),
        ("999999999999999", "999999999999999"),
        ("1152921504606847000", "1152921504606847000"),
        ("295147905179352830000", "295147905179352830000"),
        ("1000000000000000000000", "1e+21"),
        ("-0", "0"),
        ("0", "0"),
    ] {
        assert_eq!(canon(literal).as_deref(), Ok(expected), "{literal}");
    }
}

/// Written with a fraction or an exponent, a number rounds to the nearest double, as RFC 8785
/// says: it was floating point when the client wrote it.
#[test]
fn fractions_and_exponents_round_to_the_nearest_double() {
    for (literal, expected) in [
        ("9007199254740993.0", "9007199254740992"),
        ("9.007199254740993e15", "9007199254740992"),
        ("333333333.33333329", "333333333.3333333"),
        ("1.0", "1"),
        ("-0.0", "0"),
        ("-0e5", "0"),
        ("100e-2", "1"),
        ("1E+2", "100"),
        ("1e21", "1e+21"),
        ("1e-6", "0.000001"),
        ("1e-7", "1e-7"),
        ("0.1", "0.1"),
        ("1e-400", "0"),
        ("0e99999999999999999999", "0"),
        ("4.35", "4.35"),
    ] {
        assert_eq!(canon(literal).as_deref(), Ok(expected), "{literal}");
    }
}

#[test]
fn numbers_beyond_a_double_are_refused() {
    for literal in ["1e400", "-1e400", "1.8e308", "1e99999999999999999999"] {
        assert_eq!(canon(literal), Err(NotIJson::NumberOutOfRange), "{literal}");
    }
}

/// The JSON number grammar, not Rust's: no leading zeros, `+`, bare points, or words.
#[test]
fn numbers_outside_the_json_grammar_are_not_json() {
    for literal in [
        "01",
        "-01",
        "+1",
        ".5",
        "1.",
        "1.e5",
        "1e",
        "1e+",
        "-",
        "--1",
        "0x10",
        "NaN",
        "Infinity",
        "-Infinity",
        "1_000",
    ] {
        assert_eq!(canon(literal), Err(NotIJson::Syntax), "{literal}");
    }
}
