//! Sharded slots: the outbox split between `postgres.shards` relays, each
//! with its own publication and slot, by a row filter on the aggregate id
//! (PostgreSQL 15+).
//!
//! Role: the filter's text ([`filter_sql`], from `crate::outbox::shard`,
//! which the relay shares), for `init` to create and `check` to compare
//! with what the catalog holds (the server stores it deparsed, with casts
//! and parentheses of its own; [`filter_matches`] compares the two).
//!
//! Invariants:
//! * every row goes to exactly one shard: the shard is a function of the
//!   aggregate id alone (`hashtext`, built in and immutable), so all events
//!   of one aggregate stay in one slot, read in commit order;
//! * a row whose aggregate id is NULL goes to shard 0 (where the relay
//!   dead-letters it), never to none: a NULL filter result publishes nothing;
//! * `hashtext` may return `i32::MIN`, whose `abs` overflows in `integer`:
//!   the value is widened to `bigint` first, or that one row would make
//!   decoding fail on every shard.

pub use crate::outbox::shard::filter_sql;

/// The first server with publication row filters.
pub const MIN_ROW_FILTER_VERSION_NUM: i64 = 150_000;

/// Whether `deparsed` (the catalog's `pg_publication_tables.rowfilter`) is
/// the filter of shard `shard` of `shards` on `column`.
pub fn filter_matches(deparsed: &str, column: &str, shards: u32, shard: u32) -> bool {
    normalize(deparsed) == normalize(&filter_sql(column, shards, shard))
}

/// The expression without what deparsing adds or drops: case, spaces,
/// parentheses, double quotes and casts (`::text`, `::bigint`).
fn normalize(expr: &str) -> String {
    let flat: String = expr
        .chars()
        .filter(|c| !c.is_whitespace() && !matches!(c, '(' | ')' | '"'))
        .flat_map(char::to_lowercase)
        .collect();
    let mut out = String::with_capacity(flat.len());
    let mut rest = flat.as_str();
    while let Some(at) = rest.find("::") {
        out.push_str(&rest[..at]);
        rest = rest[at + 2..].trim_start_matches(|c: char| c.is_ascii_alphabetic() || c == '_');
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What PostgreSQL 15 to 17 store for the filter above, read back with
    /// `pg_publication_tables.rowfilter`.
    const DEPARSED: &str =
        "(COALESCE((abs((hashtext((aggregateid)::text))::bigint) % (2)::bigint), (0)::bigint) = 1)";

    #[test]
    fn the_servers_deparsed_filter_matches_its_shard_only() {
        assert!(filter_matches(DEPARSED, "aggregateid", 2, 1));
        assert!(
            !filter_matches(DEPARSED, "aggregateid", 2, 0),
            "another shard"
        );
        assert!(
            !filter_matches(DEPARSED, "aggregateid", 3, 1),
            "another count"
        );
        assert!(
            !filter_matches(DEPARSED, "aggregate_id", 2, 1),
            "another column"
        );
        assert!(!filter_matches(
            "(abs(hashtext((aggregateid)::text)) % 2) = 1",
            "aggregateid",
            2,
            1
        ));
        assert!(!filter_matches(
            &DEPARSED.replace("% (2)", "% (21)"),
            "aggregateid",
            2,
            1
        ));
    }
}
