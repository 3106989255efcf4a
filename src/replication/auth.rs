//! Startup and authentication of the replication connection.
//!
//! Role: send the StartupMessage with `replication=database`, answer the
//! server's authentication request (trust, cleartext password, md5,
//! SCRAM-SHA-256), and read up to the first ReadyForQuery, keeping the
//! backend pid. Startup ErrorResponses become the specific fatal errors the
//! operator can act on (wrong password, missing REPLICATION attribute,
//! missing database).
//!
//! Invariants: the password is only ever written into the authentication
//! message; SCRAM uses `n,,` (no channel binding): we never claim the server
//! lacks SCRAM-SHA-256-PLUS, which would trip its downgrade protection.

use fallible_iterator::FallibleIterator;
use postgres_protocol::authentication::md5_hash;
use postgres_protocol::authentication::sasl::{ChannelBinding, SCRAM_SHA_256, ScramSha256};
use postgres_protocol::message::backend::{
    ErrorFields, ErrorResponseBody, Message, NoticeResponseBody,
};
use postgres_protocol::message::frontend;

use super::conninfo::Conninfo;
use super::error::{ReplicationError, ServerError};
use super::socket::{FramedSocket, ReadError};

/// What the server told us during startup that the stream keeps.
#[derive(Debug, Clone, Default)]
pub struct Session {
    /// The walsender's pid (BackendKeyData): what `pg_stat_replication.pid`
    /// and `pg_replication_slots.active_pid` show for this connection.
    pub backend_pid: i32,
    pub server_version: Option<String>,
}

/// Maps a frame-reading failure to the error the caller reports.
pub fn read_error(target: &str, action: &'static str, error: ReadError) -> ReplicationError {
    match error {
        ReadError::Io(source) => ReplicationError::Io {
            target: target.to_owned(),
            action,
            source,
        },
        ReadError::Closed => ReplicationError::Closed {
            target: target.to_owned(),
            action,
        },
        ReadError::BadLength(len) => ReplicationError::Protocol {
            target: target.to_owned(),
            action,
            reason: format!("message length {len}"),
        },
    }
}

/// Reads the next backend message of the (non-streaming) protocol.
pub async fn read_message(
    socket: &mut FramedSocket,
    target: &str,
    action: &'static str,
) -> Result<Message, ReplicationError> {
    let mut frame = socket
        .read_frame()
        .await
        .map_err(|e| read_error(target, action, e))?;
    let tag = frame.tag;
    match Message::parse(&mut frame.bytes) {
        Ok(Some(message)) => Ok(message),
        Ok(None) => unreachable_incomplete(target, action),
        Err(e) => Err(ReplicationError::Protocol {
            target: target.to_owned(),
            action,
            reason: format!("message {:?}: {e}", char::from(tag)),
        }),
    }
}

/// `read_frame` only returns complete frames, so `parse` cannot ask for more;
/// reported as a protocol error rather than a panic all the same.
fn unreachable_incomplete<T>(target: &str, action: &'static str) -> Result<T, ReplicationError> {
    Err(ReplicationError::Protocol {
        target: target.to_owned(),
        action,
        reason: "incomplete message".into(),
    })
}

/// The fields of an ErrorResponse.
pub fn server_error(body: &ErrorResponseBody) -> ServerError {
    error_fields(body.fields())
}

/// The fields of a NoticeResponse (same layout as an ErrorResponse).
pub fn server_notice(body: &NoticeResponseBody) -> ServerError {
    error_fields(body.fields())
}

fn error_fields(mut fields: ErrorFields<'_>) -> ServerError {
    let mut error = ServerError {
        severity: String::new(),
        code: String::new(),
        message: String::new(),
        detail: None,
        hint: None,
    };
    let mut localized_severity = String::new();
    // A malformed field list still leaves whatever was read before it.
    while let Ok(Some(field)) = fields.next() {
        let value = String::from_utf8_lossy(field.value_bytes()).into_owned();
        match field.type_() {
            b'S' => localized_severity = value,
            b'V' => error.severity = value,
            b'C' => error.code = value,
            b'M' => error.message = value,
            b'D' => error.detail = Some(value),
            b'H' => error.hint = Some(value),
            _ => {}
        }
    }
    if error.severity.is_empty() {
        error.severity = localized_severity;
    }
    error
}

