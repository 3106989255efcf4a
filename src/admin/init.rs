//! `outbox-relay init`: creates what the relay needs in the database,
//! idempotently: the outbox table (with `--create-table`), the publication,
//! the slot, and (with `--grant`) the relay role's privileges.
//!
//! Role: [`plan`] turns the catalog's [`PgFacts`] and the options into the
//! statements still missing, or a refusal; [`run`] gathers the facts,
//! prints the plan (`--dry-run`) or executes it step by step.
//!
//! Invariants:
//! * Nothing that exists is dropped, replaced or narrowed: an existing
//!   publication only gains what the relay needs (inserts, the table).
//! * Order: table, grants, publication, slot. The publication must exist
//!   before the slot: pgoutput looks publications up as of each change it
//!   decodes, and a change older than the publication fails to decode.
//! * Every refusal is decided before the first statement runs, so a refused
//!   init changes nothing.
//! * A slot is never created where one was lost ("Loud on lost history").
//!   The rule: **when the publication and the outbox table already exist
//!   and the slot does not, init refuses to create the slot** unless
//!   `--allow-new-slot` is given (without the table, no outbox row was ever
//!   committed, so nothing can be skipped). init creates the two together, publication first; a publication
//!   without its slot is a setup that has streamed before, whose slot was
//!   dropped or invalidated, and a new slot would start at the current WAL
//!   position, silently skipping every outbox row committed since the old
//!   one stopped. The relay writes nothing to the database to remember its
//!   positions, so the publication is the durable trace it leaves.
//!   The rule errs on the safe side: a publication created by hand, or left
//!   by an init whose slot creation failed, is refused too, and the message
//!   says when `--allow-new-slot` is right.
//! * Role attributes (LOGIN, REPLICATION) are never changed: they are a
//!   superuser's decision, so init prints the `ALTER ROLE` instead.

use std::fmt::Write as _;

use crate::config::Config;
use crate::replication::{ErrorKind, ReplicationError, evaluate_slot_json};
use postgres_protocol::escape::escape_identifier;

use super::AdminTarget;
use super::facts::{self, PgFacts};

/// The oldest server the relay supports.
pub const MIN_SERVER_VERSION_NUM: i64 = 140_000;

/// What `init` was asked to do besides the publication and the slot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InitOptions {
    /// Create the outbox table when it does not exist.
    pub create_table: bool,
    /// Grant this role what the relay needs.
    pub grant: Option<String>,
    /// Create the slot even though the publication exists already.
    pub allow_new_slot: bool,
}

/// One statement init runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// What it does, for people (`create publication "outbox_pub"`).
    pub summary: String,
    pub sql: String,
}

/// What init will do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Statements to run, in order.
    pub steps: Vec<Step>,
    /// Statements init never runs itself (role attributes): printed for a
    /// superuser to run.
    pub manual: Vec<Step>,
    /// What is already in place.
    pub in_place: Vec<String>,
}

