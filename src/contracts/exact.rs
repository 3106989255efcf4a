//! The JSON Schema keywords that look at a number's value, computed on the
//! number's decimal text instead of an `f64`.
//!
//! The jsonschema crate (without its `arbitrary-precision` feature, which
//! the relay cannot enable) compares numbers as `f64`: `99999999999999999.99`
//! would be an integer, `9007199254740992.5` would keep `"maximum":
//! 9007199254740992`, two prices a cent apart would be equal for `enum` and
//! `uniqueItems`. The relay passes every number on as written (see
//! `envelope.rs`), so it checks the value written: these keywords replace
//! the crate's (`type`, `minimum`, `maximum`, `exclusiveMinimum`,
//! `exclusiveMaximum`, `multipleOf`, `enum`, `const`, `uniqueItems`).
//!
//! Invariant: a number's value is exactly its decimal text (serde_json's
//! `arbitrary_precision` keeps it); `1.0`, `1e0` and `1` are one value,
//! `-0` is `0`. Draft 4 alone calls only numbers written without fraction or
//! exponent integers; later drafts any number whose value is whole.

use std::cmp::Ordering;
use std::collections::HashSet;

use jsonschema::paths::Location;
use jsonschema::{Keyword, ValidationError, ValidationOptions};
use serde_json::{Map, Number, Value};

use super::draft::Draft;

/// The longest `multipleOf` divisor (significant digits) checked exactly.
pub const MAX_DIVISOR_DIGITS: usize = 37;

/// A decimal number: `digits` (no leading or trailing zero; none: zero)
/// times ten to `exponent`, negative when `negative` (never for zero).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Decimal {
    negative: bool,
    digits: Vec<u8>,
    exponent: i64,
}

/// Exponents are kept within this, whatever the text says: a number of
/// more digits than any payload holds is out of every comparison's reach.
const EXPONENT_LIMIT: i64 = 1 << 48;

impl Decimal {
    /// From JSON number text (`-12.50e-3`).
    pub fn parse(text: &str) -> Decimal {
        let (negative, rest) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text.strip_prefix('+').unwrap_or(text)),
        };
        let (mantissa, exponent) = match rest.find(['e', 'E']) {
            Some(i) => (&rest[..i], parse_exponent(&rest[i + 1..])),
            None => (rest, 0),
        };
        let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        let mut digits: Vec<u8> = whole
            .bytes()
            .chain(fraction.bytes())
            .map(|b| b.wrapping_sub(b'0'))
            .collect();
        let fraction_len = i64::try_from(fraction.len()).unwrap_or(EXPONENT_LIMIT);
        let mut exponent = exponent - fraction_len;
        let leading = digits.iter().take_while(|d| **d == 0).count();
        digits.drain(..leading);
        while digits.last() == Some(&0) {
            digits.pop();
            exponent += 1;
        }
        if digits.is_empty() {
            return Decimal {
                negative: false,
                digits,
                exponent: 0,
            };
        }
        Decimal {
            negative,
            digits,
            exponent,
        }
    }

    fn of(number: &Number) -> Decimal {
        Decimal::parse(number.as_str())
    }

    fn is_zero(&self) -> bool {
        self.digits.is_empty()
    }

    /// Whether the value is whole.
    pub fn is_integer(&self) -> bool {
        self.exponent >= 0
    }

    /// The power of ten of the leading digit, for ordering magnitudes.
    fn magnitude(&self) -> i64 {
        self.exponent + i64::try_from(self.digits.len()).unwrap_or(EXPONENT_LIMIT)
    }

    fn cmp_abs(&self, other: &Decimal) -> Ordering {
        match (self.is_zero(), other.is_zero()) {
            (true, true) => return Ordering::Equal,
            (true, false) => return Ordering::Less,
            (false, true) => return Ordering::Greater,
            (false, false) => {}
        }
        self.magnitude().cmp(&other.magnitude()).then_with(|| {
            // Same leading power: the digits from the leading one on; the
            // shorter is padded with zeros, which no non-zero digit equals.
            self.digits.cmp(&other.digits)
        })
    }

    /// Whether `self` is a whole multiple of `divisor` (not zero, of at
    /// most [`MAX_DIVISOR_DIGITS`] digits).
    pub fn is_multiple_of(&self, divisor: &Decimal) -> bool {
        if self.is_zero() {
            return true;
        }
        // self = a·10^e1, divisor = b·10^e2, a and b without trailing zeros:
        // with e1 < e2, b·10^(e2-e1) divides a only if 10 does; else b must
        // divide a·10^(e1-e2).
        if self.exponent < divisor.exponent {
            return false;
        }
        let modulus = divisor
            .digits
            .iter()
            .fold(0u128, |m, d| m * 10 + u128::from(*d));
        let rest = self
            .digits
            .iter()
            .fold(0u128, |r, d| (r * 10 + u128::from(*d)) % modulus);
        let shift = u64::try_from(self.exponent - divisor.exponent).unwrap_or(u64::MAX);
        mul_mod(rest, pow_mod(10, shift, modulus), modulus) == 0
    }
}