/// Sends the StartupMessage and authenticates; returns at ReadyForQuery.
pub async fn startup(
    socket: &mut FramedSocket,
    conninfo: &Conninfo,
    fallback_application_name: &str,
    target: &str,
) -> Result<Session, ReplicationError> {
    let application_name = conninfo
        .application_name
        .as_deref()
        .unwrap_or(fallback_application_name);
    let mut params = vec![
        ("user", conninfo.user.as_str()),
        ("database", conninfo.dbname.as_str()),
        // A logical walsender that also accepts simple SQL (catalog checks).
        ("replication", "database"),
        ("client_encoding", "UTF8"),
    ];
    if !application_name.is_empty() {
        params.push(("application_name", application_name));
    }
    if let Some(options) = &conninfo.options {
        params.push(("options", options));
    }
    let protocol_error = |reason: String| ReplicationError::Protocol {
        target: target.to_owned(),
        action: "starting up",
        reason,
    };
    frontend::startup_message(params.iter().copied(), socket.write_buf())
        .map_err(|e| protocol_error(e.to_string()))?;
    flush(socket, target, "sending the startup message").await?;

    let mut scram: Option<ScramSha256> = None;
    let mut session = Session::default();
    loop {
        match read_message(socket, target, "authenticating").await? {
            Message::AuthenticationOk => {}
            Message::AuthenticationCleartextPassword => {
                let password = password(conninfo, target)?;
                frontend::password_message(password, socket.write_buf())
                    .map_err(|e| protocol_error(e.to_string()))?;
                flush(socket, target, "sending the password").await?;
            }
            Message::AuthenticationMd5Password(body) => {
                let password = password(conninfo, target)?;
                let hash = md5_hash(conninfo.user.as_bytes(), password, body.salt());
                frontend::password_message(hash.as_bytes(), socket.write_buf())
                    .map_err(|e| protocol_error(e.to_string()))?;
                flush(socket, target, "sending the md5 password").await?;
            }
            Message::AuthenticationSasl(body) => {
                let mut offers_scram = false;
                let mut mechanisms = body.mechanisms();
                while let Some(mechanism) = mechanisms
                    .next()
                    .map_err(|e| protocol_error(e.to_string()))?
                {
                    offers_scram |= mechanism == SCRAM_SHA_256;
                }
                if !offers_scram {
                    return Err(ReplicationError::UnsupportedAuth {
                        target: target.to_owned(),
                        method: "SASL without SCRAM-SHA-256".into(),
                    });
                }
                let exchange =
                    ScramSha256::new(password(conninfo, target)?, ChannelBinding::unsupported());
                frontend::sasl_initial_response(
                    SCRAM_SHA_256,
                    exchange.message(),
                    socket.write_buf(),
                )
                .map_err(|e| protocol_error(e.to_string()))?;
                scram = Some(exchange);
                flush(socket, target, "starting SCRAM").await?;
            }
            Message::AuthenticationSaslContinue(body) => {
                let exchange = scram
                    .as_mut()
                    .ok_or_else(|| protocol_error("SASLContinue before SASL".into()))?;
                exchange
                    .update(body.data())
                    .map_err(|e| protocol_error(format!("SCRAM: {e}")))?;
                frontend::sasl_response(exchange.message(), socket.write_buf())
                    .map_err(|e| protocol_error(e.to_string()))?;
                flush(socket, target, "continuing SCRAM").await?;
            }
            Message::AuthenticationSaslFinal(body) => {
                scram
                    .as_mut()
                    .ok_or_else(|| protocol_error("SASLFinal before SASL".into()))?
                    .finish(body.data())
                    // The server could not prove it knows the password.
                    .map_err(|e| protocol_error(format!("SCRAM server proof: {e}")))?;
            }
            Message::AuthenticationKerberosV5 => return Err(unsupported(target, "Kerberos V5")),
            Message::AuthenticationScmCredential => return Err(unsupported(target, "SCM")),
            Message::AuthenticationGss | Message::AuthenticationGssContinue(_) => {
                return Err(unsupported(target, "GSSAPI"));
            }
            Message::AuthenticationSspi => return Err(unsupported(target, "SSPI")),
            Message::BackendKeyData(body) => session.backend_pid = body.process_id(),
            Message::ParameterStatus(body) => {
                if body.name().ok() == Some("server_version") {
                    session.server_version = body.value().ok().map(str::to_owned);
                }
            }
            Message::NoticeResponse(_) => {}
            Message::ReadyForQuery(_) => return Ok(session),
            Message::ErrorResponse(body) => {
                return Err(startup_error(server_error(&body), conninfo, target));
            }
            _ => return Err(protocol_error("unexpected message during startup".into())),
        }
    }
}

async fn flush(
    socket: &mut FramedSocket,
    target: &str,
    action: &'static str,
) -> Result<(), ReplicationError> {
    socket.flush().await.map_err(|source| ReplicationError::Io {
        target: target.to_owned(),
        action,
        source,
    })
}

fn password<'a>(conninfo: &'a Conninfo, target: &str) -> Result<&'a [u8], ReplicationError> {
    conninfo
        .password()
        .ok_or_else(|| ReplicationError::PasswordMissing {
            role: conninfo.user.clone(),
            target: target.to_owned(),
        })
}

fn unsupported(target: &str, method: &str) -> ReplicationError {
    ReplicationError::UnsupportedAuth {
        target: target.to_owned(),
        method: method.to_owned(),
    }
}

/// Turns a startup ErrorResponse into the error that tells the operator what to fix.
fn startup_error(server: ServerError, conninfo: &Conninfo, target: &str) -> ReplicationError {
    match server.code.as_str() {
        // invalid_password; invalid_authorization_specification (also "no
        // pg_hba.conf entry", which the server message spells out).
        "28P01" | "28000" => ReplicationError::AuthFailed {
            role: conninfo.user.clone(),
            target: target.to_owned(),
            server: Box::new(server),
        },
        // insufficient_privilege: "must be superuser or replication role to
        // start walsender" (PG ≤ 15), "permission denied to start WAL sender" (16+).
        "42501" => ReplicationError::MissingReplicationRole {
            role: conninfo.user.clone(),
            server: Box::new(server),
        },
        "3D000" => ReplicationError::DatabaseMissing {
            database: conninfo.dbname.clone(),
            target: target.to_owned(),
            server: Box::new(server),
        },
        _ => ReplicationError::Server {
            target: target.to_owned(),
            action: "the connection",
            server: Box::new(server),
        },
    }
}
