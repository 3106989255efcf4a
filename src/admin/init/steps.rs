//! What init is asked to do and what it plans: the types the planning and
//! each feature's share of the plan (`delivery.rs`) have in common.

use postgres_protocol::escape::escape_identifier;

/// What `init` was asked to do besides the publication and the slot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InitOptions {
    /// Create the outbox table when it does not exist.
    pub create_table: bool,
    /// Grant this role what the relay needs.
    pub grant: Option<String>,
    /// Create the slot even though the publication exists already.
    pub allow_new_slot: bool,
    /// Where the publication must be created (or made to publish the
    /// outbox's inserts) for a slot that holds WAL not yet confirmed: drop
    /// that slot and create a new one after the publication, knowing that
    /// the outbox rows committed before are not relayed by it.
    pub recreate_slot: bool,
}

/// One statement init runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// What it does, for people (`create publication "outbox_pub"`).
    pub summary: String,
    pub sql: String,
}

/// What init will do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Statements to run, in order.
    pub steps: Vec<Step>,
    /// Statements init never runs itself (role attributes): printed for a
    /// superuser to run.
    pub manual: Vec<Step>,
    /// What is already in place.
    pub in_place: Vec<String>,
}

impl Plan {
    /// `grantee` gets USAGE on schema `schema`.
    pub fn grant_schema_usage(&mut self, grantee: &str, schema: &str) {
        self.steps.push(Step {
            summary: format!("grant {grantee} USAGE on schema {schema}"),
            sql: format!(
                "GRANT USAGE ON SCHEMA {} TO {}",
                escape_identifier(schema),
                escape_identifier(grantee)
            ),
        });
    }

    /// `grantee` gets `privileges` (as SQL lists them) on the table shown
    /// as `shown` and written `table_sql`; in place already when `granted`.
    pub fn grant_on_table(
        &mut self,
        grantee: &str,
        privileges: &str,
        (shown, table_sql): (&str, &str),
        granted: bool,
    ) {
        if granted {
            self.in_place
                .push(format!("{privileges} on {shown} for {grantee}"));
            return;
        }
        self.steps.push(Step {
            summary: format!("grant {grantee} {privileges} on {shown}"),
            sql: format!(
                "GRANT {privileges} ON {table_sql} TO {}",
                escape_identifier(grantee)
            ),
        });
    }
}
