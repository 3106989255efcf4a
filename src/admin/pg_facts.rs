//! What the catalog says about the relay's setup, read in one query.
//!
//! Role: the I/O half of `init` and `check`. One statement builds a JSON
//! document (server settings, the relay's role, the outbox table and its
//! columns, the publication, the slot and who holds it, the session holding
//! the relay lock), which deserializes
//! into [`PgFacts`]; the decisions are made on that value by pure code.
//!
//! Invariants: every name reaches the server as a statement parameter,
//! never in the SQL text;
//! the query only reads (it runs in `check`, which must not change
//! anything); a missing object is `None`, never an error, so that one query
//! answers on a database where nothing is set up yet.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::pg::{PgClient, PgError};

use crate::replication::publication_relids;

/// The server and the relay's objects, as the catalog describes them.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct PgFacts {
    pub server_version_num: i64,
    pub server_version: String,
    pub database: String,
    /// The role the session runs as (the admin role with `--admin-url`).
    pub session_role: String,
    /// Whether the session's role may create a replication slot
    /// (REPLICATION or superuser).
    pub session_can_replicate: bool,
    /// The few settings the checks read, as `pg_settings.setting` text
    /// (units as `pg_settings.unit`: `max_slot_wal_keep_size` in MB).
    pub settings: BTreeMap<String, String>,
    /// Replication slots that exist (all databases).
    pub slots_used: i64,
    /// WAL sender processes running now.
    pub walsenders_used: i64,
    /// The role the checks are about (the relay's, or `--grant ROLE`).
    pub role: Option<RoleFacts>,
    pub table: Option<TableFacts>,
    pub publication: Option<PublicationFacts>,
    /// The slot's `pg_replication_slots` row, as `to_jsonb` gives it
    /// (columns differ between server versions).
    pub slot: Option<serde_json::Value>,
    /// The process holding the slot, when one does.
    pub slot_holder: Option<HolderFacts>,
    /// The session holding the relay lock of this slot (see
    /// `relay::lock`), when one does: a relay with this config that streams.
    #[serde(default)]
    pub relay_lock_holder: Option<HolderFacts>,
    /// The end of the WAL written so far (`pg_current_wal_insert_lsn()`);
    /// `None` on a standby.
    #[serde(default)]
    pub wal_insert_lsn: Option<String>,
    /// Outbox rows the slot may not have decoded yet (an upper bound, by the
    /// slot's `catalog_xmin`, see `status`): not read by the catalog query,
    /// `init` fills it in where it needs it.
    #[serde(skip)]
    pub rows_after_slot: Option<i64>,
}

/// `pg_roles`, for one role, and its privileges on the outbox table.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub struct RoleFacts {
    pub name: String,
    pub login: bool,
    pub replication: bool,
    pub superuser: bool,
    /// USAGE on the table's schema (`None` when the schema does not exist).
    pub schema_usage: Option<bool>,
    /// SELECT on the table (`None` when the table does not exist).
    pub table_select: Option<bool>,
    /// DELETE on the table, which `postgres.cleanup` needs (`None` when the
    /// table does not exist).
    pub table_delete: Option<bool>,
}

/// The outbox table.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub struct TableFacts {
    pub oid: u32,
    /// `relkind = 'p'`.
    pub partitioned: bool,
    /// Partitions below it (all levels).
    pub partitions: i64,
    pub owner: String,
    pub columns: Vec<ColumnFacts>,
}

/// One column of the outbox table.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub struct ColumnFacts {
    pub name: String,
    /// `format_type` of the column's type (a domain's base type).
    #[serde(rename = "type")]
    pub type_name: String,
    pub not_null: bool,
}

/// `pg_publication`, and whether it publishes the outbox.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub struct PublicationFacts {
    pub insert: bool,
    pub update: bool,
    pub delete: bool,
    pub truncate: bool,
    pub via_root: bool,
    pub all_tables: bool,
    /// The table or one of its partitions is published.
    pub has_table: bool,
    /// The table's row filter (`pg_publication_tables.rowfilter`, deparsed;
    /// PostgreSQL 15+), when it has one.
    pub row_filter: Option<String>,
}

