//! The pure half of `init`: from the catalog's facts and the options to the
//! statements still missing, in order, or a refusal; and the outbox table's
//! `CREATE TABLE`.
//!
//! Role: [`plan`] decides, [`super::run`] executes. Every refusal is decided
//! here, before the first statement runs (see [`super`] for the rules,
//! among them "Loud on lost history": no new slot where one was lost).

use std::fmt::Write as _;

use postgres_protocol::escape::escape_identifier;

use crate::cleanup::Cleanup;
use crate::config::Config;
use crate::pg::ErrorKind;
use crate::replication::evaluate_slot_json;

use super::steps::{InitOptions, Plan, Step};
use super::{InitError, MIN_SERVER_VERSION_NUM};
use crate::admin::pg_facts::PgFacts;
use crate::admin::shards;

/// The first server with failover slots.
pub const FAILOVER_SLOT_VERSION_NUM: i64 = 170_000;

/// The statements still missing for `config`'s setup, given what the
/// catalog says, or why init refuses.
///
/// # Errors
/// See [`InitError`]; nothing has been changed when this fails.
pub fn plan(config: &Config, facts: &PgFacts, options: &InitOptions) -> Result<Plan, InitError> {
    let pg = &config.postgres;
    let (schema, name) = pg.table_parts();
    let table_sql = format!(
        "{}.{}",
        escape_identifier(&schema),
        escape_identifier(&name)
    );
    let table_shown = format!("{schema}.{name}");
    let mut plan = Plan::default();

    if facts.server_version_num < MIN_SERVER_VERSION_NUM {
        return Err(InitError::ServerTooOld {
            version: facts.server_version.clone(),
        });
    }

    // The table.
    match &facts.table {
        Some(table) => plan.in_place.push(if table.partitioned {
            format!(
                "outbox table {table_shown} (partitioned, {} partitions)",
                table.partitions
            )
        } else {
            format!("outbox table {table_shown}")
        }),
        None if options.create_table => plan.steps.push(Step {
            summary: format!("create the outbox table {table_shown}"),
            sql: create_table_sql(config),
        }),
        None => {
            return Err(InitError::TableMissing {
                table: table_shown,
                database: facts.database.clone(),
            });
        }
    }

    // The relay role's privileges.
    if let Some(grantee) = &options.grant {
        let role = facts
            .role
            .as_ref()
            .filter(|r| &r.name == grantee)
            .ok_or_else(|| InitError::RoleMissing {
                role: grantee.clone(),
            })?;
        let grantee_sql = escape_identifier(grantee);
        if role.schema_usage == Some(true) {
            plan.in_place
                .push(format!("USAGE on schema {schema} for {grantee}"));
        } else {
            plan.steps.push(Step {
                summary: format!("grant {grantee} USAGE on schema {schema}"),
                sql: format!(
                    "GRANT USAGE ON SCHEMA {} TO {grantee_sql}",
                    escape_identifier(&schema)
                ),
            });
        }
        if role.table_select == Some(true) {
            plan.in_place
                .push(format!("SELECT on {table_shown} for {grantee}"));
        } else {
            plan.steps.push(Step {
                summary: format!("grant {grantee} SELECT on {table_shown}"),
                sql: format!("GRANT SELECT ON {table_sql} TO {grantee_sql}"),
            });
        }
        // postgres.cleanup deletes the rows whose events are confirmed.
        if pg.cleanup == Cleanup::DeleteAfterAck {
            if role.table_delete == Some(true) {
                plan.in_place
                    .push(format!("DELETE on {table_shown} for {grantee} (cleanup)"));
            } else {
                plan.steps.push(Step {
                    summary: format!("grant {grantee} DELETE on {table_shown} (cleanup)"),
                    sql: format!("GRANT DELETE ON {table_sql} TO {grantee_sql}"),
                });
            }
        }
        let mut missing = Vec::new();
        if !role.login {
            missing.push("LOGIN");
        }
        if !role.replication && !role.superuser {
            missing.push("REPLICATION");
        }
        if missing.is_empty() {
            plan.in_place
                .push(format!("role {grantee} has LOGIN and REPLICATION"));
        } else {
            plan.manual.push(Step {
                summary: format!(
                    "give role {grantee} {} (a role attribute: init leaves it to a superuser)",
                    missing.join(" and ")
                ),
                sql: format!("ALTER ROLE {grantee_sql} {}", missing.join(" ")),
            });
        }
    }

    // The delivery table of webhook sinks, and its grants.
    super::delivery::plan_delivery_table(config, options, &mut plan);

    // The publication, with this shard's row filter when sharded.
    let publication_sql = escape_identifier(&pg.publication);
    let filter =
        (pg.shards > 1).then(|| shards::filter_sql(&pg.columns.aggregate_id, pg.shards, pg.shard));
    if filter.is_some() && facts.server_version_num < shards::MIN_ROW_FILTER_VERSION_NUM {
        return Err(InitError::ShardsNeedRowFilters {
            shards: pg.shards,
            version: facts.server_version.clone(),
        });
    }
    let where_sql = filter
        .as_ref()
        .map_or_else(String::new, |f| format!(" WHERE ({f})"));
    let shard_shown = filter.as_ref().map_or_else(String::new, |_| {
        format!(" (shard {} of {})", pg.shard, pg.shards)
    });
    let steps_before_publication = plan.steps.len();
    match &facts.publication {
        None => {
            let via_root = facts.table.as_ref().is_some_and(|t| t.partitioned);
            plan.steps.push(Step {
                summary: format!(
                    "create publication {:?} on {table_shown}{shard_shown}",
                    pg.publication
                ),
                sql: format!(
                    "CREATE PUBLICATION {publication_sql} FOR TABLE {table_sql}{where_sql} WITH \
                     (publish = 'insert'{})",
                    if via_root {
                        ", publish_via_partition_root = true"
                    } else {
                        ""
                    }
                ),
            });
        }
        Some(publication) => {
            if publication.insert {
                plan.in_place.push(format!(
                    "publication {:?} publishes inserts",
                    pg.publication
                ));
            } else {
                // Keep what it publishes already (someone else may rely on
                // it), and add inserts.
                let mut ops = vec!["insert"];
                for (on, op) in [
                    (publication.update, "update"),
                    (publication.delete, "delete"),
                    (publication.truncate, "truncate"),
                ] {
                    if on {
                        ops.push(op);
                    }
                }
                plan.steps.push(Step {
                    summary: format!("let publication {:?} publish inserts", pg.publication),
                    sql: format!(
                        "ALTER PUBLICATION {publication_sql} SET (publish = '{}')",
                        ops.join(", ")
                    ),
                });
            }
            if publication.has_table {
                if let Some(expected) = &filter {
                    let matches = publication.row_filter.as_deref().is_some_and(|found| {
                        shards::filter_matches(found, &pg.columns.aggregate_id, pg.shards, pg.shard)
                    });
                    if !matches {
                        return Err(InitError::ShardFilterMismatch {
                            publication: pg.publication.clone(),
                            table: table_sql,
                            found: publication.row_filter.as_ref().map_or_else(
                                || "no row filter".to_owned(),
                                |f| format!("the row filter {f}"),
                            ),
                            expected: expected.clone(),
                            shards: pg.shards,
                            shard: pg.shard,
                        });
                    }
                }
                plan.in_place.push(format!(
                    "publication {:?} contains {table_shown}{shard_shown}",
                    pg.publication
                ));
            } else {
                plan.steps.push(Step {
                    summary: format!(
                        "add {table_shown} to publication {:?}{shard_shown}",
                        pg.publication
                    ),
                    sql: format!(
                        "ALTER PUBLICATION {publication_sql} ADD TABLE {table_sql}{where_sql}"
                    ),
                });
            }
        }
    }

    // The slot.
    let publication_changes = plan.steps.len() > steps_before_publication;
    let recreate = publication_changes && skips_rows(config, facts, options)?;
    if recreate {
        // Before the publication step: a failing drop leaves the
        // publication as it was.
        plan.steps.insert(
            steps_before_publication,
            Step {
                summary: format!(
                    "drop replication slot {:?} (--recreate-slot: the outbox rows committed \
                     before the new slot is created are not relayed by it)",
                    pg.slot
                ),
                // The name passed the slot-name rule ([a-z0-9_]).
                sql: format!("SELECT pg_drop_replication_slot('{}')", pg.slot),
            },
        );
    }
    match facts.slot.as_ref().filter(|_| !recreate) {
        Some(row) => match evaluate_slot_json(&pg.slot, &facts.database, &row.to_string()) {
            Ok(confirmed) => plan.in_place.push(format!(
                "replication slot {:?} (pgoutput, confirmed_flush_lsn {confirmed})",
                pg.slot
            )),
            // Held by a running relay (or another reader): it exists, which
            // is all init is about; `check` reports who holds it.
            Err(e) if e.kind() == ErrorKind::SlotBusy => plan
                .in_place
                .push(format!("replication slot {:?} (in use)", pg.slot)),
            Err(source) => {
                return Err(InitError::SlotUnusable {
                    slot: pg.slot.clone(),
                    source,
                });
            }
        },
        None => {
            // Without an outbox table, no outbox row was ever committed:
            // a new slot skips nothing.
            if facts.publication.is_some()
                && facts.table.is_some()
                && !options.allow_new_slot
                && !recreate
            {
                return Err(InitError::SlotWouldSkip {
                    slot: pg.slot.clone(),
                    publication: pg.publication.clone(),
                });
            }
            let wal_level = facts.setting("wal_level").unwrap_or("unknown");
            if wal_level != "logical" {
                return Err(InitError::WalLevel {
                    wal_level: wal_level.to_owned(),
                });
            }
            if let Some(max) = facts.setting_i64("max_replication_slots")
                && facts.slots_used >= max
            {
                return Err(InitError::NoFreeSlot { max });
            }
            if !facts.session_can_replicate {
                return Err(InitError::CannotCreateSlot {
                    role: facts.session_role.clone(),
                });
            }
            // PostgreSQL 17+: a failover slot, which a standby with
            // sync_replication_slots keeps in step, so that the relay can go
            // on from the promoted standby (docs/operations.md, "Failover").
            let failover = facts.server_version_num >= FAILOVER_SLOT_VERSION_NUM;
            plan.steps.push(Step {
                summary: format!(
                    "create replication slot {:?} (pgoutput{})",
                    pg.slot,
                    if failover { ", failover" } else { "" }
                ),
                // The name passed the slot-name rule ([a-z0-9_]) in config
                // validation: it needs no escaping.
                sql: if failover {
                    format!(
                        "SELECT pg_create_logical_replication_slot('{}', 'pgoutput', \
                         temporary => false, twophase => false, failover => true)",
                        pg.slot
                    )
                } else {
                    format!(
                        "SELECT pg_create_logical_replication_slot('{}', 'pgoutput')",
                        pg.slot
                    )
                },
            });
        }
    }
    Ok(plan)
}

