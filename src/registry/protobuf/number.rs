//! Numbers of a payload as proto3's JSON mapping reads them into integer
//! and floating-point fields, from the number's exact text (the payload's
//! `serde_json` keeps it, `arbitrary_precision`): never through an `f64`
//! on the way to an integer.
//!
//! What is accepted is what Google's references (`json_format` of Python,
//! `JsonFormat` of Java) both read to the same value; the rest is refused
//! with the reason, never rounded:
//!
//! * an integer field takes a JSON number or a string holding one, written
//!   as digits (`10`, `"-3"`, `"+7"`, `"010"`) or with a fraction or
//!   exponent whose value is an integer (`10.0`, `1e2`, `"2.5e1"`). A
//!   number with a fraction or exponent is taken only if a double holds its
//!   value exactly: Python's reader goes through a double there and would
//!   send `9007199254740993.0` as `…992`, so such a number is refused
//!   (written as digits it is exact for every reader).
//! * a float or double field takes a JSON number, a decimal string, or
//!   `"NaN"`, `"Infinity"`, `"-Infinity"`; a value beyond the type's range
//!   is refused, never sent as an infinity.
//!
//! A string's number is ASCII with no blanks, underscores or other digits
//! (which Python's `int()` and `float()` would take and Java's reader
//! refuses).

use std::fmt;

/// A decimal number as written: `[+-] digits [. digits] [e [+-] digits]`,
/// the digits on one side of the point possibly empty (`5.`, `.5`), not both.
struct Decimal<'a> {
    negative: bool,
    int: &'a str,
    frac: &'a str,
    /// The exponent's text, sign included; `None` if there is none.
    exp: Option<&'a str>,
    /// No point and no exponent: the integer as digits.
    plain: bool,
}

fn decimal(text: &str) -> Option<Decimal<'_>> {
    let (negative, rest) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let (mantissa, exp) = match rest.find(['e', 'E']) {
        Some(at) => (&rest[..at], Some(&rest[at + 1..])),
        None => (rest, None),
    };
    let (int, frac, point) = match mantissa.split_once('.') {
        Some((int, frac)) => (int, frac, true),
        None => (mantissa, "", false),
    };
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if !digits(int) || !digits(frac) || (int.is_empty() && frac.is_empty()) {
        return None;
    }
    if let Some(exp) = exp {
        let unsigned = exp.strip_prefix(['+', '-']).unwrap_or(exp);
        if unsigned.is_empty() || !digits(unsigned) {
            return None;
        }
    }
    Some(Decimal {
        negative,
        int,
        frac,
        exp,
        plain: !point && exp.is_none(),
    })
}

/// Why a number is not an integer a field can take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntegerError {
    /// Not a number at all (a string of something else).
    NotANumber,
    /// Its value has a fraction (`10.5`, `1e-3`).
    Fraction,
    /// Written with a fraction or exponent, and a double does not hold its
    /// value: readers disagree on it.
    Inexact,
    /// Beyond what an `i128` holds (every field's range is narrower).
    TooLarge,
}

impl fmt::Display for IntegerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IntegerError::NotANumber => "not an integer",
            IntegerError::Fraction => "a number with a fraction, not an integer",
            IntegerError::Inexact => {
                "an integer beyond 2^53 written with a fraction or exponent, which readers \
                 going through a double change: write it as digits"
            }
            IntegerError::TooLarge => "out of the range",
        })
    }
}

/// The exact integer `text` writes (a JSON number's text, or a string's).
pub fn integer(text: &str) -> Result<i128, IntegerError> {
    let d = decimal(text).ok_or(IntegerError::NotANumber)?;
    // The value is digits × 10^exponent, digits without leading zeros.
    let digits: String = d.int.chars().chain(d.frac.chars()).collect();
    let digits = digits.trim_start_matches('0');
    if digits.is_empty() {
        return Ok(0);
    }
    let written_exp: i64 = match d.exp {
        // An exponent of more than 18 digits makes the number 0.000… or
        // beyond any range: both refused below.
        Some(exp) => exp.parse().unwrap_or(if exp.starts_with('-') {
            i64::MIN / 2
        } else {
            i64::MAX / 2
        }),
        None => 0,
    };
    let significant = digits.trim_end_matches('0');
    let trailing = i64::try_from(digits.len() - significant.len()).unwrap_or(i64::MAX / 4);
    let frac_len = i64::try_from(d.frac.len()).unwrap_or(i64::MAX / 4);
    let exponent = written_exp
        .saturating_sub(frac_len)
        .saturating_add(trailing);
    if exponent < 0 {
        return Err(IntegerError::Fraction);
    }
    let length = i64::try_from(significant.len()).unwrap_or(i64::MAX / 4);
    if length.saturating_add(exponent) > 39 {
        return Err(IntegerError::TooLarge);
    }
    let mut magnitude: u128 = 0;
    for b in significant.bytes() {
        magnitude = magnitude
            .checked_mul(10)
            .and_then(|m| m.checked_add(u128::from(b - b'0')))
            .ok_or(IntegerError::TooLarge)?;
    }
    for _ in 0..exponent {
        magnitude = magnitude.checked_mul(10).ok_or(IntegerError::TooLarge)?;
    }
    let magnitude = i128::try_from(magnitude).map_err(|_| IntegerError::TooLarge)?;
    let value = if d.negative { -magnitude } else { magnitude };
    #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
    if !d.plain && (value as f64) as i128 != value {
        return Err(IntegerError::Inexact);
    }
    Ok(value)
}