/// The process holding the slot (`pg_stat_activity`, and
/// `pg_stat_replication` when it is a walsender). Columns another role's
/// session hides are `None`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
pub struct HolderFacts {
    pub pid: i32,
    pub application_name: Option<String>,
    pub client_addr: Option<String>,
    pub backend_type: Option<String>,
    /// `pg_stat_replication.state` (`streaming`, `catchup`, ...).
    pub state: Option<String>,
    /// `pg_stat_replication.flush_lag`, in seconds.
    pub flush_lag_seconds: Option<f64>,
    /// The role asking (`current_user`), and whether it has the privileges
    /// of `pg_read_all_stats`: without them, `pg_stat_replication` shows it
    /// the pid of another walsender only, its own walsenders included.
    #[serde(default, skip_serializing)]
    pub asked_as: Option<String>,
    #[serde(default, skip_serializing)]
    pub reads_all_stats: Option<bool>,
    /// Why `state` and the flush lag are missing, and the grant that shows
    /// them ([`HolderFacts::with_hint`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

/// The holder columns of `pg_stat_activity` `a` and `pg_stat_replication`
/// `r`, as the pairs of a `json_build_object`.
pub const HOLDER_COLUMNS: &str = "'pid', a.pid, 'application_name', a.application_name, \
     'client_addr', a.client_addr::text, 'backend_type', a.backend_type, 'state', r.state, \
     'flush_lag_seconds', extract(epoch FROM r.flush_lag), 'asked_as', current_user, \
     'reads_all_stats', pg_catalog.pg_has_role('pg_read_all_stats', 'USAGE')";

impl HolderFacts {
    /// With [`HolderFacts::hint`] set when the state is hidden from the
    /// role asking.
    pub fn with_hint(mut self) -> Self {
        if self.state.is_none() && self.reads_all_stats == Some(false) {
            let role = self.asked_as.as_deref().unwrap_or("<role>");
            self.hint = Some(format!(
                "state and flush lag are hidden from role {role:?} (pg_stat_replication shows \
                 them to pg_read_all_stats only): as a superuser, `GRANT pg_read_all_stats TO \
                 {};` shows them",
                crate::pg::display_ident(role)
            ));
        }
        self
    }

    /// The holder in one line, for people.
    pub fn describe(&self) -> String {
        use std::fmt::Write as _;
        let mut text = format!("pid {}", self.pid);
        if let Some(name) = &self.application_name {
            let _ = write!(text, ", application_name {name:?}");
        }
        if let Some(addr) = &self.client_addr {
            let _ = write!(text, ", from {addr}");
        }
        if let Some(state) = &self.state {
            let _ = write!(text, ", {state}");
        }
        if let Some(lag) = self.flush_lag_seconds {
            let _ = write!(text, ", flush lag {}", super::human_duration(lag));
        }
        if let Some(hint) = &self.hint {
            let _ = write!(text, "; {hint}");
        }
        text
    }
}

impl PgFacts {
    /// A setting's text, if read.
    pub fn setting(&self, name: &str) -> Option<&str> {
        self.settings.get(name).map(String::as_str)
    }

    /// A numeric setting.
    pub fn setting_i64(&self, name: &str) -> Option<i64> {
        self.setting(name).and_then(|v| v.trim().parse().ok())
    }

    /// The table's column by name.
    pub fn column(&self, name: &str) -> Option<&ColumnFacts> {
        self.table
            .as_ref()
            .and_then(|t| t.columns.iter().find(|c| c.name == name))
    }

