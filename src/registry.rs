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
//! * [`protobuf`]: a JSON payload as a message of a `.proto` schema
//!   (proto3's JSON mapping), in Protobuf's binary encoding.
//! * [`mapping`]: what the two mappings share: the error, its path.
//!
//! Only [`client`] does I/O. Nothing here logs: never a schema's text,
//! never a payload.

pub mod avro;
pub mod client;
pub mod error;
pub mod mapping;
pub mod protobuf;
pub mod subject;
pub mod wire;

pub use avro::{AvroEncoder, AvroSchemaError};
pub use client::{
    Credentials, RegistryClient, RegistrySettings, Schema, SchemaReference, SchemaType,
    SubjectVersion,
};
pub use error::RegistryError;
pub use mapping::MappingError;
pub use protobuf::{ProtobufEncoder, ProtobufSchemaError};
pub use subject::SubjectNameStrategy;

#[cfg(test)]
pub(crate) mod tests;
