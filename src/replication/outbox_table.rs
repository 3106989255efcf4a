//! Which relations in the stream are the outbox, by what the catalog says.
//!
//! Role: at connect, resolve the configured outbox table to its OID and,
//! when it is partitioned, the OIDs of its partitions; refuse a publication
//! that does not contain it. While streaming, classify a relation the stream
//! names that is not among those OIDs (a partition attached since, a table
//! renamed or detached) with one catalog look-up.
//!
//! Why not by name: pgoutput names the *leaf partition* in its Relation
//! message unless the publication has `publish_via_partition_root`, so a
//! name comparison silently skips every row of a partitioned outbox; and a
//! renamed table keeps its OID, not its name.
//!
//! Invariant: a relation is never classified "other" (its rows skipped)
//! when it may have been the outbox's. pgoutput sends only what the
//! publication published when the change was decoded, so while the
//! publication publishes nothing but the outbox's partition tree, every
//! relation in the stream is the outbox's, even one detached or dropped
//! since. Only a publication that also publishes other tables leaves the
//! catalog as the judge, and a start-up warning says so.

use std::collections::HashSet;

use postgres_protocol::escape::escape_literal;

use crate::pg::PgClient;
use crate::pg::error::PgError;
use crate::pg::socket::FramedSocket;
use crate::pg::sql::{simple_query, unexpected_shape};

/// The outbox table as the catalog knew it at connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxTable {
    /// The configured name (`postgres.table`).
    pub schema: String,
    pub name: String,
    /// The table's OID (the partition root's, when partitioned).
    pub oid: u32,
    /// Its name in the catalog now, `schema.name`: differs from the
    /// configured one when the table was renamed while the relay ran.
    pub current_name: String,
    /// The table and every partition below it, at connect.
    pub members: HashSet<u32>,
    /// Whether the publication also publishes tables outside the outbox's
    /// partition tree (`FOR ALL TABLES`, or others listed).
    pub publication_has_other_tables: bool,
}

impl OutboxTable {
    /// `schema.name`.
    pub fn qualified_name(&self) -> String {
        format!("{}.{}", self.schema, self.name)
    }
}

/// What the catalog says about a relation the stream names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RelationLookup {
    /// The relation still exists.
    pub exists: bool,
    /// It is the outbox table or one of its partitions now.
    pub in_outbox_tree: bool,
    /// The publication now publishes tables outside the outbox's tree.
    pub publication_has_other_tables: bool,
}

/// Whether a relation's rows are outbox rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelationClass {
    /// The outbox table or one of its partitions.
    Outbox,
    /// Not in the outbox's tree now, but the publication publishes nothing
    /// else, so it was the outbox's when its changes were decoded (a
    /// partition detached or dropped since).
    OutboxByPublication,
    /// Another table the publication publishes.
    Other,
    /// Dropped since, and the publication publishes other tables too: the
    /// catalog cannot tell whether it was the outbox's.
    Unknown,
}

impl RelationClass {
    /// Whether its inserts become events.
    pub fn is_outbox(self) -> bool {
        matches!(
            self,
            RelationClass::Outbox | RelationClass::OutboxByPublication
        )
    }
}

/// The decision, from what the catalog says now.
pub fn classify(lookup: RelationLookup) -> RelationClass {
    if lookup.in_outbox_tree {
        RelationClass::Outbox
    } else if !lookup.publication_has_other_tables {
        RelationClass::OutboxByPublication
    } else if lookup.exists {
        RelationClass::Other
    } else {
        RelationClass::Unknown
    }
}

/// Whether `error`, from [`resolve`], only means that no row of the outbox
/// table can arrive: the table does not exist, or the publication does not
/// publish it. That is no error when the table is `optional` (events come
/// from logical messages); any other error still is.
pub fn sends_no_rows(error: &PgError, optional: bool) -> bool {
    optional
        && matches!(
            error,
            PgError::TableMissing { .. } | PgError::PublicationLacksTable { .. }
        )
}

/// The publication's tables as OIDs (`pg_publication_tables` lists leaf
/// partitions, or the root with `publish_via_partition_root`), the
/// publication's name given by `publication`: a statement parameter (`$3`)
/// on an ordinary session, a quoted literal on the replication connection,
/// which has no parameters (it speaks the simple query protocol only).
///
/// Names are joined to the catalog rather than cast to `regclass`: a cast
/// needs USAGE on the table's schema, and a publication may hold tables of
/// schemas the relay's role cannot use.
pub fn publication_relids(publication: &str) -> String {
    format!(
        "SELECT c.oid AS relid FROM pg_catalog.pg_publication_tables pt \
         JOIN pg_catalog.pg_namespace n ON n.nspname = pt.schemaname \
         JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename \
         WHERE pt.pubname = {publication}"
    )
}

