//! How the mapping names things in its errors: types, unions, JSON kinds,
//! the path to a failing value.

use apache_avro::Schema;
use apache_avro::schema::{
    DecimalSchema, InnerDecimalSchema, Name, NamespaceRef, RecordSchema, UuidSchema,
};

use super::logical;

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
