//! An outbox event's JSON payload as a Protobuf message, by a `.proto`
//! schema as a registry holds it: proto3's JSON mapping (what
//! `JsonFormat` and `json_format.Parse` read), then Protobuf's binary
//! encoding. Pure: no I/O, no logging.
//!
//! The schema is the registry's text: a `.proto` file's source, or (what
//! Confluent's Python serializer registers) the base64 of a serialized
//! `FileDescriptorProto`. It may import Google's well-known types
//! (`google/protobuf/timestamp.proto`, ...); imports of other subjects
//! (schema references) are not resolved.
//!
//! The mapping, field type ← JSON (docs/contracts.md, "Protobuf", has the
//! full table and the differential tests behind it): what Google's
//! references (Python's `json_format`, Java's `JsonFormat`) both read to
//! the same value is accepted; where they disagree, or Python reads a form
//! loosely, the payload is refused, never guessed at.
//!
//! | Protobuf | JSON |
//! |---|---|
//! | message | an object, fields by their JSON name (`orderId`) or proto name (`order_id`), not both; `null` leaves a field unset; a field the message lacks is an error |
//! | integers | a number or a string of one, read from its exact text (`protobuf/number.rs`): digits at any size, or `10.0`, `1e2` when a double holds the value exactly; in range |
//! | `float`, `double` | a number, a decimal string, `"NaN"`, `"Infinity"`, `"-Infinity"`; in range (never an unasked infinity) |
//! | `bool` | `true`, `false` |
//! | `string` | a string |
//! | `bytes` | base64, either alphabet, padding optional |
//! | enum | a value's name, or its number (a JSON integer or a string of digits; proto2: its own numbers) |
//! | `repeated` | an array (no `null` in it) |
//! | `map<K, V>` | an object; keys as strings of `K` (`"1"`, `"true"`), no two naming one entry |
//! | `oneof` | at most one of its fields set |
//! | `google.protobuf.*` | the JSON form of its type (`protobuf/wkt.rs`: wrappers as their value, `Struct` as an object, `Timestamp` as RFC 3339, `Any` with `"@type"`, ...) |
//!
//! One known difference in what is sent: a `-0.0` in a proto3 float field
//! without presence is not written (the encoder library takes it for the
//! default), where Python's writes it.
//!
//! A proto2 `required` field must be there. An error names the first
//! failing place as a JSON pointer into the payload and why, never a value
//! of the payload.

use std::collections::{HashMap, HashSet};

use base64::Engine as _;
use bytes::Bytes;
use prost::Message as _;
use prost_reflect::{
    Cardinality, DescriptorPool, DynamicMessage, EnumDescriptor, FieldDescriptor, Kind, MapKey,
    MessageDescriptor, Syntax, Value,
};
use protox::file::{ChainFileResolver, File, FileResolver, GoogleFileResolver};
use serde_json::Value as Json;

use super::mapping::{Fail, MappingError, Step, at, fail, is_identifier, json_kind, truncate};
use number::{FloatError, IntegerError};

mod number;
mod wkt;

/// The schema text is not a Protobuf schema this mapping can use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a usable Protobuf schema: {0}")]
pub struct ProtobufSchemaError(pub String);

/// The name the registry's schema is compiled under (its imports are
/// Google's well-known types, by their own names).
const SCHEMA_FILE: &str = "registry-schema.proto";

/// One message type of a `.proto` schema, compiled once, that payloads are
/// encoded as.
pub struct ProtobufEncoder {
    message: MessageDescriptor,
    /// Where the message is in its file, as Confluent's wire format names
    /// it: `[0]` the first top-level message, `[1, 0]` the first message
    /// nested in the second.
    indexes: Vec<u32>,
}

impl std::fmt::Debug for ProtobufEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProtobufEncoder")
            .field("message", &self.message.full_name())
            .field("indexes", &self.indexes)
            .finish()
    }
}

type Mapped = Result<Value, Fail>;