/// Whether creating the publication (or letting it publish the outbox's
/// inserts) would leave the existing slot with outbox rows it never relays;
/// `Ok(true)` when `--recreate-slot` says to drop and re-create the slot.
///
/// Why it matters: pgoutput decodes each change with the catalog as of that
/// change, so a change written before the publication existed (or before it
/// published the outbox's inserts) is not published by it: depending on the
/// server version the stream fails on it or skips it, and the rows are
/// never relayed by this slot.
///
/// The test: the slot's `confirmed_flush_lsn` against the end of the WAL
/// written so far. Only when the slot has confirmed all of it can no
/// change, outbox rows among them, wait in it. Counting outbox rows above
/// the slot's position alone would not do: rows deleted since (the
/// Debezium pattern of insert and delete in one transaction, or a cleanup)
/// leave no trace in the table, yet their inserts wait in the WAL. So any
/// WAL not yet confirmed refuses, erring on the safe side on a busy server;
/// the row count (an upper bound, see `status`) tells the person what is
/// at stake. An unknown position (a standby) counts as behind.
fn skips_rows(config: &Config, facts: &PgFacts, options: &InitOptions) -> Result<bool, InitError> {
    let Some(row) = &facts.slot else {
        return Ok(false);
    };
    // A slot the relay cannot use is refused as such, never dropped.
    if let Err(e) = evaluate_slot_json(&config.postgres.slot, &facts.database, &row.to_string())
        && e.kind() != ErrorKind::SlotBusy
    {
        return Ok(false);
    }
    let parse = |text: Option<&str>| text.and_then(|t| t.parse::<pgoutput::lsn::Lsn>().ok());
    let confirmed = parse(facts.slot_text("confirmed_flush_lsn"));
    let end = parse(facts.wal_insert_lsn.as_deref());
    if matches!((confirmed, end), (Some(c), Some(e)) if c >= e) {
        return Ok(false);
    }
    if options.recreate_slot {
        return Ok(true);
    }
    let pg = &config.postgres;
    Err(InitError::PublicationWouldSkip {
        slot: pg.slot.clone(),
        publication: pg.publication.clone(),
        confirmed: facts
            .slot_text("confirmed_flush_lsn")
            .unwrap_or("unknown")
            .to_owned(),
        end: facts
            .wal_insert_lsn
            .clone()
            .unwrap_or_else(|| "unknown".to_owned()),
        rows: facts.rows_after_slot,
    })
}