    /// A string field of the slot row.
    pub fn slot_text(&self, field: &str) -> Option<&str> {
        self.slot.as_ref()?.get(field)?.as_str()
    }
}

/// The settings [`gather`] reads.
const SETTINGS: [&str; 8] = [
    "wal_level",
    // PostgreSQL 17+ failover slots (absent before).
    "synchronized_standby_slots",
    "sync_replication_slots",
    "max_replication_slots",
    "max_wal_senders",
    "max_slot_wal_keep_size",
    "track_commit_timestamp",
    "wal_sender_timeout",
];

/// The one catalog query. Its parameters: `$1` the table's schema, `$2`
/// its name, `$3` the role whose attributes and privileges are read, `$4`
/// the slot, `$5` the publication, `$6` the settings read (`SETTINGS`),
/// `$7` and `$8` the relay lock's key as `pg_locks` shows it
/// (`lock_parts`).
pub fn facts_sql() -> String {
    let (schema, name, role, slot, publication) = ("$1", "$2", "$3", "$4", "$5");
    format!(
        "WITH t AS (SELECT c.oid, c.relkind, c.relowner, c.relnamespace \
           FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
           WHERE n.nspname = {schema} AND c.relname = {name}), \
         tree AS (SELECT t.oid AS relid FROM t \
           UNION SELECT p.relid::oid FROM t, pg_catalog.pg_partition_tree(t.oid) p), \
         r AS (SELECT oid, rolname, rolcanlogin, rolreplication, rolsuper \
           FROM pg_catalog.pg_roles WHERE rolname = {role}), \
         s AS (SELECT * FROM pg_catalog.pg_replication_slots WHERE slot_name = {slot}) \
         SELECT json_build_object( \
           'server_version_num', current_setting('server_version_num')::int, \
           'server_version', current_setting('server_version'), \
           'database', current_database(), \
           'session_role', current_user, \
           'session_can_replicate', (SELECT rolreplication OR rolsuper FROM pg_catalog.pg_roles \
              WHERE rolname = current_user), \
           'settings', (SELECT json_object_agg(name, setting) FROM pg_catalog.pg_settings \
              WHERE name = ANY($6::text[])), \
           'slots_used', (SELECT count(*) FROM pg_catalog.pg_replication_slots), \
           'walsenders_used', (SELECT count(*) FROM pg_catalog.pg_stat_activity \
              WHERE backend_type = 'walsender'), \
           'role', (SELECT json_build_object('name', r.rolname, 'login', r.rolcanlogin, \
              'replication', r.rolreplication, 'superuser', r.rolsuper, \
              'schema_usage', (SELECT pg_catalog.has_schema_privilege(r.oid, n.oid, 'USAGE') \
                 FROM pg_catalog.pg_namespace n WHERE n.nspname = {schema}), \
              'table_select', (SELECT pg_catalog.has_table_privilege(r.oid, t.oid, 'SELECT') FROM t), \
              'table_delete', (SELECT pg_catalog.has_table_privilege(r.oid, t.oid, 'DELETE') FROM t)) \
              FROM r), \
           'table', (SELECT json_build_object('oid', t.oid::bigint, 'partitioned', t.relkind = 'p', \
              'partitions', (SELECT count(*) - 1 FROM tree), \
              'owner', pg_catalog.pg_get_userbyid(t.relowner), \
              'columns', (SELECT coalesce(json_agg(json_build_object('name', a.attname, \
                 'type', pg_catalog.format_type(CASE WHEN ty.typtype = 'd' THEN ty.typbasetype \
                   ELSE a.atttypid END, NULL), \
                 'not_null', a.attnotnull) ORDER BY a.attnum), '[]'::json) \
                 FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type ty ON ty.oid = a.atttypid \
                 WHERE a.attrelid = t.oid AND a.attnum > 0 AND NOT a.attisdropped)) \
              FROM t), \
           'publication', (SELECT json_build_object('insert', p.pubinsert, 'update', p.pubupdate, \
              'delete', p.pubdelete, 'truncate', p.pubtruncate, 'via_root', p.pubviaroot, \
              'all_tables', p.puballtables, \
              'has_table', p.puballtables OR EXISTS (SELECT 1 FROM ({published}) pt \
                 WHERE pt.relid IN (SELECT relid FROM tree)), \
              'row_filter', (SELECT to_jsonb(v)->>'rowfilter' \
                 FROM pg_catalog.pg_publication_tables v WHERE v.pubname = p.pubname \
                 AND v.schemaname = {schema} AND v.tablename = {name} LIMIT 1)) \
              FROM pg_catalog.pg_publication p WHERE p.pubname = {publication}), \
           'slot', (SELECT to_jsonb(s) FROM s), \
           'slot_holder', (SELECT json_build_object({HOLDER_COLUMNS}) \
              FROM pg_catalog.pg_stat_activity a \
              LEFT JOIN pg_catalog.pg_stat_replication r ON r.pid = a.pid \
              WHERE a.pid = (SELECT active_pid FROM s)), \
           'relay_lock_holder', (SELECT json_build_object({HOLDER_COLUMNS}) \
              FROM pg_catalog.pg_locks l \
              JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid \
              LEFT JOIN pg_catalog.pg_stat_replication r ON r.pid = a.pid \
              WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 \
                AND l.database = (SELECT oid FROM pg_catalog.pg_database \
                   WHERE datname = current_database()) \
                AND l.classid = $7::oid AND l.objid = $8::oid LIMIT 1), \
           'wal_insert_lsn', CASE WHEN pg_catalog.pg_is_in_recovery() THEN NULL \
              ELSE pg_catalog.pg_current_wal_insert_lsn()::text END \
         )::text",
        published = publication_relids(publication),
    )
}