impl ProtobufEncoder {
    /// Compiles `schema_text` (a `.proto` source, or a base64 serialized
    /// `FileDescriptorProto`) and takes its message `message` (a full name,
    /// `shop.OrderPlaced`); `None`: the file's first message, as
    /// Confluent's serializers take it.
    ///
    /// # Errors
    /// The text does not compile, imports a file other than Google's
    /// well-known types, has no message, or not the one named.
    pub fn new(schema_text: &str, message: Option<&str>) -> Result<Self, ProtobufSchemaError> {
        let file = parse_schema(schema_text)?;
        let mut resolver = ChainFileResolver::new();
        resolver.add(OneFile(file));
        resolver.add(GoogleFileResolver::new());
        let mut compiler = protox::Compiler::with_file_resolver(resolver);
        compiler.include_imports(true);
        compiler.open_file(SCHEMA_FILE).map_err(|e| {
            let mut text = e.to_string();
            truncate(&mut text, 300);
            ProtobufSchemaError(text)
        })?;
        let pool: DescriptorPool = compiler.descriptor_pool();
        let file = pool
            .get_file_by_name(SCHEMA_FILE)
            .ok_or_else(|| ProtobufSchemaError("the schema file did not compile".into()))?;
        let message = match message {
            Some(name) => pool
                .get_message_by_name(name.trim_start_matches('.'))
                .filter(|m| m.parent_file().name() == SCHEMA_FILE)
                .ok_or_else(|| ProtobufSchemaError(format!("the schema has no message {name}")))?,
            None => file
                .messages()
                .next()
                .ok_or_else(|| ProtobufSchemaError("the schema has no message".into()))?,
        };
        // A message's path in its file: [4, i] for the i-th top-level
        // message (field 4 of FileDescriptorProto), then [3, j] for each
        // nesting (field 3 of DescriptorProto). The indexes are the i, j.
        let indexes = message
            .path()
            .chunks(2)
            .map(|step| u32::try_from(step[1]).unwrap_or(0))
            .collect();
        Ok(ProtobufEncoder { message, indexes })
    }

    /// The message's full name (`shop.OrderPlaced`).
    pub fn message_name(&self) -> &str {
        self.message.full_name()
    }

    /// Where the message is in its file, for Confluent's wire format.
    pub fn message_indexes(&self) -> &[u32] {
        &self.indexes
    }

    /// `payload` in Protobuf's binary encoding (the message alone: the
    /// caller frames it, see [`super::wire::frame_protobuf`]).
    ///
    /// # Errors
    /// The payload does not fit the message: the first place and why.
    pub fn encode(&self, payload: &Json) -> Result<Vec<u8>, MappingError> {
        let message = message(&self.message, payload).map_err(Fail::finish)?;
        Ok(message.encode_to_vec())
    }
}

/// The registry's text as a file: a `.proto` source, else the base64 of a
/// serialized `FileDescriptorProto`.
fn parse_schema(text: &str) -> Result<File, ProtobufSchemaError> {
    let not_source = match File::from_source(SCHEMA_FILE, text) {
        Ok(file) => return Ok(file),
        Err(e) => e,
    };
    base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .ok()
        .and_then(|bytes| prost_types::FileDescriptorProto::decode(bytes.as_slice()).ok())
        .filter(|d| !d.message_type.is_empty())
        .map(|mut descriptor| {
            descriptor.name = Some(SCHEMA_FILE.to_owned());
            File::from_file_descriptor_proto(descriptor)
        })
        .ok_or_else(|| {
            let mut text = not_source.to_string();
            truncate(&mut text, 300);
            ProtobufSchemaError(text)
        })
}

/// A resolver of the one schema file.
struct OneFile(File);

impl FileResolver for OneFile {
    fn open_file(&self, name: &str) -> Result<File, protox::Error> {
        if name == SCHEMA_FILE {
            Ok(self.0.clone())
        } else {
            Err(protox::Error::file_not_found(name))
        }
    }
}

