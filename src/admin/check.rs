//! `outbox-relay check`: a preflight of everything `run` needs, each item
//! reported as ok, warn or fail with the SQL or setting that fixes it.
//!
//! Role: [`run`] gathers facts (the catalog in one query, the relay's own
//! slot and publication verdicts, the distinct aggregate types in the
//! table, the Kafka cluster's metadata and topic configs); the pure
//! `evaluate_*` functions turn them into [`Item`]s.
//!
//! Invariants:
//! * Read-only: no statement that writes, no topic created.
//! * The slot and publication verdicts are the relay's own
//!   (`evaluate_slot_json`, `resolve_on`): a fail here carries the message
//!   `run` would stop with.
//! * A check whose prerequisite failed is reported as `skip`, never as ok:
//!   the exit status is 0 only when nothing fails, and nothing is claimed
//!   that was not checked.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::time::Duration;

use postgres_protocol::escape::escape_identifier;
use serde::Serialize;

use crate::config::Config;
use crate::envelope::render_topic;
use crate::replication::{
    ErrorKind, OutboxTable, ReplicationError, SqlConnection, display_ident, evaluate_slot_json,
    resolve_on,
};
use crate::sink::OnUnroutable;

use super::AdminTarget;
use super::facts::{self, PgFacts};
use super::init::MIN_SERVER_VERSION_NUM;
use super::kafka::{self, KafkaFacts};

/// Longest a catalog or table query of `check` may run (the distinct
/// aggregate types read the whole table).
const STATEMENT_TIMEOUT: &str = "30s";
/// At most this many distinct (aggregate type, event type) pairs are read.
const MAX_AGGREGATE_ROWS: usize = 1_000;

/// An item's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    /// Works, but something will bite later.
    Warn,
    /// `run` would fail, or lose or never see events.
    Fail,
    /// Not checked: something it depends on failed.
    Skip,
}

impl Status {
    fn label(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
            Status::Skip => "skip",
        }
    }
}

/// One checked item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Item {
    /// Stable dotted name (`postgres.wal_level`, `kafka.topic.orders`).
    pub name: String,
    pub status: Status,
    pub detail: String,
    /// The SQL or setting that fixes it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Item {
    fn new(name: impl Into<String>, status: Status, detail: impl Into<String>) -> Self {
        Item {
            name: name.into(),
            status,
            detail: detail.into(),
            fix: None,
        }
    }

    fn ok(name: impl Into<String>, detail: impl Into<String>) -> Self {
        Item::new(name, Status::Ok, detail)
    }

    fn warn(name: impl Into<String>, detail: impl Into<String>) -> Self {
        Item::new(name, Status::Warn, detail)
    }

    fn fail(name: impl Into<String>, detail: impl Into<String>) -> Self {
        Item::new(name, Status::Fail, detail)
    }

    fn skip(name: impl Into<String>, detail: impl Into<String>) -> Self {
        Item::new(name, Status::Skip, detail)
    }

    fn fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }
}

/// All items of one check.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Report {
    pub items: Vec<Item>,
}

impl Report {
    /// True when no item failed: the exit status is 0 only then.
    pub fn passed(&self) -> bool {
        self.items.iter().all(|i| i.status != Status::Fail)
    }

    fn count(&self, status: Status) -> usize {
        self.items.iter().filter(|i| i.status == status).count()
    }

    /// The report for people: one line per item, its fix under it.
    pub fn render_text(&self) -> String {
        let width = self.items.iter().map(|i| i.name.len()).max().unwrap_or(0);
        let mut out = String::new();
        for item in &self.items {
            let _ = writeln!(
                out,
                "{:<4}  {:<width$}  {}",
                item.status.label(),
                item.name,
                item.detail
            );
            if let Some(fix) = &item.fix {
                let _ = writeln!(out, "      {:<width$}  fix: {fix}", "");
            }
        }
        let _ = writeln!(
            out,
            "\n{} failed, {} warnings, {} ok, {} skipped",
            self.count(Status::Fail),
            self.count(Status::Warn),
            self.count(Status::Ok),
            self.count(Status::Skip)
        );
        out
    }

    /// The report for scripts: a JSON array of items.
    pub fn render_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|_| "[]".to_owned())
    }
}

/// What the PostgreSQL side yielded.
#[derive(Debug)]
pub struct PgSide {
    pub facts: PgFacts,
    /// The relay's own verdict on the table and the publication.
    pub outbox: Result<OutboxTable, ReplicationError>,
}

