//! Avro's logical types from JSON: dates, times and timestamps as numbers
//! or ISO 8601 text, decimals as exact digits; and the names of types.

use apache_avro::Schema;
use apache_avro::schema::{DecimalSchema, InnerDecimalSchema, UuidSchema};
use chrono::{DateTime, NaiveDate, NaiveDateTime, NaiveTime, Timelike};
use serde_json::Value as Json;

/// A timestamp's unit.
#[derive(Debug, Clone, Copy)]
pub enum Unit {
    Millis,
    Micros,
    Nanos,
}

/// Whether `text` is laid out as `pattern` says, `d` a digit, anything
/// else itself; then an optional fraction (`.` and digits), and the rest
/// one of `ends`. chrono alone also takes `1:02:03` and `2024-3-1`,
/// forms the mapping does not name.
fn shaped(text: &str, pattern: &str, ends: &[&str]) -> bool {
    let Some((head, mut rest)) = text.split_at_checked(pattern.len()) else {
        return false;
    };
    let laid_out = head.bytes().zip(pattern.bytes()).all(|(t, p)| match p {
        b'd' => t.is_ascii_digit(),
        p => t == p,
    });
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return false;
        }
        rest = &fraction[digits..];
    }
    laid_out && ends.iter().any(|end| shaped_end(rest, end))
}

fn shaped_end(rest: &str, end: &str) -> bool {
    rest.len() == end.len()
        && rest.bytes().zip(end.bytes()).all(|(t, p)| match p {
            b'd' => t.is_ascii_digit(),
            b'~' => t == b'+' || t == b'-',
            p => t == p,
        })
}

/// Days since 1970-01-01: an `int`, or `"YYYY-MM-DD"`.
pub fn date(json: &Json) -> Option<i32> {
    match json {
        Json::String(text) if !shaped(text, "dddd-dd-dd", &[""]) || text.contains('.') => None,
        Json::String(text) => {
            let date = NaiveDate::parse_from_str(text, "%Y-%m-%d").ok()?;
            let days = date.signed_duration_since(NaiveDate::default()).num_days();
            i32::try_from(days).ok()
        }
        _ => i32::try_from(json.as_i64()?).ok(),
    }
}

/// Time since midnight in `per_second` units: an integer, or
/// `"HH:MM:SS[.fraction]"` (a finer fraction is cut, not rounded).
pub fn time(json: &Json, per_second: i64) -> Option<i64> {
    match json {
        Json::String(text) if !shaped(text, "dd:dd:dd", &[""]) => None,
        Json::String(text) => {
            let t = NaiveTime::parse_from_str(text, "%H:%M:%S%.f").ok()?;
            let seconds = i64::from(t.num_seconds_from_midnight());
            let fraction = i64::from(t.nanosecond()) / (1_000_000_000 / per_second);
            Some(seconds * per_second + fraction)
        }
        _ => json.as_i64(),
    }
}

/// `text` as a timestamp in `unit`: RFC 3339 with its offset, or (`local`)
/// a date-time without one.
pub fn timestamp(text: &str, unit: Unit, local: bool) -> Option<i64> {
    let ends: &[&str] = if local { &[""] } else { &["Z", "~dd:dd"] };
    if !shaped(text, "dddd-dd-ddTdd:dd:dd", ends) {
        return None;
    }
    let utc = if local {
        NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f")
            .ok()?
            .and_utc()
    } else {
        DateTime::parse_from_rfc3339(text).ok()?.to_utc()
    };
    match unit {
        Unit::Millis => Some(utc.timestamp_millis()),
        Unit::Micros => Some(utc.timestamp_micros()),
        Unit::Nanos => utc.timestamp_nanos_opt(),
    }
}

/// Why a decimal's text has no exact value at a scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecimalError {
    #[error("expected a decimal number such as 12.30 or 1.5e3")]
    Malformed,
    /// More places than the scale, even zeros: `1.50` at scale 1 is
    /// refused as the reference refuses it, so that both accept the same.
    #[error("more decimal places than the scale {0}")]
    Places(usize),
    /// The unscaled value needs more than 128 bits (more than 38 digits).
    #[error("too many digits")]
    TooBig,
}

