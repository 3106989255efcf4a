//! init's share of the dead-letter commands: the replay record
//! (`outbox_dead_replay` in the outbox table's schema, see
//! docs/dead-letters.md), where `dead retry` and `dead discard` record what
//! they did. Every config has a Kafka dead-letter topic (`kafka.dlq_topic`
//! is required, `outbox.dlq` by default), so init always plans it. With
//! `--grant`, the relay role gets what the commands need on it
//! ([`REPLAY_PRIVILEGES`]). Planned from the catalog ([`ReplayFacts`]), so
//! that a second run finds it in place and changes nothing.

use super::steps::{InitOptions, Plan, Step};
use crate::admin::dead::table::{REPLAY_PRIVILEGES, ReplayFacts, TableName, create_replay_sql};

/// Adds the replay record's steps (or what is in place) to `plan`; `facts`
/// are about the `--grant` role when there is one.
pub(super) fn plan_replay_table(
    table: &TableName,
    facts: &ReplayFacts,
    options: &InitOptions,
    plan: &mut Plan,
) {
    let shown = table.shown();
    if facts.exists {
        plan.in_place
            .push(format!("dead-letter replay record {shown}"));
    } else {
        plan.steps.push(Step {
            summary: format!("create the dead-letter replay record {shown} (if missing)"),
            sql: create_replay_sql(table),
        });
    }
    let Some(grantee) = &options.grant else {
        return;
    };
    plan.grant_on_table(
        grantee,
        &REPLAY_PRIVILEGES.join(", "),
        (&shown, &table.sql()),
        facts.exists && facts.missing.is_empty(),
    );
}