/// The topics the relay will write to, as far as they can be known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Topics {
    /// The template has no placeholder: one topic.
    Fixed(String),
    /// From the (aggregate type, event type) pairs in the table.
    FromRows {
        topics: BTreeSet<String>,
        /// Rows whose topic name would be invalid: an example each.
        invalid: Vec<String>,
    },
    /// Depends on rows, and there are none to read (the reason).
    Unknown(String),
}

/// The topics for `template`, given the table's distinct `(aggregate type,
/// event type)` pairs (`None`: they could not be read, with why).
pub fn topics_for(template: &str, rows: Result<Vec<(String, String)>, String>) -> Topics {
    if !template.contains("{aggregatetype}") && !template.contains("{type}") {
        return Topics::Fixed(template.to_owned());
    }
    let rows = match rows {
        Ok(rows) if rows.is_empty() => {
            return Topics::Unknown("the outbox table holds no rows to take them from".into());
        }
        Ok(rows) => rows,
        Err(why) => return Topics::Unknown(why),
    };
    let mut topics = BTreeSet::new();
    let mut invalid = Vec::new();
    for (aggregate_type, event_type) in rows {
        match render_topic(template, &aggregate_type, &event_type) {
            Ok(topic) => {
                topics.insert(topic);
            }
            Err(e) if invalid.len() < 3 => invalid.push(e.to_string()),
            Err(_) => {}
        }
    }
    Topics::FromRows { topics, invalid }
}

/// The PostgreSQL items. `relay_role` is the user of `postgres.url`;
/// `relay_application_name` what a running relay with this config shows.
pub fn evaluate_postgres(
    config: &Config,
    relay_role: &str,
    relay_application_name: &str,
    side: &PgSide,
) -> Vec<Item> {
    let facts = &side.facts;
    let pg = &config.postgres;
    let (schema, name) = pg.table_parts();
    let table_shown = format!("{schema}.{name}");
    let table_sql = format!(
        "{}.{}",
        escape_identifier(&schema),
        escape_identifier(&name)
    );
    let mut items = vec![Item::ok(
        "postgres.connection",
        format!(
            "connected to database {:?} as {}",
            facts.database, facts.session_role
        ),
    )];

    // The server.
    items.push(if facts.server_version_num >= MIN_SERVER_VERSION_NUM {
        Item::ok(
            "postgres.version",
            format!("PostgreSQL {}", facts.server_version),
        )
    } else {
        Item::fail(
            "postgres.version",
            format!(
                "PostgreSQL {}: the relay needs 14 or later",
                facts.server_version
            ),
        )
        .fix("upgrade PostgreSQL to 14 or later")
    });
    let wal_level = facts.setting("wal_level").unwrap_or("unknown");
    items.push(if wal_level == "logical" {
        Item::ok("postgres.wal_level", "logical")
    } else {
        Item::fail(
            "postgres.wal_level",
            format!("{wal_level}: logical decoding needs wal_level = logical"),
        )
        .fix("ALTER SYSTEM SET wal_level = logical;  -- then restart PostgreSQL")
    });
    items.push(slots_item(facts));
    items.push(wal_senders_item(facts));
    items.push(match facts.setting_i64("max_slot_wal_keep_size") {
        Some(-1) => Item::warn(
            "postgres.max_slot_wal_keep_size",
            "-1 (unlimited): a stopped or slow relay keeps WAL on disk until the disk is full",
        )
        .fix(
            "ALTER SYSTEM SET max_slot_wal_keep_size = '<what the WAL disk can spare, e.g. 50GB>'; \
             SELECT pg_reload_conf();  -- a relay further behind then loses its slot instead \
             of the server stopping",
        ),
        Some(mb) => Item::ok(
            "postgres.max_slot_wal_keep_size",
            format!(
                "{}: a relay further behind than that loses its slot (wal_status = lost)",
                super::human_bytes(u64::try_from(mb).unwrap_or(0).saturating_mul(1024 * 1024))
            ),
        ),
        None => Item::skip("postgres.max_slot_wal_keep_size", "not readable"),
    });

    // The relay's role.
    items.extend(role_items(facts, relay_role, &schema, &table_sql));

    // The table and the publication: the relay's own verdict.
    items.extend(outbox_items(config, side, &table_shown));

    // The slot.
    items.extend(slot_items(config, facts, relay_application_name));

    // The columns.
    items.extend(column_items(config, facts));
    items
}

