//! An outbox event's JSON payload as an Avro record, by an Avro schema:
//! the mapping a user writing JSON expects, then Avro's binary encoding
//! (the `apache-avro` crate's). Pure: no I/O, no logging.
//!
//! The mapping, schema type ← JSON:
//!
//! | Avro | JSON |
//! |---|---|
//! | `null` | `null` |
//! | `boolean` | `true`, `false` |
//! | `int`, `long` | an integer written without fraction or exponent, in range (not `1.0`, not `1e3`, not `"1"`) |
//! | `float`, `double` | any number within the type's range, rounded once from its text to the nearest (IEEE 754) |
//! | `string` | a string |
//! | `bytes`, `fixed` | a base64 string (standard alphabet, `=` padding optional); `fixed` of exactly its size |
//! | `enum` | one of its symbols, as a string |
//! | `array` | an array |
//! | `map` | an object |
//! | record | an object, fields by name (an alias is refused: a value given by one is never dropped for the default); a missing field takes its default, or is null when its type is a union with `null` and it has none; a key that is no field's name is an error |
//! | union | `null` for its `null` branch; else the value as the first branch it fits, in the schema's order; else Avro's JSON encoding `{"<branch type name>": value}` |
//! | `date` | days since 1970-01-01, or `"2024-03-01"` |
//! | `time-millis`, `time-micros` | since midnight, or `"13:45:00.250"` |
//! | `timestamp-*` | since the epoch, or RFC 3339 `"2024-03-01T13:45:00.25Z"` |
//! | `local-timestamp-*` | since the epoch, or `"2024-03-01T13:45:00.25"` |
//! | `uuid` | its 8-4-4-4-12 text form, written as given |
//! | `decimal` | a number or a string (`"12.30"`, `1.5e3`), with at most `scale` decimal places as written (zeros too) and `precision` digits at the scale: never rounded |
//! | `duration` | `{"months": m, "days": d, "millis": ms}` |
//!
//! Numbers are read from their text (serde_json's `arbitrary_precision`),
//! never through an f64: a value that does not fit is an error, never a
//! changed value. docs/contracts.md ("Avro") has where this is stricter
//! than fastavro and why; `tests/reference/avro.rs` checks it.
//!
//! A field's default in the schema is read as Avro's JSON encoding says
//! (a union's default is its first branch's, bytes as code points 0-255).
//! `big-decimal` is refused when the schema is read.
//!
//! An error names the first failing place as a JSON pointer into the
//! payload and why (`/amount: expected long, got string`); never a value of
//! the payload. A map's key is payload data: its place shows as `*`.

use std::collections::HashMap;

use apache_avro::schema::{
    DecimalSchema, InnerDecimalSchema, Name, NamespaceRef, RecordSchema, ResolvedSchema, UuidSchema,
};
use apache_avro::types::Value;
use apache_avro::{Days, Decimal, Duration, Millis, Months, Schema};
use base64::Engine as _;
use serde_json::Value as Json;

mod logical;
mod names;

use names::{branch_names, describe, union_description};

use super::mapping::{Fail, MappingError, Step, at, fail, is_identifier, json_kind, truncate};

/// The schema text is not an Avro schema this mapping handles.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a usable Avro schema: {0}")]
pub struct AvroSchemaError(pub String);

/// One Avro schema, parsed once, that payloads are encoded by.
pub struct AvroEncoder {
    schema: Schema,
    /// The named types (records, enums, fixed) by full name, which a
    /// schema's later uses of a name refer to.
    names: HashMap<Name, Schema>,
}

impl std::fmt::Debug for AvroEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AvroEncoder")
            .field("record", &self.record_name())
            .finish_non_exhaustive()
    }
}

/// Where a JSON value comes from: the payload, or a default in the schema
/// (Avro's JSON encoding).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Source {
    Payload,
    Default,
}

type Mapped = Result<Value, Fail>;

impl AvroEncoder {
    /// Parses `schema_text` (Avro's JSON schema, as the registry holds it).
    ///
    /// # Errors
    /// Not a valid Avro schema, a name it uses is not defined in it (schema
    /// references are not resolved), or it uses `big-decimal`.
    pub fn new(schema_text: &str) -> Result<AvroEncoder, AvroSchemaError> {
        let schema = Schema::parse_str(schema_text).map_err(|e| {
            let mut text = e.to_string();
            truncate(&mut text, 200);
            AvroSchemaError(text)
        })?;
        refuse_unsupported(&schema)?;
        let names = ResolvedSchema::try_from(&schema)
            .map_err(|e| AvroSchemaError(e.to_string()))?
            .get_names()
            .iter()
            .map(|(name, schema)| (name.clone(), (*schema).clone()))
            .collect();
        Ok(AvroEncoder { schema, names })
    }

