//! `check`'s item for parking: the parking table (`postgres.parked_table`,
//! `sql/outbox_parked.sql`) exists and the relay role may SELECT, INSERT,
//! UPDATE and DELETE it (asked of the catalog: check writes nothing). A
//! failure: "park" is the default after a dead letter, and the relay
//! cannot keep a dead-lettered aggregate's order without the table;
//! skipped under `kafka.after_dead_letter = "skip"`, which never parks.

use super::Item;
use crate::admin::AdminTarget;
use crate::admin::dead::parked::{PRIVILEGES, parked_table};
use crate::admin::dead::table::{self, TableName};
use crate::config::Config;
use crate::routes::AfterDeadLetter;

/// The item; `role` is the relay's role.
///
/// The catalog is asked on a session of its own ([`super::replay::session`]).
pub(super) async fn item(target: &AdminTarget, config: &Config, role: &str) -> Item {
    const NAME: &str = "postgres.parked_table";
    let parked = parked_table(config);
    let name = TableName {
        schema: parked.schema.clone(),
        name: parked.name.clone(),
    };
    let shown = name.shown();
    let wanted = PRIVILEGES.join(", ");
    if config.kafka.after_dead_letter == AfterDeadLetter::Skip {
        return Item::skip(
            NAME,
            format!("not used: kafka.after_dead_letter = \"skip\" never parks ({shown})"),
        );
    }
    let facts = match super::replay::session(target).await {
        Ok(client) => table::table_facts(&client, &name, role, &PRIVILEGES).await,
        Err(e) => Err(e),
    };
    match facts {
        Err(e) => Item::fail(NAME, format!("could not be checked: {e}")),
        Ok(facts) if !facts.exists => Item::fail(
            NAME,
            format!(
                "{shown} does not exist; the relay parks the later events of a dead-lettered \
                 aggregate there (after_dead_letter = \"park\", the default)"
            ),
        )
        .fix(
            "run `outbox-relay init --admin-url <owner's URL> --grant <relay role>` (it creates \
             the table from sql/outbox_parked.sql and grants the relay role what it needs)",
        ),
        Ok(facts) if !facts.missing.is_empty() => Item::fail(
            NAME,
            format!(
                "the relay role lacks {} on {shown}",
                facts.missing.join(", ")
            ),
        )
        .fix(format!(
            "run `outbox-relay init --admin-url <owner's URL> --grant <relay role>`, or as its \
             owner: GRANT {wanted} ON {} TO <relay role>",
            name.sql()
        )),
        Ok(_) => Item::ok(
            NAME,
            format!("{shown} exists; the relay role has {wanted} on it"),
        ),
    }
}
