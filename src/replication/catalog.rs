//! Pre-flight checks of the slot and the publication, run as simple SQL on
//! the replication connection itself (a `replication=database` walsender
//! accepts simple queries since PostgreSQL 10), and the START_REPLICATION
//! command.
//!
//! Why here and not on an ordinary session with parameters: the checks
//! read the slot the stream is about to take (active or not, its
//! `confirmed_flush_lsn`) on the very connection and server that takes it,
//! right before START_REPLICATION, with no second connection per connect
//! (another login, another place to fail or to land on another host). A
//! walsender speaks the simple query protocol only, so the names these
//! checks compare are quoted literals: the one place the relay still writes
//! values into SQL text.
//!
//! Role: turn "the stream would fail later, or worse, silently read
//! nothing" into a fatal error up front that names the object and the fix:
//! a missing slot is never created here, a slot whose WAL is lost is never
//! used, a slot another process reads is never shared.
//!
//! Invariants: slot names are validated to PostgreSQL's own rule
//! (`[a-z0-9_]{1,63}`) before they reach any command; every other name is
//! quoted, never interpolated raw. Columns that only newer servers have
//! (`conflicting` 16+, `invalidation_reason` 17+) are read through
//! `to_jsonb(row)`, so one query works on every supported version.

use std::time::Duration;

use postgres_protocol::escape::{escape_identifier, escape_literal};
use serde::Deserialize;

use super::ReplicationSettings;
use super::outbox_table::{self, OutboxTable};
use crate::pg::error::{ErrorKind, PgError};
use crate::pg::quote::replication_literal;
use crate::pg::socket::FramedSocket;
use crate::pg::sql::{simple_query, unexpected_shape};
use pgoutput::lsn::Lsn;

/// PostgreSQL's `NAMEDATALEN - 1`.
const MAX_NAME_LEN: usize = 63;

/// Rejects what PostgreSQL would reject as a slot name (see
/// `ReplicationSlotValidateName`), so the name can appear in commands unquoted
/// and in fix hints verbatim.
pub fn validate_slot_name(slot: &str) -> Result<(), PgError> {
    let reason = if slot.is_empty() {
        "it is empty"
    } else if slot.len() > MAX_NAME_LEN {
        "it is longer than 63 bytes"
    } else if !slot
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        "PostgreSQL allows only lower case letters, digits and underscores"
    } else {
        return Ok(());
    };
    Err(PgError::InvalidSlotName {
        slot: slot.to_owned(),
        reason,
    })
}

/// `START_REPLICATION` from the slot's own position. Always `0/0`: the server
/// then starts at the slot's `confirmed_flush_lsn` (start where the slot
/// says), never at a position we computed. `publication_names` is parsed by the server as
/// an identifier list, so the name is quoted as an identifier inside the
/// literal: this keeps upper case and commas intact.
pub fn start_replication_command(slot: &str, publication: &str) -> String {
    format!(
        "START_REPLICATION SLOT {} LOGICAL 0/0 (proto_version '1', publication_names {}, \
         messages 'true')",
        escape_identifier(slot),
        replication_literal(&escape_identifier(publication)),
    )
}

/// `pg_replication_slots`, as far as the checks need it.
#[derive(Debug, Deserialize)]
struct SlotRow {
    slot_type: String,
    plugin: Option<String>,
    database: Option<String>,
    active: bool,
    active_pid: Option<i32>,
    wal_status: Option<String>,
    confirmed_flush_lsn: Option<String>,
    /// PostgreSQL 16+.
    conflicting: Option<bool>,
    /// PostgreSQL 17+.
    invalidation_reason: Option<String>,
    /// PostgreSQL 14+.
    two_phase: Option<bool>,
}

/// Which server answered: its system identifier (kept by physical
/// standbys, so shared by a promoted standby and its old primary) and
/// timeline (bumped by every promotion). A position confirmed on one
/// identity means nothing on another: after a failover the new primary's
/// history forked from the old one's somewhere below it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerIdentity {
    pub system_id: String,
    pub timeline: u32,
}

impl std::fmt::Display for ServerIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "system {} timeline {}", self.system_id, self.timeline)
    }
}

