//! `outbox-relay init`: creates what the relay needs in the database,
//! idempotently: the outbox table (with `--create-table`), the publication,
//! the slot, the dead-letter replay record ([`replay`]), the parking table
//! ([`parked`]), and (with
//! `--grant`) the relay role's privileges; in exactly-once mode also the
//! checkpoint topic on Kafka ([`checkpoint`]).
//!
//! Role: [`plan`] turns the catalog's [`PgFacts`] and the options into the
//! statements still missing, or a refusal; [`run`] gathers the facts,
//! prints the plan (`--dry-run`) or executes it step by step (the
//! checkpoint topic first, then the database).
//!
//! Invariants:
//! * Nothing that exists is dropped, replaced or narrowed: an existing
//!   publication only gains what the relay needs (inserts, the table). The
//!   one exception is asked for by name: `--recreate-slot` (below).
//! * Order: table, grants, publication, slot, then the replay record and
//!   the parking table (they depend on nothing else). The publication must exist
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
//! * No publication is set up silently for a slot that holds WAL not yet
//!   confirmed: pgoutput decodes each change with the catalog as of that
//!   change, so outbox rows committed before the publication published
//!   them would never be relayed. init refuses, naming them, unless
//!   `--recreate-slot` says to drop that slot and create a new one after
//!   the publication (see `planning::skips_rows` for the test).
//! * Role attributes (LOGIN, REPLICATION) are never changed: they are a
//!   superuser's decision, so init prints the `ALTER ROLE` instead.

use std::fmt::Write as _;

use crate::config::Config;
use crate::pg::PgError;
use postgres_protocol::escape::escape_identifier;

use super::AdminTarget;
use super::pg_facts;
use checkpoint::TopicPlan;

pub mod checkpoint;
mod delivery;
mod parked;
mod planning;
mod replay;
mod steps;

pub use planning::{FAILOVER_SLOT_VERSION_NUM, create_table_sql, plan};
pub use steps::{InitOptions, Plan, Step};

/// The oldest server the relay supports.
pub const MIN_SERVER_VERSION_NUM: i64 = 140_000;

/// Why init stopped.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error("cannot connect to PostgreSQL: {0}")]
    Connect(PgError),
    #[error("{0}")]
    Query(PgError),
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
        "replication slot {slot:?} has WAL not yet confirmed (confirmed_flush_lsn {confirmed}, \
         the WAL ends at {end}){}, and publication {publication:?} does not publish the \
         outbox's inserts yet. pgoutput decodes each change with the catalog as of that change, \
         so outbox rows committed before the publication publishes them are never relayed by \
         this slot (the stream fails on them or skips them, depending on the PostgreSQL \
         version): init refuses to set the publication up over them and changed nothing. Two \
         ways out: see to those rows first (re-publish them some other way, or make sure none \
         are due), then run init again with --recreate-slot, which drops the slot, sets the \
         publication up and creates a new slot that relays only rows committed after it; or \
         run init with --recreate-slot now and then re-insert the rows committed since the \
         slot's position (delete and insert each again in one transaction, keeping its id: \
         consumers that deduplicate on the CloudEvents id see each once)",
        match rows {
            Some(n) => format!(
                "; up to {n} outbox rows in the table were committed after its position (rows \
                 deleted since are not counted)"
            ),
            None => String::new(),
        }
    )]
    PublicationWouldSkip {
        slot: String,
        publication: String,
        confirmed: String,
        end: String,
        rows: Option<i64>,
    },
    #[error(
        "replication slot {slot:?} exists but the relay cannot use it; init never drops a slot it \
         cannot use: {source}"
    )]
    SlotUnusable { slot: String, source: PgError },
    #[error(
        "postgres.shards = {shards} needs publication row filters, which PostgreSQL \
         {version} does not have (15 or later does): run one relay per outbox on this server, \
         or upgrade it"
    )]
    ShardsNeedRowFilters { shards: u32, version: String },
    #[error(
        "publication {publication:?} exists with {found} on the outbox table, not shard \
         {shard} of {shards}: init does not change an existing filter. Fix it with \
         `ALTER PUBLICATION {} SET TABLE {table} WHERE ({expected});` (rows committed before \
         it were filtered the old way), or fix postgres.shards and postgres.shard",
        escape_identifier(publication)
    )]
    ShardFilterMismatch {
        publication: String,
        table: String,
        found: String,
        expected: String,
        shards: u32,
        shard: u32,
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
        "cannot ask the Kafka cluster about checkpoint topic {topic:?} ({why}); init changed \
         nothing. Check kafka.brokers and [kafka.properties], then run init again (or create the \
         topic yourself: {create})"
    )]
    CheckpointTopicUnknown {
        topic: String,
        why: String,
        create: String,
    },
    #[error(
        "checkpoint topic {topic:?} exists but {problem}, and the relay refuses to start on it. \
         init does not change an existing topic, and changed nothing. {fix}, then run init again"
    )]
    CheckpointTopicUnusable {
        topic: String,
        problem: String,
        fix: String,
    },
    #[error(
        "init could not create checkpoint topic {topic:?} ({why}) and changed nothing in the \
         database. Create it yourself (or as a principal allowed to create topics): {create}; \
         then run init again"
    )]
    CheckpointTopicCreate {
        topic: String,
        why: String,
        create: String,
    },
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
        source: Box<PgError>,
    },
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