impl Ord for Decimal {
    fn cmp(&self, other: &Decimal) -> Ordering {
        match (self.negative, other.negative) {
            (false, true) => Ordering::Greater,
            (true, false) => Ordering::Less,
            (false, false) => self.cmp_abs(other),
            (true, true) => other.cmp_abs(self),
        }
    }
}

impl PartialOrd for Decimal {
    fn partial_cmp(&self, other: &Decimal) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

fn parse_exponent(text: &str) -> i64 {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let value = digits.bytes().fold(0i64, |v, b| {
        (v * 10 + i64::from(b.wrapping_sub(b'0'))).min(EXPONENT_LIMIT)
    });
    if negative { -value } else { value }
}

/// `a·b mod m` without overflow (`a`, `b` < `m` < 10^37).
fn mul_mod(mut a: u128, mut b: u128, m: u128) -> u128 {
    let mut product = 0;
    a %= m;
    while b > 0 {
        if b & 1 == 1 {
            product = (product + a) % m;
        }
        a = (a + a) % m;
        b >>= 1;
    }
    product
}

fn pow_mod(base: u128, mut exponent: u64, m: u128) -> u128 {
    let mut result = 1 % m;
    let mut base = base % m;
    while exponent > 0 {
        if exponent & 1 == 1 {
            result = mul_mod(result, base, m);
        }
        base = mul_mod(base, base, m);
        exponent >>= 1;
    }
    result
}

/// Whether `text` (a JSON number) has a fraction or an exponent.
fn is_literal_integer(text: &str) -> bool {
    !text.bytes().any(|b| matches!(b, b'.' | b'e' | b'E'))
}

/// Whether `number` is an integer by `draft`'s rule.
pub fn is_integer(number: &Number, draft: Draft) -> bool {
    let text = number.as_str();
    is_literal_integer(text) || (!draft.integers_are_literal() && Decimal::parse(text).is_integer())
}

/// JSON equality with numbers by value (`enum`, `const`, `uniqueItems`).
pub fn equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(a), Value::Number(b)) => {
            a.as_str() == b.as_str() || Decimal::of(a) == Decimal::of(b)
        }
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| equal(a, b))
        }
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len()
                && a.iter()
                    .all(|(k, v)| b.get(k).is_some_and(|other| equal(v, other)))
        }
        (a, b) => a == b,
    }
}

/// A value's text with numbers by value and members sorted: equal values,
/// equal keys.
fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Number(n) => {
            let d = Decimal::of(n);
            out.push_str(if d.negative { "-" } else { "+" });
            out.extend(d.digits.iter().map(|d| char::from(b'0' + d)));
            out.push('e');
            out.push_str(&d.exponent.to_string());
        }
        Value::Array(items) => {
            out.push('[');
            for item in items {
                canonical(item, out);
                out.push(',');
            }
            out.push(']');
        }
        Value::Object(members) => {
            let mut keys: Vec<&String> = members.keys().collect();
            keys.sort();
            out.push('{');
            for key in keys {
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                canonical(&members[key], out);
                out.push(',');
            }
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// Which bound a numeric keyword sets.
#[derive(Clone, Copy)]
enum Bound {
    Minimum,
    Maximum,
}

/// One of the keywords above, compiled.
enum Rule {
    /// The type names allowed (`"integer"` by the draft's rule).
    Type {
        names: Vec<String>,
        draft: Draft,
    },
    Bound {
        bound: Bound,
        limit: Decimal,
        limit_text: String,
        exclusive: bool,
    },
    /// Draft 4's boolean `exclusiveMinimum`/`exclusiveMaximum`: read by
    /// its sibling bound.
    Nothing,
    MultipleOf {
        divisor: Decimal,
        text: String,
    },
    Enum {
        values: Vec<Value>,
        text: String,
    },
    Const {
        value: Value,
        text: String,
    },
    UniqueItems(bool),
}

fn error(message: String) -> ValidationError<'static> {
    ValidationError::custom(message)
}