/// What the checks learned, for the stream.
#[derive(Debug, Clone)]
pub struct CatalogState {
    /// The slot's `confirmed_flush_lsn` at connect: where the stream starts.
    pub confirmed_flush: Lsn,
    /// `wal_sender_timeout`; `None` when disabled (0).
    pub wal_sender_timeout: Option<Duration>,
    pub identity: ServerIdentity,
    /// The server's WAL flush position at connect (`IDENTIFY_SYSTEM`'s
    /// `xlogpos`): no position the relay confirmed on this server can be
    /// above it.
    pub server_wal: Lsn,
    /// Where the server's timeline forked from its parent (its last
    /// promotion), when it is not the first timeline.
    pub timeline_fork: Option<Lsn>,
    /// The outbox table, when the settings name one (and, when it is
    /// optional, it exists and the publication publishes it).
    pub outbox: Option<OutboxTable>,
}

/// Identifies the server, checks slot, publication and outbox table, and
/// reads `wal_sender_timeout`.
pub async fn check(
    socket: &mut FramedSocket,
    settings: &ReplicationSettings,
    target: &str,
) -> Result<CatalogState, PgError> {
    let (identity, server_wal) = identify_system(socket, target).await?;
    let timeline_fork = timeline_fork_point(socket, identity.timeline, target).await?;
    let confirmed_flush = check_slot(socket, &settings.slot, target).await?;
    let outbox = match &settings.outbox_table {
        Some((schema, name)) => match outbox_table::resolve(
            socket,
            (schema.as_str(), name.as_str()),
            settings.outbox_oid,
            &settings.publication,
            target,
        )
        .await
        {
            Ok(outbox) => Some(outbox),
            Err(error) if outbox_table::sends_no_rows(&error, settings.outbox_table_optional) => {
                check_publication(socket, &settings.publication, target).await?;
                None
            }
            Err(error) => return Err(error),
        },
        None => {
            check_publication(socket, &settings.publication, target).await?;
            None
        }
    };
    let wal_sender_timeout = wal_sender_timeout(socket, target).await?;
    Ok(CatalogState {
        confirmed_flush,
        wal_sender_timeout,
        identity,
        server_wal,
        timeline_fork,
        outbox,
    })
}

/// `TIMELINE_HISTORY`: the position where `timeline` branched off its
/// parent (the last line of its history file: parent, switch point, reason).
/// `None` on the first timeline, or when the history cannot be read (it is
/// only used to tell the operator which range a failover may have lost).
async fn timeline_fork_point(
    socket: &mut FramedSocket,
    timeline: u32,
    target: &str,
) -> Result<Option<Lsn>, PgError> {
    if timeline <= 1 {
        return Ok(None);
    }
    let rows = simple_query(
        socket,
        &format!("TIMELINE_HISTORY {timeline}"),
        target,
        "reading the timeline history",
    )
    .await;
    let content = match rows {
        Ok(rows) => rows
            .first()
            .and_then(|row| row.get(1).cloned().flatten())
            .unwrap_or_default(),
        Err(error) if error.kind() == ErrorKind::Transient => return Err(error),
        Err(_) => return Ok(None),
    };
    Ok(parse_fork_point(&content))
}

/// The switch point on the last line of a timeline history file, given as
/// text or as a `\x...` hex bytea.
fn parse_fork_point(content: &str) -> Option<Lsn> {
    let text = match content.strip_prefix("\\x") {
        Some(hex) => {
            let bytes: Option<Vec<u8>> = (0..hex.len() / 2)
                .map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok())
                .collect();
            String::from_utf8(bytes?).ok()?
        }
        None => content.to_owned(),
    };
    let last = text.lines().rev().find(|line| !line.trim().is_empty())?;
    last.split_whitespace().nth(1)?.parse().ok()
}

/// `IDENTIFY_SYSTEM`: the system identifier and timeline, and the WAL
/// flush position (`xlogpos`).
async fn identify_system(
    socket: &mut FramedSocket,
    target: &str,
) -> Result<(ServerIdentity, Lsn), PgError> {
    let action = "identifying the server";
    let rows = simple_query(socket, "IDENTIFY_SYSTEM", target, action).await?;
    let row = match rows.as_slice() {
        [row] if row.len() >= 3 => row,
        _ => return Err(unexpected_shape(target, action)),
    };
    let system_id = row[0]
        .clone()
        .ok_or_else(|| unexpected_shape(target, action))?;
    let timeline = row[1]
        .as_deref()
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| unexpected_shape(target, action))?;
    let wal = row[2]
        .as_deref()
        .and_then(|lsn| lsn.parse().ok())
        .ok_or_else(|| unexpected_shape(target, action))?;
    Ok((
        ServerIdentity {
            system_id,
            timeline,
        },
        wal,
    ))
}