/// The outbox rows an existing slot may not have decoded yet, counted only
/// where init would set the publication up for it (the count goes into the
/// refusal); `None` when not counted or not countable.
async fn rows_after_slot(
    client: &crate::pg::PgClient,
    table: (&str, &str),
    facts: &pg_facts::PgFacts,
) -> Option<i64> {
    let ready = facts
        .publication
        .as_ref()
        .is_some_and(|p| p.insert && p.has_table);
    if ready || facts.table.is_none() {
        return None;
    }
    let catalog_xmin = facts.slot_text("catalog_xmin")?;
    super::status::count_pending(client, table, catalog_xmin, None)
        .await
        .ok()?
        .0
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
    // The catalog, the replay and parking tables' facts and the plan's steps:
    // one ordinary session of tokio-postgres, typed parameters throughout.
    let session = target.client().await.map_err(InitError::Connect)?;
    let (schema, name) = pg.table_parts();
    let facts =
        pg_facts::gather(&session, (&schema, &name), &pg.publication, &pg.slot, &role).await;
    let facts = match facts {
        Ok(mut f) => {
            f.rows_after_slot = rows_after_slot(&session, (&schema, &name), &f).await;
            Ok(f)
        }
        Err(e) => Err(e),
    };
    let replay_table = super::dead::table::replay_table(&schema);
    let replay_facts = match facts {
        Ok(_) => super::dead::table::replay_facts(&session, &replay_table, &role)
            .await
            .map_err(InitError::Query),
        Err(_) => Ok(Default::default()),
    };
    let parked_table = super::dead::parked::parked_table(config);
    let parked_facts = match &replay_facts {
        Ok(_) => {
            let name = super::dead::table::TableName {
                schema: parked_table.schema.clone(),
                name: parked_table.name.clone(),
            };
            let facts = super::dead::table::table_facts(
                &session,
                &name,
                &role,
                &super::dead::parked::PRIVILEGES,
            )
            .await;
            let usage = super::dead::table::schema_usage(&session, &name.schema, &role).await;
            facts
                .and_then(|f| Ok((f, usage?)))
                .map_err(InitError::Query)
        }
        Err(_) => Ok(Default::default()),
    };
    let plan = facts
        .map_err(InitError::Query)
        .and_then(|f| plan(config, &f, options))
        .and_then(|mut plan| {
            replay::plan_replay_table(&replay_table, &replay_facts?, options, &mut plan);
            let (parked_facts, usage) = parked_facts?;
            parked::plan_parked_table(
                &parked_table,
                (&schema, usage),
                &parked_facts,
                options,
                &mut plan,
            );
            Ok(plan)
        })?;
    // Every refusal, the checkpoint topic's too, before anything runs.
    let topic_plan = checkpoint::look(config)
        .await
        .and_then(|looked| checkpoint::plan(config, looked.as_ref()))?;
    if dry_run {
        let _ = write!(out, "{}", render_dry_run(&plan));
        let _ = write!(out, "{}", topic_plan.render_dry_run(config));
        let _ = write!(out, "{}", checkpoint::acl_note(config));
        return Ok(());
    }
    for line in &plan.in_place {
        let _ = writeln!(out, "in place: {line}");
    }
    match &topic_plan {
        TopicPlan::NotUsed => {}
        TopicPlan::InPlace(line) => {
            let _ = writeln!(out, "in place: {line}");
        }
        TopicPlan::Create => match checkpoint::create(config).await {
            Ok(done) => {
                let _ = writeln!(out, "done: {done}");
            }
            Err(e) => return Err(e),
        },
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
        // A step is DDL, or a call whose arguments init shows as written
        // (`--dry-run` prints these same statements): run as shown.
        if let Err(e) = session.batch_execute(&step.sql).await {
            let source = session.error("running init", e);
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
    if plan.steps.is_empty() {
        let _ = writeln!(out, "nothing to do: the database is set up for the relay");
    }
    let mut manual = String::new();
    render_manual(&plan, &mut manual);
    let _ = write!(out, "{manual}");
    let _ = write!(out, "{}", checkpoint::acl_note(config));
    Ok(())
}

#[cfg(test)]
mod tests;
