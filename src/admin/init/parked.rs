//! init's share of parking: the parking table (`sql/outbox_parked.sql`,
//! named by `postgres.parked_table`), always, since "park" is the default
//! after a dead letter (`kafka.after_dead_letter`); with `--grant`, the
//! relay role's privileges on it (SELECT, INSERT, UPDATE, DELETE: the
//! relay parks and reads heads, the `dead` commands release, promote and
//! delete) and USAGE on its schema when that is not the outbox table's and
//! the role lacks it.
//! Planned from the catalog, so a second run finds it in place and changes
//! nothing.

use super::steps::{InitOptions, Plan, Step};
use crate::admin::dead::parked::PRIVILEGES;
use crate::admin::dead::table::ReplayFacts;
use crate::parking::ParkedTable;

/// Adds the parking table's steps (or what is in place) to `plan`; `facts`
/// and `usage` (USAGE on the table's schema) are about the `--grant` role
/// when there is one.
pub(super) fn plan_parked_table(
    table: &ParkedTable,
    (outbox_schema, usage): (&str, bool),
    facts: &ReplayFacts,
    options: &InitOptions,
    plan: &mut Plan,
) {
    let shown = format!("{}.{}", table.schema, table.name);
    if facts.exists {
        plan.in_place.push(format!("parking table {shown}"));
    } else {
        plan.steps.push(Step {
            summary: format!("create the parking table {shown} (if missing)"),
            sql: table.create_sql().trim().trim_end_matches(';').to_owned(),
        });
    }
    let Some(grantee) = &options.grant else {
        return;
    };
    // The outbox table's schema is granted with the outbox table.
    if table.schema != outbox_schema && !usage {
        plan.grant_schema_usage(grantee, &table.schema);
    }
    plan.grant_on_table(
        grantee,
        &PRIVILEGES.join(", "),
        (&shown, &table.quoted()),
        facts.exists && facts.missing.is_empty(),
    );
}
