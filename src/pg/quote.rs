//! Names and values written into the text of the relay's SQL statements and
//! replication commands.
//!
//! Role: the two quoting rules that are not libpq's. SQL identifiers and
//! string literals are quoted with `postgres_protocol::escape` (libpq's
//! `PQescapeIdentifier` / `PQescapeLiteral`) where they are written; this
//! module holds what that does not cover: the literal of the replication
//! command grammar, and identifiers as an operator types them in a fix
//! hint.
//!
//! Why `escape_literal` is right whatever `standard_conforming_strings` the
//! session has: a value without a backslash becomes `'...'` with `'`
//! doubled, which both settings read the same; a value with one becomes
//! ` E'...'` (leading space included) with `\` and `'` doubled, which is an
//! escape string under both settings.
//!
//! Invariant: nothing here depends on another module of the client, so
//! error texts can use it without a cycle.

use postgres_protocol::escape::escape_identifier;

/// A string literal for the replication command grammar (walsender's
/// `repl_scanner.l`): its quoted strings know only `''` as an escape, there
/// is no `E'...'` and a backslash is an ordinary character, so
/// `escape_literal`'s `E'...'` form would be a syntax error there, and
/// doubling a backslash would change the value.
pub fn replication_literal(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

/// `"schema"."name"`, quoted for SQL text.
pub fn qualified(schema: &str, name: &str) -> String {
    format!("{}.{}", escape_identifier(schema), escape_identifier(name))
}

/// The SQL of a file that makes table `default` (in the search path) and
/// indexes named `<default>_<suffix>`, for the table `schema.name`: every
/// `CREATE TABLE IF NOT EXISTS`, `ALTER TABLE` and `ON` of `default`, and
/// every `INDEX IF NOT EXISTS <default>_<suffix>` (which becomes
/// `<name>_<suffix>`), says the configured names instead.
pub fn renamed_table_sql(sql: &str, default: &str, schema: &str, name: &str) -> String {
    let quoted = qualified(schema, name);
    let mut out = sql
        .replace(
            &format!("CREATE TABLE IF NOT EXISTS {default} "),
            &format!("CREATE TABLE IF NOT EXISTS {quoted} "),
        )
        .replace(
            &format!("ALTER TABLE {default} "),
            &format!("ALTER TABLE {quoted} "),
        )
        .replace(&format!("ON {default} "), &format!("ON {quoted} "));
    let index = format!("INDEX IF NOT EXISTS {default}_");
    while let Some(at) = out.find(&index) {
        let rest = &out[at + index.len()..];
        let suffix: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let renamed = format!(
            "INDEX IF NOT EXISTS {}",
            escape_identifier(&format!("{name}_{suffix}"))
        );
        out.replace_range(at..at + index.len() + suffix.len(), &renamed);
    }
    out
}

/// `text` cut to at most `max` bytes at a character boundary, with `…`
/// when cut: what a column keeps of a long error or reason.
pub fn clip(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// An identifier as an operator would type it in a fix hint: bare when that
/// means the same, quoted otherwise (upper case, punctuation, the reserved
/// words a role or publication is most likely to be named after).
pub fn display_ident(name: &str) -> String {
    const RESERVED: [&str; 9] = [
        "all",
        "current_role",
        "current_user",
        "group",
        "none",
        "public",
        "role",
        "session_user",
        "user",
    ];
    let bare = name
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && !RESERVED.contains(&name);
    if bare {
        name.to_owned()
    } else {
        escape_identifier(name)
    }
}

#[cfg(test)]
mod tests {
    use postgres_protocol::escape::escape_literal;

    use super::*;

    #[test]
    fn fix_hints_quote_only_what_needs_it() {
        assert_eq!(display_ident("relay_1"), "relay_1");
        assert_eq!(display_ident("Relay"), "\"Relay\"");
        assert_eq!(display_ident("user"), "\"user\"");
        assert_eq!(display_ident("1st"), "\"1st\"");
        assert_eq!(display_ident(r#"a"b"#), r#""a""b""#);
    }

    #[test]
    fn replication_literals_double_quotes_only() {
        assert_eq!(replication_literal(r#"it's a \ "x""#), r#"'it''s a \ "x"'"#);
    }

    /// What the module header relies on from `postgres_protocol::escape`.
    #[test]
    fn sql_literals_use_escape_syntax_exactly_when_there_is_a_backslash() {
        assert_eq!(escape_literal("it's"), "'it''s'");
        assert_eq!(escape_literal(r"it's a \ back"), r" E'it''s a \\ back'");
        assert_eq!(escape_identifier(r#"My"Pub"#), r#""My""Pub""#);
    }
}