fn message(desc: &MessageDescriptor, json: &Json) -> Result<DynamicMessage, Fail> {
    if let Some(known) = wkt::well_known(desc, json) {
        return known;
    }
    let Json::Object(object) = json else {
        return Err(fail(format!(
            "expected message {}, got {}",
            desc.full_name(),
            json_kind(json)
        )));
    };
    let mut out = DynamicMessage::new(desc.clone());
    let mut oneofs: HashMap<String, String> = HashMap::new();
    let mut given = HashSet::new();
    for (key, value) in object {
        let Some(field) = desc
            .get_field_by_json_name(key)
            .or_else(|| desc.get_field_by_name(key))
        else {
            return Err(if is_identifier(key) {
                fail(format!("message {} has no field {key}", desc.full_name()))
            } else {
                fail(format!(
                    "a field message {} does not have",
                    desc.full_name()
                ))
            });
        };
        let step = || Step::Field(field.json_name().to_owned());
        // One field by its JSON name and its proto name: Python's reader
        // takes whichever comes last, Java's refuses. Which one a sender
        // meant is unknown (and the payload's key order is lost here), so
        // the event is refused rather than one value silently dropped.
        if !given.insert(field.number()) {
            return Err(at(step())(fail(format!(
                "field {} is given twice, as {} and as {}: keep one",
                field.name(),
                field.json_name(),
                field.name()
            ))));
        }
        if value.is_null() && !is_null_value(&field) {
            continue;
        }
        if let Some(oneof) = field.containing_oneof().filter(|o| !o.is_synthetic())
            && let Some(first) = oneofs.insert(oneof.name().to_owned(), field.name().to_owned())
        {
            return Err(at(step())(fail(format!(
                "{first} and {} are both set, of oneof {}",
                field.name(),
                oneof.name()
            ))));
        }
        let mapped = field_value(&field, value).map_err(at(step()))?;
        out.set_field(&field, mapped);
    }
    if let Some(missing) = desc
        .fields()
        .find(|f| f.cardinality() == Cardinality::Required && !out.has_field(f))
    {
        return Err(fail(format!(
            "required field {} of message {} is missing",
            missing.name(),
            desc.full_name()
        )));
    }
    Ok(out)
}

/// A `google.protobuf.Value` field takes `null` as its `NULL_VALUE`.
fn is_null_value(field: &FieldDescriptor) -> bool {
    matches!(field.kind(), Kind::Message(m) if m.full_name() == "google.protobuf.Value")
        || matches!(field.kind(), Kind::Enum(e) if e.full_name() == "google.protobuf.NullValue")
}

fn field_value(field: &FieldDescriptor, json: &Json) -> Mapped {
    if field.is_map() {
        let Kind::Message(entry) = field.kind() else {
            return Err(fail("a map field without its entry type"));
        };
        let Json::Object(object) = json else {
            return Err(fail(format!(
                "expected map (an object), got {}",
                json_kind(json)
            )));
        };
        let (key_field, value_field) = (entry.map_entry_key_field(), entry.map_entry_value_field());
        let mut map = HashMap::with_capacity(object.len());
        for (key, value) in object {
            let key = map_key(&key_field.kind(), key).map_err(at(Step::MapValue))?;
            let value = single(&value_field.kind(), value).map_err(at(Step::MapValue))?;
            // `"1"` and `"1.0"` are one int key: which value a reader keeps
            // depends on the key order, which is lost here.
            if map.insert(key, value).is_some() {
                return Err(at(Step::MapValue)(fail(format!(
                    "two keys of map {} name the same entry: keep one",
                    field.name()
                ))));
            }
        }
        return Ok(Value::Map(map));
    }
    if field.is_list() {
        let Json::Array(items) = json else {
            return Err(fail(format!(
                "expected repeated {}, an array, got {}",
                kind_name(&field.kind()),
                json_kind(json)
            )));
        };
        let kind = field.kind();
        return items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                if item.is_null() && !is_null_value(field) {
                    return Err(at(Step::Index(i))(fail("null in a repeated field")));
                }
                single(&kind, item).map_err(at(Step::Index(i)))
            })
            .collect::<Result<_, _>>()
            .map(Value::List);
    }
    single(&field.kind(), json)
}