/// `CREATE TABLE` for a Debezium-compatible outbox with the configured
/// column names (as `sql/outbox.sql` with the defaults).
pub fn create_table_sql(config: &Config) -> String {
    let pg = &config.postgres;
    let (schema, name) = pg.table_parts();
    let c = &pg.columns;
    let mut columns: Vec<(String, &str)> = vec![
        (c.id.clone(), "uuid PRIMARY KEY"),
        (c.aggregate_type.clone(), "text NOT NULL"),
        (c.aggregate_id.clone(), "text NOT NULL"),
        (c.event_type.clone(), "text NOT NULL"),
        (c.payload.clone(), "jsonb NOT NULL"),
    ];
    if let Some(timestamp) = c.timestamp_column() {
        columns.push((timestamp.to_owned(), "timestamptz NOT NULL DEFAULT now()"));
    }
    if let Some(tracing) = c.tracing_span_context_column() {
        columns.push((tracing.to_owned(), "text"));
    }
    if let Some(source) = c.source_column() {
        columns.push((source.to_owned(), "text"));
    }
    for column in pg.header_columns.keys() {
        columns.push((column.clone(), "text"));
    }
    // One column may serve two roles (a header copied from a mapped column).
    let mut seen = std::collections::HashSet::new();
    columns.retain(|(column, _)| seen.insert(column.clone()));
    let mut sql = format!(
        "CREATE TABLE IF NOT EXISTS {}.{} (",
        escape_identifier(&schema),
        escape_identifier(&name)
    );
    for (i, (column, definition)) in columns.iter().enumerate() {
        let _ = write!(
            sql,
            "{}\n    {} {definition}",
            if i == 0 { "" } else { "," },
            escape_identifier(column)
        );
    }
    sql.push_str("\n)");
    sql
}
