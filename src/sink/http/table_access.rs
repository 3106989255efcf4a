//! The start check of the delivery table: before the relay streams, it
//! asks the catalog whether the table exists and whether the relay's role
//! may use it as the dispatcher and the retry worker do (`store`: SELECT
//! to look events up and claim rows, INSERT to park them, UPDATE to lock
//! and record a try; USAGE on its schema), and whether the table has the
//! columns this relay writes (`after_dead_letter`, added after the table's
//! first version). A table missing, older, or unusable stops the relay at
//! once with a message that names the table and the command that fixes it,
//! instead of a relay that runs, reports ready, and retries forever; the
//! slot keeps every event meanwhile.
//!
//! The catalog is read by name (the table's schema and name, and the
//! column's, as parameters), so the check needs no privilege itself and
//! changes nothing. The verdict ([`verdict`]) is pure; [`check`] runs the
//! query.

use std::sync::Arc;

use super::dispatch::SinkRuntime;
use super::store::{DeliveryTable, HOLD_COLUMN};
use crate::pg::{PgClient, PgError};

/// What the catalog says about the delivery table, for the current role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TableAccess {
    pub exists: bool,
    pub schema_usage: bool,
    pub select: bool,
    pub insert: bool,
    pub update: bool,
    /// It has the [`HOLD_COLUMN`] (a table from an older relay lacks it
    /// until `init` runs again).
    pub current: bool,
}

/// Why the relay refuses to start with webhook routes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeliveryTableRefused {
    #[error(
        "the delivery table {table} does not exist: webhook routes cannot run without it (events \
         an endpoint does not take at once wait there for their retries). Create it with \
         `{} --admin-url <a table owner's or superuser's postgres URL> --grant` (it creates \
         the table from sql/outbox_delivery.sql and grants the relay's role its privileges), \
         then start the relay again",
        crate::invocation::command("init")
    )]
    Missing { table: String },
    #[error(
        "the delivery table {table} has no column {HOLD_COLUMN}: it was created by an older \
         relay, and this one records there whether a DEAD row holds its aggregate's later \
         events. Add it with `{} --admin-url <a table owner's or superuser's postgres URL>` \
         (it runs sql/outbox_delivery.sql again, which adds the column and keeps every row; \
         rows already there hold nothing, as before), then start the relay again",
        crate::invocation::command("init")
    )]
    Outdated { table: String },
    #[error(
        "the relay's role may not use the delivery table {table}: it lacks {missing}. Grant it \
         with `{} --admin-url <a table owner's or superuser's postgres URL> --grant`, or: \
         {grant}",
        crate::invocation::command("init")
    )]
    NotPermitted {
        table: String,
        /// The privileges missing, as SQL names them.
        missing: String,
        /// The GRANT statements that fix it.
        grant: String,
    },
}

/// The catalog query: one row of six booleans, by name; `$1` the table's
/// schema, `$2` its name, `$3` the [`HOLD_COLUMN`].
pub fn access_sql() -> String {
    let privilege = |p: &str| format!("coalesce(has_table_privilege(c.oid, {p}), false)");
    format!(
        "SELECT c.oid IS NOT NULL, coalesce(has_schema_privilege(n.oid, 'USAGE'), false), {}, \
                {}, {}, \
                EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a WHERE a.attrelid = c.oid \
                        AND a.attname = $3 AND NOT a.attisdropped) \
         FROM (SELECT 1) one \
         LEFT JOIN pg_catalog.pg_namespace n ON n.nspname = $1 \
         LEFT JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = $2 \
              AND c.relkind IN ('r', 'p')",
        privilege("'SELECT'"),
        privilege("'INSERT'"),
        privilege("'UPDATE'"),
    )
}

/// The answer of [`access_sql`], its columns in order (no row, or NULL:
/// no).
pub fn parse(row: Option<[Option<bool>; 6]>) -> TableAccess {
    let flag = |i: usize| row.is_some_and(|r| r[i] == Some(true));
    TableAccess {
        exists: flag(0),
        schema_usage: flag(1),
        select: flag(2),
        insert: flag(3),
        update: flag(4),
        current: flag(5),
    }
}

/// Whether the relay may start with `table` as `access` says.
///
/// # Errors
/// [`DeliveryTableRefused`]: the table is missing, or a privilege is.
pub fn verdict(table: &DeliveryTable, access: TableAccess) -> Result<(), DeliveryTableRefused> {
    let shown = table.quoted();
    if !access.exists {
        return Err(DeliveryTableRefused::Missing { table: shown });
    }
    if !access.current {
        // Before the privileges: `init --grant` fixes both at once.
        return Err(DeliveryTableRefused::Outdated { table: shown });
    }
    let mut missing = Vec::new();
    let mut grant = Vec::new();
    if !access.schema_usage {
        missing.push(format!(
            "USAGE on schema {}",
            postgres_protocol::escape::escape_identifier(&table.schema)
        ));
        grant.push(format!(
            "GRANT USAGE ON SCHEMA {} TO <relay role>;",
            postgres_protocol::escape::escape_identifier(&table.schema)
        ));
    }
    let table_privileges: Vec<&str> = [
        ("SELECT", access.select),
        ("INSERT", access.insert),
        ("UPDATE", access.update),
    ]
    .into_iter()
    .filter(|(_, held)| !held)
    .map(|(name, _)| name)
    .collect();
    if !table_privileges.is_empty() {
        missing.push(table_privileges.join(", "));
        grant.push(format!(
            "GRANT {} ON {shown} TO <relay role>;",
            table_privileges.join(", ")
        ));
    }
    if missing.is_empty() {
        return Ok(());
    }
    Err(DeliveryTableRefused::NotPermitted {
        table: shown,
        missing: missing.join(" and "),
        grant: grant.join(" "),
    })
}

