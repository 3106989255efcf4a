//! The outbox items of `check`: the table and the publication (the relay's
//! own verdict, `resolve_on`), the replication slot (the relay's own
//! verdict, `evaluate_slot_json`) and the columns the relay reads.
//!
//! Role: pure functions from gathered facts to [`Item`]s, called by
//! [`super::evaluate_postgres`].
//!
//! Invariants: a fail carries the message `run` would stop with; a column
//! item whose column is optional and absent says what the relay does
//! without it.

use postgres_protocol::escape::escape_identifier;

use crate::admin::pg_facts::PgFacts;
use crate::admin::shards;
use crate::config::Config;
use crate::pg::{ErrorKind, PgError};
use crate::replication::evaluate_slot_json;

use super::{Item, PgSide};

pub(super) fn outbox_items(config: &Config, side: &PgSide, table_shown: &str) -> Vec<Item> {
    let facts = &side.facts;
    let publication = &config.postgres.publication;
    let mut items = Vec::new();
    // Never the bare SQL: a publication set up by hand for a slot that holds
    // older WAL leaves the outbox rows in it unrelayed, silently; init
    // refuses there and says what would be skipped.
    let init_fix = "outbox-relay init: it sets the publication up, or, where the slot holds WAL \
                    written before, refuses and names the outbox rows that would never be \
                    relayed and the ways out";
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
            items.extend(shard_item(config, facts, table_shown));
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
        Err(e @ PgError::TableMissing { .. }) => {
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
            e @ (PgError::PublicationMissing { .. }
            | PgError::PublicationWithoutInserts { .. }
            | PgError::PublicationLacksTable { .. }),
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

/// Whether the publication's row filter is this relay's shard
/// (`postgres.shards`, `postgres.shard`); a filter on an unsharded relay is
/// worth a warning (rows outside it are never relayed by this relay).
fn shard_item(config: &Config, facts: &PgFacts, table_shown: &str) -> Option<Item> {
    let pg = &config.postgres;
    let found = facts.publication.as_ref()?.row_filter.as_deref();
    let name = "postgres.shard";
    if pg.shards <= 1 {
        return found.map(|filter| {
            Item::warn(
                name,
                format!(
                    "{:?} filters the outbox rows ({filter}): rows outside the filter are never \
                     relayed by this relay",
                    pg.publication
                ),
            )
            .fix("set postgres.shards and postgres.shard if it is one shard of several")
        });
    }
    let expected = shards::filter_sql(&pg.columns.aggregate_id, pg.shards, pg.shard);
    let shown = format!("shard {} of {}", pg.shard, pg.shards);
    if facts.server_version_num < shards::MIN_ROW_FILTER_VERSION_NUM {
        return Some(Item::fail(
            name,
            format!(
                "{shown} needs publication row filters (PostgreSQL 15+); this server is {}",
                facts.server_version
            ),
        ));
    }
    let fix = format!(
        "ALTER PUBLICATION {} SET TABLE {table_shown} WHERE ({expected});",
        escape_identifier(&pg.publication)
    );
    Some(match found {
        Some(filter)
            if shards::filter_matches(filter, &pg.columns.aggregate_id, pg.shards, pg.shard) =>
        {
            Item::ok(
                name,
                format!("{shown}: {:?} filters {filter}", pg.publication),
            )
        }
        Some(filter) => Item::fail(
            name,
            format!(
                "{:?} filters {filter}, not {shown} ({expected})",
                pg.publication
            ),
        )
        .fix(fix),
        None => Item::fail(
            name,
            format!(
                "{:?} publishes every row, not {shown}: this relay would send the other \
                 shards' events too, out of order with their relays",
                pg.publication
            ),
        )
        .fix(fix),
    })
}

/// PostgreSQL 17+: whether the slot is a failover slot, whether it is a
/// synchronized copy (`synced`: this server is a standby that keeps it in
/// step), and whether `synchronized_standby_slots` keeps the relay from
/// getting ahead of the standbys that would take over.
fn failover_items(facts: &PgFacts) -> Vec<Item> {
    let name = "postgres.slot.failover";
    // Before 17 there is nothing to report: no server has failover slots
    // (docs/operations.md, "Failover", says what to do instead).
    if facts.server_version_num < crate::admin::init::FAILOVER_SLOT_VERSION_NUM {
        return Vec::new();
    }
    let flag = |field: &str| facts.slot.as_ref()?.get(field)?.as_bool();
    let synced = flag("synced").unwrap_or(false);
    let mut items = Vec::new();
    items.push(match flag("failover") {
        Some(true) => Item::ok(
            name,
            format!(
                "failover = true, synced = {synced}{}",
                if synced {
                    " (this server is a standby keeping a copy in step)"
                } else {
                    ""
                }
            ),
        ),
        _ => Item::warn(
            name,
            "failover = false: a standby does not keep this slot in step, and after a \
             failover the relay finds no slot on the new primary",
        )
        .fix(
            "on a replication connection: ALTER_REPLICATION_SLOT <slot> (FAILOVER true) \
             (the relay must not hold it meanwhile); or init a new slot on PostgreSQL 17+",
        ),
    });
    if flag("failover") == Some(true) && !synced {
        let standby_slots = facts.setting("synchronized_standby_slots").unwrap_or("");
        items.push(if standby_slots.trim().is_empty() {
            Item::warn(
                "postgres.synchronized_standby_slots",
                "empty: the relay may confirm WAL a standby has not received yet, and after \
                 a failover to that standby the synchronized slot is behind or not usable",
            )
            .fix(
                "ALTER SYSTEM SET synchronized_standby_slots = '<the standbys' physical slots>'; \
                 SELECT pg_reload_conf();",
            )
        } else {
            Item::ok(
                "postgres.synchronized_standby_slots",
                format!("{standby_slots}: the relay never gets ahead of these standbys"),
            )
        });
    }
    items
}

pub(super) fn slot_items(
    config: &Config,
    facts: &PgFacts,
    relay_application_name: &str,
) -> Vec<Item> {
    let slot = &config.postgres.slot;
    let Some(row) = &facts.slot else {
        let missing = PgError::SlotMissing {
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
                crate::admin::human_bytes(u64::try_from(bytes).unwrap_or(0))
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
    items.extend(failover_items(facts));
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
            relay_holder_item(config, facts, &who)
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

/// The slot is held under the application_name a relay with this config
/// shows: OK when that relay is the one running with this config, which
/// with `relay.standby_lock` means a session from the same client holds
/// this slot's relay lock (only a streaming relay holds it); a reader that
/// merely has the name is worth a warning.
fn relay_holder_item(config: &Config, facts: &PgFacts, who: &str) -> Item {
    let name = "postgres.slot.holder";
    if !config.relay.standby_lock {
        return Item::ok(
            name,
            format!(
                "held by {who}: the relay running with this config, by its application_name \
                 (relay.standby_lock is off, so no relay lock tells it apart further)"
            ),
        );
    }
    let holder_addr = facts
        .slot_holder
        .as_ref()
        .and_then(|h| h.client_addr.as_deref());
    let lock = facts.relay_lock_holder.as_ref().filter(|lock| {
        lock.application_name == facts.slot_holder.as_ref().and_then(|h| h.application_name.clone())
            // Addresses hidden from this role (or a Unix socket) prove
            // nothing either way.
            && (lock.client_addr.is_none()
                || holder_addr.is_none()
                || lock.client_addr.as_deref() == holder_addr)
    });
    match lock {
        Some(lock) => Item::ok(
            name,
            format!(
                "held by {who}: the relay running with this config (its session pid {} holds \
                 the relay lock)",
                lock.pid
            ),
        ),
        None => Item::warn(
            name,
            format!(
                "held by {who}: a relay by its application_name, but none of its sessions holds \
                 this config's relay lock: a relay with relay.standby_lock = false or another \
                 config reads the slot, and a relay with this config would wait for it"
            ),
        )
        .fix(
            "run one relay config per slot: stop the other reader, or give this config its \
             own slot",
        ),
    }
}

/// Types whose text form the relay uses as is for ids, types and keys.
fn is_text_like(type_name: &str) -> bool {
    let base = type_name.split('(').next().unwrap_or(type_name).trim();
    matches!(
        base,
        "text" | "character varying" | "character" | "name" | "citext" | "uuid"
    )
}

pub(super) fn column_items(config: &Config, facts: &PgFacts) -> Vec<Item> {
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
