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

mod contracts;
mod delivery;
mod exactly_once;
mod outbox;
mod parked;
mod postgres;
mod replay;
mod topics;

pub use postgres::{PgSide, evaluate_postgres};
pub use topics::{Topics, evaluate_kafka, topics_for};

use std::fmt::Write as _;
use std::time::Duration;

use postgres_protocol::escape::escape_identifier;
use serde::Serialize;

use crate::config::Config;
use crate::pg::{PgClient, PgError};
use crate::replication::resolve_on;

use super::AdminTarget;
use super::kafka_facts;
use super::pg_facts;

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

/// The distinct `(aggregate type, event type)` pairs of the table (event
/// type empty when the template does not use it).
async fn aggregate_pairs(
    client: &PgClient,
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
        "SELECT DISTINCT {}::text, {event_type} FROM {} LIMIT $1",
        escape_identifier(&pg.columns.aggregate_type),
        crate::pg::qualified(&schema, &name),
    );
    let limit = i64::try_from(MAX_AGGREGATE_ROWS).unwrap_or(i64::MAX);
    let read = async {
        let rows = client.query(&sql, &[&limit]).await?;
        rows.iter()
            .map(|row| {
                Ok((
                    row.try_get::<_, Option<String>>(0)?,
                    row.try_get::<_, Option<String>>(1)?,
                ))
            })
            .collect::<Result<Vec<_>, tokio_postgres::Error>>()
    };
    let rows = read.await.map_err(|e| {
        let e = client.error("reading the aggregate types in the outbox", e);
        format!("the rows could not be read: {e}")
    })?;
    Ok(rows
        .into_iter()
        .filter_map(|(aggregate_type, event_type)| {
            Some((aggregate_type?, event_type.unwrap_or_default()))
        })
        .collect())
}

/// The catalog session of `check`: an ordinary session whose statements
/// are bounded by [`STATEMENT_TIMEOUT`] (a limit that cannot be set leaves
/// the server's).
async fn catalog_session(target: &AdminTarget) -> Result<PgClient, PgError> {
    let client = target.client().await?;
    let _ = client
        .execute(
            "SELECT set_config('statement_timeout', $1, false)",
            &[&STATEMENT_TIMEOUT],
        )
        .await;
    Ok(client)
}

/// Runs every check.
pub async fn run(target: &AdminTarget, config: &Config, kafka_timeout: Duration) -> Report {
    let pg = &config.postgres;
    let mut items = Vec::new();
    let relay_role = target.relay_role();
    let mut topics = Topics::Unknown("the outbox table could not be read".into());
    // Whether a relay holds the slot (`None`: unknown): trying the
    // transactional id would fence it.
    let mut slot_held = None;
    let connection = match &relay_role {
        Ok(_) => catalog_session(target).await.map_err(|e| e.to_string()),
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
        Ok(client) => {
            let role = relay_role.as_deref().unwrap_or_default();
            let (schema, name) = pg.table_parts();
            match pg_facts::gather(&client, (&schema, &name), &pg.publication, &pg.slot, role).await
            {
                Err(e) => {
                    items.push(Item::fail("postgres.catalog", e.to_string()));
                }
                Ok(facts) => {
                    slot_held = Some(facts.slot_holder.is_some());
                    let outbox = resolve_on(&client, (&schema, &name), &pg.publication).await;
                    let template = &config.kafka.topic;
                    let per_row =
                        template.contains("{aggregatetype}") || template.contains("{type}");
                    topics = if per_row && facts.table.is_some() {
                        topics_for(template, aggregate_pairs(&client, config).await)
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
            items.extend(delivery::items(target, config, role).await);
            items.push(replay::item(target, config, role).await);
            items.push(parked::item(target, config, role).await);
        }
    }
    let mut wanted: Vec<String> = match &topics {
        Topics::Fixed(topic) => vec![topic.clone()],
        Topics::FromRows { topics, .. } => topics.iter().cloned().collect(),
        Topics::Unknown(_) => Vec::new(),
    };
    wanted.push(config.kafka.dlq_topic.clone());
    let exactly_once = config.kafka.delivery == crate::config::Delivery::ExactlyOnce;
    if exactly_once {
        wanted.push(config.kafka.checkpoint_topic.clone());
    }
    let cluster = kafka_facts::gather(&config.kafka, &wanted, kafka_timeout).await;
    items.extend(evaluate_kafka(config, &cluster, &topics));
    items.extend(contracts::items(config).await);
    if exactly_once {
        items.extend(exactly_once::evaluate(config, &cluster));
        items.push(exactly_once::probe_transactional_id(config, slot_held, kafka_timeout).await);
    }
    Report { items }
}

#[cfg(test)]
mod tests;