/// The decimal `text` (`-12.30`, `1e3`, `0.5E-2`) times 10^`scale`, exact.
/// Its decimal places are those written (the fraction's digits, less the
/// exponent): refused when more than `scale`, or when the value does not
/// fit 128 bits.
pub fn unscaled(text: &str, scale: usize) -> Result<i128, DecimalError> {
    use DecimalError as E;
    let (negative, unsigned) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(i) => (
            &unsigned[..i],
            unsigned[i + 1..].parse::<i64>().map_err(|_| E::Malformed)?,
        ),
        None => (unsigned, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() && fraction.is_empty() || !all_digits(whole) || !all_digits(fraction) {
        return Err(E::Malformed);
    }
    // digits × 10^-places is the value; digits × 10^(scale - places) the
    // unscaled value.
    let places = i64::try_from(fraction.len())
        .ok()
        .and_then(|f| f.checked_sub(exponent))
        .ok_or(E::Malformed)?;
    let shift = i64::try_from(scale)
        .ok()
        .and_then(|s| s.checked_sub(places))
        .ok_or(E::Malformed)?;
    if shift < 0 {
        return Err(E::Places(scale));
    }
    let mut value: i128 = 0;
    for b in whole.bytes().chain(fraction.bytes()) {
        value = value
            .checked_mul(10)
            .and_then(|v| v.checked_add(i128::from(b - b'0')))
            .ok_or(E::TooBig)?;
    }
    if value != 0 {
        let factor = u32::try_from(shift)
            .ok()
            .and_then(|s| 10i128.checked_pow(s))
            .ok_or(E::TooBig)?;
        value = value.checked_mul(factor).ok_or(E::TooBig)?;
    }
    Ok(if negative { -value } else { value })
}

/// Whether `text` is a UUID's text form: 8-4-4-4-12 hex digits (either
/// case) with hyphens, as Avro's `uuid` specifies (RFC 4122).
pub fn is_uuid(text: &str) -> bool {
    text.len() == 36
        && text.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_hexdigit(),
        })
}

/// How many decimal digits `value` has (0 has one).
pub fn digits(value: i128) -> usize {
    value
        .unsigned_abs()
        .checked_ilog10()
        .map_or(1, |d| d as usize + 1)
}

/// `value` as the fewest big-endian two's complement bytes, as Avro's
/// decimal holds it.
pub fn twos_complement(value: i128) -> Vec<u8> {
    let bytes = value.to_be_bytes();
    let mut start = 0;
    while start < bytes.len() - 1 {
        let (first, next) = (bytes[start], bytes[start + 1]);
        if (first == 0x00 && next & 0x80 == 0) || (first == 0xff && next & 0x80 != 0) {
            start += 1;
        } else {
            break;
        }
    }
    bytes[start..].to_vec()
}

/// The name of the Avro type a schema is written as: a logical type's
/// underlying type (a union branch's name in Avro's JSON encoding).
pub fn base_type(schema: &Schema) -> &'static str {
    use Schema as S;
    match schema {
        S::Null => "null",
        S::Boolean => "boolean",
        S::Int | S::Date | S::TimeMillis => "int",
        S::Long
        | S::TimeMicros
        | S::TimestampMillis
        | S::TimestampMicros
        | S::TimestampNanos
        | S::LocalTimestampMillis
        | S::LocalTimestampMicros
        | S::LocalTimestampNanos => "long",
        S::Float => "float",
        S::Double => "double",
        S::Bytes
        | S::BigDecimal
        | S::Uuid(UuidSchema::Bytes)
        | S::Decimal(DecimalSchema {
            inner: InnerDecimalSchema::Bytes,
            ..
        }) => "bytes",
        S::String | S::Uuid(UuidSchema::String) => "string",
        S::Array(_) => "array",
        S::Map(_) => "map",
        S::Union(_) => "union",
        S::Record(_) | S::Ref { .. } => "record",
        S::Enum(_) => "enum",
        S::Fixed(_) | S::Duration(_) | S::Uuid(UuidSchema::Fixed(_)) | S::Decimal(_) => "fixed",
    }
}

/// A logical type's name, `None` for the others.
pub fn logical_name(schema: &Schema) -> Option<&'static str> {
    use Schema as S;
    Some(match schema {
        S::Date => "date",
        S::TimeMillis => "time-millis",
        S::TimeMicros => "time-micros",
        S::TimestampMillis => "timestamp-millis",
        S::TimestampMicros => "timestamp-micros",
        S::TimestampNanos => "timestamp-nanos",
        S::LocalTimestampMillis => "local-timestamp-millis",
        S::LocalTimestampMicros => "local-timestamp-micros",
        S::LocalTimestampNanos => "local-timestamp-nanos",
        S::Decimal(_) => "decimal",
        S::BigDecimal => "big-decimal",
        S::Uuid(_) => "uuid",
        S::Duration(_) => "duration",
        _ => return None,
    })
}