/// The check at start, for the webhook sinks of the relay (they share one
/// table): `Err` when the relay must not start. When the question cannot
/// be asked (PostgreSQL went away since the stream connected), it warns
/// and lets the relay go on: the retry worker then backs off until the
/// table can be used.
///
/// # Errors
/// [`DeliveryTableRefused`].
pub async fn check_at_start(sinks: &[Arc<SinkRuntime>]) -> Result<(), DeliveryTableRefused> {
    let Some(sink) = sinks.first() else {
        return Ok(());
    };
    let asked = match sink.pool.get().await {
        Ok(conn) => {
            let asked = check(conn.client(), &sink.table).await;
            if asked.is_ok() {
                sink.pool.put(conn);
            }
            asked
        }
        Err(e) => Err(e),
    };
    match asked {
        Ok(verdict) => verdict,
        Err(e) => {
            crate::events::DeliveryTableUnchecked {
                table: &sink.table.quoted(),
                error: &e,
            }
            .emit();
            Ok(())
        }
    }
}

/// Asks the catalog about `table` on `conn`.
///
/// # Errors
/// `Ok(Err(_))`: the relay must not start; `Err(_)`: the question could not
/// be asked (the connection's error).
pub async fn check(
    conn: &PgClient,
    table: &DeliveryTable,
) -> Result<Result<(), DeliveryTableRefused>, PgError> {
    let action = "checking the delivery table";
    let error = |e| PgError::client(conn.target(), action, e);
    let row = conn
        .query_opt(&access_sql(), &[&table.schema, &table.name, &HOLD_COLUMN])
        .await
        .map_err(error)?;
    let flags = match &row {
        Some(row) => {
            let mut flags = [None; 6];
            for (i, flag) in flags.iter_mut().enumerate() {
                *flag = row.try_get(i).map_err(error)?;
            }
            Some(flags)
        }
        None => None,
    };
    Ok(verdict(table, parse(flags)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> DeliveryTable {
        DeliveryTable {
            schema: "hooks".into(),
            name: "outbox_delivery".into(),
        }
    }

    fn all() -> TableAccess {
        TableAccess {
            exists: true,
            schema_usage: true,
            select: true,
            insert: true,
            update: true,
            current: true,
        }
    }

    #[test]
    fn a_table_without_the_hold_column_asks_for_init() {
        let e = verdict(
            &table(),
            TableAccess {
                current: false,
                ..all()
            },
        )
        .unwrap_err();
        assert_eq!(
            e,
            DeliveryTableRefused::Outdated {
                table: "\"hooks\".\"outbox_delivery\"".into()
            }
        );
        let text = e.to_string();
        assert!(text.contains("no column after_dead_letter"), "{text}");
        assert!(
            text.contains("outbox-relay init --config") && text.contains("--admin-url"),
            "{text}"
        );
    }

    #[test]
    fn a_usable_table_passes() {
        assert_eq!(verdict(&table(), all()), Ok(()));
    }

    #[test]
    fn a_missing_table_names_itself_and_init() {
        let e = verdict(&table(), TableAccess::default()).unwrap_err();
        assert!(matches!(e, DeliveryTableRefused::Missing { .. }));
        let text = e.to_string();
        assert!(text.contains("\"hooks\".\"outbox_delivery\""), "{text}");
        assert!(
            text.contains("outbox-relay init --config") && text.contains("--admin-url"),
            "{text}"
        );
    }

    #[test]
    fn each_missing_privilege_is_named_with_its_grant() {
        let e = verdict(
            &table(),
            TableAccess {
                insert: false,
                update: false,
                ..all()
            },
        )
        .unwrap_err();
        let text = e.to_string();
        assert!(text.contains("it lacks INSERT, UPDATE."), "{text}");
        assert!(
            text.contains("GRANT INSERT, UPDATE ON \"hooks\".\"outbox_delivery\" TO <relay role>"),
            "{text}"
        );
        assert!(!text.contains("SELECT"), "{text}");
        let e = verdict(
            &table(),
            TableAccess {
                schema_usage: false,
                ..all()
            },
        )
        .unwrap_err();
        let text = e.to_string();
        assert!(text.contains("USAGE on schema \"hooks\""), "{text}");
        assert!(text.contains("GRANT USAGE ON SCHEMA \"hooks\""), "{text}");
    }

    #[test]
    fn the_answer_is_read_by_position_and_null_is_no() {
        assert_eq!(parse(Some([Some(true); 6])), all());
        assert_eq!(
            parse(Some([
                Some(true),
                Some(true),
                Some(true),
                None,
                Some(false),
                Some(true)
            ])),
            TableAccess {
                insert: false,
                update: false,
                ..all()
            }
        );
        assert_eq!(parse(None), TableAccess::default());
        // The names are parameters: nothing of them is in the text.
        let sql = access_sql();
        assert!(
            sql.contains("n.nspname = $1")
                && sql.contains("c.relname = $2")
                && sql.contains("a.attname = $3"),
            "{sql}"
        );
        assert!(!sql.contains(HOLD_COLUMN), "{sql}");
    }
}
