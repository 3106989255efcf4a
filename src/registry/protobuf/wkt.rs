//! Google's well-known types (`google.protobuf.*`) in their JSON forms.
//!
//! The wrappers, `Struct`, `Value`, `ListValue` and `Any` hold payload
//! numbers and fields, so they are read here by the same rules as any
//! field (exact number text, no duplicate names). `Timestamp`, `Duration`
//! and `FieldMask` are strings, read by prost-reflect's mapping after the
//! checks where it is more lenient than the references (a leap second, more
//! than nine fractional digits).

use prost::Message as _;
use prost_reflect::{DynamicMessage, MessageDescriptor, Value};
use serde_json::Value as Json;

use super::{Fail, at, fail, json_kind, message, single};
use crate::registry::mapping::Step;

/// `json` as the well-known type `desc`; `None`: `desc` is not one this
/// module reads (the caller reads it as a plain message).
pub(super) fn well_known(
    desc: &MessageDescriptor,
    json: &Json,
) -> Option<Result<DynamicMessage, Fail>> {
    let name = desc.full_name();
    let name = name.strip_prefix("google.protobuf.")?;
    Some(match name {
        "DoubleValue" | "FloatValue" | "Int64Value" | "UInt64Value" | "Int32Value"
        | "UInt32Value" | "BoolValue" | "StringValue" | "BytesValue" => wrapper(desc, json),
        "Value" => value(desc, json),
        "Struct" => structure(desc, json),
        "ListValue" => list(desc, json),
        "Any" => any(desc, json),
        "Timestamp" | "Duration" | "FieldMask" => string_form(desc, json),
        _ => return None,
    })
}

fn wrapper(desc: &MessageDescriptor, json: &Json) -> Result<DynamicMessage, Fail> {
    let field = desc
        .get_field_by_name("value")
        .ok_or_else(|| fail("a wrapper type without its value field"))?;
    let value = single(&field.kind(), json)?;
    let mut out = DynamicMessage::new(desc.clone());
    out.set_field(&field, value);
    Ok(out)
}

/// A `google.protobuf.Value`: any JSON value (`null` too).
fn value(desc: &MessageDescriptor, json: &Json) -> Result<DynamicMessage, Fail> {
    let pool = desc.parent_pool();
    let mut out = DynamicMessage::new(desc.clone());
    let (field, content) = match json {
        Json::Null => ("null_value", Value::EnumNumber(0)),
        Json::Bool(b) => ("bool_value", Value::Bool(*b)),
        Json::String(s) => ("string_value", Value::String(s.clone())),
        Json::Number(n) => {
            let number = super::number::number_f64(&n.to_string())
                .map_err(|_| fail("a number beyond the range of a double"))?;
            ("number_value", Value::F64(number))
        }
        Json::Array(_) => {
            let list = pool
                .get_message_by_name("google.protobuf.ListValue")
                .ok_or_else(|| fail("google.protobuf.ListValue is missing"))?;
            ("list_value", Value::Message(self::list(&list, json)?))
        }
        Json::Object(_) => {
            let structure = pool
                .get_message_by_name("google.protobuf.Struct")
                .ok_or_else(|| fail("google.protobuf.Struct is missing"))?;
            (
                "struct_value",
                Value::Message(self::structure(&structure, json)?),
            )
        }
    };
    let field = desc
        .get_field_by_name(field)
        .ok_or_else(|| fail("google.protobuf.Value without its fields"))?;
    out.set_field(&field, content);
    Ok(out)
}

fn structure(desc: &MessageDescriptor, json: &Json) -> Result<DynamicMessage, Fail> {
    let Json::Object(object) = json else {
        return Err(fail(format!(
            "expected google.protobuf.Struct (an object), got {}",
            json_kind(json)
        )));
    };
    let field = desc
        .get_field_by_name("fields")
        .ok_or_else(|| fail("google.protobuf.Struct without its fields"))?;
    let value_desc = value_descriptor(desc)?;
    let mut map = std::collections::HashMap::with_capacity(object.len());
    for (key, item) in object {
        let item = value(&value_desc, item).map_err(at(Step::MapValue))?;
        map.insert(
            prost_reflect::MapKey::String(key.clone()),
            Value::Message(item),
        );
    }
    let mut out = DynamicMessage::new(desc.clone());
    out.set_field(&field, Value::Map(map));
    Ok(out)
}

fn list(desc: &MessageDescriptor, json: &Json) -> Result<DynamicMessage, Fail> {
    let Json::Array(items) = json else {
        return Err(fail(format!(
            "expected google.protobuf.ListValue (an array), got {}",
            json_kind(json)
        )));
    };
    let field = desc
        .get_field_by_name("values")
        .ok_or_else(|| fail("google.protobuf.ListValue without its values"))?;
    let value_desc = value_descriptor(desc)?;
    let values = items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            value(&value_desc, item)
                .map(Value::Message)
                .map_err(at(Step::Index(i)))
        })
        .collect::<Result<_, _>>()?;
    let mut out = DynamicMessage::new(desc.clone());
    out.set_field(&field, Value::List(values));
    Ok(out)
}