    /// The parsed schema.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// The full name of the schema's record (`namespace.name`), for the
    /// record-name subject strategies; `None` when it is not a record.
    pub fn record_name(&self) -> Option<String> {
        match self.schema() {
            Schema::Record(RecordSchema { name, .. }) => Some(name.fullname(None)),
            _ => None,
        }
    }

    /// `payload` as an Avro value of the schema.
    ///
    /// # Errors
    /// The payload does not fit the schema: the first place and why.
    pub fn to_value(&self, payload: &Json) -> Result<Value, MappingError> {
        self.map(self.schema(), payload, Source::Payload, None)
            .map_err(Fail::finish)
    }

    /// `payload` in Avro's binary encoding (the record alone: the caller
    /// frames it, see [`super::wire`]).
    ///
    /// # Errors
    /// As [`AvroEncoder::to_value`].
    pub fn encode(&self, payload: &Json) -> Result<Vec<u8>, MappingError> {
        let value = self.to_value(payload)?;
        // No validation by the crate: the mapping made the value by the
        // schema, and the crate's validator logs values it refuses.
        apache_avro::writer::datum::GenericDatumWriter::builder(self.schema())
            .validate(false)
            .build()
            .and_then(|w| w.write_value_to_vec(value))
            .map_err(|_| MappingError {
                path: "/".into(),
                // Not the crate's text: it may quote the value.
                reason: "the Avro encoder refused the value".into(),
            })
    }

