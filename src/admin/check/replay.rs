//! `check`'s item for the dead-letter commands: the replay record
//! (`outbox_dead_replay`, which `dead retry` and `dead discard` record in)
//! exists and the relay role may use it (asked of the catalog: check
//! writes nothing). A warning, not a failure: `run` does not need it, only
//! the `dead` commands do, and they change nothing without it.

use super::Item;
use crate::admin::AdminTarget;
use crate::admin::dead::table::{self, REPLAY_PRIVILEGES};
use crate::config::Config;
use crate::pg::{PgClient, PgError};

/// The item; `role` is the relay's role.
///
/// The catalog is asked on a session of its own ([`session`]).
pub(super) async fn item(target: &AdminTarget, config: &Config, role: &str) -> Item {
    const NAME: &str = "postgres.replay_table";
    let (schema, _) = config.postgres.table_parts();
    let replay = table::replay_table(&schema);
    let shown = replay.shown();
    let wanted = REPLAY_PRIVILEGES.join(", ");
    let facts = match session(target).await {
        Ok(client) => table::replay_facts(&client, &replay, role).await,
        Err(e) => Err(e),
    };
    match facts {
        Err(e) => Item::warn(NAME, format!("could not be checked: {e}")),
        Ok(facts) if !facts.exists => Item::warn(
            NAME,
            format!(
                "{shown} does not exist; `outbox-relay dead retry` and `dead discard` refuse \
                 to act without it"
            ),
        )
        .fix(
            "run `outbox-relay init --admin-url <owner's URL> --grant` (it creates the table \
             and grants the relay role what the dead commands need)",
        ),
        Ok(facts) if !facts.missing.is_empty() => Item::warn(
            NAME,
            format!(
                "the relay role lacks {} on {shown}; the dead commands cannot record what \
                 they did",
                facts.missing.join(", ")
            ),
        )
        .fix(format!(
            "run `outbox-relay init --admin-url <owner's URL> --grant`, or as its owner: \
             GRANT {wanted} ON {} TO <relay role>",
            replay.sql()
        )),
        Ok(_) => Item::ok(
            NAME,
            format!("{shown} exists; the relay role has {wanted} on it"),
        ),
    }
}

/// An ordinary session for a catalog item, its statements bounded as
/// check's others are.
///
/// # Errors
/// The connect's.
pub(super) async fn session(target: &AdminTarget) -> Result<PgClient, PgError> {
    let client = target.client().await?;
    // As on check's own session: a limit that cannot be set leaves the
    // server's.
    let _ = client
        .execute(
            "SELECT set_config('statement_timeout', $1, false)",
            &[&super::STATEMENT_TIMEOUT],
        )
        .await;
    Ok(client)
}
