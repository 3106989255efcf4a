//! `relay.metrics_addr`: the `host:port` the relay listens on, where the host
//! is an IP address or a host name (`localhost:9187`). A name is resolved
//! when the relay binds, not when the config loads, so `check-config` needs
//! no DNS.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// What every refusal says: the forms that are accepted.
const FORMS: &str = "expected host:port, e.g. \"0.0.0.0:9187\", \"[::]:9187\" or \
                     \"localhost:9187\" (a host name is resolved when the relay starts)";

/// A listening address as configured: IP address or host name, and port.
#[derive(Clone, PartialEq, Eq)]
pub struct ListenAddr {
    /// An IP address (IPv6 without brackets) or a host name.
    host: String,
    port: u16,
}

impl ListenAddr {
    /// Parses `host:port`; the reason never quotes the text.
    ///
    /// # Errors
    /// What is expected, when the text is not `host:port`.
    pub fn parse(text: &str) -> Result<ListenAddr, String> {
        if let Ok(addr) = text.parse::<SocketAddr>() {
            return Ok(ListenAddr {
                host: addr.ip().to_string(),
                port: addr.port(),
            });
        }
        let Some((host, port)) = text.rsplit_once(':') else {
            return Err(format!("no port: {FORMS}"));
        };
        let port = port
            .parse::<u16>()
            .map_err(|_| format!("the port is not a number from 0 to 65535: {FORMS}"))?;
        let name_chars = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_';
        if host.is_empty()
            || host.len() > 253
            || !host.chars().all(name_chars)
            || host.starts_with(['-', '.'])
        {
            // An IPv6 address without brackets lands here too.
            return Err(format!(
                "the host is neither an IP address nor a host name: {FORMS}"
            ));
        }
        Ok(ListenAddr {
            host: host.to_owned(),
            port,
        })
    }

    /// The IP address or host name, without brackets: what
    /// `TcpListener::bind((host, port))` takes.
    pub fn host(&self) -> &str {
        &self.host
    }

    pub fn port(&self) -> u16 {
        self.port
    }
}

impl FromStr for ListenAddr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ListenAddr::parse(s)
    }
}

impl From<SocketAddr> for ListenAddr {
    fn from(addr: SocketAddr) -> Self {
        ListenAddr {
            host: addr.ip().to_string(),
            port: addr.port(),
        }
    }
}

/// `host:port`, an IPv6 address in brackets: the form [`ListenAddr::parse`]
/// reads back.
impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

impl fmt::Debug for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl Serialize for ListenAddr {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ListenAddr {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct AddrVisitor;
        impl Visitor<'_> for AddrVisitor {
            type Value = ListenAddr;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(FORMS)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ListenAddr, E> {
                ListenAddr::parse(v).map_err(E::custom)
            }
        }
        deserializer.deserialize_str(AddrVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_and_addresses_parse_and_print_back() {
        for (text, host, port) in [
            ("localhost:9187", "localhost", 9187),
            (
                "metrics.internal-net.example:80",
                "metrics.internal-net.example",
                80,
            ),
            ("0.0.0.0:9187", "0.0.0.0", 9187),
            ("127.0.0.1:0", "127.0.0.1", 0),
            ("[::]:9187", "::", 9187),
            ("[::1]:9", "::1", 9),
        ] {
            let addr = ListenAddr::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!((addr.host(), addr.port()), (host, port), "{text}");
            assert_eq!(addr.to_string(), text);
            assert_eq!(ListenAddr::parse(&addr.to_string()), Ok(addr));
        }
    }

    #[test]
    fn what_is_not_host_port_is_refused_saying_what_is() {
        for text in [
            "localhost",
            "localhost:",
            ":9187",
            "localhost:99999",
            "localhost:port",
            "::1:9187",
            "local host:9187",
            "http://localhost:9187",
            "",
        ] {
            let why = ListenAddr::parse(text).expect_err(text);
            assert!(why.contains("localhost:9187"), "{text}: {why}");
        }
    }
}
