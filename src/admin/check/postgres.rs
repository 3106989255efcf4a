//! The server and role items of `check`: the connection, the version and
//! the replication settings of the server, and what the relay's role may do.
//!
//! Role: [`evaluate_postgres`] assembles every PostgreSQL item, taking the
//! table, publication, slot and column items from [`super::outbox`].
//!
//! Invariants: pure (the facts were gathered by [`super::run`]); an item
//! whose setting could not be read is `skip`, never ok.

use std::fmt::Write as _;

use postgres_protocol::escape::escape_identifier;

use crate::admin::init::MIN_SERVER_VERSION_NUM;
use crate::admin::pg_facts::PgFacts;
use crate::cleanup::Cleanup;
use crate::config::Config;
use crate::pg::{PgError, display_ident};
use crate::replication::OutboxTable;

use super::Item;
use super::outbox::{column_items, outbox_items, slot_items};

/// What the PostgreSQL side yielded.
#[derive(Debug)]
pub struct PgSide {
    pub facts: PgFacts,
    /// The relay's own verdict on the table and the publication.
    pub outbox: Result<OutboxTable, PgError>,
}

/// The PostgreSQL items. `relay_role` is the user of `postgres.url`;
/// `relay_application_name` what a running relay with this config shows.
pub fn evaluate_postgres(
    config: &Config,
    relay_role: &str,
    relay_application_name: &str,
    side: &PgSide,
) -> Vec<Item> {
    let facts = &side.facts;
    let pg = &config.postgres;
    let (schema, name) = pg.table_parts();
    let table_shown = format!("{schema}.{name}");
    let table_sql = format!(
        "{}.{}",
        escape_identifier(&schema),
        escape_identifier(&name)
    );
    let mut items = vec![Item::ok(
        "postgres.connection",
        format!(
            "connected to database {:?} as {}",
            facts.database, facts.session_role
        ),
    )];

    // The server.
    items.push(if facts.server_version_num >= MIN_SERVER_VERSION_NUM {
        Item::ok(
            "postgres.version",
            format!("PostgreSQL {}", facts.server_version),
        )
    } else {
        Item::fail(
            "postgres.version",
            format!(
                "PostgreSQL {}: the relay needs 14 or later",
                facts.server_version
            ),
        )
        .fix("upgrade PostgreSQL to 14 or later")
    });
    let wal_level = facts.setting("wal_level").unwrap_or("unknown");
    items.push(if wal_level == "logical" {
        Item::ok("postgres.wal_level", "logical")
    } else {
        Item::fail(
            "postgres.wal_level",
            format!("{wal_level}: logical decoding needs wal_level = logical"),
        )
        .fix("ALTER SYSTEM SET wal_level = logical;  -- then restart PostgreSQL")
    });
    items.push(slots_item(facts));
    items.push(wal_senders_item(facts));
    items.push(match facts.setting_i64("max_slot_wal_keep_size") {
        Some(-1) => Item::warn(
            "postgres.max_slot_wal_keep_size",
            "-1 (unlimited): a stopped or slow relay keeps WAL on disk until the disk is full",
        )
        .fix(
            "ALTER SYSTEM SET max_slot_wal_keep_size = '<what the WAL disk can spare, e.g. 50GB>'; \
             SELECT pg_reload_conf();  -- a relay further behind then loses its slot instead \
             of the server stopping",
        ),
        Some(mb) => Item::ok(
            "postgres.max_slot_wal_keep_size",
            format!(
                "{}: a relay further behind than that loses its slot (wal_status = lost)",
                crate::admin::human_bytes(
                    u64::try_from(mb).unwrap_or(0).saturating_mul(1024 * 1024)
                )
            ),
        ),
        None => Item::skip("postgres.max_slot_wal_keep_size", "not readable"),
    });

    // The relay's role.
    items.extend(role_items(
        facts, relay_role, &schema, &table_sql, pg.cleanup,
    ));

    // The table and the publication: the relay's own verdict.
    items.extend(outbox_items(config, side, &table_shown));

    // The slot.
    items.extend(slot_items(config, facts, relay_application_name));

    // The columns.
    items.extend(column_items(config, facts));
    items
}

fn slots_item(facts: &PgFacts) -> Item {
    let name = "postgres.max_replication_slots";
    let Some(max) = facts.setting_i64("max_replication_slots") else {
        return Item::skip(name, "not readable");
    };
    let used = facts.slots_used;
    if facts.slot.is_some() {
        Item::ok(
            name,
            format!("{used} of {max} in use, the relay's among them"),
        )
    } else if used < max {
        Item::ok(
            name,
            format!("{used} of {max} in use: one is free for the relay's slot"),
        )
    } else {
        Item::fail(
            name,
            format!("{used} of {max} in use: none is free for the relay's slot"),
        )
        .fix(format!(
            "drop an unused slot, or ALTER SYSTEM SET max_replication_slots = {};  -- then \
             restart PostgreSQL",
            max + 1
        ))
    }
}

