//! init's share of the webhook sinks: the delivery table
//! (`sql/outbox_delivery.sql`, named by `postgres.delivery_table`) when the
//! config has a sink, and with `--grant` the relay role's privileges on it
//! (SELECT, INSERT, UPDATE, DELETE: the relay inserts and updates rows, the
//! `dead` commands delete them). The table's statements are all
//! `IF NOT EXISTS`, so running init again changes nothing on a current
//! table, and adds what a table from an older relay lacks (the
//! `after_dead_letter` column, an index), keeping its rows.

use postgres_protocol::escape::escape_identifier;

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
        let grantee_sql = escape_identifier(grantee);
        if schema != config.postgres.table_parts().0 {
            plan.steps.push(Step {
                summary: format!("grant {grantee} USAGE on schema {schema}"),
                sql: format!(
                    "GRANT USAGE ON SCHEMA {} TO {grantee_sql}",
                    escape_identifier(&schema)
                ),
            });
        }
        plan.steps.push(Step {
            summary: format!("grant {grantee} SELECT, INSERT, UPDATE, DELETE on {schema}.{name}"),
            sql: format!(
                "GRANT SELECT, INSERT, UPDATE, DELETE ON {} TO {grantee_sql}",
                table.quoted()
            ),
        });
    }
}
