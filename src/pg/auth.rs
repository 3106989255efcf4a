//! Startup and authentication of a PostgreSQL connection: the replication
//! stream's, or a plain SQL session's.
//!
//! Role: send the StartupMessage (with `replication=database` for the
//! stream and its sessions, without for an ordinary one), answer the
//! server's authentication request (trust, cleartext password, md5,
//! SCRAM-SHA-256), and read up to the first ReadyForQuery, keeping the
//! backend pid. Startup ErrorResponses become the specific fatal errors the
//! operator can act on (wrong password, missing REPLICATION attribute,
//! missing database).
//!
//! Invariants:
//! * the password is only ever written into the authentication message, and
//!   never when `channel_binding=require` cannot be met (a cleartext or md5
//!   request could come from a man in the middle);
//! * channel binding follows libpq's `channel_binding`: over TLS, when the
//!   server offers SCRAM-SHA-256-PLUS and binding is not disabled, the
//!   exchange is bound to the server certificate (`p=tls-server-end-point`,
//!   RFC 5929), so a man in the middle who terminates TLS cannot relay it;
//!   over TLS without PLUS on offer the client says it could have bound
//!   (`y,,`), which lets a server that does offer PLUS detect a downgrade;
//!   without TLS, or disabled, `n,,`. `require` fails with a fatal error
//!   naming the fix when there is no TLS, no PLUS, or the server
//!   authenticates in a way that cannot bind (trust, md5, password): never
//!   an unbound session.

use fallible_iterator::FallibleIterator;
use postgres_protocol::authentication::md5_hash;
use postgres_protocol::authentication::sasl::{
    self, SCRAM_SHA_256, SCRAM_SHA_256_PLUS, ScramSha256,
};
use postgres_protocol::message::backend::Message;
use postgres_protocol::message::frontend;
use tokio_postgres::error::SqlState;

use super::conninfo::{ChannelBinding, Conninfo};
use super::error::{PgError, ServerError};
use super::protocol::{read_message, server_error};
use super::socket::FramedSocket;

/// What the server told us during startup that the stream keeps.
#[derive(Debug, Clone, Default)]
pub struct Session {
    /// The walsender's pid (BackendKeyData): what `pg_stat_replication.pid`
    /// and `pg_replication_slots.active_pid` show for this connection.
    pub backend_pid: i32,
    pub server_version: Option<String>,
    /// Whether authentication was SCRAM-SHA-256-PLUS bound to the TLS channel.
    pub channel_bound: bool,
}

/// The channel binding of one SCRAM exchange: the GS2 header its first
/// message starts with.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Binding {
    /// `n,,`: no binding (no TLS, or binding disabled or impossible).
    None,
    /// `y,,`: the client could bind, but the server offered no
    /// SCRAM-SHA-256-PLUS.
    Unrequested,
    /// `p=tls-server-end-point,,`: SCRAM-SHA-256-PLUS, bound to this hash of
    /// the server certificate.
    EndPoint(Vec<u8>),
}

impl Binding {
    fn mechanism(&self) -> &'static str {
        match self {
            Binding::EndPoint(_) => SCRAM_SHA_256_PLUS,
            Binding::None | Binding::Unrequested => SCRAM_SHA_256,
        }
    }

    fn scram(self, password: &[u8]) -> ScramSha256 {
        let binding = match self {
            Binding::None => sasl::ChannelBinding::unsupported(),
            Binding::Unrequested => sasl::ChannelBinding::unrequested(),
            Binding::EndPoint(hash) => sasl::ChannelBinding::tls_server_end_point(hash),
        };
        ScramSha256::new(password, binding)
    }
}