fn wal_senders_item(facts: &PgFacts) -> Item {
    let name = "postgres.max_wal_senders";
    let Some(max) = facts.setting_i64("max_wal_senders") else {
        return Item::skip(name, "not readable");
    };
    let used = facts.walsenders_used;
    let fix = format!(
        "ALTER SYSTEM SET max_wal_senders = {};  -- then restart PostgreSQL",
        max.max(used) + 1
    );
    if used < max {
        Item::ok(name, format!("{used} of {max} WAL senders running"))
    } else if facts.slot_holder.is_some() {
        Item::warn(
            name,
            format!(
                "{used} of {max} WAL senders running, one of them on the relay's slot: a \
                 relay that reconnects gets that one back, nothing else can start"
            ),
        )
        .fix(fix)
    } else {
        Item::fail(
            name,
            format!("{used} of {max} WAL senders running: none is free for the relay"),
        )
        .fix(fix)
    }
}

fn role_items(
    facts: &PgFacts,
    relay_role: &str,
    schema: &str,
    table_sql: &str,
    cleanup: Cleanup,
) -> Vec<Item> {
    let role_sql = display_ident(relay_role);
    let Some(role) = facts.role.as_ref().filter(|r| r.name == relay_role) else {
        return vec![
            Item::fail(
                "postgres.role",
                format!("role {relay_role:?} (the user of postgres.url) does not exist"),
            )
            .fix(format!(
                "CREATE ROLE {role_sql} LOGIN REPLICATION PASSWORD '...'; then outbox-relay \
                 init --grant {relay_role}"
            )),
        ];
    };
    let mut items = Vec::new();
    items.push(if role.login {
        Item::ok("postgres.role.login", format!("{relay_role} may log in"))
    } else {
        Item::fail(
            "postgres.role.login",
            format!("{relay_role} has no LOGIN attribute"),
        )
        .fix(format!("ALTER ROLE {role_sql} LOGIN;"))
    });
    items.push(if role.replication {
        Item::ok(
            "postgres.role.replication",
            format!("{relay_role} has REPLICATION"),
        )
    } else if role.superuser {
        Item::ok(
            "postgres.role.replication",
            format!(
                "{relay_role} is a superuser (least privilege: a role with LOGIN REPLICATION \
                 is enough)"
            ),
        )
    } else {
        Item::fail(
            "postgres.role.replication",
            format!(
                "{relay_role} has no REPLICATION attribute: the replication connection is \
                 refused"
            ),
        )
        .fix(format!("ALTER ROLE {role_sql} REPLICATION;"))
    });
    items.push(match (role.schema_usage, role.table_select) {
        (Some(true), Some(true)) => Item::ok(
            "postgres.role.select",
            format!("{relay_role} may read the outbox table"),
        ),
        (Some(usage), Some(_)) => {
            let mut fix = String::new();
            if !usage {
                let _ = write!(
                    fix,
                    "GRANT USAGE ON SCHEMA {} TO {role_sql}; ",
                    escape_identifier(schema)
                );
            }
            let _ = write!(fix, "GRANT SELECT ON {table_sql} TO {role_sql};");
            Item::warn(
                "postgres.role.select",
                format!(
                    "{relay_role} may not read the outbox table: streaming does not need it, \
                     but `outbox-relay status` (pending rows) and `check` (topics from the \
                     rows) run as it do, and the documented setup grants it"
                ),
            )
            .fix(format!("{fix}  -- or outbox-relay init --grant"))
        }
        _ => Item::skip("postgres.role.select", "the outbox table does not exist"),
    });
    if cleanup == Cleanup::DeleteAfterAck {
        items.push(match role.table_delete {
            Some(true) => Item::ok(
                "postgres.role.delete",
                format!("{relay_role} may delete confirmed rows (postgres.cleanup)"),
            ),
            Some(false) => Item::warn(
                "postgres.role.delete",
                format!(
                    "{relay_role} may not delete from the outbox table: with postgres.cleanup = \
                     \"delete-after-ack\" the relay streams, but every row stays"
                ),
            )
            .fix(format!(
                "GRANT DELETE ON {table_sql} TO {role_sql};  -- or outbox-relay init --grant"
            )),
            None => Item::skip("postgres.role.delete", "the outbox table does not exist"),
        });
    }
    items
}