fn slots_item(facts: &PgFacts) -> Item {
    let name = "postgres.max_replication_slots";
    let Some(max) = facts.setting_i64("max_replication_slots") else {
        return Item::skip(name, "not readable");
    };
    let used = facts.slots_used;
    if facts.slot.is_some() {
        Item::ok(
            name,
            format!("{used} of {max} in use, the relay's among them"),
        )
    } else if used < max {
        Item::ok(
            name,
            format!("{used} of {max} in use: one is free for the relay's slot"),
        )
    } else {
        Item::fail(
            name,
            format!("{used} of {max} in use: none is free for the relay's slot"),
        )
        .fix(format!(
            "drop an unused slot, or ALTER SYSTEM SET max_replication_slots = {};  -- then \
             restart PostgreSQL",
            max + 1
        ))
    }
}

fn wal_senders_item(facts: &PgFacts) -> Item {
    let name = "postgres.max_wal_senders";
    let Some(max) = facts.setting_i64("max_wal_senders") else {
        return Item::skip(name, "not readable");
    };
    let used = facts.walsenders_used;
    let fix = format!(
        "ALTER SYSTEM SET max_wal_senders = {};  -- then restart PostgreSQL",
        max.max(used) + 1
    );
    if used < max {
        Item::ok(name, format!("{used} of {max} WAL senders running"))
    } else if facts.slot_holder.is_some() {
        Item::warn(
            name,
            format!(
                "{used} of {max} WAL senders running, one of them on the relay's slot: a \
                 relay that reconnects gets that one back, nothing else can start"
            ),
        )
        .fix(fix)
    } else {
        Item::fail(
            name,
            format!("{used} of {max} WAL senders running: none is free for the relay"),
        )
        .fix(fix)
    }
}

fn role_items(facts: &PgFacts, relay_role: &str, schema: &str, table_sql: &str) -> Vec<Item> {
    let role_sql = display_ident(relay_role);
    let Some(role) = facts.role.as_ref().filter(|r| r.name == relay_role) else {
        return vec![
            Item::fail(
                "postgres.role",
                format!("role {relay_role:?} (the user of postgres.url) does not exist"),
            )
            .fix(format!(
                "CREATE ROLE {role_sql} LOGIN REPLICATION PASSWORD '...'; then outbox-relay \
                 init --grant {relay_role}"
            )),
        ];
    };
    let mut items = Vec::new();
    items.push(if role.login {
        Item::ok("postgres.role.login", format!("{relay_role} may log in"))
    } else {
        Item::fail(
            "postgres.role.login",
            format!("{relay_role} has no LOGIN attribute"),
        )
        .fix(format!("ALTER ROLE {role_sql} LOGIN;"))
    });
    items.push(if role.replication {
        Item::ok(
            "postgres.role.replication",
            format!("{relay_role} has REPLICATION"),
        )
    } else if role.superuser {
        Item::ok(
            "postgres.role.replication",
            format!(
                "{relay_role} is a superuser (least privilege: a role with LOGIN REPLICATION \
                 is enough)"
            ),
        )
    } else {
        Item::fail(
            "postgres.role.replication",
            format!(
                "{relay_role} has no REPLICATION attribute: the replication connection is \
                 refused"
            ),
        )
        .fix(format!("ALTER ROLE {role_sql} REPLICATION;"))
    });
    items.push(match (role.schema_usage, role.table_select) {
        (Some(true), Some(true)) => Item::ok(
            "postgres.role.select",
            format!("{relay_role} may read the outbox table"),
        ),
        (Some(usage), Some(_)) => {
            let mut fix = String::new();
            if !usage {
                let _ = write!(
                    fix,
                    "GRANT USAGE ON SCHEMA {} TO {role_sql}; ",
                    escape_identifier(schema)
                );
            }
            let _ = write!(fix, "GRANT SELECT ON {table_sql} TO {role_sql};");
            Item::warn(
                "postgres.role.select",
                format!(
                    "{relay_role} may not read the outbox table: streaming does not need it, \
                     but `outbox-relay status` (pending rows) and `check` (topics from the \
                     rows) run as it do, and the documented setup grants it"
                ),
            )
            .fix(format!("{fix}  -- or outbox-relay init --grant"))
        }
        _ => Item::skip("postgres.role.select", "the outbox table does not exist"),
    });
    items
}

