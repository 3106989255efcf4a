//! A client of the Confluent Schema Registry API (Confluent's registry,
//! Apicurio's `/apis/ccompat/v7`, Redpanda's, Karapace): a subject's latest
//! or pinned version, a schema by id, and registering a schema (for tests
//! and tools), through the relay's one HTTP client
//! ([`crate::http_client`]).
//!
//! Invariants:
//! * A subject's pinned version and a schema id name one schema for good in
//!   a registry, so both are cached for the client's life; `latest` is asked
//!   every time (it moves when a schema is registered) and fills both caches.
//! * Nothing here retries or logs: [`RegistryError::is_retryable`] tells the
//!   caller whether asking again can help (the registry unreachable, slow or
//!   failing) or a person must fix something (a subject or version that does
//!   not exist, refused credentials, a URL that is not a registry's).
//! * Neither errors nor `Debug` output carry a schema's text, the
//!   registry's error message (it may quote the schema) or the password.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http_body_util::Full;
use hyper::Request;
use hyper::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde::{Deserialize, Serialize};

use super::error::RegistryError;
use crate::http_client::{HttpClient, HttpClientSettings};

/// The most bytes of one answer read: a schema with its metadata.
pub const MAX_ANSWER: usize = 8 << 20;

/// The registry API's media type, asked for and sent.
const MEDIA_TYPE: &str = "application/vnd.schemaregistry.v1+json";

/// What a subject name keeps as it is in a URL path (RFC 3986 unreserved
/// characters); everything else is percent-encoded, `/` included.
const SUBJECT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// A schema's language, the registry's `schemaType` (absent means Avro).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum SchemaType {
    #[default]
    Avro,
    Json,
    Protobuf,
}

impl SchemaType {
    /// The registry's name for it: `AVRO`, `JSON`, `PROTOBUF`.
    pub fn as_str(self) -> &'static str {
        match self {
            SchemaType::Avro => "AVRO",
            SchemaType::Json => "JSON",
            SchemaType::Protobuf => "PROTOBUF",
        }
    }
}

/// Another subject's schema that a schema imports or names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchemaReference {
    /// The name it is imported by (an Avro full name, a `.proto` file).
    pub name: String,
    pub subject: String,
    pub version: u32,
}

/// A schema as the registry holds it. `Debug` leaves the text out.
#[derive(Clone, PartialEq, Eq)]
pub struct Schema {
    pub schema_type: SchemaType,
    /// The schema itself: Avro or JSON Schema JSON text, or a `.proto` file.
    pub text: String,
    pub references: Vec<SchemaReference>,
}

impl fmt::Debug for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Schema")
            .field("schema_type", &self.schema_type)
            .field("text_len", &self.text.len())
            .field("references", &self.references)
            .finish()
    }
}

/// One version of a subject: its number, the schema's id, the schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubjectVersion {
    pub subject: String,
    pub version: u32,
    /// What the Confluent wire format puts before each record.
    pub id: u32,
    pub schema: Arc<Schema>,
}

/// HTTP Basic credentials (Confluent Cloud's API key and secret). `Debug`
/// hides the password.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub user: String,
    pub password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// How a client is set up.
#[derive(Debug, Clone)]
pub struct RegistrySettings {
    /// The API's root, e.g. `https://registry:8081` or Apicurio's
    /// `http://host:8080/apis/ccompat/v7`; no credentials in it.
    pub url: String,
    /// From connect to the end of the answer, per request.
    pub timeout: Duration,
    /// CA certificates (PEM) trusted for https besides the system store.
    pub ca_file: Option<PathBuf>,
    pub credentials: Option<Credentials>,
}

/// A registry's client, with its caches; cheap to share behind an `Arc`.
pub struct RegistryClient {
    http: HttpClient,
    base: String,
    authorization: Option<HeaderValue>,
    cache: Mutex<Cache>,
}

impl fmt::Debug for RegistryClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegistryClient")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Cache {
    versions: HashMap<(String, u32), SubjectVersion>,
    ids: HashMap<u32, Arc<Schema>>,
}

/// A subject version as the registry answers it.
#[derive(Deserialize)]
struct VersionAnswer {
    version: u32,
    id: u32,
    #[serde(flatten)]
    schema: SchemaAnswer,
}

/// A schema as the registry answers it.
#[derive(Deserialize)]
struct SchemaAnswer {
    schema: String,
    /// A string, so that another type is named in the error.
    #[serde(rename = "schemaType")]
    schema_type: Option<String>,
    #[serde(default)]
    references: Vec<SchemaReference>,
}