/// The values of [`resolve_sql`], as SQL expressions: quoted literals on
/// the replication connection, parameters on an ordinary session.
struct ResolveValues<'a> {
    /// `false` when no OID is known, else a condition on `c.oid`.
    by_oid: &'a str,
    schema: &'a str,
    name: &'a str,
    publication: &'a str,
}

/// The statement that resolves the outbox table and checks the
/// publication: one row of seven text columns (see [`read_resolved`]).
fn resolve_sql(values: &ResolveValues<'_>) -> String {
    let ResolveValues {
        by_oid,
        schema,
        name,
        publication,
    } = values;
    format!(
        "WITH found AS (SELECT 0 AS preference, c.oid, n.nspname, c.relname \
           FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
           WHERE {by_oid} \
           UNION ALL SELECT 1, c.oid, n.nspname, c.relname \
           FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
           WHERE n.nspname = {schema} AND c.relname = {name}), \
         t AS (SELECT oid, nspname, relname FROM found ORDER BY preference LIMIT 1), \
         tree AS (SELECT oid AS relid FROM t \
           UNION SELECT p.relid::oid FROM t, pg_catalog.pg_partition_tree(t.oid) p), \
         pub AS (SELECT pubinsert FROM pg_catalog.pg_publication WHERE pubname = {publication}), \
         rels AS ({relids}) \
         SELECT current_database()::text, (SELECT oid::text FROM t), \
           (SELECT string_agg(relid::oid::text, ',') FROM tree), \
           (SELECT pubinsert::text FROM pub), \
           EXISTS (SELECT 1 FROM rels WHERE relid IN (SELECT relid FROM tree))::text, \
           EXISTS (SELECT 1 FROM rels WHERE relid NOT IN (SELECT relid FROM tree))::text, \
           (SELECT nspname::text || '.' || relname::text FROM t)",
        relids = publication_relids(publication),
    )
}

/// Resolves the outbox table and checks the publication, on the
/// replication connection before START_REPLICATION.
///
/// # Errors
/// Fatal: the table does not exist, the publication does not exist, does
/// not publish inserts or does not contain the table. Transient: I/O.
///
/// `known_oid` is the table's OID from an earlier session: a table renamed
/// since is still found by it (it is preferred over the name).
pub async fn resolve(
    socket: &mut FramedSocket,
    table: (&str, &str),
    known_oid: Option<u32>,
    publication: &str,
    target: &str,
) -> Result<OutboxTable, PgError> {
    // The replication connection has no statement parameters: the names
    // go as quoted literals (an OID is a number).
    let by_oid = known_oid.map_or_else(|| "false".to_owned(), |oid| format!("c.oid = {oid}::oid"));
    let sql = resolve_sql(&ResolveValues {
        by_oid: &by_oid,
        schema: &escape_literal(table.0),
        name: &escape_literal(table.1),
        publication: &escape_literal(publication),
    });
    let rows = simple_query(socket, &sql, target, RESOLVING).await?;
    read_resolved(&rows, table, publication, target)
}

const RESOLVING: &str = "resolving the outbox table";

/// The outbox table and the publication's verdict from [`resolve_sql`]'s
/// row, whichever connection ran it.
fn read_resolved(
    rows: &[Vec<Option<String>>],
    table: (&str, &str),
    publication: &str,
    target: &str,
) -> Result<OutboxTable, PgError> {
    let (schema, name) = table;
    let action = RESOLVING;
    let row = match rows {
        [row] if row.len() == 7 => row,
        _ => return Err(unexpected_shape(target, action)),
    };
    let text = |i: usize| row[i].as_deref();
    let database = text(0).unwrap_or_default().to_owned();
    let table_name = format!("{schema}.{name}");
    let Some(oid) = text(1) else {
        return Err(PgError::TableMissing {
            table: table_name,
            database,
        });
    };
    let oid = parse_oid(oid, target, action)?;
    let members = text(2)
        .unwrap_or_default()
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| parse_oid(s, target, action))
        .collect::<Result<HashSet<u32>, _>>()?;
    match text(3) {
        None => {
            return Err(PgError::PublicationMissing {
                publication: publication.to_owned(),
                database,
            });
        }
        Some("true") => {}
        Some(_) => {
            return Err(PgError::PublicationWithoutInserts {
                publication: publication.to_owned(),
            });
        }
    }
    if text(4) != Some("true") {
        return Err(PgError::PublicationLacksTable {
            publication: publication.to_owned(),
            table: table_name,
        });
    }
    Ok(OutboxTable {
        schema: schema.to_owned(),
        name: name.to_owned(),
        oid,
        current_name: text(6).map_or_else(|| table_name.clone(), str::to_owned),
        members,
        publication_has_other_tables: text(5) == Some("true"),
    })
}