fn outbox_items(config: &Config, side: &PgSide, table_shown: &str) -> Vec<Item> {
    let facts = &side.facts;
    let publication = &config.postgres.publication;
    let mut items = Vec::new();
    let init_fix = "outbox-relay init (creates the publication, or adds what it lacks)";
    match &side.outbox {
        Ok(outbox) => {
            let partitions = facts
                .table
                .as_ref()
                .filter(|t| t.partitioned)
                .map(|t| format!(", partitioned ({} partitions)", t.partitions))
                .unwrap_or_default();
            items.push(Item::ok(
                "postgres.table",
                format!("{table_shown} (oid {}){partitions}", outbox.oid),
            ));
            let mut also = Vec::new();
            if let Some(p) = &facts.publication {
                for (on, op) in [
                    (p.update, "update"),
                    (p.delete, "delete"),
                    (p.truncate, "truncate"),
                ] {
                    if on {
                        also.push(op);
                    }
                }
            }
            let also = if also.is_empty() {
                String::new()
            } else {
                format!(
                    " (also {}: the relay ignores and counts them; publish = 'insert' spares \
                     decoding them)",
                    also.join(", ")
                )
            };
            items.push(Item::ok(
                "postgres.publication",
                format!("{publication:?} publishes the inserts of {table_shown}{also}"),
            ));
            if outbox.publication_has_other_tables {
                items.push(
                    Item::warn(
                        "postgres.publication.other_tables",
                        format!(
                            "{publication:?} also publishes tables outside the outbox: their \
                         changes are decoded and sent to the relay, which skips them"
                        ),
                    )
                    .fix(format!(
                        "a publication for the outbox alone: CREATE PUBLICATION <name> FOR TABLE \
                     {table_shown} WITH (publish = 'insert'); and set postgres.publication"
                    )),
                );
            }
        }
        Err(e @ ReplicationError::TableMissing { .. }) => {
            items.push(
                Item::fail("postgres.table", e.to_string()).fix("outbox-relay init --create-table"),
            );
            items.push(match &facts.publication {
                None => Item::fail(
                    "postgres.publication",
                    format!("{publication:?} does not exist"),
                )
                .fix(init_fix),
                Some(_) => Item::skip(
                    "postgres.publication",
                    format!("{publication:?} exists; whether it publishes the table is checked once the table exists"),
                ),
            });
        }
        Err(
            e @ (ReplicationError::PublicationMissing { .. }
            | ReplicationError::PublicationWithoutInserts { .. }
            | ReplicationError::PublicationLacksTable { .. }),
        ) => {
            items.push(Item::ok("postgres.table", table_shown.to_owned()));
            items.push(Item::fail("postgres.publication", e.to_string()).fix(init_fix));
        }
        Err(e) => {
            items.push(Item::fail("postgres.table", e.to_string()));
            items.push(Item::skip(
                "postgres.publication",
                "the table could not be resolved",
            ));
        }
    }
    items
}