/// Whether `text` is an integer as digits only (`[+-]digits`): what an
/// enum's number in a string may be (Python reads it with `int()`, which
/// takes no fraction).
pub fn is_digits(text: &str) -> bool {
    decimal(text).is_some_and(|d| d.plain)
}

/// Why a number is not a value a float or double field can take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloatError {
    NotANumber,
    TooLarge,
}

/// A JSON number's value for a double: the nearest double to its text. A
/// `-0` written as an integer is 0, as a JSON reader that reads integers
/// as integers (Python's) has it; `-0.0` keeps its sign.
pub fn number_f64(text: &str) -> Result<f64, FloatError> {
    let d = decimal(text).ok_or(FloatError::NotANumber)?;
    let value: f64 = text.parse().map_err(|_| FloatError::NotANumber)?;
    if value.is_infinite() {
        return Err(FloatError::TooLarge);
    }
    Ok(if d.plain && value == 0.0 { 0.0 } else { value })
}

/// A string's value for a double: `"NaN"`, `"Infinity"`, `"-Infinity"`,
/// or a decimal (`"1.5"`, `"-2e3"`, `".5"`) to the nearest double.
pub fn string_f64(text: &str) -> Result<f64, FloatError> {
    match text {
        "NaN" => Ok(f64::NAN),
        "Infinity" => Ok(f64::INFINITY),
        "-Infinity" => Ok(f64::NEG_INFINITY),
        _ => {
            decimal(text).ok_or(FloatError::NotANumber)?;
            let value: f64 = text.parse().map_err(|_| FloatError::NotANumber)?;
            if value.is_infinite() {
                return Err(FloatError::TooLarge);
            }
            Ok(value)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_read_from_their_exact_text() {
        assert_eq!(integer("10"), Ok(10));
        assert_eq!(integer("10.0"), Ok(10));
        assert_eq!(integer("1e2"), Ok(100));
        assert_eq!(integer("1E+2"), Ok(100));
        assert_eq!(integer("2.5e1"), Ok(25));
        assert_eq!(integer("-0"), Ok(0));
        assert_eq!(integer("-0.0"), Ok(0));
        assert_eq!(integer("0e999999999999999999999"), Ok(0));
        assert_eq!(integer("+7"), Ok(7));
        assert_eq!(integer("010"), Ok(10));
        assert_eq!(integer(".5e1"), Ok(5));
        assert_eq!(integer("5."), Ok(5));
        assert_eq!(integer("9007199254740993"), Ok(9_007_199_254_740_993));
        assert_eq!(
            integer("18446744073709551615"),
            Ok(i128::from(u64::MAX)),
            "digits are exact at any size"
        );
        assert_eq!(integer("-9223372036854775808"), Ok(i128::from(i64::MIN)));
        // A double holds 2^63 and 10^19 exactly: every reader agrees.
        assert_eq!(integer("9.223372036854775808e18"), Ok(1 << 63));
        assert_eq!(integer("1e19"), Ok(10_000_000_000_000_000_000));
    }

    #[test]
    fn an_integer_a_double_would_change_is_refused_not_rounded() {
        assert_eq!(integer("9007199254740993.0"), Err(IntegerError::Inexact));
        assert_eq!(integer("9.007199254740993e15"), Err(IntegerError::Inexact));
        assert_eq!(integer("9223372036854775807.0"), Err(IntegerError::Inexact));
        assert_eq!(integer("9007199254740992.0"), Ok(1 << 53));
        assert_eq!(integer("10.5"), Err(IntegerError::Fraction));
        assert_eq!(integer("1e-400"), Err(IntegerError::Fraction));
        assert_eq!(integer("1.0000000000000001"), Err(IntegerError::Fraction));
        assert_eq!(integer("1e40"), Err(IntegerError::TooLarge));
        assert_eq!(
            integer("1e999999999999999999999"),
            Err(IntegerError::TooLarge)
        );
        for text in [
            "", "-", "+", ".", "e5", "1e", "1e+", "1_0", " 10", "10 ", "\t1", "0x10", "١", "1.2.3",
            "--1", "inf", "NaN",
        ] {
            assert_eq!(integer(text), Err(IntegerError::NotANumber), "{text:?}");
        }
    }

    #[test]
    fn floats_are_the_nearest_double_and_never_an_unasked_infinity() {
        assert_eq!(number_f64("0.1"), Ok(0.1));
        assert_eq!(number_f64("-0").map(f64::to_bits), Ok(0));
        assert_eq!(
            number_f64("-0.0").map(f64::to_bits),
            Ok((-0.0f64).to_bits())
        );
        assert_eq!(number_f64("1e400"), Err(FloatError::TooLarge));
        assert_eq!(number_f64("1e-400"), Ok(0.0));
        assert_eq!(string_f64("-Infinity"), Ok(f64::NEG_INFINITY));
        assert!(string_f64("NaN").is_ok_and(f64::is_nan));
        assert_eq!(string_f64("+.5"), Ok(0.5));
        assert_eq!(string_f64("-0").map(f64::to_bits), Ok((-0.0f64).to_bits()));
        assert_eq!(string_f64("1e400"), Err(FloatError::TooLarge));
        for text in ["inf", "nan", "infinity", " 1", "1_0", "0x1p3", ""] {
            assert_eq!(string_f64(text), Err(FloatError::NotANumber), "{text:?}");
        }
    }
}