/// [`resolve`] on an ordinary session, the names as parameters: the same
/// checks and errors as at the stream's connect, for the operator commands.
///
/// # Errors
/// As [`resolve`].
pub async fn resolve_on(
    client: &PgClient,
    table: (&str, &str),
    publication: &str,
) -> Result<OutboxTable, PgError> {
    let sql = resolve_sql(&ResolveValues {
        by_oid: "false",
        schema: "$1",
        name: "$2",
        publication: "$3",
    });
    let rows: Vec<Vec<Option<String>>> = client
        .query(&sql, &[&table.0, &table.1, &publication])
        .await
        .and_then(|rows| rows.iter().map(text_columns).collect())
        .map_err(|e| client.error(RESOLVING, e))?;
    read_resolved(&rows, table, publication, client.target())
}

/// A row whose columns are all text, as the simple query protocol gives it.
fn text_columns(row: &tokio_postgres::Row) -> Result<Vec<Option<String>>, tokio_postgres::Error> {
    (0..row.len()).map(|i| row.try_get(i)).collect()
}

/// Asks the catalog about relation `oid` (one query on `client`, on the
/// server the stream reads).
///
/// # Errors
/// Transient I/O errors; a server error.
pub async fn look_up(
    client: &PgClient,
    outbox: &OutboxTable,
    publication: &str,
    oid: u32,
) -> Result<RelationLookup, PgError> {
    let sql = format!(
        "WITH tree AS (SELECT $1::oid AS relid \
           UNION SELECT p.relid::oid FROM pg_catalog.pg_partition_tree($1::oid::regclass) p), \
         rels AS ({relids}) \
         SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class WHERE oid = $2::oid), \
           ($2::oid IN (SELECT relid FROM tree)), \
           EXISTS (SELECT 1 FROM rels WHERE relid NOT IN (SELECT relid FROM tree))",
        relids = publication_relids("$3"),
    );
    let action = "looking up a relation in the catalog";
    let row = client
        .query_one(&sql, &[&outbox.oid, &oid, &publication])
        .await
        .map_err(|e| client.error(action, e))?;
    let flag = |i: usize| row.try_get::<_, bool>(i);
    (|| {
        Ok(RelationLookup {
            exists: flag(0)?,
            in_outbox_tree: flag(1)?,
            publication_has_other_tables: flag(2)?,
        })
    })()
    .map_err(|e| client.error(action, e))
}

fn parse_oid(text: &str, target: &str, action: &'static str) -> Result<u32, PgError> {
    text.parse().map_err(|_| PgError::Protocol {
        target: target.to_owned(),
        action,
        reason: format!("OID {text:?} is not a number"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(exists: bool, in_tree: bool, others: bool) -> RelationLookup {
        RelationLookup {
            exists,
            in_outbox_tree: in_tree,
            publication_has_other_tables: others,
        }
    }

    #[test]
    fn a_member_of_the_tree_is_the_outbox_whatever_else_is_published() {
        for others in [false, true] {
            assert_eq!(classify(lookup(true, true, others)), RelationClass::Outbox);
        }
    }

    #[test]
    fn with_an_outbox_only_publication_nothing_is_ever_skipped() {
        // Detached (exists, not in the tree) or dropped since: the
        // publication published it, and it publishes only the outbox.
        for exists in [false, true] {
            let class = classify(lookup(exists, false, false));
            assert_eq!(class, RelationClass::OutboxByPublication);
            assert!(class.is_outbox());
        }
    }

    #[test]
    fn with_other_tables_published_the_catalog_decides() {
        assert_eq!(classify(lookup(true, false, true)), RelationClass::Other);
        assert_eq!(classify(lookup(false, false, true)), RelationClass::Unknown);
        assert!(!RelationClass::Other.is_outbox());
        assert!(!RelationClass::Unknown.is_outbox());
    }

    #[test]
    fn only_an_optional_table_may_be_absent_and_only_absent() {
        let missing = PgError::TableMissing {
            table: "public.outbox".into(),
            database: "app".into(),
        };
        let unpublished = PgError::PublicationLacksTable {
            publication: "outbox_pub".into(),
            table: "public.outbox".into(),
        };
        let no_publication = PgError::PublicationMissing {
            publication: "outbox_pub".into(),
            database: "app".into(),
        };
        assert!(sends_no_rows(&missing, true));
        assert!(sends_no_rows(&unpublished, true));
        // A table source needs its table, and a publication is needed always.
        assert!(!sends_no_rows(&missing, false));
        assert!(!sends_no_rows(&unpublished, false));
        assert!(!sends_no_rows(&no_publication, true));
    }
}
