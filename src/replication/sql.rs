//! A plain SQL session beside the stream: the same conninfo, TLS and
//! authentication as the replication connection (`replication=database`
//! walsenders accept simple queries since PostgreSQL 10), for the few
//! statements the relay runs while it streams: the idle heartbeat and the
//! catalog look-up of a relation the stream names but the relay has not
//! classified yet.
//!
//! Role: connect (trying the conninfo's endpoints in order, bounded by the
//! connect timeout), run simple queries, say goodbye. One connection serves
//! many queries; the caller keeps it for the life of a session.
//!
//! [`SqlConnection::connect_normal`] opens an ordinary session instead (no
//! `replication` startup parameter, so no REPLICATION attribute needed),
//! with the same conninfo, TLS and authentication semantics: the operator
//! commands (`init`, `check`, `status`) use it.

use postgres_protocol::message::frontend;
use tokio::time::timeout;

use super::ReplicationSettings;
use super::auth::{self, SessionKind};
use super::catalog::simple_query;
use super::conninfo::Conninfo;
use super::error::ReplicationError;
use super::socket::{self, FramedSocket};

/// An authenticated connection that runs simple queries.
pub struct SqlConnection {
    socket: FramedSocket,
    target: String,
}

impl SqlConnection {
    /// Connects like the stream does (`replication=database`).
    ///
    /// # Errors
    /// The stream's classification: transient for network trouble, fatal
    /// for a refused login.
    pub async fn connect(settings: &ReplicationSettings) -> Result<Self, ReplicationError> {
        Self::connect_as(settings, SessionKind::Replication).await
    }

    /// Connects as an ordinary session: same conninfo, TLS and
    /// authentication, but no walsender, so the role needs no REPLICATION
    /// attribute and every SQL statement is available.
    ///
    /// # Errors
    /// As [`SqlConnection::connect`].
    pub async fn connect_normal(settings: &ReplicationSettings) -> Result<Self, ReplicationError> {
        Self::connect_as(settings, SessionKind::Normal).await
    }

    async fn connect_as(
        settings: &ReplicationSettings,
        kind: SessionKind,
    ) -> Result<Self, ReplicationError> {
        let conninfo = Conninfo::parse(&settings.conninfo)?;
        let mut last_error = None;
        for endpoint in &conninfo.endpoints {
            let target = endpoint.to_string();
            let attempt = async {
                let socket = socket::open(endpoint, &conninfo.tls, &target).await?;
                let mut socket = FramedSocket::new(socket);
                auth::startup_as(
                    &mut socket,
                    &conninfo,
                    &settings.application_name,
                    &target,
                    kind,
                )
                .await?;
                Ok::<_, ReplicationError>(socket)
            };
            match timeout(settings.connect_timeout, attempt).await {
                Ok(Ok(socket)) => return Ok(SqlConnection { socket, target }),
                Ok(Err(e)) => last_error = Some(e),
                Err(_) => {
                    last_error = Some(ReplicationError::ConnectTimeout {
                        target,
                        timeout: settings.connect_timeout,
                    });
                }
            }
        }
        Err(last_error.unwrap_or_else(|| ReplicationError::Conninfo {
            conninfo: conninfo.to_string(),
            reason: "no host to connect to".into(),
        }))
    }

    /// Runs one simple query; rows as text.
    ///
    /// # Errors
    /// Transient I/O errors; the server's error for a failed statement.
    pub async fn query(
        &mut self,
        sql: &str,
        action: &'static str,
    ) -> Result<Vec<Vec<Option<String>>>, ReplicationError> {
        simple_query(&mut self.socket, sql, &self.target, action).await
    }

    /// The socket, for the catalog checks that run on either kind of
    /// connection.
    pub(super) fn socket_mut(&mut self) -> &mut FramedSocket {
        &mut self.socket
    }

    /// The endpoint connected to, for errors (no credentials in it).
    pub fn target(&self) -> &str {
        &self.target
    }

    /// Terminate, best effort: the server closes the connection on it.
    pub async fn close(mut self) {
        frontend::terminate(self.socket.write_buf());
        let _ = self.socket.flush().await;
    }
}
