//! What can go wrong asking a schema registry, and whether asking again
//! can help.

/// Why the registry did not give what was asked. `registry` is the URL of
/// the settings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    #[error("schema registry client for {url:?}: {reason}")]
    Setup { url: String, reason: String },
    #[error("schema registry {registry} unreachable: {reason}")]
    Unreachable { registry: String, reason: String },
    #[error(
        "subject {subject:?} does not exist in the schema registry {registry}: \
         register the schema under it, or correct the subject name"
    )]
    SubjectNotFound { registry: String, subject: String },
    #[error(
        "subject {subject:?} has no version {version} in the schema registry {registry}: \
         pin a version it has, or register the schema"
    )]
    VersionNotFound {
        registry: String,
        subject: String,
        version: u32,
    },
    #[error("the schema registry {registry} has no schema with id {id}")]
    SchemaNotFound { registry: String, id: u32 },
    #[error(
        "the schema registry {registry} refused the request (HTTP {status}): \
         check the registry credentials and what they are allowed"
    )]
    Unauthorized { registry: String, status: u16 },
    /// Any other error answer. `message` is the registry's own, kept for a
    /// caller that chooses to show it: it may quote the schema.
    #[error("the schema registry {registry} answered HTTP {status}{}", error_code.map(|c| format!(" (error code {c})")).unwrap_or_default())]
    Failed {
        registry: String,
        status: u16,
        error_code: Option<u32>,
        message: String,
    },
    #[error(
        "the schema registry {registry} holds a schema of type {schema_type:?}: \
         only AVRO, JSON and PROTOBUF are known"
    )]
    UnknownSchemaType {
        registry: String,
        schema_type: String,
    },
    #[error(
        "{registry} does not answer as a schema registry ({reason}): \
         is it the root of its Confluent-compatible API?"
    )]
    BadAnswer { registry: String, reason: String },
    /// The URL answers 404 to what every registry answers: its path is not
    /// a registry API's root.
    #[error(
        "registry.url {registry} does not look like a schema registry: its path {path} is \
         not the root of a Confluent-compatible registry API ({answered}); set registry.url \
         to that root (Confluent, Redpanda, Karapace: http://host:8081; Apicurio: \
         http://host:8080/apis/ccompat/v7)"
    )]
    NotARegistry {
        registry: String,
        path: String,
        answered: String,
    },
}

impl RegistryError {
    /// Whether asking again later can help: the registry was unreachable,
    /// too slow, or failing (HTTP 5xx, 408, 429). The others need a person:
    /// a missing subject or version, credentials, the URL.
    pub fn is_retryable(&self) -> bool {
        match self {
            RegistryError::Unreachable { .. } => true,
            RegistryError::Failed { status, .. } => {
                *status >= 500 || *status == 408 || *status == 429
            }
            _ => false,
        }
    }
}