/// The relay lock's key of `slot` as `pg_locks` shows a bigint advisory
/// lock: its high 32 bits in `classid`, its low 32 bits in `objid`.
fn lock_parts(slot: &str) -> (u32, u32) {
    // Bit for bit: the key's two halves as unsigned numbers.
    let key = crate::relay::lock_key(slot) as u64;
    ((key >> 32) as u32, key as u32)
}

/// Reads the facts on `connection`.
///
/// # Errors
/// The server refused the query (or the connection failed); a result that
/// is not the expected JSON is a `Protocol` error.
pub async fn gather(
    client: &PgClient,
    table: (&str, &str),
    publication: &str,
    slot: &str,
    role: &str,
) -> Result<PgFacts, PgError> {
    let action = "reading the relay's setup from the catalog";
    let (lock_high, lock_low) = lock_parts(slot);
    let json: String = client
        .query_one(
            &facts_sql(),
            &[
                &table.0,
                &table.1,
                &role,
                &slot,
                &publication,
                &&SETTINGS[..],
                &lock_high,
                &lock_low,
            ],
        )
        .await
        .and_then(|row| row.try_get(0))
        .map_err(|e| client.error(action, e))?;
    serde_json::from_str(&json).map_err(|e| PgError::Protocol {
        target: client.target().to_owned(),
        action,
        reason: format!("unexpected catalog document: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_reach_the_server_only_as_parameters() {
        let sql = facts_sql();
        for placeholder in ["$1", "$2", "$3", "$4", "$5", "$6", "$7", "$8"] {
            assert!(sql.contains(placeholder), "{placeholder} in {sql}");
        }
        assert!(!sql.contains("$9"), "{sql}");
    }

    #[test]
    fn the_lock_key_splits_as_pg_locks_shows_it() {
        let key = crate::relay::lock_key("outbox_relay") as u64;
        let (high, low) = lock_parts("outbox_relay");
        assert_eq!((u64::from(high) << 32) | u64::from(low), key);
    }

    #[test]
    fn a_document_for_an_empty_database_deserializes() {
        let json = r#"{"server_version_num":150018,"server_version":"15.18","database":"app",
            "session_role":"postgres","session_can_replicate":true,
            "settings":{"wal_level":"logical","max_replication_slots":"10"},
            "slots_used":0,"walsenders_used":0,"role":null,"table":null,
            "publication":null,"slot":null,"slot_holder":null}"#;
        let facts: PgFacts = serde_json::from_str(json).unwrap();
        assert_eq!(facts.setting("wal_level"), Some("logical"));
        assert_eq!(facts.setting_i64("max_replication_slots"), Some(10));
        assert_eq!(facts.setting_i64("max_wal_senders"), None);
        assert!(facts.table.is_none() && facts.slot.is_none());
    }
}
