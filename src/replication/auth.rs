//! Startup and authentication of the replication connection.
//!
//! Role: send the StartupMessage with `replication=database`, answer the
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
use super::error::{ReplicationError, ServerError};
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
) -> Result<Session, ReplicationError> {
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
) -> Result<Session, ReplicationError> {
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
    let protocol_error = |reason: String| ReplicationError::Protocol {
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
    let unbindable = |what: &str| ReplicationError::ChannelBinding {
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
                .map_err(|reason| ReplicationError::ChannelBinding {
                    target: target.to_owned(),
                    reason,
                })?;
                let mechanism = binding.mechanism();
                if !offered.iter().any(|m| m == mechanism) {
                    return Err(ReplicationError::UnsupportedAuth {
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
                    return Err(ReplicationError::ChannelBinding {
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
fn startup_error(
    server: ServerError,
    conninfo: &Conninfo,
    target: &str,
    kind: SessionKind,
) -> ReplicationError {
    match server.sqlstate() {
        // Also "no pg_hba.conf entry" (28000), which the server message
        // spells out.
        SqlState::INVALID_PASSWORD | SqlState::INVALID_AUTHORIZATION_SPECIFICATION => {
            ReplicationError::AuthFailed {
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
            ReplicationError::MissingReplicationRole {
                role: conninfo.user.clone(),
                server: Box::new(server),
            }
        }
        SqlState::UNDEFINED_DATABASE => ReplicationError::DatabaseMissing {
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

#[cfg(test)]
mod tests {
    use bytes::BufMut;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::UnixStream;

    use super::*;
    use crate::replication::ErrorKind;
    use crate::replication::socket::Socket;

    fn offered(mechanisms: &[&str]) -> Vec<String> {
        mechanisms.iter().map(|m| (*m).to_owned()).collect()
    }

    #[test]
    fn binding_follows_libpq_channel_binding() {
        use ChannelBinding::{Disable, Prefer, Require};
        let both = offered(&[SCRAM_SHA_256_PLUS, SCRAM_SHA_256]);
        let plain = offered(&[SCRAM_SHA_256]);
        let hash = || Some(Ok(vec![7u8; 32]));
        let no_hash = || Some(Err("no hash for Ed25519".to_owned()));
        let bound = Ok(Binding::EndPoint(vec![7u8; 32]));
        for (mode, offer, end_point, expected) in [
            (Prefer, &both, hash(), bound.clone()),
            (Require, &both, hash(), bound.clone()),
            (Disable, &both, hash(), Ok(Binding::None)),
            (Prefer, &plain, hash(), Ok(Binding::Unrequested)),
            (Prefer, &both, None, Ok(Binding::None)),
            (Prefer, &both, no_hash(), Ok(Binding::None)),
            (Disable, &plain, None, Ok(Binding::None)),
        ] {
            assert_eq!(
                choose_binding(mode, offer, end_point),
                expected,
                "{mode:?} {offer:?}"
            );
        }
        for (offer, end_point, says) in [
            (&both, None, "not encrypted"),
            (&plain, hash(), "not SCRAM-SHA-256-PLUS"),
            (&both, no_hash(), "no hash for Ed25519"),
        ] {
            let why = choose_binding(Require, offer, end_point).unwrap_err();
            assert!(
                why.contains(says) && why.contains("channel_binding"),
                "{why}"
            );
        }
    }

    #[test]
    fn the_first_scram_message_names_the_binding() {
        for (binding, header) in [
            (Binding::EndPoint(vec![1, 2, 3]), "p=tls-server-end-point,,"),
            (Binding::Unrequested, "y,,"),
            (Binding::None, "n,,"),
        ] {
            let mechanism = binding.mechanism();
            let message = binding.scram(b"pw").message().to_vec();
            let message = String::from_utf8(message).unwrap();
            assert!(message.starts_with(header), "{message}");
            assert!(message[header.len()..].starts_with("n=,r="), "{message}");
            assert_eq!(
                mechanism == SCRAM_SHA_256_PLUS,
                header.starts_with("p="),
                "{mechanism}"
            );
        }
    }

    fn authentication(code: i32, data: &[u8]) -> Vec<u8> {
        let mut body = bytes::BytesMut::new();
        body.put_i32(code);
        body.put_slice(data);
        let mut out = vec![b'R'];
        out.extend(i32::try_from(body.len() + 4).unwrap().to_be_bytes());
        out.extend(&body);
        out
    }

    /// Runs `startup` for `conninfo` against a fake server that sends
    #[test]
    fn startup_errors_name_what_to_fix_by_sqlstate() {
        let conninfo = Conninfo::parse("host=h user=relay dbname=app").unwrap();
        let server = |code: &str| ServerError {
            severity: "FATAL".into(),
            code: code.into(),
            message: "m".into(),
            detail: None,
            hint: None,
        };
        let error =
            |code| startup_error(server(code), &conninfo, "h:5432", SessionKind::Replication);
        for code in ["28P01", "28000"] {
            assert!(
                matches!(error(code), ReplicationError::AuthFailed { ref role, .. } if role == "relay"),
                "{code}"
            );
        }
        assert!(matches!(
            error("42501"),
            ReplicationError::MissingReplicationRole { .. }
        ));
        assert!(matches!(
            error("3D000"),
            ReplicationError::DatabaseMissing { ref database, .. } if database == "app"
        ));
        for code in ["57P03", "53300", "XX000"] {
            assert!(
                matches!(error(code), ReplicationError::Server { .. }),
                "{code}"
            );
        }
    }

    /// `server` once the startup message arrived and hangs up; returns the
    /// outcome and everything the client wrote after its startup message.
    async fn startup_against(
        conninfo: &str,
        server: Vec<u8>,
    ) -> (Result<Session, ReplicationError>, Vec<u8>) {
        let conninfo = Conninfo::parse(conninfo).unwrap();
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        let fake = tokio::spawn(async move {
            let len = theirs.read_i32().await.unwrap();
            let mut startup = vec![0u8; usize::try_from(len).unwrap() - 4];
            theirs.read_exact(&mut startup).await.unwrap();
            theirs.write_all(&server).await.unwrap();
            // Then hang up (the client's next read ends) and keep what the
            // client sends until it closes its side.
            theirs.shutdown().await.unwrap();
            let mut rest = Vec::new();
            let _ = theirs.read_to_end(&mut rest).await;
            rest
        });
        let mut socket = FramedSocket::new(Socket::Unix(ours));
        let outcome = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            startup(&mut socket, &conninfo, "test", "fake"),
        )
        .await
        .expect("startup ends once the fake server hangs up");
        drop(socket);
        (outcome, fake.await.unwrap())
    }

    /// The startup message `startup_as` sends for `kind`, and its outcome
    /// when the server answers `server` and hangs up.
    async fn startup_message_for(
        kind: SessionKind,
        server: Vec<u8>,
    ) -> (Result<Session, ReplicationError>, Vec<u8>) {
        let conninfo = Conninfo::parse("host=/nonexistent user=u dbname=app").unwrap();
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        let fake = tokio::spawn(async move {
            let len = theirs.read_i32().await.unwrap();
            let mut startup = vec![0u8; usize::try_from(len).unwrap() - 4];
            theirs.read_exact(&mut startup).await.unwrap();
            theirs.write_all(&server).await.unwrap();
            theirs.shutdown().await.unwrap();
            startup
        });
        let mut socket = FramedSocket::new(Socket::Unix(ours));
        let outcome = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            startup_as(&mut socket, &conninfo, "test", "fake", kind),
        )
        .await
        .expect("startup ends once the fake server hangs up");
        drop(socket);
        (outcome, fake.await.unwrap())
    }

    /// The startup parameters as `name=value` strings.
    fn startup_parameters(message: &[u8]) -> Vec<String> {
        // Protocol version (4 bytes), then NUL-terminated name/value pairs.
        let fields: Vec<&[u8]> = message[4..].split(|b| *b == 0).collect();
        fields
            .chunks(2)
            .filter(|pair| pair.len() == 2 && !pair[0].is_empty())
            .map(|pair| {
                format!(
                    "{}={}",
                    String::from_utf8_lossy(pair[0]),
                    String::from_utf8_lossy(pair[1])
                )
            })
            .collect()
    }

    fn error_response(code: &str, message: &str) -> Vec<u8> {
        let mut body = Vec::new();
        for (field, value) in [
            (b'S', "FATAL"),
            (b'V', "FATAL"),
            (b'C', code),
            (b'M', message),
        ] {
            body.push(field);
            body.extend(value.as_bytes());
            body.push(0);
        }
        body.push(0);
        let mut out = vec![b'E'];
        out.extend(i32::try_from(body.len() + 4).unwrap().to_be_bytes());
        out.extend(body);
        out
    }

    #[tokio::test]
    async fn only_a_replication_session_asks_for_a_walsender() {
        let trust = authentication(0, b"");
        let (_, replication) = startup_message_for(SessionKind::Replication, trust.clone()).await;
        let replication = startup_parameters(&replication);
        assert!(
            replication.contains(&"replication=database".to_owned()),
            "{replication:?}"
        );
        let (_, normal) = startup_message_for(SessionKind::Normal, trust).await;
        let normal = startup_parameters(&normal);
        assert!(
            normal.iter().all(|p| !p.starts_with("replication=")),
            "{normal:?}"
        );
        for expected in ["user=u", "database=app", "client_encoding=UTF8"] {
            assert!(normal.contains(&expected.to_owned()), "{normal:?}");
        }
    }

    #[tokio::test]
    async fn insufficient_privilege_names_the_replication_attribute_only_for_a_walsender() {
        let refused = error_response("42501", "permission denied for database app");
        let (outcome, _) = startup_message_for(SessionKind::Replication, refused.clone()).await;
        assert!(
            matches!(
                outcome,
                Err(ReplicationError::MissingReplicationRole { .. })
            ),
            "{outcome:?}"
        );
        let (outcome, _) = startup_message_for(SessionKind::Normal, refused).await;
        let err = outcome.unwrap_err();
        assert!(matches!(err, ReplicationError::Server { .. }), "{err}");
        assert!(
            err.to_string()
                .contains("permission denied for database app"),
            "{err}"
        );
        assert!(!err.to_string().contains("REPLICATION"), "{err}");
    }

    #[tokio::test]
    async fn require_without_tls_sends_nothing_and_says_how_to_fix() {
        let sasl = authentication(10, b"SCRAM-SHA-256-PLUS\0SCRAM-SHA-256\0\0");
        let md5 = authentication(5, &[1, 2, 3, 4]);
        let cleartext = authentication(3, b"");
        let trust = authentication(0, b"");
        for (server, says) in [
            (sasl, "not encrypted"),
            (md5, "md5"),
            (cleartext, "cleartext"),
            (trust, "without SCRAM"),
        ] {
            let (outcome, sent) = startup_against(
                "host=/nonexistent user=u password=Pw9x channel_binding=require",
                server,
            )
            .await;
            let err = outcome.unwrap_err();
            assert!(
                matches!(err, ReplicationError::ChannelBinding { .. }),
                "{err}"
            );
            assert_eq!(err.kind(), ErrorKind::Fatal);
            let text = err.to_string();
            assert!(
                text.contains(says) && text.contains("channel_binding"),
                "{text}"
            );
            assert!(
                sent.is_empty(),
                "nothing after the startup message: {sent:?}"
            );
        }
    }

    #[tokio::test]
    async fn prefer_without_tls_uses_plain_scram_without_binding() {
        let sasl = authentication(10, b"SCRAM-SHA-256-PLUS\0SCRAM-SHA-256\0\0");
        let (outcome, sent) = startup_against("host=/nonexistent user=u password=Pw9x", sasl).await;
        // The fake server hangs up after the mechanisms.
        assert!(outcome.is_err());
        assert_eq!(sent.first(), Some(&b'p'), "SASLInitialResponse: {sent:?}");
        let body = &sent[5..];
        let mechanism_end = body.iter().position(|b| *b == 0).unwrap();
        assert_eq!(&body[..mechanism_end], SCRAM_SHA_256.as_bytes());
        let first_message = &body[mechanism_end + 1 + 4..];
        assert!(first_message.starts_with(b"n,,n=,r="), "{first_message:?}");
    }
}
