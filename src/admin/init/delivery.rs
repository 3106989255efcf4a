//! init's share of the webhook sinks: the delivery table
//! (`sql/outbox_delivery.sql`, named by `postgres.delivery_table`) when the
//! config has a sink, and with `--grant` the relay role's privileges on it
//! (SELECT, INSERT, UPDATE, DELETE: the relay inserts and updates rows, the
//! `dead` commands delete them). The table's statements are all
//! `IF NOT EXISTS`, so running init again changes nothing on a current
//! table, and adds what a table from an older relay lacks (the
//! `after_dead_letter` column, an index), keeping its rows.

use super::steps::{InitOptions, Plan, Step};
use crate::config::Config;
use crate::sink::http::store::DeliveryTable;

/// Adds the delivery table's steps to `plan`; nothing without a sink.
pub(super) fn plan_delivery_table(config: &Config, options: &InitOptions, plan: &mut Plan) {
    if config.sinks.is_empty() {
        return;
    }
    let (schema, name) = config.postgres.delivery_table_parts();
    let table = DeliveryTable {
        schema: schema.clone(),
        name: name.clone(),
    };
    plan.steps.push(Step {
        summary: format!(
            "create the delivery table {schema}.{name} (if missing; add the columns and indexes \
             an older one lacks)"
        ),
        sql: table.create_sql().trim().trim_end_matches(';').to_owned(),
    });
    if let Some(grantee) = &options.grant {
        if schema != config.postgres.table_parts().0 {
            plan.grant_schema_usage(grantee, &schema);
        }
        plan.grant_on_table(
            grantee,
            "SELECT, INSERT, UPDATE, DELETE",
            (&format!("{schema}.{name}"), &table.quoted()),
            false,
        );
    }
}