fn slot_items(config: &Config, facts: &PgFacts, relay_application_name: &str) -> Vec<Item> {
    let slot = &config.postgres.slot;
    let Some(row) = &facts.slot else {
        let missing = ReplicationError::SlotMissing {
            slot: slot.clone(),
            database: facts.database.clone(),
        };
        return vec![
            Item::fail("postgres.slot", missing.to_string()).fix(
                "outbox-relay init (creates it, and refuses where a slot was lost: see \
                 docs/getting-started.md)",
            ),
            Item::skip("postgres.slot.wal_status", "no slot"),
            Item::skip("postgres.slot.holder", "no slot"),
        ];
    };
    let mut items = Vec::new();
    let detail = |lsn: &str| {
        format!(
            "{slot:?}: pgoutput, database {:?}, confirmed_flush_lsn {lsn}",
            facts.database
        )
    };
    match evaluate_slot_json(slot, &facts.database, &row.to_string()) {
        Ok(lsn) => items.push(Item::ok("postgres.slot", detail(&lsn.to_string()))),
        // Held by someone: everything else about it is fine (the holder is
        // the next item).
        Err(e) if e.kind() == ErrorKind::SlotBusy => items.push(Item::ok(
            "postgres.slot",
            detail(facts.slot_text("confirmed_flush_lsn").unwrap_or("?")),
        )),
        Err(e) => items.push(Item::fail("postgres.slot", e.to_string())),
    }
    let safe = row
        .get("safe_wal_size")
        .and_then(serde_json::Value::as_i64)
        .map(|bytes| {
            format!(
                "; {} more WAL before it is lost (safe_wal_size)",
                super::human_bytes(u64::try_from(bytes).unwrap_or(0))
            )
        })
        .unwrap_or_default();
    items.push(match facts.slot_text("wal_status") {
        Some("reserved") => Item::ok("postgres.slot.wal_status", format!("reserved{safe}")),
        Some("extended") => Item::warn(
            "postgres.slot.wal_status",
            format!("extended: the slot holds more WAL than max_wal_size{safe}"),
        )
        .fix("let the relay catch up (outbox-relay status shows the lag)"),
        Some("unreserved") => Item::warn(
            "postgres.slot.wal_status",
            format!(
                "unreserved: WAL the slot needs is due for removal; the slot is lost at the \
                 next checkpoint unless the relay catches up{safe}"
            ),
        )
        .fix("let the relay catch up now, or raise max_slot_wal_keep_size"),
        Some("lost") => Item::fail(
            "postgres.slot.wal_status",
            "lost: the WAL the slot needed is gone; events may be lost",
        )
        .fix("drop and recreate the slot, then re-publish the outbox from a known position"),
        other => Item::ok(
            "postgres.slot.wal_status",
            other.unwrap_or("unknown").to_owned(),
        ),
    });
    let active = row
        .get("active")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false);
    items.push(if !active {
        Item::ok("postgres.slot.holder", "no process holds it")
    } else {
        let pid = row.get("active_pid").and_then(serde_json::Value::as_i64);
        let holder = facts.slot_holder.as_ref();
        let application = holder.and_then(|h| h.application_name.as_deref());
        let who = format!(
            "pid {}{}{}",
            pid.map_or_else(|| "?".to_owned(), |p| p.to_string()),
            application
                .map(|a| format!(", application_name {a:?}"))
                .unwrap_or_default(),
            holder
                .and_then(|h| h.client_addr.as_deref())
                .map(|a| format!(", from {a}"))
                .unwrap_or_default(),
        );
        if application == Some(relay_application_name) {
            Item::warn(
                "postgres.slot.holder",
                format!(
                    "held by {who}: by its application_name, a relay, presumably the one \
                     running with this config; another relay would wait for it"
                ),
            )
        } else {
            Item::fail(
                "postgres.slot.holder",
                format!(
                    "held by another process ({who}): the relay waits until it lets go, \
                     never reading a slot beside another reader"
                ),
            )
            .fix(format!(
                "stop that reader, or SELECT pg_terminate_backend({});  -- if it must not \
                 read the slot",
                pid.unwrap_or(0)
            ))
        }
    });
    items
}

/// Types whose text form the relay uses as is for ids, types and keys.
fn is_text_like(type_name: &str) -> bool {
    let base = type_name.split('(').next().unwrap_or(type_name).trim();
    matches!(
        base,
        "text" | "character varying" | "character" | "name" | "citext" | "uuid"
    )
}