/// libpq's choice of channel binding for a SCRAM exchange. `end_point` is
/// `None` without TLS, else the connection's end-point data or why there is
/// none. The error is the reason `channel_binding=require` cannot be met.
fn choose_binding(
    mode: ChannelBinding,
    offered: &[String],
    end_point: Option<Result<Vec<u8>, String>>,
) -> Result<Binding, String> {
    let plus_offered = offered.iter().any(|m| m == SCRAM_SHA_256_PLUS);
    match (mode, end_point) {
        (ChannelBinding::Disable, _) => Ok(Binding::None),
        (ChannelBinding::Require, None) => Err(
            "channel_binding=require, but the connection is not encrypted (a Unix socket, or \
             sslmode=prefer and the server offers no TLS): connect over TCP with sslmode=require \
             or stronger, or lower channel_binding"
                .into(),
        ),
        (ChannelBinding::Require, Some(_)) if !plus_offered => Err(format!(
            "channel_binding=require, but the server offers only {} and not \
             SCRAM-SHA-256-PLUS: let pg_hba.conf use scram-sha-256 for this connection over TLS \
             directly to PostgreSQL (a pooler in between cannot bind), or lower channel_binding",
            offered.join(", ")
        )),
        (ChannelBinding::Require, Some(Err(why))) => {
            Err(format!("channel_binding=require, but {why}"))
        }
        // With `require`, PLUS is on offer here.
        (ChannelBinding::Require | ChannelBinding::Prefer, Some(Ok(hash))) => Ok(if plus_offered {
            Binding::EndPoint(hash)
        } else {
            Binding::Unrequested
        }),
        // No end-point data for this certificate: the client cannot bind.
        (ChannelBinding::Prefer, Some(Err(_)) | None) => Ok(Binding::None),
    }
}

/// Which kind of backend a connection asks the server for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionKind {
    /// `replication=database`: a logical walsender that also accepts simple
    /// SQL (the stream and its catalog checks). Needs the REPLICATION
    /// attribute.
    Replication,
    /// An ordinary backend, without the `replication` startup parameter:
    /// any SQL, no REPLICATION attribute needed. The operator commands use
    /// it, so that they can report on a role that lacks the attribute.
    Normal,
}

/// Sends the StartupMessage (with `replication=database` for a
/// [`SessionKind::Replication`]) and authenticates; returns at ReadyForQuery.
pub async fn startup(
    socket: &mut FramedSocket,
    conninfo: &Conninfo,
    fallback_application_name: &str,
    target: &str,
) -> Result<Session, PgError> {
    startup_as(
        socket,
        conninfo,
        fallback_application_name,
        target,
        SessionKind::Replication,
    )
    .await
}

/// Like [`startup`], for either kind of session.
pub async fn startup_as(
    socket: &mut FramedSocket,
    conninfo: &Conninfo,
    fallback_application_name: &str,
    target: &str,
    kind: SessionKind,
) -> Result<Session, PgError> {
    let application_name = conninfo
        .application_name
        .as_deref()
        .unwrap_or(fallback_application_name);
    let mut params = vec![
        ("user", conninfo.user.as_str()),
        ("database", conninfo.dbname.as_str()),
    ];
    if kind == SessionKind::Replication {
        // A logical walsender that also accepts simple SQL (catalog checks).
        params.push(("replication", "database"));
    }
    params.push(("client_encoding", "UTF8"));
    if !application_name.is_empty() {
        params.push(("application_name", application_name));
    }
    if let Some(options) = &conninfo.options {
        params.push(("options", options));
    }
    let protocol_error = |reason: String| PgError::Protocol {
        target: target.to_owned(),
        action: "starting up",
        reason,
    };
    frontend::startup_message(params.iter().copied(), socket.write_buf())
        .map_err(|e| protocol_error(e.to_string()))?;
    flush(socket, target, "sending the startup message").await?;

    let mut scram: Option<ScramSha256> = None;
    // The SCRAM exchange under way is SCRAM-SHA-256-PLUS (`p=`), or at least
    // told the server the client can bind (`p=` or `y,,`).
    let mut binding_sent = false;
    let mut binding_claimed = false;
    let mut session = Session::default();
    let require = conninfo.channel_binding == ChannelBinding::Require;
    let unbindable = |what: &str| PgError::ChannelBinding {
        target: target.to_owned(),
        reason: format!(
            "channel_binding=require, but the server {what}, which cannot be bound to the TLS \
             channel (nothing was sent): let pg_hba.conf use scram-sha-256 for this connection, \
             or lower channel_binding"
        ),
    };
    loop {
        match read_message(socket, target, "authenticating").await? {
            Message::AuthenticationOk if require && !session.channel_bound => {
                return Err(unbindable("let the relay in without SCRAM (trust or peer)"));
            }
            Message::AuthenticationOk => {}
            Message::AuthenticationCleartextPassword if require => {
                return Err(unbindable("asked for a cleartext password"));
            }
            Message::AuthenticationMd5Password(_) if require => {
                return Err(unbindable("asked for an md5 password"));
            }
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
                let offered: Vec<String> = body
                    .mechanisms()
                    .map(|m| Ok(m.to_owned()))
                    .collect()
                    .map_err(|e| protocol_error(e.to_string()))?;
                let binding = choose_binding(
                    conninfo.channel_binding,
                    &offered,
                    socket.tls_server_end_point(),
                )
                .map_err(|reason| PgError::ChannelBinding {
                    target: target.to_owned(),
                    reason,
                })?;
                let mechanism = binding.mechanism();
                if !offered.iter().any(|m| m == mechanism) {
                    return Err(PgError::UnsupportedAuth {
                        target: target.to_owned(),
                        method: format!("SASL with {}", offered.join(", ")),
                    });
                }
                binding_sent = matches!(binding, Binding::EndPoint(_));
                binding_claimed = binding != Binding::None;
                let exchange = binding.scram(password(conninfo, target)?);
                frontend::sasl_initial_response(mechanism, exchange.message(), socket.write_buf())
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
                // The server checked the binding data before its proof.
                session.channel_bound = binding_sent;
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
                let server = server_error(&body);
                // A bound exchange refused before the server's proof:
                // PostgreSQL's "SCRAM channel binding check failed" (28000),
                // or, after `y,,`, "channel binding negotiation error" (the
                // server does offer PLUS: someone took it off the list); 08P01
                // for a malformed binding. A wrong password is 28P01.
                if binding_claimed
                    && !session.channel_bound
                    && matches!(
                        server.sqlstate(),
                        SqlState::INVALID_AUTHORIZATION_SPECIFICATION
                            | SqlState::PROTOCOL_VIOLATION
                    )
                {
                    return Err(PgError::ChannelBinding {
                        target: target.to_owned(),
                        reason: format!(
                            "PostgreSQL refused it ({server}): the TLS channel the relay \
                             bound to is not the server's, so something in between terminates \
                             TLS or rewrites the exchange (a proxy, or an attacker). Connect to \
                             PostgreSQL directly, or set channel_binding=disable if that proxy \
                             is trusted"
                        ),
                    });
                }
                return Err(startup_error(server, conninfo, target, kind));
            }
            _ => return Err(protocol_error("unexpected message during startup".into())),
        }
    }
}

