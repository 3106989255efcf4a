//! The URLs the relay's HTTP endpoints are configured with (a webhook
//! sink's `url`, `[tracing] otlp_endpoint`), read by one parser: `http::Uri`,
//! the URI type hyper sends requests to (re-exported as `hyper::Uri`, so no
//! crate is added for it). What is accepted here is therefore exactly what a
//! request can carry.
//!
//! `http::Uri` is lenient where a config error is more useful than a guess,
//! so a few checks come on top of it: a `#fragment` (which it drops without
//! a word) and `user:password@` (which it keeps in the authority) are
//! refused, and a port it cannot read (`:http`, `:99999`, `:`) is an error,
//! not "no port". Each caller turns [`UrlError`] into its own sentence, for
//! its own config key.

use hyper::Uri;

/// An absolute `http://` or `https://` URL, in parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpUrl {
    /// `https`.
    pub tls: bool,
    /// Without the brackets of an IPv6 address; never empty.
    pub host: String,
    /// The port the URL names, if it names one; never 0.
    pub port: Option<u16>,
    /// The path and query as written, starting with `/` (`/` alone when the
    /// URL has neither; `/?query` when it has a query but no path).
    pub path_and_query: String,
}

/// Why a URL is not one [`HttpUrl::parse`] takes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("not an http:// or https:// URL")]
    Scheme,
    #[error("carries credentials (user:password@)")]
    Credentials,
    #[error("names no host")]
    NoHost,
    /// The port as written.
    #[error("the port {0:?} is not a number from 1 to 65535")]
    Port(String),
    #[error("holds a space or a control character")]
    Whitespace,
    #[error("has a #fragment, which a request never carries")]
    Fragment,
    /// `http::Uri`'s reason (e.g. `invalid uri character`).
    #[error("is not a valid URI ({0})")]
    Invalid(String),
}

impl HttpUrl {
    /// Parses `url` with `http::Uri`, then refuses what it would let
    /// through silently (see the module docs).
    ///
    /// # Errors
    /// The first thing wrong with `url`, as a [`UrlError`].
    pub fn parse(url: &str) -> Result<HttpUrl, UrlError> {
        // The scheme as the config's other checks read it (a sink's
        // `ca_file` needs `https://`): in lower case, though `http::Uri`
        // would take `HTTPS://` too. Without one, `host:port` would read as
        // an authority alone.
        let tls = if url.starts_with("https://") {
            true
        } else if url.starts_with("http://") {
            false
        } else {
            return Err(UrlError::Scheme);
        };
        let uri: Uri = url.parse().map_err(|e: hyper::http::uri::InvalidUri| {
            // A space is "an invalid uri character" to the parser, like `<`;
            // told apart, the error can say which.
            if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
                UrlError::Whitespace
            } else if url.ends_with("://") {
                // `http://` alone: the parser's reason is "empty string".
                UrlError::NoHost
            } else {
                UrlError::Invalid(e.to_string())
            }
        })?;
        let authority = uri.authority().ok_or(UrlError::NoHost)?.as_str();
        if authority.contains('@') {
            return Err(UrlError::Credentials);
        }
        if url.contains('#') {
            return Err(UrlError::Fragment);
        }
        // With no user info, the authority is the host (IPv6 in brackets)
        // and, after a colon, the port as written.
        let bracketed = uri.host().unwrap_or_default();
        let host = bracketed
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(bracketed);
        if host.is_empty() {
            return Err(UrlError::NoHost);
        }
        let port = match &authority[bracketed.len()..] {
            "" => None,
            after => {
                // `http::Uri` takes `[::1]x` as the host `[::1]`.
                let written = after.strip_prefix(':').ok_or_else(|| {
                    UrlError::Invalid(format!("{after:?} after the host, where only :port may be"))
                })?;
                Some(
                    uri.port_u16()
                        .filter(|&p| p > 0)
                        .ok_or_else(|| UrlError::Port(written.to_owned()))?,
                )
            }
        };
        let path_and_query = match uri.path_and_query().map(|p| p.as_str()) {
            None | Some("") => "/".to_owned(),
            Some(query) if query.starts_with('?') => format!("/{query}"),
            Some(path) => path.to_owned(),
        };
        Ok(HttpUrl {
            tls,
            host: host.to_owned(),
            port,
            path_and_query,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(url: &str) -> (bool, String, Option<u16>, String) {
        let u = HttpUrl::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
        (u.tls, u.host, u.port, u.path_and_query)
    }

    #[test]
    fn the_parts_of_a_url() {
        let own = |tls, host: &str, port, path: &str| (tls, host.to_owned(), port, path.to_owned());
        assert_eq!(
            parts("https://billing.example/hooks/outbox"),
            own(true, "billing.example", None, "/hooks/outbox")
        );
        assert_eq!(
            parts("http://127.0.0.1:8080"),
            own(false, "127.0.0.1", Some(8080), "/")
        );
        assert_eq!(
            parts("http://[::1]:9/x?y=1"),
            own(false, "::1", Some(9), "/x?y=1")
        );
        assert_eq!(parts("http://[::1]"), own(false, "::1", None, "/"));
        assert_eq!(parts("http://h?x=1"), own(false, "h", None, "/?x=1"));
        assert_eq!(parts("http://h/a%20b"), own(false, "h", None, "/a%20b"));
    }

    #[test]
    fn what_the_uri_type_would_let_through_is_refused() {
        for (url, why) in [
            ("ftp://x", UrlError::Scheme),
            ("billing.example", UrlError::Scheme),
            ("c:4318", UrlError::Scheme),
            ("mailto:a@b", UrlError::Scheme),
            ("HTTPS://h/x", UrlError::Scheme),
            ("http://", UrlError::NoHost),
            ("http://:4318", UrlError::NoHost),
            ("http://u:p@host/", UrlError::Credentials),
            ("http://user@host/", UrlError::Credentials),
            ("http://host:0/", UrlError::Port("0".into())),
            ("http://host:99999/", UrlError::Port("99999".into())),
            ("http://host:http/", UrlError::Port("http".into())),
            ("http://host:/", UrlError::Port(String::new())),
            ("http://[::1]:0/", UrlError::Port("0".into())),
            ("http://host/a b", UrlError::Whitespace),
            ("http://host/a\tb", UrlError::Whitespace),
            ("http://host/a#top", UrlError::Fragment),
            (
                "http://host/a<b",
                UrlError::Invalid("invalid uri character".into()),
            ),
            (
                "http://[::1]x/",
                UrlError::Invalid("\"x\" after the host, where only :port may be".into()),
            ),
            (
                "http://[::1/x",
                UrlError::Invalid("invalid authority".into()),
            ),
        ] {
            assert_eq!(HttpUrl::parse(url), Err(why), "{url}");
        }
    }
}