async fn check_slot(socket: &mut FramedSocket, slot: &str, target: &str) -> Result<Lsn, PgError> {
    let sql = format!(
        "SELECT current_database(), (SELECT to_jsonb(s)::text FROM pg_replication_slots s \
         WHERE s.slot_name = {})",
        escape_literal(slot)
    );
    let rows = simple_query(socket, &sql, target, "checking the replication slot").await?;
    let (database, json) = match rows.as_slice() {
        [row] if row.len() == 2 => (row[0].clone().unwrap_or_default(), row[1].as_deref()),
        _ => return Err(unexpected_shape(target, "checking the replication slot")),
    };
    let Some(json) = json else {
        return Err(PgError::SlotMissing {
            slot: slot.to_owned(),
            database,
        });
    };
    let row: SlotRow = serde_json::from_str(json).map_err(|e| PgError::Protocol {
        target: target.to_owned(),
        action: "checking the replication slot",
        reason: format!("pg_replication_slots row: {e}"),
    })?;
    evaluate_slot(slot, &database, row).map_err(|error| match error {
        PgError::Protocol { action, reason, .. } => PgError::Protocol {
            target: target.to_owned(),
            action,
            reason,
        },
        other => other,
    })
}

/// The slot checks of [`evaluate_slot`] on a `pg_replication_slots` row
/// given as JSON (`to_jsonb(s)`), for the operator commands: the same
/// verdict, with the same message, as the stream's connect.
///
/// # Errors
/// As at connect; `Protocol` when the JSON is not a slot row.
pub fn evaluate_slot_json(slot: &str, database: &str, json: &str) -> Result<Lsn, PgError> {
    let row: SlotRow = serde_json::from_str(json).map_err(|e| PgError::Protocol {
        target: String::new(),
        action: "checking the replication slot",
        reason: format!("pg_replication_slots row: {e}"),
    })?;
    evaluate_slot(slot, database, row)
}

/// The slot checks, in the order an operator should fix things.
fn evaluate_slot(slot: &str, database: &str, row: SlotRow) -> Result<Lsn, PgError> {
    let plugin = row.plugin.unwrap_or_default();
    if row.slot_type != "logical" || plugin != "pgoutput" {
        return Err(PgError::SlotNotPgoutput {
            slot: slot.to_owned(),
            slot_type: row.slot_type,
            plugin,
        });
    }
    if let Some(slot_database) = row.database.filter(|d| d != database) {
        return Err(PgError::SlotWrongDatabase {
            slot: slot.to_owned(),
            slot_database,
            database: database.to_owned(),
        });
    }
    if row.two_phase == Some(true) {
        return Err(PgError::SlotTwoPhase {
            slot: slot.to_owned(),
        });
    }
    let wal_status = row.wal_status.unwrap_or_else(|| "unknown".to_owned());
    let reason = match (&row.invalidation_reason, row.conflicting) {
        (Some(reason), _) => Some(format!(", invalidation_reason = {reason}")),
        (None, Some(true)) => Some(", conflicting = true".to_owned()),
        _ if wal_status == "lost" => Some(String::new()),
        _ => None,
    };
    if let Some(reason) = reason {
        return Err(PgError::SlotInvalidated {
            slot: slot.to_owned(),
            wal_status,
            reason,
        });
    }
    if row.active {
        return Err(PgError::SlotInUse {
            slot: slot.to_owned(),
            active_pid: row.active_pid,
        });
    }
    match row.confirmed_flush_lsn {
        Some(lsn) => lsn.parse().map_err(|e| PgError::Protocol {
            target: String::new(),
            action: "checking the replication slot",
            reason: format!("confirmed_flush_lsn: {e}"),
        }),
        None => Ok(Lsn::ZERO),
    }
}

async fn check_publication(
    socket: &mut FramedSocket,
    publication: &str,
    target: &str,
) -> Result<(), PgError> {
    let sql = format!(
        "SELECT current_database(), (SELECT pubinsert::text FROM pg_publication \
         WHERE pubname = {})",
        escape_literal(publication)
    );
    let rows = simple_query(socket, &sql, target, "checking the publication").await?;
    let (database, pubinsert) = match rows.as_slice() {
        [row] if row.len() == 2 => (row[0].clone().unwrap_or_default(), row[1].as_deref()),
        _ => return Err(unexpected_shape(target, "checking the publication")),
    };
    match pubinsert {
        None => Err(PgError::PublicationMissing {
            publication: publication.to_owned(),
            database,
        }),
        Some("true") => Ok(()),
        Some(_) => Err(PgError::PublicationWithoutInserts {
            publication: publication.to_owned(),
        }),
    }
}

