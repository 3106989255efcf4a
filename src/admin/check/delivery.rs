//! `check`'s items for the webhook sinks: the delivery table exists, has the
//! columns this relay writes (a table from an older relay lacks
//! `after_dead_letter` until `init` runs again, which adds it and keeps
//! every row), and the relay role may read and write it (SELECT, INSERT,
//! UPDATE, DELETE, asked of the catalog: check writes nothing), and the config's webhook
//! warnings (a secret sent over plain http to another host). Nothing
//! without a sink.

use super::{Item, STATEMENT_TIMEOUT};
use crate::admin::{ADMIN_APPLICATION_NAME, AdminTarget};
use crate::config::Config;
use crate::pg::{ConnectSettings, Conninfo, PgClient, PgError};
use crate::sink::http::store::HOLD_COLUMN;

/// The catalog query: `$1` the table's schema, `$2` its name, `$3` the
/// relay's role, `$4` the [`HOLD_COLUMN`]. The table is looked up as
/// `to_regclass` finds its quoted name (quoted by the server), as the relay
/// names it; one row: whether it exists, whether the role holds every
/// privilege (NULL without the table), whether it has the column.
const ACCESS_SQL: &str = "\
    WITH t AS (SELECT to_regclass(format('%I.%I', $1::text, $2::text)) AS oid) \
    SELECT t.oid IS NOT NULL, \
           CASE WHEN t.oid IS NULL THEN NULL \
                ELSE has_table_privilege($3::name, t.oid, 'SELECT') \
                     AND has_table_privilege($3::name, t.oid, 'INSERT') \
                     AND has_table_privilege($3::name, t.oid, 'UPDATE') \
                     AND has_table_privilege($3::name, t.oid, 'DELETE') END, \
           EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a \
                   WHERE a.attrelid = t.oid AND a.attname = $4::name AND NOT a.attisdropped) \
    FROM t";

/// The items; `role` is the relay's role. The catalog is asked on a
/// session of its own, opened as `target` says.
pub(super) async fn items(target: &AdminTarget, config: &Config, role: &str) -> Vec<Item> {
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
    let item = "postgres.delivery_table";
    match access(target, (&schema, &name), role).await {
        Err(e) => items.push(Item::fail(item, format!("could not be checked: {e}"))),
        Ok(value) => {
            if value[0] != Some(true) {
                items.push(
                    Item::fail(
                        item,
                        format!("{shown} does not exist; webhook sinks cannot retry without it"),
                    )
                    .fix("run `outbox-relay init` (it creates the table from sql/outbox_delivery.sql)"),
                );
            } else if value[2] != Some(true) {
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
            } else if value[1] != Some(true) {
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

/// [`ACCESS_SQL`]'s answer, on a session opened for it.
async fn access(
    target: &AdminTarget,
    (schema, name): (&str, &str),
    role: &str,
) -> Result<[Option<bool>; 3], PgError> {
    let action = "checking the delivery table";
    let settings = ConnectSettings {
        conninfo: Conninfo::parse(target.session_url())?,
        connect_timeout: target.connect_timeout,
        application_name: ADMIN_APPLICATION_NAME.to_owned(),
    };
    let client = PgClient::connect(&settings).await?;
    let error = |e| PgError::client(client.target(), action, e);
    client
        .execute(
            "SELECT set_config('statement_timeout', $1, false)",
            &[&STATEMENT_TIMEOUT],
        )
        .await
        .map_err(error)?;
    let row = client
        .query_one(ACCESS_SQL, &[&schema, &name, &role, &HOLD_COLUMN])
        .await
        .map_err(error)?;
    let mut value = [None; 3];
    for (i, v) in value.iter_mut().enumerate() {
        *v = row.try_get(i).map_err(error)?;
    }
    Ok(value)
}
