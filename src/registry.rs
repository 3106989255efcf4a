//! Schema registries: the building blocks of event contracts kept in a
//! Confluent-compatible schema registry.
//!
//! * [`client`]: the registry's API (a subject's latest or pinned version,
//!   a schema by id, registering), cached, with errors that say whether
//!   retrying can help.
//! * [`subject`]: which subject a topic's value schema is under
//!   (Confluent's subject name strategies).
//! * [`wire`]: Confluent's wire format: magic byte, schema id, Protobuf
//!   message indexes, then the record.
//! * [`avro`]: a JSON payload as an Avro record of a schema (the mapping a
//!   user expects, errors naming the first failing place), in Avro's
//!   binary encoding.
//!
//! Only [`client`] does I/O. Nothing here logs: never a schema's text,
//! never a payload.

pub mod avro;
pub mod client;
pub mod error;
pub mod subject;
pub mod wire;

pub use avro::{AvroEncoder, AvroMappingError, AvroSchemaError};
pub use client::{
    Credentials, RegistryClient, RegistrySettings, Schema, SchemaReference, SchemaType,
    SubjectVersion,
};
pub use error::RegistryError;
pub use subject::SubjectNameStrategy;

#[cfg(test)]
mod tests;