fn column_items(config: &Config, facts: &PgFacts) -> Vec<Item> {
    if facts.table.is_none() {
        return vec![Item::skip(
            "postgres.columns",
            "the outbox table does not exist",
        )];
    }
    let c = &config.postgres.columns;
    let mut items = Vec::new();
    let setting = |role: &str| format!("postgres.columns.{role}");
    for (role, column) in [
        ("id", &c.id),
        ("aggregate_type", &c.aggregate_type),
        ("aggregate_id", &c.aggregate_id),
        ("event_type", &c.event_type),
    ] {
        let name = format!("postgres.column.{role}");
        items.push(match facts.column(column) {
            None => Item::fail(
                name,
                format!("column {column:?} does not exist: every row would be dead-lettered"),
            )
            .fix(format!("set {} to the column's name", setting(role))),
            Some(col) if is_text_like(&col.type_name) => {
                Item::ok(name, format!("{column:?} {}", col.type_name))
            }
            Some(col) => Item::warn(
                name,
                format!(
                    "{column:?} is {}: the relay uses its text form; text or uuid is usual",
                    col.type_name
                ),
            ),
        });
    }
    let payload = &c.payload;
    items.push(match facts.column(payload) {
        None => Item::fail(
            "postgres.column.payload",
            format!("column {payload:?} does not exist: every row would be dead-lettered"),
        )
        .fix(format!("set {} to the column's name", setting("payload"))),
        Some(col) if col.type_name == "jsonb" || col.type_name == "json" => Item::ok(
            "postgres.column.payload",
            format!("{payload:?} {}", col.type_name),
        ),
        Some(col) if is_text_like(&col.type_name) && col.type_name != "uuid" => Item::ok(
            "postgres.column.payload",
            format!(
                "{payload:?} {}: rows whose payload is not JSON go to the dead-letter topic",
                col.type_name
            ),
        ),
        Some(col) => Item::fail(
            "postgres.column.payload",
            format!(
                "{payload:?} is {}, whose text form is not JSON: every row would be \
                 dead-lettered",
                col.type_name
            ),
        )
        .fix(format!(
            "ALTER TABLE ... ALTER COLUMN {} TYPE jsonb USING ...;",
            escape_identifier(payload)
        )),
    });
    if let Some(timestamp) = c.timestamp_column() {
        items.push(match facts.column(timestamp) {
            None => Item::ok(
                "postgres.column.timestamp",
                format!("no column {timestamp:?}: CloudEvents time is the commit time"),
            ),
            Some(col) if col.type_name == "timestamp with time zone" => Item::ok(
                "postgres.column.timestamp",
                format!("{timestamp:?} timestamptz"),
            ),
            Some(col) if col.type_name == "timestamp without time zone" => Item::warn(
                "postgres.column.timestamp",
                format!(
                    "{timestamp:?} is a timestamp without time zone: taken as UTC; \
                     timestamptz says what it means"
                ),
            ),
            Some(col) => Item::warn(
                "postgres.column.timestamp",
                format!(
                    "{timestamp:?} is {}, not a timestamp: CloudEvents time falls back to the \
                     commit time",
                    col.type_name
                ),
            ),
        });
    }
    if let Some(tracing) = c.tracing_span_context_column() {
        items.push(match facts.column(tracing) {
            None => Item::ok(
                "postgres.column.tracing_span_context",
                format!("no column {tracing:?}: events carry no traceparent"),
            ),
            Some(col) if is_text_like(&col.type_name) => Item::ok(
                "postgres.column.tracing_span_context",
                format!("{tracing:?} {}", col.type_name),
            ),
            Some(col) => Item::warn(
                "postgres.column.tracing_span_context",
                format!("{tracing:?} is {}: a traceparent is text", col.type_name),
            ),
        });
    }
    if let Some(source) = c.source_column() {
        items.push(match facts.column(source) {
            None => Item::warn(
                "postgres.column.source",
                format!(
                    "no column {source:?}: every event gets the source from [cloudevents] \
                     source"
                ),
            )
            .fix("add the column, or remove postgres.columns.source"),
            Some(col) => Item::ok(
                "postgres.column.source",
                format!("{source:?} {}", col.type_name),
            ),
        });
    }
    for (column, header) in &config.postgres.header_columns {
        let name = format!("postgres.column.header.{column}");
        items.push(match facts.column(column) {
            None => Item::warn(
                name,
                format!("no column {column:?}: no {header:?} header is ever sent"),
            )
            .fix("add the column, or remove it from [postgres.header_columns]"),
            Some(col) => Item::ok(
                name,
                format!("{column:?} {} → header {header:?}", col.type_name),
            ),
        });
    }
    items
}