impl Rule {
    fn is_valid(&self, instance: &Value) -> bool {
        match self {
            Rule::Type { names, draft } => names.iter().any(|name| match name.as_str() {
                "integer" => matches!(instance, Value::Number(n) if is_integer(n, *draft)),
                "number" => instance.is_number(),
                "string" => instance.is_string(),
                "object" => instance.is_object(),
                "array" => instance.is_array(),
                "boolean" => instance.is_boolean(),
                "null" => instance.is_null(),
                _ => false,
            }),
            Rule::Bound {
                bound,
                limit,
                exclusive,
                ..
            } => {
                let Value::Number(n) = instance else {
                    return true;
                };
                let order = Decimal::of(n).cmp(limit);
                match (bound, exclusive) {
                    (Bound::Minimum, false) => order != Ordering::Less,
                    (Bound::Minimum, true) => order == Ordering::Greater,
                    (Bound::Maximum, false) => order != Ordering::Greater,
                    (Bound::Maximum, true) => order == Ordering::Less,
                }
            }
            Rule::Nothing => true,
            Rule::MultipleOf { divisor, .. } => match instance {
                Value::Number(n) => Decimal::of(n).is_multiple_of(divisor),
                _ => true,
            },
            Rule::Enum { values, .. } => values.iter().any(|v| equal(v, instance)),
            Rule::Const { value, .. } => equal(value, instance),
            Rule::UniqueItems(false) => true,
            Rule::UniqueItems(true) => match instance {
                Value::Array(items) => {
                    let mut seen = HashSet::with_capacity(items.len());
                    items.iter().all(|item| {
                        let mut key = String::new();
                        canonical(item, &mut key);
                        seen.insert(key)
                    })
                }
                _ => true,
            },
        }
    }

