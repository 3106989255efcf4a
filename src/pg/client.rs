//! [`PgClient`]: an ordinary SQL session on tokio-postgres, opened with the
//! relay's own conninfo, TLS and connect semantics.
//!
//! Role: every ordinary statement of the relay (the lock, the cleanup, the
//! heartbeat, the operator's commands...) runs on a [`PgClient`], with typed
//! parameters (`$1`, ...) and prepared statements, never with values spliced
//! into the SQL text. Only the replication (walsender) connection keeps the
//! relay's own protocol code (`auth`, `socket`, `sql`).
//!
//! How a session opens, per conninfo endpoint in order, each attempt bounded
//! by [`ConnectSettings::connect_timeout`]:
//! 1. [`socket::open`] connects (TCP or Unix socket) and negotiates TLS per
//!    `sslmode` exactly as the replication connection does (`tls.rs`:
//!    SSLRequest, exactly one byte read, the relay's verification rules and
//!    errors);
//! 2. tokio-postgres's `connect_raw` runs the startup and authentication on
//!    that transport. TLS is already up, so it is told not to negotiate it
//!    again: `sslmode=disable` for a plain transport; for TLS,
//!    `sslmode=require` with `sslnegotiation=direct` and a connector
//!    ([`Established`]) that hands the established session through
//!    unchanged, whose `channel_binding()` is the `tls-server-end-point` hash
//!    of the server's certificate, so SCRAM-SHA-256-PLUS binds as on the
//!    replication connection. Until authentication is over, the transport
//!    notes how far it got (`client/transport.rs`), so that a refused
//!    bound exchange is told apart from a refused login by the protocol
//!    state, as on the replication connection;
//! 3. the connection future runs on its own task until the client is
//!    dropped or the server goes away; requests made after that fail with a
//!    closed-connection error, which is transient.
//!
//! Invariants: the password goes only into tokio-postgres's `Config` for the
//! authentication exchange; errors are built from the endpoint, the role and
//! the server's fields, never from the conninfo. Every tokio-postgres error
//! is classified once, by [`PgError::client`]: a server error keeps its
//! SQLSTATE, message, detail and hint as a [`ServerError`], so
//! [`PgError::kind`] and SQLSTATE checks work as on the replication
//! connection.

use std::io;
use std::ops::{Deref, DerefMut};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::task::JoinHandle;
use tokio_postgres::error::{DbError, SqlState};
use tokio_postgres::tls::{self as pg_tls, TlsConnect};
use tokio_postgres::{AsyncMessage, Client, Config, Connection};

use super::ConnectSettings;
use super::auth::{SessionKind, startup_error};
use super::conninfo::{ChannelBinding, Conninfo, Endpoint};
use super::error::{PgError, ServerError};
use super::socket::{self, Socket};

mod transport;

use transport::{SASL_ASKED, SASL_FINAL, Seen, Transport};

/// An authenticated ordinary session (no walsender): tokio-postgres's
/// [`Client`] (through `Deref`), the endpoint it reached, and the task that
/// drives its connection.
pub struct PgClient {
    client: Client,
    target: String,
    endpoint: Endpoint,
    /// Ends by itself once `client` is dropped (tokio-postgres then sends
    /// Terminate) or the server closes the connection.
    _connection: JoinHandle<()>,
}

impl PgClient {
    /// Connects as an ordinary session, with the semantics of the
    /// replication connection: the conninfo's endpoints in order, each
    /// bounded by the connect timeout, `application_name` falling back to
    /// the settings', TLS per `sslmode` and SCRAM bound per
    /// `channel_binding`.
    ///
    /// # Errors
    /// The last endpoint's error: transient for network trouble and
    /// timeouts, fatal for a refused login or TLS that cannot be had.
    pub async fn connect(settings: &ConnectSettings) -> Result<PgClient, PgError> {
        let ((client, connection), target, endpoint) =
            super::first_endpoint(settings, |endpoint, target| {
                let endpoint = endpoint.clone();
                async move { connect_to(&endpoint, settings, &target).await }
            })
            .await?;
        Ok(PgClient {
            client,
            _connection: tokio::spawn(drive(connection, target.clone())),
            target,
            endpoint,
        })
    }

    /// The endpoint connected to, for errors (no credentials in it).
    pub fn target(&self) -> &str {
        &self.target
    }

    /// The conninfo endpoint that answered: the server this session is on,
    /// for a connection that must reach the same one
    /// ([`super::Conninfo::pinned_to`]).
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Classifies `e` for this session (see [`PgError::client`]).
    pub fn error(&self, action: &'static str, e: tokio_postgres::Error) -> PgError {
        PgError::client(&self.target, action, e)
    }
}