    fn map(&self, schema: &Schema, json: &Json, from: Source, ns: NamespaceRef<'_>) -> Mapped {
        use Schema as S;
        let expected = || {
            fail(format!(
                "expected {}, got {}",
                describe(schema),
                json_kind(json)
            ))
        };
        match schema {
            S::Ref { name } => {
                let name = name.fully_qualified_name(ns);
                match self.names.get(name.as_ref()) {
                    Some(named) => self.map(named, json, from, ns),
                    None => Err(fail(format!("type {} is not defined", name.fullname(None)))),
                }
            }
            S::Null => json.is_null().then_some(Value::Null).ok_or_else(expected),
            S::Boolean => json.as_bool().map(Value::Boolean).ok_or_else(expected),
            S::Int => integer(json, schema).map(Value::Int),
            S::Long => long(json, schema).map(Value::Long),
            S::Float => float(json, schema).map(Value::Float),
            S::Double => float(json, schema).map(Value::Double),
            S::String => json
                .as_str()
                .map(|s| Value::String(s.to_string()))
                .ok_or_else(expected),
            S::Bytes => bytes(json, from, schema).map(Value::Bytes),
            S::Fixed(fixed) => {
                let b = bytes(json, from, schema)?;
                if b.len() != fixed.size {
                    return Err(fail(format!(
                        "expected {} bytes for fixed {}, got {}",
                        fixed.size,
                        fixed.name.fullname(None),
                        b.len()
                    )));
                }
                Ok(Value::Fixed(fixed.size, b))
            }
            S::Enum(e) => {
                let symbol = json.as_str().ok_or_else(expected)?;
                match e.symbols.iter().position(|s| s == symbol) {
                    Some(i) => Ok(Value::Enum(i as u32, symbol.to_string())),
                    None => Err(fail(format!(
                        "not one of the {} symbols of enum {}",
                        e.symbols.len(),
                        e.name.fullname(None)
                    ))),
                }
            }
            S::Array(array) => {
                let items = json.as_array().ok_or_else(expected)?;
                let mapped = items.iter().enumerate().map(|(i, item)| {
                    self.map(&array.items, item, from, ns)
                        .map_err(at(Step::Index(i)))
                });
                Ok(Value::Array(mapped.collect::<Result<_, _>>()?))
            }
            S::Map(map) => {
                let entries = json.as_object().ok_or_else(expected)?;
                let mut out = HashMap::with_capacity(entries.len());
                for (key, value) in entries {
                    let value = self
                        .map(&map.types, value, from, ns)
                        .map_err(at(Step::MapValue))?;
                    out.insert(key.clone(), value);
                }
                Ok(Value::Map(out))
            }
            S::Record(record) => self.record(record, json, from, ns),
            S::Union(union) => self.union(union.variants(), json, from, ns),
            S::Decimal(d) => self.decimal(d, json, from, schema),
            S::Uuid(UuidSchema::String) => {
                let text = json.as_str().ok_or_else(expected)?;
                if !logical::is_uuid(text) {
                    return Err(fail(
                        "expected a UUID as 8-4-4-4-12 hex digits with hyphens",
                    ));
                }
                // Written as the payload has it: the crate writes a UUID
                // value in lowercase, so other text goes as the string it
                // is (the same bytes on the wire).
                Ok(match apache_avro::Uuid::parse_str(text) {
                    Ok(uuid) if uuid.to_string() == text => Value::Uuid(uuid),
                    _ => Value::String(text.to_string()),
                })
            }
            S::Uuid(_) => {
                let text = json.as_str().ok_or_else(expected)?;
                logical::is_uuid(text)
                    .then(|| apache_avro::Uuid::parse_str(text).ok())
                    .flatten()
                    .map(Value::Uuid)
                    .ok_or_else(|| fail("expected a UUID as 8-4-4-4-12 hex digits with hyphens"))
            }
            S::Duration(_) => duration(json, from, schema),
            S::BigDecimal => Err(fail("big-decimal is not supported")),
            S::Date => logical::date(json).map(Value::Date).ok_or_else(expected),
            S::TimeMillis => logical::time(json, 1_000)
                .and_then(|t| i32::try_from(t).ok())
                .map(Value::TimeMillis)
                .ok_or_else(expected),
            S::TimeMicros => logical::time(json, 1_000_000)
                .map(Value::TimeMicros)
                .ok_or_else(expected),
            S::TimestampMillis => {
                timestamp(json, logical::Unit::Millis, false, schema).map(Value::TimestampMillis)
            }
            S::TimestampMicros => {
                timestamp(json, logical::Unit::Micros, false, schema).map(Value::TimestampMicros)
            }
            S::TimestampNanos => {
                timestamp(json, logical::Unit::Nanos, false, schema).map(Value::TimestampNanos)
            }
            S::LocalTimestampMillis => timestamp(json, logical::Unit::Millis, true, schema)
                .map(Value::LocalTimestampMillis),
            S::LocalTimestampMicros => timestamp(json, logical::Unit::Micros, true, schema)
                .map(Value::LocalTimestampMicros),
            S::LocalTimestampNanos => {
                timestamp(json, logical::Unit::Nanos, true, schema).map(Value::LocalTimestampNanos)
            }
        }
    }

    fn record(&self, record: &RecordSchema, json: &Json, from: Source, ns: NamespaceRef) -> Mapped {
        let name = record.name.fullname(None);
        let Some(object) = json.as_object() else {
            return Err(fail(format!(
                "expected record {name}, got {}",
                json_kind(json)
            )));
        };
        // Names in the record's fields are relative to its namespace.
        let inner = record.name.namespace().or(ns);
        // Fields by their names only: an alias is for reading old data, and
        // a value given under one would otherwise be dropped for the
        // field's default (the reference writer ignores unknown keys).
        for key in object.keys() {
            if record.fields.iter().any(|f| &f.name == key) {
                continue;
            }
            if let Some(field) = record.fields.iter().find(|f| f.aliases.contains(key)) {
                let why = format!(
                    "{key} is an alias of field {} of record {name}: give the field by its name",
                    field.name
                );
                return Err(at(Step::Field(key.clone()))(fail(why)));
            }
            return Err(if is_identifier(key) {
                fail(format!("record {name} has no field {key}"))
            } else {
                fail(format!("a field record {name} does not have"))
            });
        }
        let mut fields = Vec::with_capacity(record.fields.len());
        for field in &record.fields {
            let value = match (object.get(&field.name), &field.default) {
                (Some(value), _) => self.map(&field.schema, value, from, inner),
                (None, Some(default)) => self.map(&field.schema, default, Source::Default, inner),
                (None, None) if self.nullable(&field.schema, inner) => {
                    self.map(&field.schema, &Json::Null, from, inner)
                }
                (None, None) => Err(fail("missing, and the field has no default")),
            }
            .map_err(at(Step::Field(field.name.clone())))?;
            fields.push((field.name.clone(), value));
        }
        Ok(Value::Record(fields))
    }