#[derive(Deserialize)]
struct ErrorAnswer {
    error_code: Option<u32>,
    #[serde(default)]
    message: String,
}

#[derive(Deserialize)]
struct IdAnswer {
    id: u32,
}

#[derive(Deserialize)]
struct CompatibilityAnswer {
    is_compatible: bool,
}

#[derive(Serialize)]
struct RegisterRequest<'a> {
    schema: &'a str,
    #[serde(rename = "schemaType", skip_serializing_if = "Option::is_none")]
    schema_type: Option<&'static str>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    references: &'a [SchemaReference],
}

/// A schema as the registry's requests carry it (register, compatibility).
fn schema_body(schema: &Schema) -> Bytes {
    let body = serde_json::to_vec(&RegisterRequest {
        schema: &schema.text,
        schema_type: (schema.schema_type != SchemaType::Avro)
            .then_some(schema.schema_type.as_str()),
        references: &schema.references,
    })
    .expect("a schema serializes");
    Bytes::from(body)
}

/// What was asked, to name what was not found.
enum Asked<'a> {
    Version(&'a str, Option<u32>),
    Id(u32),
    Register(&'a str),
}

impl RegistryClient {
    /// # Errors
    /// [`RegistryError::Setup`]: the URL is not an http(s) URL without
    /// credentials, query or fragment, or TLS cannot be set up.
    pub fn new(settings: &RegistrySettings) -> Result<RegistryClient, RegistryError> {
        let setup = |reason: String| RegistryError::Setup {
            url: without_userinfo(&settings.url),
            reason,
        };
        let base = settings.url.trim_end_matches('/').to_string();
        let uri: hyper::Uri = base.parse().map_err(|e| setup(format!("not a URL: {e}")))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
            return Err(setup(
                "an http:// or https:// URL with a host is needed".into(),
            ));
        }
        if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
            return Err(setup(
                "credentials go in the registry's user and password settings, not in the URL"
                    .into(),
            ));
        }
        if uri.query().is_some() || base.contains('#') {
            return Err(setup("the API root takes no query or fragment".into()));
        }
        let http = HttpClient::new(&HttpClientSettings {
            ca_file: settings.ca_file.as_deref(),
            timeout: settings.timeout,
            max_idle: 2,
        })
        .map_err(|e| setup(e.0))?;
        let authorization = match &settings.credentials {
            None => None,
            Some(c) => {
                let token = base64::engine::general_purpose::STANDARD
                    .encode(format!("{}:{}", c.user, c.password));
                let mut value = HeaderValue::from_str(&format!("Basic {token}"))
                    .map_err(|_| setup("the credentials cannot go in a header".into()))?;
                value.set_sensitive(true);
                Some(value)
            }
        };
        Ok(RegistryClient {
            http,
            base,
            authorization,
            cache: Mutex::new(Cache::default()),
        })
    }

    /// The registry's URL, as errors name it.
    pub fn url(&self) -> &str {
        &self.base
    }

    /// The subject's latest version, asked every time.
    ///
    /// # Errors
    /// [`RegistryError`]; `SubjectNotFound` when the subject has no version.
    pub async fn latest(&self, subject: &str) -> Result<SubjectVersion, RegistryError> {
        self.fetch_version(subject, None).await
    }

    /// The subject's version `version`, cached once fetched.
    ///
    /// # Errors
    /// [`RegistryError`]; `SubjectNotFound`, `VersionNotFound`.
    pub async fn version(
        &self,
        subject: &str,
        version: u32,
    ) -> Result<SubjectVersion, RegistryError> {
        if let Some(found) = self.cached_version(subject, version) {
            return Ok(found);
        }
        self.fetch_version(subject, Some(version)).await
    }

    /// The schema with id `id`, cached once fetched.
    ///
    /// # Errors
    /// [`RegistryError`]; `SchemaNotFound`.
    pub async fn schema(&self, id: u32) -> Result<Arc<Schema>, RegistryError> {
        if let Some(found) = self.lock().ids.get(&id) {
            return Ok(Arc::clone(found));
        }
        let url = format!("{}/schemas/ids/{id}", self.base);
        let body = self.call(get(&url), Bytes::new(), Asked::Id(id)).await?;
        let answer: SchemaAnswer = self.parse(&body)?;
        let schema = Arc::new(self.schema_of(answer)?);
        let mut cache = self.lock();
        Ok(Arc::clone(cache.ids.entry(id).or_insert(schema)))
    }

    /// Registers `schema` under `subject` (a new version unless the subject
    /// has it already) and returns its id. For tests and tools: the relay
    /// only reads.
    ///
    /// # Errors
    /// [`RegistryError`]; `Failed` with status 409 when the registry finds
    /// it incompatible with the subject's versions, 422 when invalid.
    pub async fn register(&self, subject: &str, schema: &Schema) -> Result<u32, RegistryError> {
        let url = format!("{}/subjects/{}/versions", self.base, encode(subject));
        let request = Request::post(&url).header(CONTENT_TYPE, MEDIA_TYPE);
        let answer = self
            .call(request, schema_body(schema), Asked::Register(subject))
            .await?;
        Ok(self.parse::<IdAnswer>(&answer)?.id)
    }

    /// Whether `schema` is compatible with the latest version of `subject`
    /// by the subject's compatibility rule (`POST
    /// /compatibility/subjects/<subject>/versions/latest`).
    ///
    /// # Errors
    /// [`RegistryError`], as [`RegistryClient::latest`].
    pub async fn compatible_with_latest(
        &self,
        subject: &str,
        schema: &Schema,
    ) -> Result<bool, RegistryError> {
        let url = format!(
            "{}/compatibility/subjects/{}/versions/latest",
            self.base,
            encode(subject)
        );
        let request = Request::post(&url).header(CONTENT_TYPE, MEDIA_TYPE);
        let answer = self
            .call(request, schema_body(schema), Asked::Version(subject, None))
            .await?;
        Ok(self.parse::<CompatibilityAnswer>(&answer)?.is_compatible)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn cached_version(&self, subject: &str, version: u32) -> Option<SubjectVersion> {
        self.lock()
            .versions
            .get(&(subject.to_string(), version))
            .cloned()
    }

    async fn fetch_version(
        &self,
        subject: &str,
        version: Option<u32>,
    ) -> Result<SubjectVersion, RegistryError> {
        let which = version.map_or_else(|| "latest".to_string(), |v| v.to_string());
        let url = format!(
            "{}/subjects/{}/versions/{which}",
            self.base,
            encode(subject)
        );
        let body = self
            .call(get(&url), Bytes::new(), Asked::Version(subject, version))
            .await?;
        let answer: VersionAnswer = self.parse(&body)?;
        if version.is_some_and(|v| v != answer.version) {
            return Err(self.bad_answer(format!(
                "version {} came for version {which}",
                answer.version
            )));
        }
        let schema = self.schema_of(answer.schema)?;
        let mut cache = self.lock();
        let schema = Arc::clone(cache.ids.entry(answer.id).or_insert(Arc::new(schema)));
        let found = SubjectVersion {
            // The subject as asked: the cache's key, and the registry may
            // spell it otherwise (a context prefix).
            subject: subject.to_string(),
            version: answer.version,
            id: answer.id,
            schema,
        };
        cache
            .versions
            .insert((subject.to_string(), found.version), found.clone());
        Ok(found)
    }

    /// Sends `request` and returns the body of a 2xx answer.
    async fn call(
        &self,
        request: hyper::http::request::Builder,
        body: Bytes,
        asked: Asked<'_>,
    ) -> Result<Bytes, RegistryError> {
        let request = match self.headers(request).body(Full::new(body)) {
            Ok(r) => r,
            Err(e) => return Err(self.bad_answer(format!("cannot build the request: {e}"))),
        };
        self.send(request, asked).await
    }

    async fn send(
        &self,
        request: Request<Full<Bytes>>,
        asked: Asked<'_>,
    ) -> Result<Bytes, RegistryError> {
        let (answer, body) =
            self.http
                .fetch(request, MAX_ANSWER)
                .await
                .map_err(|e| RegistryError::Unreachable {
                    registry: self.base.clone(),
                    reason: e.0,
                })?;
        if (200..300).contains(&answer.status) {
            return Ok(body);
        }
        // A 404 is a missing subject, version or id only when the URL is a
        // registry's at all: a wrong path answers 404 to everything, some
        // servers with a registry-like error code.
        if answer.status == 404
            && let Some(answered) = self.not_a_registry().await
        {
            return Err(RegistryError::NotARegistry {
                registry: self.base.clone(),
                path: self.path().to_owned(),
                answered,
            });
        }
        Err(self.error(answer.status, &body, &asked))
    }

    /// The URL's path: what is wrong when the URL is not a registry's root.
    fn path(&self) -> &str {
        let after_scheme = self.base.find("://").map_or(0, |i| i + 3);
        self.base[after_scheme..]
            .find('/')
            .map_or("/", |i| &self.base[after_scheme + i..])
    }

    /// Whether the URL is not a registry's API root, by two requests every
    /// Confluent-compatible registry answers: `GET /schemas/types` (a list
    /// of types; Confluent since 5.5, Apicurio, Redpanda, Karapace) and,
    /// for older ones, `GET /config` (the global compatibility). `Some`:
    /// what the first answered, when neither answered as a registry would;
    /// `None`: a registry, or no way to tell (refused, failing, away).
    async fn not_a_registry(&self) -> Option<String> {
        let mut first = None;
        for (probe, want_list) in [("/schemas/types", true), ("/config", false)] {
            let url = format!("{}{probe}", self.base);
            let request = self.headers(get(&url)).body(Full::new(Bytes::new())).ok()?;
            let (answer, body) = self.http.fetch(request, MAX_ANSWER).await.ok()?;
            let answered = match answer.status {
                200..300 => match serde_json::from_slice::<serde_json::Value>(&body) {
                    Ok(v) if v.is_array() == want_list && (v.is_array() || v.is_object()) => {
                        return None;
                    }
                    _ => format!(
                        "GET {}{probe} answered HTTP {} with something else than a registry's \
                         answer",
                        self.path().trim_end_matches('/'),
                        answer.status
                    ),
                },
                404 => format!(
                    "GET {}{probe} answered HTTP 404",
                    self.path().trim_end_matches('/')
                ),
                _ => return None,
            };
            first.get_or_insert(answered);
        }
        first
    }

    /// `request` with what every request to the registry carries.
    fn headers(&self, request: hyper::http::request::Builder) -> hyper::http::request::Builder {
        let mut request = request.header(ACCEPT, format!("{MEDIA_TYPE}, application/json"));
        if let Some(authorization) = &self.authorization {
            request = request.header(AUTHORIZATION, authorization.clone());
        }
        request
    }

    /// The error an error answer means.
    fn error(&self, status: u16, body: &[u8], asked: &Asked<'_>) -> RegistryError {
        let registry = self.base.clone();
        let (error_code, message) = match serde_json::from_slice::<ErrorAnswer>(body) {
            Ok(e) => (e.error_code, e.message),
            Err(_) => (None, String::new()),
        };
        match (status, error_code, asked) {
            (401 | 403, _, _) => RegistryError::Unauthorized { registry, status },
            (404, Some(40401), Asked::Version(subject, _) | Asked::Register(subject)) => {
                RegistryError::SubjectNotFound {
                    registry,
                    subject: subject.to_string(),
                }
            }
            (404, Some(40402), Asked::Version(subject, Some(version))) => {
                RegistryError::VersionNotFound {
                    registry,
                    subject: subject.to_string(),
                    version: *version,
                }
            }
            (404, Some(40403), Asked::Id(id)) => {
                RegistryError::SchemaNotFound { registry, id: *id }
            }
            // A 404 without the registry's error code: no such API here.
            (404, None, _) => RegistryError::BadAnswer {
                registry,
                reason: "HTTP 404 without a registry error code".into(),
            },
            _ => RegistryError::Failed {
                registry,
                status,
                error_code,
                message,
            },
        }
    }

    fn parse<'a, T: Deserialize<'a>>(&self, body: &'a [u8]) -> Result<T, RegistryError> {
        serde_json::from_slice(body).map_err(|e| {
            // The position and the kind of mistake, never the text.
            self.bad_answer(format!(
                "unexpected answer at line {} column {} ({:?})",
                e.line(),
                e.column(),
                e.classify()
            ))
        })
    }

    fn schema_of(&self, answer: SchemaAnswer) -> Result<Schema, RegistryError> {
        let schema_type = match answer.schema_type.as_deref() {
            None | Some("AVRO") => SchemaType::Avro,
            Some("JSON") => SchemaType::Json,
            Some("PROTOBUF") => SchemaType::Protobuf,
            Some(other) => {
                return Err(RegistryError::UnknownSchemaType {
                    registry: self.base.clone(),
                    schema_type: other.to_string(),
                });
            }
        };
        Ok(Schema {
            schema_type,
            text: answer.schema,
            references: answer.references,
        })
    }

    fn bad_answer(&self, reason: String) -> RegistryError {
        RegistryError::BadAnswer {
            registry: self.base.clone(),
            reason,
        }
    }
}

/// `url` with a password (any user information) replaced by `***`.
fn without_userinfo(url: &str) -> String {
    let start = url.find("://").map_or(0, |i| i + 3);
    let end = url[start..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| start + i);
    match url[start..end].rfind('@') {
        Some(at) => format!("{}***{}", &url[..start], &url[start + at..]),
        None => url.to_string(),
    }
}

fn get(url: &str) -> hyper::http::request::Builder {
    Request::get(url)
}

/// `subject` as one URL path segment.
pub fn encode(subject: &str) -> String {
    utf8_percent_encode(subject, SUBJECT).to_string()
}