fn single(kind: &Kind, json: &Json) -> Mapped {
    let expected = || {
        fail(format!(
            "expected {}, got {}",
            kind_name(kind),
            json_kind(json)
        ))
    };
    Ok(match kind {
        Kind::Message(desc) => Value::Message(message(desc, json)?),
        Kind::Enum(desc) => Value::EnumNumber(enum_number(desc, json)?),
        Kind::Bool => Value::Bool(json.as_bool().ok_or_else(expected)?),
        Kind::String => Value::String(json.as_str().ok_or_else(expected)?.to_owned()),
        Kind::Bytes => {
            let text = json.as_str().ok_or_else(expected)?;
            Value::Bytes(Bytes::from(base64_bytes(text).ok_or_else(|| {
                fail("expected bytes as base64 (standard or URL-safe)")
            })?))
        }
        Kind::Double => Value::F64(float(json, kind)?),
        Kind::Float => {
            let v = float(json, kind)?;
            if v.is_finite() && v.abs() > f64::from(f32::MAX) {
                return Err(fail("out of the range of float"));
            }
            // The nearest float, as the references' C cast rounds.
            #[allow(clippy::cast_possible_truncation)]
            Value::F32(v as f32)
        }
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => {
            Value::I32(in_range(integer(json, kind)?, kind)?)
        }
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => {
            Value::I64(in_range(integer(json, kind)?, kind)?)
        }
        Kind::Uint32 | Kind::Fixed32 => Value::U32(in_range(integer(json, kind)?, kind)?),
        Kind::Uint64 | Kind::Fixed64 => Value::U64(in_range(integer(json, kind)?, kind)?),
    })
}

/// An integer as proto3 JSON writes one: a JSON number or a string of one
/// ([`number::integer`]), exact at any size. Wide enough for every
/// Protobuf integer type.
fn integer(json: &Json, kind: &Kind) -> Result<i128, Fail> {
    let text = match json {
        Json::Number(n) => n.to_string(),
        Json::String(s) => s.clone(),
        _ => {
            return Err(fail(format!(
                "expected {}, got {}",
                kind_name(kind),
                json_kind(json)
            )));
        }
    };
    number::integer(&text).map_err(|e| match e {
        IntegerError::TooLarge => fail(format!("out of the range of {}", kind_name(kind))),
        IntegerError::NotANumber => fail(format!(
            "expected {}, got {}",
            kind_name(kind),
            if json.is_string() {
                "a string that is not an integer"
            } else {
                json_kind(json)
            }
        )),
        e => fail(format!("expected {}, got {e}", kind_name(kind))),
    })
}

fn in_range<T: TryFrom<i128>>(value: i128, kind: &Kind) -> Result<T, Fail> {
    T::try_from(value).map_err(|_| fail(format!("out of the range of {}", kind_name(kind))))
}

fn float(json: &Json, kind: &Kind) -> Result<f64, Fail> {
    let read = match json {
        Json::Number(n) => number::number_f64(&n.to_string()),
        Json::String(s) => number::string_f64(s),
        _ => Err(FloatError::NotANumber),
    };
    read.map_err(|e| match e {
        FloatError::TooLarge => fail(format!(
            "out of the range of {} (an infinity is written \"Infinity\" or \"-Infinity\")",
            kind_name(kind)
        )),
        FloatError::NotANumber => fail(format!(
            "expected {}, got {}",
            kind_name(kind),
            if json.is_string() {
                "a string that is not a number, \"NaN\", \"Infinity\" or \"-Infinity\""
            } else {
                json_kind(json)
            }
        )),
    })
}

