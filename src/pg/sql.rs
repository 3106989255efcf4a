//! Simple-query execution, and a plain SQL session beside the stream.
//!
//! [`simple_query`] runs one statement of the simple query protocol on any
//! authenticated socket: the replication connection itself before
//! START_REPLICATION (a `replication=database` walsender accepts simple
//! queries since PostgreSQL 10, and replication commands such as
//! IDENTIFY_SYSTEM the same way), or a [`SqlConnection`].
//!
//! [`SqlConnection`]: a walsender session (`replication=database`) with
//! the same conninfo, TLS and authentication as the stream, for what must
//! run on a replication connection (the catalog checks before
//! START_REPLICATION, replication commands). Every ordinary statement runs
//! on tokio-postgres instead ([`super::PgClient`]), with typed parameters.
//!
//! Invariant: a statement's rows are returned only when the server ended it
//! without an ErrorResponse, and its ErrorResponse only after ReadyForQuery,
//! so after either the connection is ready for the next statement.

use fallible_iterator::FallibleIterator;
use postgres_protocol::message::backend::Message;
use postgres_protocol::message::frontend;

use super::ConnectSettings;
use super::auth::{self, SessionKind};
use super::conninfo::Endpoint;
use super::error::{PgError, ServerError};
use super::protocol::{read_message, server_error};
use super::socket::{self, FramedSocket};

/// An authenticated connection that runs simple queries.
pub struct SqlConnection {
    socket: FramedSocket,
    target: String,
    /// The conninfo endpoint that answered, of those tried in order.
    endpoint: Endpoint,
}

impl SqlConnection {
    /// Connects like the stream does (`replication=database`).
    ///
    /// # Errors
    /// The stream's classification: transient for network trouble, fatal
    /// for a refused login.
    pub async fn connect(settings: &ConnectSettings) -> Result<Self, PgError> {
        Self::connect_as(settings, SessionKind::Replication).await
    }

    async fn connect_as(settings: &ConnectSettings, kind: SessionKind) -> Result<Self, PgError> {
        let conninfo = &settings.conninfo;
        let (socket, target, endpoint) = super::first_endpoint(settings, |endpoint, target| {
            let endpoint = endpoint.clone();
            async move {
                let socket = socket::open(&endpoint, &conninfo.tls, &target).await?;
                let mut socket = FramedSocket::new(socket);
                auth::startup_as(
                    &mut socket,
                    conninfo,
                    &settings.application_name,
                    &target,
                    kind,
                )
                .await?;
                Ok(socket)
            }
        })
        .await?;
        Ok(SqlConnection {
            socket,
            target,
            endpoint,
        })
    }

    /// Runs one simple query; rows as text.
    ///
    /// # Errors
    /// Transient I/O errors; the server's error for a failed statement.
    pub async fn query(
        &mut self,
        sql: &str,
        action: &'static str,
    ) -> Result<Vec<Vec<Option<String>>>, PgError> {
        simple_query(&mut self.socket, sql, &self.target, action).await
    }

    /// The endpoint connected to, for errors (no credentials in it).
    pub fn target(&self) -> &str {
        &self.target
    }

    /// The conninfo endpoint connected to: the server this session is on,
    /// for a connection that must reach the same one
    /// ([`super::Conninfo::pinned_to`]).
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Terminate, best effort: the server closes the connection on it.
    pub async fn close(mut self) {
        frontend::terminate(self.socket.write_buf());
        let _ = self.socket.flush().await;
    }
}

/// Runs one simple query and returns its rows as text (NULL as `None`).
///
/// # Errors
/// Transient I/O errors; the server's error for a failed statement
/// ([`PgError::Server`]); a protocol error for a malformed answer.
pub async fn simple_query(
    socket: &mut FramedSocket,
    sql: &str,
    target: &str,
    action: &'static str,
) -> Result<Vec<Vec<Option<String>>>, PgError> {
    frontend::query(sql, socket.write_buf()).map_err(|e| PgError::Protocol {
        target: target.to_owned(),
        action,
        reason: e.to_string(),
    })?;
    socket.flush().await.map_err(|source| PgError::Io {
        target: target.to_owned(),
        action,
        source,
    })?;
    let mut rows = Vec::new();
    let mut failure: Option<ServerError> = None;
    loop {
        match read_message(socket, target, action).await? {
            Message::DataRow(body) => {
                let buffer = body.buffer();
                let row = body
                    .ranges()
                    .map(
                        |range| Ok(range.map(|r| String::from_utf8_lossy(&buffer[r]).into_owned())),
                    )
                    .collect()
                    .map_err(|e| PgError::Protocol {
                        target: target.to_owned(),
                        action,
                        reason: format!("DataRow: {e}"),
                    })?;
                rows.push(row);
            }
            Message::ErrorResponse(body) => failure = Some(server_error(&body)),
            Message::ReadyForQuery(_) => break,
            // RowDescription, CommandComplete, EmptyQueryResponse, notices and
            // parameter changes carry nothing the checks need.
            _ => {}
        }
    }
    match failure {
        Some(server) => Err(PgError::Server {
            target: target.to_owned(),
            action,
            server: Box::new(server),
        }),
        None => Ok(rows),
    }
}

/// The error for a result that does not have the rows and columns the
/// statement that produced it always returns.
pub fn unexpected_shape(target: &str, action: &'static str) -> PgError {
    PgError::Protocol {
        target: target.to_owned(),
        action,
        reason: "unexpected result shape".into(),
    }
}