impl Deref for PgClient {
    type Target = Client;

    fn deref(&self) -> &Client {
        &self.client
    }
}

impl DerefMut for PgClient {
    fn deref_mut(&mut self) -> &mut Client {
        &mut self.client
    }
}

/// One endpoint: transport and TLS ours, startup and authentication
/// tokio-postgres's.
async fn connect_to(
    endpoint: &Endpoint,
    settings: &ConnectSettings,
    target: &str,
) -> Result<(Client, Connection<Transport, Bound>), PgError> {
    let conninfo = &settings.conninfo;
    let socket = socket::open(endpoint, &conninfo.tls, target).await?;
    let end_point = match &socket {
        Socket::Tls(stream) => Some(stream.server_end_point()),
        Socket::Tcp(_) | Socket::Unix(_) => None,
    };
    // Refused before the startup message, as libpq does: nothing to bind
    // to, so nothing is sent that could be relayed.
    if conninfo.channel_binding == ChannelBinding::Require {
        match &end_point {
            None => {
                return Err(PgError::ChannelBinding {
                    target: target.to_owned(),
                    reason: "channel_binding=require, but the connection is not encrypted (a \
                             Unix socket, or sslmode=prefer and the server offers no TLS): \
                             connect over TCP with sslmode=require or stronger, or lower \
                             channel_binding"
                        .into(),
                });
            }
            Some(Err(why)) => {
                return Err(PgError::ChannelBinding {
                    target: target.to_owned(),
                    reason: format!("channel_binding=require, but {why}"),
                });
            }
            Some(Ok(_)) => {}
        }
    }
    let binding = match end_point {
        Some(Ok(hash)) if conninfo.channel_binding != ChannelBinding::Disable => Some(hash),
        _ => None,
    };
    let can_bind = binding.is_some();
    let config = session_config(conninfo, &settings.application_name, binding.is_some());
    let (transport, seen) = Transport::new(socket);
    config
        .connect_raw(transport, Established { binding })
        .await
        .map_err(|e| connect_error(e, conninfo, target, can_bind && refused_in_sasl(&seen)))
}

/// Whether the server refused after asking for SASL and before its SCRAM
/// proof: where it checks the channel binding data.
fn refused_in_sasl(seen: &Seen) -> bool {
    let seen = seen.load(std::sync::atomic::Ordering::Relaxed);
    seen & SASL_ASKED != 0 && seen & SASL_FINAL == 0
}

/// tokio-postgres's settings for the startup: who, where, which name, and
/// no TLS negotiation of its own (see the module header).
fn session_config(conninfo: &Conninfo, fallback_application_name: &str, tls: bool) -> Config {
    let mut config = Config::new();
    config.user(&conninfo.user).dbname(&conninfo.dbname);
    let application_name = conninfo
        .application_name
        .as_deref()
        .unwrap_or(fallback_application_name);
    if !application_name.is_empty() {
        config.application_name(application_name);
    }
    if let Some(options) = &conninfo.options {
        config.options(options);
    }
    if let Some(password) = conninfo.password() {
        config.password(password);
    }
    let (ssl_mode, negotiation) = tls_handover(tls);
    config
        .ssl_mode(ssl_mode)
        .ssl_negotiation(negotiation)
        .channel_binding(channel_binding(conninfo.channel_binding));
    config
}

/// How tokio-postgres is told about a transport whose TLS the relay has
/// already negotiated: not at all for plain, and "TLS straight away" (no
/// SSLRequest of its own) for an established session, which [`Established`]
/// hands through.
fn tls_handover(
    tls: bool,
) -> (
    tokio_postgres::config::SslMode,
    tokio_postgres::config::SslNegotiation,
) {
    use tokio_postgres::config::{SslMode, SslNegotiation};
    if tls {
        (SslMode::Require, SslNegotiation::Direct)
    } else {
        (SslMode::Disable, SslNegotiation::Postgres)
    }
}

/// The conninfo's `channel_binding` for tokio-postgres: the same three
/// choices with the same meaning.
fn channel_binding(ours: ChannelBinding) -> tokio_postgres::config::ChannelBinding {
    use tokio_postgres::config::ChannelBinding as Theirs;
    match ours {
        ChannelBinding::Disable => Theirs::Disable,
        ChannelBinding::Prefer => Theirs::Prefer,
        ChannelBinding::Require => Theirs::Require,
    }
}