    fn union(&self, variants: &[Schema], json: &Json, from: Source, ns: NamespaceRef) -> Mapped {
        let null = variants.iter().position(|v| matches!(v, Schema::Null));
        if from == Source::Default {
            // Avro: a union's default is a value of its first branch.
            let first = variants.first().ok_or_else(|| fail("empty union"))?;
            return Ok(Value::Union(0, Box::new(self.map(first, json, from, ns)?)));
        }
        if json.is_null() {
            return match null {
                Some(i) => Ok(Value::Union(i as u32, Box::new(Value::Null))),
                None => Err(fail(format!(
                    "expected {}, got null",
                    union_description(variants)
                ))),
            };
        }
        let others: Vec<usize> = (0..variants.len()).filter(|&i| Some(i) != null).collect();
        let mut first_error = None;
        for &i in &others {
            match self.map(&variants[i], json, from, ns) {
                Ok(value) => return Ok(Value::Union(i as u32, Box::new(value))),
                Err(e) => first_error = first_error.or(Some(e)),
            }
        }
        // Avro's JSON encoding: {"<type name>": value}.
        if let Some((key, inner)) = json
            .as_object()
            .filter(|o| o.len() == 1)
            .and_then(|o| o.iter().next())
            && let Some(i) = others
                .iter()
                .copied()
                .find(|&i| branch_names(&variants[i], ns).contains(key))
        {
            let value = self
                .map(&variants[i], inner, from, ns)
                .map_err(at(Step::Field(key.clone())))?;
            return Ok(Value::Union(i as u32, Box::new(value)));
        }
        if let ([_], Some(error)) = (&others[..], first_error) {
            // ["null", T]: the value is meant as a T, and T's error tells.
            return Err(error);
        }
        Err(fail(format!(
            "{} fits no branch of {}",
            json_kind(json),
            union_description(variants)
        )))
    }

    fn decimal(&self, d: &DecimalSchema, json: &Json, from: Source, schema: &Schema) -> Mapped {
        if from == Source::Default {
            return Ok(Value::Decimal(Decimal::from(bytes(json, from, schema)?)));
        }
        let text = match json {
            Json::Number(n) => n.to_string(),
            Json::String(s) => s.clone(),
            _ => return Err(fail(format!("expected decimal, got {}", json_kind(json)))),
        };
        let too_many = || {
            fail(format!(
                "more than the {} digits of decimal({}, {})",
                d.precision, d.precision, d.scale
            ))
        };
        let unscaled = match logical::unscaled(&text, d.scale) {
            Ok(unscaled) => unscaled,
            Err(logical::DecimalError::TooBig) => return Err(too_many()),
            Err(e) => return Err(fail(e.to_string())),
        };
        // Digits at the schema's scale: 1e3 at scale 2 is 100000, six.
        if logical::digits(unscaled) > d.precision {
            return Err(too_many());
        }
        let bytes = logical::twos_complement(unscaled);
        if let InnerDecimalSchema::Fixed(fixed) = &d.inner
            && bytes.len() > fixed.size
        {
            return Err(fail(format!(
                "does not fit the {} bytes of fixed {}",
                fixed.size,
                fixed.name.fullname(None)
            )));
        }
        Ok(Value::Decimal(Decimal::from(bytes)))
    }

    /// Whether `schema` is a union with a `null` branch.
    fn nullable(&self, schema: &Schema, ns: NamespaceRef) -> bool {
        match schema {
            Schema::Union(u) => u.variants().iter().any(|v| matches!(v, Schema::Null)),
            Schema::Ref { name } => self
                .names
                .get(name.fully_qualified_name(ns).as_ref())
                .is_some_and(|s| self.nullable(s, ns)),
            _ => false,
        }
    }
}

fn integer(json: &Json, schema: &Schema) -> Result<i32, Fail> {
    i32::try_from(long(json, schema)?).map_err(|_| {
        fail(format!(
            "integer out of range for {} (-2^31 to 2^31-1)",
            describe(schema)
        ))
    })
}