/// An enum value: its name, or its number as a JSON integer or a string
/// of digits. A number written with a fraction must be an integer (Python's
/// reader would cut `1.5` to 1); a proto2 enum takes only its own numbers.
fn enum_number(desc: &EnumDescriptor, json: &Json) -> Result<i32, Fail> {
    let number = match json {
        Json::String(name) => {
            if let Some(value) = desc.get_value_by_name(name) {
                return Ok(value.number());
            }
            if !number::is_digits(name) {
                return Err(fail(format!("not a value of enum {}", desc.full_name())));
            }
            number::integer(name)
        }
        Json::Number(n) => number::integer(&n.to_string()),
        other => {
            return Err(fail(format!(
                "expected enum {} (a name or number), got {}",
                desc.full_name(),
                json_kind(other)
            )));
        }
    };
    let number = number
        .ok()
        .and_then(|n| i32::try_from(n).ok())
        .ok_or_else(|| fail(format!("not a number of enum {}", desc.full_name())))?;
    let open = desc.parent_file().syntax() != Syntax::Proto2;
    if open || desc.get_value(number).is_some() {
        Ok(number)
    } else {
        Err(fail(format!("not a number of enum {}", desc.full_name())))
    }
}

/// A map key: the key's text read as the key type, integers by the rule of
/// integers in strings.
fn map_key(kind: &Kind, key: &str) -> Result<MapKey, Fail> {
    let number = || -> Result<i128, Fail> {
        number::integer(key).map_err(|e| match e {
            IntegerError::TooLarge => {
                fail(format!("a map key out of the range of {}", kind_name(kind)))
            }
            _ => fail(format!("a map key that is not a {}", kind_name(kind))),
        })
    };
    Ok(match kind {
        Kind::String => MapKey::String(key.to_owned()),
        Kind::Bool => match key {
            "true" => MapKey::Bool(true),
            "false" => MapKey::Bool(false),
            _ => return Err(fail("a map key that is not true or false")),
        },
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => MapKey::I32(in_range(number()?, kind)?),
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => MapKey::I64(in_range(number()?, kind)?),
        Kind::Uint32 | Kind::Fixed32 => MapKey::U32(in_range(number()?, kind)?),
        Kind::Uint64 | Kind::Fixed64 => MapKey::U64(in_range(number()?, kind)?),
        _ => return Err(fail("a map key type Protobuf does not allow")),
    })
}

/// Base64, its two alphabets alike (even mixed, as the references read
/// them), padding optional; bits past the last byte are ignored, as the
/// references ignore them. Nothing else: no blanks, no stray characters.
fn base64_bytes(text: &str) -> Option<Vec<u8>> {
    const CONFIG: base64::engine::GeneralPurposeConfig =
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::RequireNone)
            .with_decode_allow_trailing_bits(true);
    const STANDARD: base64::engine::GeneralPurpose =
        base64::engine::GeneralPurpose::new(&base64::alphabet::STANDARD, CONFIG);
    let unpadded = text
        .strip_suffix("==")
        .or_else(|| text.strip_suffix('='))
        .unwrap_or(text);
    // Padding only fills the last group of four (`AQ==`, `AQ=`).
    let pad = text.len() - unpadded.len();
    if pad > 0 && (unpadded.len().is_multiple_of(4) || unpadded.len() % 4 + pad > 4) {
        return None;
    }
    let standard: String = unpadded
        .chars()
        .map(|c| match c {
            '-' => '+',
            '_' => '/',
            c => c,
        })
        .collect();
    STANDARD.decode(standard).ok()
}

/// What a field type is called in an error.
fn kind_name(kind: &Kind) -> String {
    match kind {
        Kind::Message(m) => format!("message {}", m.full_name()),
        Kind::Enum(e) => format!("enum {}", e.full_name()),
        Kind::Double => "double".into(),
        Kind::Float => "float".into(),
        Kind::Int32 => "int32".into(),
        Kind::Int64 => "int64".into(),
        Kind::Uint32 => "uint32".into(),
        Kind::Uint64 => "uint64".into(),
        Kind::Sint32 => "sint32".into(),
        Kind::Sint64 => "sint64".into(),
        Kind::Fixed32 => "fixed32".into(),
        Kind::Fixed64 => "fixed64".into(),
        Kind::Sfixed32 => "sfixed32".into(),
        Kind::Sfixed64 => "sfixed64".into(),
        Kind::Bool => "bool".into(),
        Kind::String => "string".into(),
        Kind::Bytes => "bytes".into(),
    }
}

#[cfg(test)]
mod tests;
