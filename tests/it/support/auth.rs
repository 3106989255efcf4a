//! Roles and connection strings for the authentication, TLS and secrets
//! tests: a role made for one test, and the relay's PostgreSQL URL or
//! key=value conninfo with another user, password, host or options. Nothing
//! here changes a server-wide setting.

use tokio_postgres::Client;

use super::{TestOutbox, env, random_name};

/// `postgres://user:password@127.0.0.1:<PG_PORT>/postgres?<query>`, the
/// password percent-encoded.
pub fn pg_url_for(user: &str, password: &str, query: &str) -> String {
    pg_url_at("127.0.0.1", user, password, query)
}

/// As [`pg_url_for`] with another host (e.g. `localhost` for verify-full).
pub fn pg_url_at(host: &str, user: &str, password: &str, query: &str) -> String {
    pg_url_written(host, user, &percent_encode_all(password), query)
}

/// As [`pg_url_at`] with the password written as given (`written` must
/// already be encoded where the URL needs it, see [`percent_encode_minimal`]).
pub fn pg_url_written(host: &str, user: &str, written: &str, query: &str) -> String {
    let sep = if query.is_empty() { "" } else { "?" };
    format!(
        "postgres://{user}:{written}@{host}:{}/postgres{sep}{query}",
        env("PG_PORT")
    )
}

/// Every byte but RFC 3986's unreserved ones as `%XX`.
pub fn percent_encode_all(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Only what a URL password cannot hold raw: `%` and `@`. `/ ? # : = ' "`
/// and spaces stay as they are (tokio-postgres reads the password up to
/// the `@`).
pub fn percent_encode_minimal(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '%' | '@' => percent_encode_all(&c.to_string()),
            c => c.to_string(),
        })
        .collect()
}

/// A key=value conninfo for 127.0.0.1:<PG_PORT>, the password single-quoted
/// with `\` escapes, plus `extra`.
pub fn pg_key_value_for(user: &str, password: &str, extra: &str) -> String {
    let quoted: String = password
        .chars()
        .flat_map(|c| match c {
            '\'' | '\\' => vec!['\\', c],
            c => vec![c],
        })
        .collect();
    format!(
        "host=127.0.0.1 port={} dbname=postgres user={user} password='{quoted}' {extra}",
        env("PG_PORT")
    )
}

/// A role created for one test; dropped by [`TestRole::drop_role`] (after the
/// objects granted to it are gone).
pub struct TestRole {
    pub name: String,
    pub password: String,
}

impl TestRole {
    /// `CREATE ROLE <random> <attributes> PASSWORD '<password>'`, with
    /// SELECT on the outbox table (what the relay's checks read) and the
    /// use of its parking table (which the relay reads at start). The
    /// password may hold any character but NUL.
    pub async fn create(outbox: &TestOutbox, attributes: &str, password: &str) -> Self {
        let name = random_name("role");
        // A standard SQL string literal: quotes doubled, backslashes literal.
        let literal = password.replace('\'', "''");
        outbox
            .admin
            .batch_execute(&format!(
                "CREATE ROLE {name} {attributes} PASSWORD '{literal}';
                 GRANT SELECT ON public.{} TO {name};
                 GRANT SELECT, INSERT, UPDATE, DELETE ON public.{}_parked TO {name};",
                outbox.table, outbox.table
            ))
            .await
            .expect("create role");
        TestRole {
            name,
            password: password.to_string(),
        }
    }

    /// Drops the role; call after `drop_all` (the table held its grant).
    /// What `init --grant` gave it on tables that stay (the replay record
    /// in `public`) is revoked first, or the role could not be dropped.
    pub async fn drop_role(&self, admin: &Client) {
        let _ = admin
            .batch_execute(&format!(
                "REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {name}; DROP ROLE IF EXISTS {name}",
                name = self.name
            ))
            .await;
    }
}
