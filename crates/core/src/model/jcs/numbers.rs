//! Numbers in canonical form: a JSON number literal as ECMAScript's `Number::toString` writes
//! the double it stands for, and the integers a double cannot hold refused.

use std::borrow::Cow;

use super::refusal::NotIJson;

/// The canonical form of a number literal of the JSON grammar; `integer` when it was written
/// without fraction or exponent.
pub(super) fn canonical_number(literal: &str, integer: bool) -> Result<Cow<'_, str>, NotIJson> {
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
