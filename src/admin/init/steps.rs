//! What init is asked to do and what it plans: the types the planning and
//! each feature's share of the plan (`delivery.rs`) have in common.

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