    /// What the rule asks, the value masked (never quoted).
    fn message(&self) -> String {
        match self {
            Rule::Type { names, .. } if names.len() == 1 => {
                format!("value is not of type \"{}\"", names[0])
            }
            Rule::Type { names, .. } => format!(
                "value is not of types {}",
                names
                    .iter()
                    .map(|n| format!("\"{n}\""))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Rule::Bound {
                bound,
                limit_text,
                exclusive,
                ..
            } => {
                let (side, word) = match bound {
                    Bound::Minimum => ("less than", "minimum"),
                    Bound::Maximum => ("greater than", "maximum"),
                };
                let equal = if *exclusive { " or equal to" } else { "" };
                format!("value is {side}{equal} the {word} of {limit_text}")
            }
            Rule::Nothing | Rule::UniqueItems(false) => String::new(),
            Rule::MultipleOf { text, .. } => format!("value is not a multiple of {text}"),
            Rule::Enum { text, .. } => format!("value is not one of {text}"),
            Rule::Const { text, .. } => format!("value is not {text}"),
            Rule::UniqueItems(true) => "value has non-unique elements".to_owned(),
        }
    }
}

impl<'i> Keyword<'i> for Rule {
    fn validate(&self, instance: &'i Value) -> Result<(), ValidationError<'i>> {
        if self.is_valid(instance) {
            Ok(())
        } else {
            Err(error(self.message()))
        }
    }

    fn is_valid(&self, instance: &'i Value) -> bool {
        Rule::is_valid(self, instance)
    }
}

type Built<'a> = Result<Box<dyn for<'i> Keyword<'i>>, ValidationError<'a>>;

/// A schema value that is not what the keyword takes: the meta-schema
/// check, which runs first, refuses such a schema; kept for its text.
fn malformed(keyword: &str) -> ValidationError<'static> {
    error(format!(
        "\"{keyword}\" has a value its draft does not allow"
    ))
}

fn bound<'a>(keyword: &'static str, parent: &Map<String, Value>, value: &'a Value) -> Built<'a> {
    let (bound, exclusive_keyword, exclusive) = match keyword {
        "minimum" => (Bound::Minimum, "exclusiveMinimum", false),
        "maximum" => (Bound::Maximum, "exclusiveMaximum", false),
        "exclusiveMinimum" => (Bound::Minimum, "", true),
        _ => (Bound::Maximum, "", true),
    };
    let limit = match value {
        Value::Number(n) => n,
        // Draft 4's boolean form: its sibling `minimum`/`maximum` reads it.
        Value::Bool(_) if exclusive => return Ok(Box::new(Rule::Nothing)),
        _ => return Err(malformed(keyword)),
    };
    let exclusive = exclusive
        || parent
            .get(exclusive_keyword)
            .and_then(Value::as_bool)
            .unwrap_or(false);
    Ok(Box::new(Rule::Bound {
        bound,
        limit: Decimal::of(limit),
        limit_text: limit.as_str().to_owned(),
        exclusive,
    }))
}

/// `options` with the keywords above in place of the crate's, `type` by
/// `draft`'s rule for integers.
pub fn with_exact_numbers(options: ValidationOptions<'_>, draft: Draft) -> ValidationOptions<'_> {
    let mut options = options
        .with_keyword(
            "type",
            move |_: &Map<String, Value>, value: &Value, _: Location| -> Built<'_> {
                let names = match value {
                    Value::String(name) => vec![name.clone()],
                    Value::Array(names) => names
                        .iter()
                        .map(|n| {
                            n.as_str()
                                .map(str::to_owned)
                                .ok_or_else(|| malformed("type"))
                        })
                        .collect::<Result<_, _>>()?,
                    _ => return Err(malformed("type")),
                };
                Ok(Box::new(Rule::Type { names, draft }))
            },
        )
        .with_keyword(
            "multipleOf",
            |_: &Map<String, Value>, value: &Value, _: Location| -> Built<'_> {
                let Value::Number(n) = value else {
                    return Err(malformed("multipleOf"));
                };
                let divisor = Decimal::of(n);
                if divisor.is_zero() || divisor.negative {
                    return Err(malformed("multipleOf"));
                }
                if divisor.digits.len() > MAX_DIVISOR_DIGITS {
                    return Err(error(format!(
                        "multipleOf {} has more than {MAX_DIVISOR_DIGITS} significant digits, \
                     more than the relay checks exactly: round it",
                        n.as_str()
                    )));
                }
                Ok(Box::new(Rule::MultipleOf {
                    divisor,
                    text: n.as_str().to_owned(),
                }))
            },
        )
        .with_keyword(
            "enum",
            |_: &Map<String, Value>, value: &Value, _: Location| -> Built<'_> {
                let Value::Array(values) = value else {
                    return Err(malformed("enum"));
                };
                Ok(Box::new(Rule::Enum {
                    values: values.clone(),
                    text: value.to_string(),
                }))
            },
        )
        .with_keyword(
            "const",
            |_: &Map<String, Value>, value: &Value, _: Location| -> Built<'_> {
                Ok(Box::new(Rule::Const {
                    value: value.clone(),
                    text: value.to_string(),
                }))
            },
        )
        .with_keyword(
            "uniqueItems",
            |_: &Map<String, Value>, value: &Value, _: Location| -> Built<'_> {
                match value {
                    Value::Bool(unique) => Ok(Box::new(Rule::UniqueItems(*unique))),
                    _ => Err(malformed("uniqueItems")),
                }
            },
        );
    for keyword in ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"] {
        options = options.with_keyword(
            keyword,
            move |parent: &Map<String, Value>, value: &Value, _: Location| {
                bound(keyword, parent, value)
            },
        );
    }
    options
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(text: &str) -> Decimal {
        Decimal::parse(text)
    }

    #[test]
    fn decimals_compare_by_their_exact_value() {
        assert_eq!(d("1.0"), d("1"));
        assert_eq!(d("1e2"), d("100"));
        assert_eq!(d("-0"), d("0.000"));
        assert_eq!(d("-0.0e5"), d("0"));
        assert!(d("99999999999999999.99") > d("99999999999999999.98"));
        assert!(d("9007199254740992.5") > d("9007199254740992"));
        assert!(d("0.09999999999999999999") < d("0.1"));
        assert!(d("1e400") > d("18446744073709551617"));
        assert!(d("-1e400") < d("-9223372036854775808"));
        assert!(d("-2") < d("-1.5"));
        assert!(d("0.5") > d("-0.5"));
        assert!(d("12") > d("9.99"));
    }

    #[test]
    fn integers_and_multiples_are_exact() {
        assert!(d("1e400").is_integer());
        assert!(d("1.0").is_integer());
        assert!(!d("99999999999999999.99").is_integer());
        assert!(d("0.3").is_multiple_of(&d("0.1")));
        assert!(d("1e400").is_multiple_of(&d("0.1")));
        assert!(d("1e400").is_multiple_of(&d("7e-3")) == d("1e403").is_multiple_of(&d("7")));
        assert!(!d("1e400").is_multiple_of(&d("3")));
        assert!(d("99999999999999999.99").is_multiple_of(&d("0.01")));
        assert!(!d("99999999999999999.99").is_multiple_of(&d("0.02")));
        assert!(!d("0.001").is_multiple_of(&d("0.01")));
        assert!(d("18446744073709551617").is_multiple_of(&d("274177")));
        assert!(d("-0").is_multiple_of(&d("3.3")));
    }

    #[test]
    fn equal_values_are_equal_whatever_their_text() {
        let v = |t: &str| serde_json::from_str::<Value>(t).unwrap();
        assert!(equal(&v("[1.0, {\"a\": 1e2}]"), &v("[1, {\"a\": 100}]")));
        assert!(!equal(
            &v("99999999999999999.99"),
            &v("99999999999999999.98")
        ));
        assert!(!equal(&v("1"), &v("true")));
        let (mut a, mut b) = (String::new(), String::new());
        canonical(&v("{\"b\": -0, \"a\": [1e1]}"), &mut a);
        canonical(&v("{\"a\": [10.00], \"b\": 0}"), &mut b);
        assert_eq!(a, b);
    }
}