async fn flush(
    socket: &mut FramedSocket,
    target: &str,
    action: &'static str,
) -> Result<(), PgError> {
    socket.flush().await.map_err(|source| PgError::Io {
        target: target.to_owned(),
        action,
        source,
    })
}

fn password<'a>(conninfo: &'a Conninfo, target: &str) -> Result<&'a [u8], PgError> {
    conninfo.password().ok_or_else(|| PgError::PasswordMissing {
        role: conninfo.user.clone(),
        target: target.to_owned(),
    })
}

fn unsupported(target: &str, method: &str) -> PgError {
    PgError::UnsupportedAuth {
        target: target.to_owned(),
        method: method.to_owned(),
    }
}

/// Turns a startup ErrorResponse into the error that tells the operator what to fix.
pub(super) fn startup_error(
    server: ServerError,
    conninfo: &Conninfo,
    target: &str,
    kind: SessionKind,
) -> PgError {
    match server.sqlstate() {
        // Also "no pg_hba.conf entry" (28000), which the server message
        // spells out.
        SqlState::INVALID_PASSWORD | SqlState::INVALID_AUTHORIZATION_SPECIFICATION => {
            PgError::AuthFailed {
                role: conninfo.user.clone(),
                target: target.to_owned(),
                server: Box::new(server),
            }
        }
        // "must be superuser or replication role to start walsender" (PG ≤
        // 15), "permission denied to start WAL sender" (16+). In a normal
        // session it means something else (no CONNECT privilege on the
        // database), which the server's message says.
        SqlState::INSUFFICIENT_PRIVILEGE if kind == SessionKind::Replication => {
            PgError::MissingReplicationRole {
                role: conninfo.user.clone(),
                server: Box::new(server),
            }
        }
        SqlState::UNDEFINED_DATABASE => PgError::DatabaseMissing {
            database: conninfo.dbname.clone(),
            target: target.to_owned(),
            server: Box::new(server),
        },
        _ => PgError::Server {
            target: target.to_owned(),
            action: "the connection",
            server: Box::new(server),
        },
    }
}

#[cfg(test)]
mod tests;