/// Why init stopped.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error("cannot connect to PostgreSQL: {0}")]
    Connect(ReplicationError),
    #[error("{0}")]
    Query(ReplicationError),
    #[error(
        "PostgreSQL {version} is too old: the relay needs PostgreSQL 14 or later \
         (logical replication of partitioned tables, pgoutput protocol 1 with messages)"
    )]
    ServerTooOld { version: String },
    #[error(
        "the outbox table {table} does not exist in database {database:?}: run init with \
         --create-table to create a Debezium-compatible one (columns from \
         [postgres.columns]), or create it yourself, or fix postgres.table"
    )]
    TableMissing { table: String, database: String },
    #[error(
        "role {role:?} does not exist, so nothing can be granted to it: create it first \
         (`CREATE ROLE {} LOGIN REPLICATION PASSWORD '...';` as a superuser), then run init \
         again",
        escape_identifier(role)
    )]
    RoleMissing { role: String },
    #[error(
        "replication slot {slot:?} does not exist, but publication {publication:?} does: this \
         database was set up for the relay before, so its slot was most likely dropped or \
         invalidated. A new slot starts at the current WAL position and would silently skip \
         every outbox row committed since the old slot stopped, so init refuses to create it. \
         If no rows were written since, or you will re-publish them (rows from the time the \
         old slot stopped), run init again with --allow-new-slot. That is also right when \
         the publication was made by hand or by an init whose slot creation failed: no slot \
         ever streamed, nothing is skipped"
    )]
    SlotWouldSkip { slot: String, publication: String },
    #[error(
        "replication slot {slot:?} exists but the relay cannot use it; init never drops a slot: {source}"
    )]
    SlotUnusable {
        slot: String,
        source: ReplicationError,
    },
    #[error(
        "wal_level is {wal_level}, so no logical replication slot can be created: \
         `ALTER SYSTEM SET wal_level = logical;` and restart PostgreSQL, then run init again"
    )]
    WalLevel { wal_level: String },
    #[error(
        "all {max} replication slots (max_replication_slots) are in use: drop an unused slot \
         or raise max_replication_slots (`ALTER SYSTEM SET max_replication_slots = {};` and \
         restart PostgreSQL), then run init again",
        max + 1
    )]
    NoFreeSlot { max: i64 },
    #[error(
        "role {role:?} may not create a replication slot (it has neither REPLICATION nor \
         superuser): run init as a role that may (--admin-url), or `ALTER ROLE {} REPLICATION;`",
        escape_identifier(role)
    )]
    CannotCreateSlot { role: String },
    #[error(
        "init stopped at step {failed_step:?}{}: {source}{}",
        if done.is_empty() { String::new() } else { format!(" after {}", done.join(", ")) },
        if *publication_created { "; the publication was created by this run and no slot \
            ever streamed from it, so once the cause is fixed, run init again with \
            --allow-new-slot" } else { "" }
    )]
    Step {
        done: Vec<String>,
        failed_step: String,
        publication_created: bool,
        source: Box<ReplicationError>,
    },
}

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

    // The publication.
    let publication_sql = escape_identifier(&pg.publication);
    match &facts.publication {
        None => {
            let via_root = facts.table.as_ref().is_some_and(|t| t.partitioned);
            plan.steps.push(Step {
                summary: format!("create publication {:?} on {table_shown}", pg.publication),
                sql: format!(
                    "CREATE PUBLICATION {publication_sql} FOR TABLE {table_sql} WITH (publish = \
                     'insert'{})",
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
                plan.in_place.push(format!(
                    "publication {:?} contains {table_shown}",
                    pg.publication
                ));
            } else {
                plan.steps.push(Step {
                    summary: format!("add {table_shown} to publication {:?}", pg.publication),
                    sql: format!("ALTER PUBLICATION {publication_sql} ADD TABLE {table_sql}"),
                });
            }
        }
    }

    // The slot.
    match &facts.slot {
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
            if facts.publication.is_some() && facts.table.is_some() && !options.allow_new_slot {
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
            plan.steps.push(Step {
                summary: format!("create replication slot {:?} (pgoutput)", pg.slot),
                // The name passed the slot-name rule ([a-z0-9_]) in config
                // validation: it needs no escaping.
                sql: format!(
                    "SELECT pg_create_logical_replication_slot('{}', 'pgoutput')",
                    pg.slot
                ),
            });
        }
    }
    Ok(plan)
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

/// The plan as SQL a person can read and run (`--dry-run`).
pub fn render_dry_run(plan: &Plan) -> String {
    let mut out = String::new();
    for line in &plan.in_place {
        let _ = writeln!(out, "-- in place: {line}");
    }
    if plan.steps.is_empty() {
        out.push_str("-- nothing to do\n");
    } else {
        out.push_str("-- init would run, in this order:\n");
        for step in &plan.steps {
            let _ = writeln!(out, "\n-- {}\n{};", step.summary, step.sql);
        }
    }
    render_manual(plan, &mut out);
    out
}

fn render_manual(plan: &Plan, out: &mut String) {
    if plan.manual.is_empty() {
        return;
    }
    out.push_str("\n-- init does not change role attributes; as a superuser, run:\n");
    for step in &plan.manual {
        let _ = writeln!(out, "-- {}\n{};", step.summary, step.sql);
    }
}

/// Connects, plans, and prints (`dry_run`) or runs the plan, reporting
/// each step on `out` as it completes.
///
/// # Errors
/// See [`InitError`].
pub async fn run(
    target: &AdminTarget,
    config: &Config,
    options: &InitOptions,
    dry_run: bool,
    out: &mut dyn std::io::Write,
) -> Result<(), InitError> {
    let pg = &config.postgres;
    let role = match &options.grant {
        Some(role) => role.clone(),
        None => target.relay_role().map_err(InitError::Connect)?,
    };
    let mut connection = target.connect().await.map_err(InitError::Connect)?;
    let (schema, name) = pg.table_parts();
    let facts = facts::gather(
        &mut connection,
        (&schema, &name),
        &pg.publication,
        &pg.slot,
        &role,
    )
    .await;
    let plan = match facts
        .map_err(InitError::Query)
        .and_then(|f| plan(config, &f, options))
    {
        Ok(plan) => plan,
        Err(e) => {
            connection.close().await;
            return Err(e);
        }
    };
    if dry_run {
        connection.close().await;
        let _ = write!(out, "{}", render_dry_run(&plan));
        return Ok(());
    }
    for line in &plan.in_place {
        let _ = writeln!(out, "in place: {line}");
    }
    let mut done: Vec<String> = Vec::new();
    for step in &plan.steps {
        if step.sql.contains("pg_create_logical_replication_slot") {
            // Creating a logical slot waits for every transaction open now.
            let _ = writeln!(
                out,
                "creating the slot: this waits until the transactions open right now have ended"
            );
        }
        let _ = out.flush();
        if let Err(source) = connection.query(&step.sql, "running init").await {
            connection.close().await;
            return Err(InitError::Step {
                publication_created: done.iter().any(|d| d.starts_with("create publication")),
                done,
                failed_step: step.summary.clone(),
                source: Box::new(source),
            });
        }
        let _ = writeln!(out, "done: {}", step.summary);
        done.push(step.summary.clone());
    }
    connection.close().await;
    if plan.steps.is_empty() {
        let _ = writeln!(out, "nothing to do: the database is set up for the relay");
    }
    let mut manual = String::new();
    render_manual(&plan, &mut manual);
    let _ = write!(out, "{manual}");
    Ok(())
}

#[cfg(test)]
mod tests;