/// The "TLS connector" tokio-postgres is given: the session is already
/// established (or the transport is plain and it is never called), so it
/// returns the transport unchanged, with its channel binding data when
/// binding is allowed.
struct Established {
    binding: Option<Vec<u8>>,
}

impl TlsConnect<Transport> for Established {
    type Stream = Bound;
    type Error = io::Error;
    type Future = std::future::Ready<Result<Bound, io::Error>>;

    fn connect(self, socket: Transport) -> Self::Future {
        std::future::ready(Ok(Bound {
            socket,
            binding: self.binding,
        }))
    }
}

/// An established TLS transport and its `tls-server-end-point` data (none
/// with `channel_binding=disable`).
struct Bound {
    socket: Transport,
    binding: Option<Vec<u8>>,
}

impl pg_tls::TlsStream for Bound {
    fn channel_binding(&self) -> pg_tls::ChannelBinding {
        match &self.binding {
            Some(hash) => pg_tls::ChannelBinding::tls_server_end_point(hash.clone()),
            None => pg_tls::ChannelBinding::none(),
        }
    }
}

impl tokio::io::AsyncRead for Bound {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().socket).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Bound {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().socket).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().socket).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().socket).poll_shutdown(cx)
    }
}

/// Drives the connection until it ends. Notices are the server's remarks on
/// ordinary statements (`IF NOT EXISTS` skipped, ...): debug, as the simple
/// query path ignored them. The end of the connection shows to the client as
/// a closed-connection error on its next request.
async fn drive(mut connection: Connection<Transport, Bound>, target: String) {
    let ended = std::future::poll_fn(|cx| {
        loop {
            match connection.poll_message(cx) {
                Poll::Ready(Some(Ok(AsyncMessage::Notice(notice)))) => {
                    tracing::debug!(%target, severity = notice.severity(), message = notice.message(), "PostgreSQL notice");
                }
                Poll::Ready(Some(Ok(_))) => {}
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(e)),
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
    });
    if let Some(e) = ended.await {
        tracing::debug!(%target, error = %PgError::client(&target, "running a session", e), "SQL session ended");
    }
}

/// A failed connect (`bound`: see [`refused_in_sasl`]): the server's
/// refusal classified as the replication connection's startup classifies
/// it (a wrong password names the role, a missing database the dbname),
/// tokio-postgres's own refusals as the relay's errors for the same
/// situation.
fn connect_error(
    e: tokio_postgres::Error,
    conninfo: &Conninfo,
    target: &str,
    bound: bool,
) -> PgError {
    if let Some(db) = e.as_db_error() {
        let server = server_error(db);
        // `bound`: the exchange could bind and the server refused it
        // before its proof. PostgreSQL's "SCRAM channel binding check
        // failed" (28000), or, after `y,,`, "channel binding negotiation
        // error" (the server does offer PLUS: someone took it off the
        // list); 08P01 for a malformed binding. A wrong password is 28P01.
        if bound
            && matches!(
                server.sqlstate(),
                SqlState::INVALID_AUTHORIZATION_SPECIFICATION | SqlState::PROTOCOL_VIOLATION
            )
        {
            return PgError::ChannelBinding {
                target: target.to_owned(),
                reason: format!(
                    "PostgreSQL refused it ({server}): the TLS channel the relay bound to is \
                     not the server's, so something in between terminates TLS or rewrites the \
                     exchange (a proxy, or an attacker). Connect to PostgreSQL directly, or set \
                     channel_binding=disable if that proxy is trusted"
                ),
            };
        }
        return startup_error(server, conninfo, target, SessionKind::Normal);
    }
    // tokio-postgres's own refusals carry no code; their text is fixed.
    let text = full_text(&e);
    if text.contains("password missing") {
        return PgError::PasswordMissing {
            role: conninfo.user.clone(),
            target: target.to_owned(),
        };
    }
    if text.contains("server did not use channel binding") {
        return PgError::ChannelBinding {
            target: target.to_owned(),
            reason: "channel_binding=require, but the server did not offer SCRAM-SHA-256-PLUS \
                     (trust, a password or md5, or SCRAM without binding): let pg_hba.conf use \
                     scram-sha-256 for this connection over TLS directly to PostgreSQL (a \
                     pooler in between cannot bind), or lower channel_binding"
                .into(),
        };
    }
    if text.contains("unsupported authentication method")
        || text.contains("unsupported SASL mechanism")
    {
        return PgError::UnsupportedAuth {
            target: target.to_owned(),
            method: text,
        };
    }
    PgError::client(target, "authenticating", e)
}

/// tokio-postgres's text of an error and of its cause: its `Display` alone
/// says only the kind ("invalid configuration").
fn full_text(e: &tokio_postgres::Error) -> String {
    match std::error::Error::source(e) {
        Some(source) => format!("{e}: {source}"),
        None => e.to_string(),
    }
}

/// The relay's [`ServerError`] of a tokio-postgres [`DbError`]: the fields
/// the simple-query path reads from an ErrorResponse, the non-localized
/// severity preferred.
fn server_error(db: &DbError) -> ServerError {
    ServerError {
        severity: db
            .parsed_severity()
            .map_or_else(|| db.severity().to_owned(), |s| s.to_string()),
        code: db.code().code().to_owned(),
        message: db.message().to_owned(),
        detail: db.detail().map(str::to_owned),
        hint: db.hint().map(str::to_owned),
    }
}

impl PgError {
    /// Classifies an error of a [`PgClient`] request once: a server error
    /// as [`PgError::Server`] with its SQLSTATE and fields (so
    /// [`PgError::kind`] reads its class), a closed connection as
    /// [`PgError::Closed`] and an I/O error as [`PgError::Io`] (both
    /// transient), anything else (a row that does not convert, a
    /// malformed answer) as a fatal protocol error.
    pub fn client(target: &str, action: &'static str, e: tokio_postgres::Error) -> PgError {
        if let Some(db) = e.as_db_error() {
            return PgError::Server {
                target: target.to_owned(),
                action,
                server: Box::new(server_error(db)),
            };
        }
        if e.is_closed() {
            return PgError::Closed {
                target: target.to_owned(),
                action,
            };
        }
        let reason = full_text(&e);
        match e.into_source().map(|source| source.downcast::<io::Error>()) {
            Some(Ok(source)) => PgError::Io {
                target: target.to_owned(),
                action,
                source: *source,
            },
            _ => PgError::Protocol {
                target: target.to_owned(),
                action,
                reason,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_is_handed_over_never_negotiated_twice() {
        use tokio_postgres::config::{SslMode, SslNegotiation};
        // Plain: tokio-postgres sends no SSLRequest.
        assert_eq!(
            tls_handover(false),
            (SslMode::Disable, SslNegotiation::Postgres)
        );
        // Established: no SSLRequest either ("direct"), and the connector
        // is called, which hands the session through.
        assert_eq!(
            tls_handover(true),
            (SslMode::Require, SslNegotiation::Direct)
        );
    }

    #[test]
    fn channel_binding_keeps_its_meaning() {
        use tokio_postgres::config::ChannelBinding as Theirs;
        assert_eq!(channel_binding(ChannelBinding::Disable), Theirs::Disable);
        assert_eq!(channel_binding(ChannelBinding::Prefer), Theirs::Prefer);
        assert_eq!(channel_binding(ChannelBinding::Require), Theirs::Require);
    }

    #[test]
    fn the_startup_config_has_the_conninfos_names_and_the_fallback() {
        let conninfo =
            Conninfo::parse("postgres://relay:hunter2@db/app?options=-c%20x%3D1").unwrap();
        let config = session_config(&conninfo, "outbox-relay", false);
        assert_eq!(config.get_user(), Some("relay"));
        assert_eq!(config.get_dbname(), Some("app"));
        assert_eq!(config.get_application_name(), Some("outbox-relay"));
        assert_eq!(config.get_options(), Some("-c x=1"));
        assert_eq!(config.get_password(), Some(&b"hunter2"[..]));
        assert!(!format!("{config:?}").contains("hunter2"));
        let named = Conninfo::parse("postgres://relay@db/app?application_name=mine").unwrap();
        let config = session_config(&named, "outbox-relay", true);
        assert_eq!(config.get_application_name(), Some("mine"));
        assert_eq!(config.get_password(), None);
        // An empty fallback sends no name at all, as on the stream.
        let config = session_config(&conninfo, "", false);
        assert_eq!(config.get_application_name(), None);
    }

    #[test]
    fn an_error_without_a_server_or_io_cause_is_a_fatal_protocol_error() {
        // tokio-postgres builds its errors itself; the timeout one is the
        // only public constructor, and classifies as a fatal protocol error
        // carrying its text.
        let e = tokio_postgres::Error::__private_api_timeout();
        let error = PgError::client("h:1", "testing", e);
        assert!(matches!(error, PgError::Protocol { .. }), "{error}");
        assert_eq!(error.kind(), super::super::ErrorKind::Fatal);
        assert!(
            error.to_string().contains("timeout waiting for server"),
            "{error}"
        );
    }
}