/// The Kafka items.
pub fn evaluate_kafka(
    config: &Config,
    cluster: &Result<KafkaFacts, String>,
    topics: &Topics,
) -> Vec<Item> {
    let kafka_config = &config.kafka;
    let facts = match cluster {
        Ok(facts) => facts,
        Err(why) => {
            return vec![
                Item::fail("kafka.brokers", why.clone()).fix(
                    "check kafka.brokers, that the brokers are up, and the security properties \
                     in [kafka.properties]",
                ),
                Item::skip("kafka.topics", "no broker answered"),
                Item::skip("kafka.dead_letter_topic", "no broker answered"),
            ];
        }
    };
    let mut items = vec![Item::ok(
        "kafka.brokers",
        format!(
            "{} broker(s) answer: {}",
            facts.brokers.len(),
            facts.brokers.join(", ")
        ),
    )];
    let producer_creates = kafka::producer_auto_create(kafka_config);
    let auto_create = facts.broker_auto_create.map(|b| b && producer_creates);
    let create_fix = |topic: &str| {
        format!(
            "kafka-topics.sh --bootstrap-server {} --create --topic {topic} --partitions <N>",
            kafka_config.brokers
        )
    };
    let dead_letters_unroutable = kafka_config.on_unroutable == OnUnroutable::DeadLetter;
    let not_created = if producer_creates {
        "the broker has auto.create.topics.enable = false"
    } else {
        "allow.auto.create.topics = false in [kafka.properties]"
    };
    let missing = |name: String, topic: &str, what: &str| match auto_create {
        Some(true) => Item::warn(
            name,
            format!(
                "{what} {topic:?} does not exist: the broker creates it on first use, with its \
                 default partition count and settings"
            ),
        )
        .fix(create_fix(topic)),
        // An event topic: what happens follows kafka.on_unroutable.
        Some(false) if what == "topic" && dead_letters_unroutable => Item::warn(
            name,
            format!(
                "{what} {topic:?} does not exist and will not be created automatically \
                 ({not_created}): its events go to the dead-letter topic \
                 (kafka.on_unroutable = \"dead-letter\")"
            ),
        )
        .fix(create_fix(topic)),
        Some(false) if what == "topic" => Item::fail(
            name,
            format!(
                "{what} {topic:?} does not exist and will not be created automatically \
                 ({not_created}): the relay stops at its first event"
            ),
        )
        .fix(format!(
            "{}; or set kafka.on_unroutable = \"dead-letter\" to dead-letter such events",
            create_fix(topic)
        )),
        Some(false) => Item::fail(
            name,
            format!(
                "{what} {topic:?} does not exist and will not be created automatically \
                 ({not_created}): the relay refuses to start without it"
            ),
        )
        .fix(create_fix(topic)),
        None => Item::warn(
            name,
            format!(
                "{what} {topic:?} does not exist, and whether the broker creates topics could \
                 not be read{}",
                facts
                    .config_problem
                    .as_deref()
                    .map(|p| format!(" ({p})"))
                    .unwrap_or_default()
            ),
        )
        .fix(create_fix(topic)),
    };
    let topic_item = |topic: &str, what: &str, name: String| match facts.topics.get(topic) {
        Some(partitions) => Item::ok(name, format!("{what} {topic:?}: {partitions} partitions")),
        None => missing(name, topic, what),
    };
    let mut checked: Vec<String> = Vec::new();
    match topics {
        Topics::Fixed(topic) => {
            items.push(topic_item(topic, "topic", format!("kafka.topic.{topic}")));
            checked.push(topic.clone());
        }
        Topics::FromRows { topics, invalid } => {
            for topic in topics {
                items.push(topic_item(topic, "topic", format!("kafka.topic.{topic}")));
                checked.push(topic.clone());
            }
            if !invalid.is_empty() {
                items.push(Item::warn(
                    "kafka.topic_names",
                    format!(
                        "some rows give no valid topic name and go to the dead-letter topic: {}",
                        invalid.join("; ")
                    ),
                ));
            }
        }
        Topics::Unknown(why) => {
            let template = &kafka_config.topic;
            items.push(match auto_create {
                Some(true) => Item::ok(
                    "kafka.topics",
                    format!(
                        "topics come from {template:?} and the rows ({why}); the broker \
                         creates missing ones on first use"
                    ),
                ),
                _ => Item::warn(
                    "kafka.topics",
                    format!(
                        "topics come from {template:?} and the rows ({why}), and missing \
                         topics are not created automatically: create each one before the \
                         first event of its aggregate type, or {}",
                        if dead_letters_unroutable {
                            "its events go to the dead-letter topic"
                        } else {
                            "the relay stops at that event (kafka.on_unroutable)"
                        }
                    ),
                )
                .fix(create_fix(template)),
            });
        }
    }
    let dlq = &kafka_config.dlq_topic;
    items.push(topic_item(
        dlq,
        "dead-letter topic",
        "kafka.dead_letter_topic".into(),
    ));
    checked.push(dlq.clone());

    // Record sizes.
    let producer_max = kafka::producer_message_max_bytes(kafka_config);
    let mut size_items = Vec::new();
    for topic in &checked {
        if let Some(&topic_max) = facts.max_message_bytes.get(topic)
            && producer_max > topic_max
        {
            size_items.push(
                Item::warn(
                    format!("kafka.message_size.{topic}"),
                    format!(
                        "the producer sends records up to {producer_max} bytes \
                         (message.max.bytes) but {topic:?} takes at most {topic_max} \
                         (max.message.bytes): records in between are refused by the broker \
                         and dead-lettered"
                    ),
                )
                .fix(format!(
                    "\"message.max.bytes\" = \"{topic_max}\" in [kafka.properties], or raise \
                     the topic's max.message.bytes"
                )),
            );
        }
    }
    if size_items.is_empty() {
        items.push(match &facts.config_problem {
            Some(problem) => Item::warn(
                "kafka.message_size",
                format!("topic configs could not be read: {problem}"),
            ),
            None => Item::ok(
                "kafka.message_size",
                format!(
                    "message.max.bytes {producer_max} fits the max.message.bytes of every \
                     existing topic checked"
                ),
            ),
        });
    }
    items.extend(size_items);
    items
}

