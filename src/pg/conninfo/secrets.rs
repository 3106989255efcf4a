//! The second line of defence against a password leaking from a conninfo:
//! every form a password may take in the string (as written, as parsed,
//! percent-decoded and percent-encoded), collected before anything parses
//! it, and cut out of any text shown about it.
//!
//! Role: [`Secrets`] for [`super::Conninfo`]'s `Display`, `Debug` and error
//! reasons; [`with_cause`] for a parser's error with its causes.
//!
//! Invariants: a form inside another is cut out after the longer one, so no
//! tail of a password is left behind.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};

use crate::redact::{key_values, split_url_scheme};

/// Every form in which a conninfo may carry a password, collected before
/// anything parses it, so that even a parser's error about a malformed
/// string can be cleaned.
#[derive(Clone, Default)]
pub(super) struct Secrets(Vec<String>);

/// Shown in place of a scrubbed secret.
const SCRUBBED: &str = "***";

impl Secrets {
    pub(super) fn of(conninfo: &str) -> Secrets {
        let mut secrets = Secrets::default();
        let trimmed = conninfo.trim_start();
        if let Some((_, rest)) = split_url_scheme(trimmed) {
            // The user info ends at the first '@' for tokio-postgres, maybe
            // at the last for whoever wrote the URL: take both readings.
            for at in [rest.find('@'), rest.rfind('@')].into_iter().flatten() {
                if let Some((_, password)) = rest[..at].split_once(':') {
                    secrets.add(password);
                }
            }
            for param in rest.split(['?', '&']) {
                if let Some((key, value)) = param.split_once('=')
                    && is_password_key(&percent_decode_lossy(key))
                {
                    secrets.add(value);
                }
            }
        } else {
            for pair in key_values(trimmed).0 {
                if is_password_key(pair.key) {
                    secrets.add(pair.raw);
                    secrets.add(&pair.value);
                }
            }
        }
        secrets
    }

    /// Adds `text` as written, percent-decoded and percent-encoded.
    pub(super) fn add(&mut self, text: &str) {
        for form in [
            text.to_owned(),
            percent_decode_lossy(text),
            percent_encode(text),
        ] {
            if !form.is_empty() && !self.0.contains(&form) {
                self.0.push(form);
            }
        }
        // Longest first, so a form inside another is not cut out of it first
        // and leaves the rest of the longer one behind.
        self.0.sort_by_key(|s| std::cmp::Reverse(s.len()));
    }

    pub(super) fn scrub(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for secret in &self.0 {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), SCRUBBED);
            }
        }
        out
    }
}

/// `error` and its causes: tokio-postgres's own text is only "invalid
/// connection string", the cause says which option. Scrubbed by the caller.
pub(super) fn with_cause(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        cause = inner.source();
    }
    text
}

fn is_password_key(key: &str) -> bool {
    key.to_ascii_lowercase().contains("password")
}

/// Percent-decodes what decodes and keeps the rest, as tokio-postgres does
/// for the URL password (with the same library).
fn percent_decode_lossy(s: &str) -> String {
    percent_decode_str(s).decode_utf8_lossy().into_owned()
}

/// Every byte but RFC 3986's unreserved ones.
const NOT_UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Every byte but RFC 3986's unreserved ones as `%XX`.
fn percent_encode(s: &str) -> String {
    utf8_percent_encode(s, NOT_UNRESERVED).to_string()
}