/// A number written as an integer (no fraction, no exponent: `1.0` and
/// `1e3` are refused, never truncated), read from its text.
fn long(json: &Json, schema: &Schema) -> Result<i64, Fail> {
    let Json::Number(n) = json else {
        return Err(fail(format!(
            "expected {}, got {}",
            describe(schema),
            json_kind(json)
        )));
    };
    let text = n.to_string();
    let digits = text.strip_prefix('-').unwrap_or(&text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(fail(format!(
            "expected {} as an integer without fraction or exponent, got a number",
            describe(schema)
        )));
    }
    text.parse().map_err(|_| {
        fail(format!(
            "integer out of range for {} (-2^63 to 2^63-1)",
            describe(schema)
        ))
    })
}

/// A `float` or `double` from the number's text, rounded once to the
/// nearest value of the type (IEEE 754, ties to even); a number beyond
/// the type's range is refused, never made infinite.
fn float<F: std::str::FromStr + Float>(json: &Json, schema: &Schema) -> Result<F, Fail> {
    let Json::Number(n) = json else {
        return Err(fail(format!(
            "expected {}, got {}",
            describe(schema),
            json_kind(json)
        )));
    };
    match n.to_string().parse::<F>() {
        Ok(f) if f.finite() => Ok(f),
        _ => Err(fail(format!(
            "number out of range for {}",
            describe(schema)
        ))),
    }
}

/// What [`float`] needs of `f32` and `f64`.
trait Float {
    fn finite(&self) -> bool;
}

impl Float for f32 {
    fn finite(&self) -> bool {
        self.is_finite()
    }
}

impl Float for f64 {
    fn finite(&self) -> bool {
        self.is_finite()
    }
}

/// Bytes of a `bytes` or `fixed`: base64 in a payload, code points 0-255
/// in a default.
fn bytes(json: &Json, from: Source, schema: &Schema) -> Result<Vec<u8>, Fail> {
    let Some(text) = json.as_str() else {
        return Err(fail(format!(
            "expected {} (base64), got {}",
            describe(schema),
            json_kind(json)
        )));
    };
    match from {
        Source::Payload => BASE64
            .decode(text)
            .map_err(|_| fail(format!("expected {} as base64", describe(schema)))),
        Source::Default => text
            .chars()
            .map(|c| u8::try_from(u32::from(c)).ok())
            .collect::<Option<_>>()
            .ok_or_else(|| fail("a default's bytes are code points 0-255")),
    }
}

/// Standard base64, padding optional.
const BASE64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

fn timestamp(json: &Json, unit: logical::Unit, local: bool, schema: &Schema) -> Result<i64, Fail> {
    match json {
        Json::String(text) => logical::timestamp(text, unit, local).ok_or_else(|| {
            fail(if local {
                "expected a local date-time such as 2024-03-01T13:45:00.25"
            } else {
                "expected an RFC 3339 date-time such as 2024-03-01T13:45:00.25Z"
            })
        }),
        _ => long(json, schema),
    }
}

fn duration(json: &Json, from: Source, schema: &Schema) -> Mapped {
    if from == Source::Default {
        let b: [u8; 12] = bytes(json, from, schema)?
            .try_into()
            .map_err(|_| fail("a duration is 12 bytes"))?;
        return Ok(Value::Duration(Duration::from(b)));
    }
    let part = |name: &str| {
        json.get(name)
            .and_then(Json::as_u64)
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| {
                fail(format!(
                    "expected a duration {{\"months\", \"days\", \"millis\"}} of unsigned 32-bit \
                     integers ({name} is not)"
                ))
            })
    };
    if json.as_object().is_none_or(|o| o.len() != 3) {
        return Err(fail(format!(
            "expected a duration {{\"months\", \"days\", \"millis\"}}, got {}",
            json_kind(json)
        )));
    }
    Ok(Value::Duration(Duration::new(
        Months::new(part("months")?),
        Days::new(part("days")?),
        Millis::new(part("millis")?),
    )))
}

/// Refuses schemas with types the mapping cannot fill.
fn refuse_unsupported(schema: &Schema) -> Result<(), AvroSchemaError> {
    let nested: Vec<&Schema> = match schema {
        Schema::BigDecimal => {
            return Err(AvroSchemaError(
                "the big-decimal logical type is not supported".into(),
            ));
        }
        Schema::Array(a) => vec![&a.items],
        Schema::Map(m) => vec![&m.types],
        Schema::Union(u) => u.variants().iter().collect(),
        Schema::Record(r) => r.fields.iter().map(|f| &f.schema).collect(),
        _ => Vec::new(),
    };
    nested.into_iter().try_for_each(refuse_unsupported)
}

#[cfg(test)]
mod tests;
