//! How the mapping names things in its errors: types, unions, JSON kinds,
//! the path to a failing value.

use apache_avro::Schema;
use apache_avro::schema::{
    DecimalSchema, InnerDecimalSchema, Name, NamespaceRef, RecordSchema, UuidSchema,
};
use serde_json::Value as Json;

use super::logical;

/// One step of the path to a failing value, innermost first.
pub enum Step {
    Field(String),
    Index(usize),
    MapValue,
}

/// The names a union branch goes by in Avro's JSON encoding: its type's
/// name (the full and the short name of a named type).
pub fn branch_names(schema: &Schema, ns: NamespaceRef) -> Vec<String> {
    let named = |name: &Name| vec![name.fullname(ns), name.name().to_string()];
    match schema {
        Schema::Record(RecordSchema { name, .. }) | Schema::Ref { name } => named(name),
        Schema::Enum(e) => named(&e.name),
        Schema::Fixed(f) | Schema::Duration(f) | Schema::Uuid(UuidSchema::Fixed(f)) => {
            named(&f.name)
        }
        Schema::Decimal(DecimalSchema {
            inner: InnerDecimalSchema::Fixed(f),
            ..
        }) => named(&f.name),
        other => vec![logical::base_type(other).to_string()],
    }
}

/// What a schema is called in an error: its type, logical type or name.
pub fn describe(schema: &Schema) -> String {
    match schema {
        Schema::Record(RecordSchema { name, .. }) | Schema::Ref { name } => {
            format!("record {}", name.fullname(None))
        }
        Schema::Enum(e) => format!("enum {}", e.name.fullname(None)),
        Schema::Fixed(f) => format!("fixed {}", f.name.fullname(None)),
        Schema::Union(u) => union_description(u.variants()),
        other => logical::logical_name(other)
            .unwrap_or_else(|| logical::base_type(other))
            .to_string(),
    }
}

pub fn union_description(variants: &[Schema]) -> String {
    let names: Vec<String> = variants.iter().map(describe).collect();
    format!("union [{}]", names.join(", "))
}

pub fn json_kind(json: &Json) -> &'static str {
    match json {
        Json::Null => "null",
        Json::Bool(_) => "boolean",
        Json::Number(n) if n.is_f64() => "number",
        Json::Number(_) => "integer",
        Json::String(_) => "string",
        Json::Array(_) => "array",
        Json::Object(_) => "object",
    }
}

/// The JSON pointer of `steps` (innermost first); `/` for the payload.
pub fn pointer(steps: &[Step]) -> String {
    if steps.is_empty() {
        return "/".into();
    }
    let mut out = String::new();
    for step in steps.iter().rev() {
        out.push('/');
        match step {
            Step::Field(name) => out.push_str(&name.replace('~', "~0").replace('/', "~1")),
            Step::Index(i) => out.push_str(&i.to_string()),
            Step::MapValue => out.push('*'),
        }
    }
    out
}

/// Avro's name syntax, which a field name of a payload shows in errors
/// only if it has: anything else may be data.
pub fn is_avro_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.len() <= 64
}

pub fn truncate(text: &mut String, max: usize) {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
}