/// The distinct `(aggregate type, event type)` pairs of the table (event
/// type empty when the template does not use it).
async fn aggregate_pairs(
    connection: &mut SqlConnection,
    config: &Config,
) -> Result<Vec<(String, String)>, String> {
    let pg = &config.postgres;
    let (schema, name) = pg.table_parts();
    let event_type = if config.kafka.topic.contains("{type}") {
        format!("{}::text", escape_identifier(&pg.columns.event_type))
    } else {
        "''".to_owned()
    };
    let sql = format!(
        "SELECT DISTINCT {}::text, {event_type} FROM {}.{} LIMIT {MAX_AGGREGATE_ROWS}",
        escape_identifier(&pg.columns.aggregate_type),
        escape_identifier(&schema),
        escape_identifier(&name),
    );
    let rows = connection
        .query(&sql, "reading the aggregate types in the outbox")
        .await
        .map_err(|e| format!("the rows could not be read: {e}"))?;
    Ok(rows
        .into_iter()
        .filter_map(|row| {
            let mut values = row.into_iter();
            let aggregate_type = values.next().flatten()?;
            let event_type = values.next().flatten().unwrap_or_default();
            Some((aggregate_type, event_type))
        })
        .collect())
}

/// Runs every check.
pub async fn run(target: &AdminTarget, config: &Config, kafka_timeout: Duration) -> Report {
    let pg = &config.postgres;
    let mut items = Vec::new();
    let relay_role = target.relay_role();
    let mut topics = Topics::Unknown("the outbox table could not be read".into());
    let connection = match &relay_role {
        Ok(_) => target.connect().await.map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    match connection {
        Err(e) => {
            items.push(
                Item::fail("postgres.connection", e)
                    .fix("check postgres.url (or --admin-url), the server and pg_hba.conf"),
            );
            items.push(Item::skip("postgres", "no connection"));
        }
        Ok(mut connection) => {
            let role = relay_role.as_deref().unwrap_or_default();
            let _ = connection
                .query(
                    &format!("SET statement_timeout = '{STATEMENT_TIMEOUT}'"),
                    "limiting statement time",
                )
                .await;
            let (schema, name) = pg.table_parts();
            match facts::gather(
                &mut connection,
                (&schema, &name),
                &pg.publication,
                &pg.slot,
                role,
            )
            .await
            {
                Err(e) => {
                    items.push(Item::fail("postgres.catalog", e.to_string()));
                }
                Ok(facts) => {
                    let outbox =
                        resolve_on(&mut connection, (&schema, &name), &pg.publication).await;
                    let template = &config.kafka.topic;
                    let per_row =
                        template.contains("{aggregatetype}") || template.contains("{type}");
                    topics = if per_row && facts.table.is_some() {
                        topics_for(template, aggregate_pairs(&mut connection, config).await)
                    } else {
                        topics_for(template, Err("the outbox table does not exist".into()))
                    };
                    let side = PgSide { facts, outbox };
                    items.extend(evaluate_postgres(
                        config,
                        role,
                        &target.relay_application_name(),
                        &side,
                    ));
                }
            }
            connection.close().await;
        }
    }
    let mut wanted: Vec<String> = match &topics {
        Topics::Fixed(topic) => vec![topic.clone()],
        Topics::FromRows { topics, .. } => topics.iter().cloned().collect(),
        Topics::Unknown(_) => Vec::new(),
    };
    wanted.push(config.kafka.dlq_topic.clone());
    let cluster = kafka::gather(&config.kafka, &wanted, kafka_timeout).await;
    items.extend(evaluate_kafka(config, &cluster, &topics));
    Report { items }
}

#[cfg(test)]
mod tests;