/// `wal_sender_timeout` in milliseconds from `pg_settings` (unit-free,
/// unlike `SHOW`, which prints `1min`).
async fn wal_sender_timeout(
    socket: &mut FramedSocket,
    target: &str,
) -> Result<Option<Duration>, PgError> {
    let action = "reading wal_sender_timeout";
    let rows = simple_query(
        socket,
        "SELECT setting FROM pg_settings WHERE name = 'wal_sender_timeout'",
        target,
        action,
    )
    .await?;
    let millis: u64 = rows
        .first()
        .and_then(|row| row.first())
        .and_then(|value| value.as_deref())
        .and_then(|value| value.parse().ok())
        .ok_or_else(|| unexpected_shape(target, action))?;
    Ok((millis > 0).then(|| Duration::from_millis(millis)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pg::ErrorKind;

    fn row(json: &str) -> SlotRow {
        serde_json::from_str(json).unwrap()
    }

    const HEALTHY: &str = r#"{"slot_name":"s","plugin":"pgoutput","slot_type":"logical",
        "datoid":5,"database":"app","temporary":false,"active":false,"active_pid":null,
        "xmin":null,"catalog_xmin":"740","restart_lsn":"0/1549D48",
        "confirmed_flush_lsn":"0/1549D80","wal_status":"reserved","safe_wal_size":null,
        "two_phase":false}"#;

    #[test]
    fn healthy_slot_yields_its_confirmed_flush_lsn() {
        let lsn = evaluate_slot("s", "app", row(HEALTHY)).unwrap();
        assert_eq!(lsn, "0/1549D80".parse().unwrap());
    }

    #[test]
    fn slot_problems_are_named() {
        let cases = [
            (
                HEALTHY.replace("pgoutput", "wal2json"),
                "wal2json",
                ErrorKind::Fatal,
            ),
            (
                HEALTHY.replace("\"app\"", "\"other\""),
                "other",
                ErrorKind::Fatal,
            ),
            (
                HEALTHY.replace("reserved", "lost"),
                "lost",
                ErrorKind::Fatal,
            ),
            (
                HEALTHY.replace(
                    "\"two_phase\"",
                    r#""invalidation_reason":"wal_removed","x""#,
                ),
                "wal_removed",
                ErrorKind::Fatal,
            ),
            (
                HEALTHY.replace("\"two_phase\"", r#""conflicting":true,"x""#),
                "conflicting",
                ErrorKind::Fatal,
            ),
            (
                HEALTHY.replace(r#""two_phase":false"#, r#""two_phase":true"#),
                "two_phase",
                ErrorKind::Fatal,
            ),
            (
                HEALTHY.replace(
                    r#""active":false,"active_pid":null"#,
                    r#""active":true,"active_pid":4242"#,
                ),
                "4242",
                ErrorKind::SlotBusy,
            ),
        ];
        for (json, needle, kind) in cases {
            let err = evaluate_slot("s", "app", row(&json)).unwrap_err();
            assert_eq!(err.kind(), kind, "{err}");
            assert!(err.to_string().contains(needle), "{err}");
            assert!(err.to_string().contains("\"s\""), "{err}");
        }
    }

    #[test]
    fn invalidated_slot_says_recreate_and_republish() {
        let err = evaluate_slot("s", "app", row(&HEALTHY.replace("reserved", "lost"))).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("wal_status = lost") && text.contains("recreate"),
            "{text}"
        );
    }

    #[test]
    fn the_fork_point_is_the_switch_point_of_the_last_history_line() {
        let text = "1\t0/3000060\tno recovery target specified\n\n2\t0/7013BD0\tno recovery target specified\n";
        assert_eq!(parse_fork_point(text), Some("0/7013BD0".parse().unwrap()));
        let hex = hex::encode(text);
        assert_eq!(
            parse_fork_point(&format!("\\x{hex}")),
            Some("0/7013BD0".parse().unwrap())
        );
        assert_eq!(parse_fork_point(""), None);
        assert_eq!(parse_fork_point("garbage"), None);
    }

    #[test]
    fn slot_names_follow_postgresql_rules() {
        assert!(validate_slot_name("outbox_relay_1").is_ok());
        for bad in ["", "Outbox", "a-b", "x'y", &"a".repeat(64)] {
            let err = validate_slot_name(bad).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Fatal);
        }
    }

    #[test]
    fn start_replication_quotes_the_publication_as_an_identifier_in_a_literal() {
        assert_eq!(
            start_replication_command("s", r#"Out'b\ox"x"#),
            "START_REPLICATION SLOT \"s\" LOGICAL 0/0 (proto_version '1', publication_names \
             '\"Out''b\\ox\"\"x\"', messages 'true')"
        );
    }
}
