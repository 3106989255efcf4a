//! `check`'s items for the webhook sinks: the delivery table exists, has the
//! columns this relay writes (a table from an older relay lacks
//! `after_dead_letter` until `init` runs again, which adds it and keeps
//! every row), and the relay role may read and write it (SELECT, INSERT,
//! UPDATE, DELETE, asked of the catalog: check writes nothing), and the config's webhook
//! warnings (a secret sent over plain http to another host). Nothing
//! without a sink.

use postgres_protocol::escape::escape_literal;

use super::Item;
use crate::config::Config;
use crate::pg::SqlConnection;
use crate::sink::http::store::HOLD_COLUMN;

/// The items; `role` is the relay's role.
pub(super) async fn items(
    connection: &mut SqlConnection,
    config: &Config,
    role: &str,
) -> Vec<Item> {
    if config.sinks.is_empty() {
        return Vec::new();
    }
    let mut items: Vec<Item> = crate::config::warnings(config)
        .into_iter()
        .map(|w| {
            let (name, detail) = w.split_once(": ").unwrap_or(("sinks", w.as_str()));
            Item::warn(format!("config.{name}"), detail.to_owned())
        })
        .collect();
    let (schema, name) = config.postgres.delivery_table_parts();
    let shown = format!("{schema}.{name}");
    let table = escape_literal(&format!(
        "{}.{}",
        postgres_protocol::escape::escape_identifier(&schema),
        postgres_protocol::escape::escape_identifier(&name)
    ));
    let role = escape_literal(role);
    let privilege = |p: &str| format!("has_table_privilege({role}, {table}, '{p}')");
    let sql = format!(
        "SELECT to_regclass({table}) IS NOT NULL, \
                CASE WHEN to_regclass({table}) IS NULL THEN NULL \
                     ELSE {} AND {} AND {} AND {} END, \
                EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a \
                        WHERE a.attrelid = to_regclass({table}) AND a.attname = {column} \
                        AND NOT a.attisdropped)",
        privilege("SELECT"),
        privilege("INSERT"),
        privilege("UPDATE"),
        privilege("DELETE"),
        column = escape_literal(HOLD_COLUMN),
    );
    let item = "postgres.delivery_table";
    match connection.query(&sql, "checking the delivery table").await {
        Err(e) => items.push(Item::fail(item, format!("could not be checked: {e}"))),
        Ok(rows) => {
            let value = |i: usize| rows.first().and_then(|r| r.get(i)).cloned().flatten();
            if value(0).as_deref() != Some("t") {
                items.push(
                    Item::fail(
                        item,
                        format!("{shown} does not exist; webhook sinks cannot retry without it"),
                    )
                    .fix("run `outbox-relay init` (it creates the table from sql/outbox_delivery.sql)"),
                );
            } else if value(2).as_deref() != Some("t") {
                items.push(
                    Item::fail(
                        item,
                        format!(
                            "{shown} has no column {HOLD_COLUMN} (created by an older relay); \
                             the relay refuses to start without it"
                        ),
                    )
                    .fix(
                        "run `outbox-relay init` (it adds the column from sql/outbox_delivery.sql \
                         and keeps every row)",
                    ),
                );
            } else if value(1).as_deref() != Some("t") {
                items.push(
                    Item::fail(
                        item,
                        format!("the relay role may not read and write {shown}"),
                    )
                    .fix(format!(
                        "GRANT SELECT, INSERT, UPDATE, DELETE ON {shown} TO <relay role> \
                         (or `outbox-relay init --grant <role>`)"
                    )),
                );
            } else {
                items.push(Item::ok(item, format!("{shown} exists and is writable")));
            }
        }
    }
    items
}