fn value_descriptor(desc: &MessageDescriptor) -> Result<MessageDescriptor, Fail> {
    desc.parent_pool()
        .get_message_by_name("google.protobuf.Value")
        .ok_or_else(|| fail("google.protobuf.Value is missing"))
}

/// A `google.protobuf.Any`: `{}`, or `"@type"` naming a message of the
/// schema (or a well-known type) by a URL whose last segment is its full
/// name, with the message's fields beside it (a well-known type's JSON
/// form in `"value"`).
fn any(desc: &MessageDescriptor, json: &Json) -> Result<DynamicMessage, Fail> {
    let Json::Object(object) = json else {
        return Err(fail(format!(
            "expected google.protobuf.Any (an object), got {}",
            json_kind(json)
        )));
    };
    let mut out = DynamicMessage::new(desc.clone());
    if object.is_empty() {
        return Ok(out);
    }
    let type_url = object
        .get("@type")
        .and_then(Json::as_str)
        .ok_or_else(|| fail("google.protobuf.Any without its \"@type\" string"))?;
    let name = type_url.rsplit('/').next().unwrap_or(type_url);
    let inner = desc
        .parent_pool()
        .get_message_by_name(name)
        .ok_or_else(|| {
            fail(
                "google.protobuf.Any of a type that is not in the schema: name one of its messages",
            )
        })?;
    let content = if inner.full_name().starts_with("google.protobuf.")
        && well_known(&inner, &Json::Null).is_some()
    {
        if let Some(other) = object.keys().find(|k| *k != "@type" && *k != "value") {
            return Err(unknown_member(&inner, other));
        }
        let value = object.get("value").ok_or_else(|| {
            fail(format!(
                "google.protobuf.Any of {} without its \"value\"",
                inner.full_name()
            ))
        })?;
        message(&inner, value).map_err(at(Step::Field("value".into())))?
    } else {
        let mut fields = object.clone();
        fields.remove("@type");
        message(&inner, &Json::Object(fields))?
    };
    let url = desc
        .get_field_by_name("type_url")
        .ok_or_else(|| fail("google.protobuf.Any without its fields"))?;
    let bytes = desc
        .get_field_by_name("value")
        .ok_or_else(|| fail("google.protobuf.Any without its fields"))?;
    out.set_field(&url, Value::String(type_url.to_owned()));
    out.set_field(&bytes, Value::Bytes(content.encode_to_vec().into()));
    Ok(out)
}

fn unknown_member(desc: &MessageDescriptor, key: &str) -> Fail {
    if crate::registry::mapping::is_identifier(key) {
        fail(format!(
            "google.protobuf.Any of {} has no member {key}",
            desc.full_name()
        ))
    } else {
        fail(format!(
            "a member google.protobuf.Any of {} does not have",
            desc.full_name()
        ))
    }
}

/// The types whose JSON form is a string, read by
/// prost-reflect's mapping; its error may quote the value, so it is not
/// shown.
fn string_form(desc: &MessageDescriptor, json: &Json) -> Result<DynamicMessage, Fail> {
    let expected = || {
        fail(format!(
            "expected {} in its JSON form, got {}",
            desc.full_name(),
            json_kind(json)
        ))
    };
    if let Json::String(text) = json {
        if !time_text_is_plain(desc.full_name(), text) {
            return Err(expected());
        }
        // `"+1s"`: the references read a Duration's plus sign, prost-reflect
        // does not.
        if desc.full_name() == "google.protobuf.Duration"
            && let Some(unsigned) = text.strip_prefix('+')
            && unsigned.starts_with(|c: char| c.is_ascii_digit())
        {
            let unsigned = Json::String(unsigned.to_owned());
            return DynamicMessage::deserialize(desc.clone(), &unsigned).map_err(|_| expected());
        }
    }
    DynamicMessage::deserialize(desc.clone(), json).map_err(|_| expected())
}

/// Where prost-reflect takes a text the references refuse or read
/// otherwise: a `Timestamp` second of 60 (a leap second, which Python's
/// `datetime` refuses), more than nine fractional digits (Python rounds a
/// `Duration`'s), a `FieldMask` with an empty path.
fn time_text_is_plain(type_name: &str, text: &str) -> bool {
    let fraction_digits = |s: &str| {
        s.split_once('.')
            .map_or(0, |(_, f)| f.bytes().take_while(u8::is_ascii_digit).count())
    };
    match type_name {
        "google.protobuf.Timestamp" => text.get(17..19) != Some("60") && fraction_digits(text) <= 9,
        "google.protobuf.Duration" => fraction_digits(text) <= 9,
        // An empty path (`"a,,b"`): Python keeps it, Java drops it.
        "google.protobuf.FieldMask" => text.is_empty() || !text.split(',').any(str::is_empty),
        _ => true,
    }
}
