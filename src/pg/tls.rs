//! TLS for a PostgreSQL connection, following libpq's `sslmode`.
//!
//! Role: turn a connected TCP stream into what the connection runs on
//! ([`Negotiated`]: the plain stream, or a [`TlsStream`]): send SSLRequest,
//! read the server's one-byte answer, and run the OpenSSL handshake with the
//! verification the mode asks for. A [`TlsStream`] is read and written like
//! any tokio stream and tells its channel binding data; nothing outside this
//! module sees OpenSSL.
//!
//! Invariants (libpq's, relied on by users who copy their conninfo):
//! * `disable` never sends SSLRequest; `prefer` falls back to plain only when
//!   the server answers `N`, never after a failed handshake;
//! * `require` without `sslrootcert` encrypts but does not verify; with
//!   `sslrootcert` it verifies the chain (as `verify-ca`);
//! * `verify-full` checks the certificate against `host` (DNS name or IP),
//!   not `hostaddr`, so a certificate for another name is refused even when
//!   the address is right;
//! * `sslrootcert=<file>` trusts the CAs in that file and nothing else (not
//!   the system's store as well); `sslrootcert=system` (libpq 16) trusts the
//!   system's store and comes with `verify-full` (the conninfo refuses it with
//!   a weaker mode, like libpq);
//! * exactly one byte is read after SSLRequest before the handshake, so
//!   nothing a man in the middle sends ahead of it is taken as plaintext
//!   (CVE-2021-23222).
//!
//! Unlike libpq: `verify-ca`/`verify-full` without `sslrootcert` are refused
//! with an error that says to set `sslrootcert=<path>` (or `system`). libpq
//! would read `~/.postgresql/root.crt`, but the library reads nothing from
//! the environment, and silently verifying against the system trust store
//! instead would accept any certificate a public CA signed.
//!
//! [`TlsStream::server_end_point`] computes the `tls-server-end-point`
//! channel binding data (RFC 5929) SCRAM-SHA-256-PLUS sends (see `auth.rs`).

use std::io;
use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll};

use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::ssl::{SslConnector, SslFiletype, SslMethod, SslVerifyMode};
use openssl::x509::store::{X509Store, X509StoreBuilder};
use openssl::x509::{X509, X509Ref, X509VerifyResult};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_openssl::SslStream;

use super::conninfo::{RootCert, SslMode, TlsSettings};
use super::error::PgError;

/// A TCP connection after [`establish`]: plain (`sslmode=disable`, or
/// `prefer` and the server said no) or TLS.
pub enum Negotiated {
    Plain(TcpStream),
    Tls(Box<TlsStream>),
}

/// An established TLS session over TCP.
pub struct TlsStream(SslStream<TcpStream>);

impl TlsStream {
    /// The `tls-server-end-point` channel binding data of the session: the
    /// hash of the server's certificate (RFC 5929 section 4.1).
    ///
    /// # Errors
    /// No certificate, or one whose hash RFC 5929 does not define; the reason.
    pub fn server_end_point(&self) -> Result<Vec<u8>, String> {
        let cert = self
            .0
            .ssl()
            .peer_certificate()
            .ok_or_else(|| "the server sent no certificate".to_owned())?;
        server_end_point(&cert)
    }
}

// `SslStream<TcpStream>` is `Unpin`, so plain delegation needs no projection.
impl AsyncRead for TlsStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

/// How much of the server certificate to check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verify {
    Nothing,
    Chain,
    ChainAndHost,
}

fn verification(settings: &TlsSettings) -> Verify {
    match settings.mode {
        SslMode::Disable | SslMode::Prefer => Verify::Nothing,
        SslMode::Require if settings.root_cert.is_some() => Verify::Chain,
        SslMode::Require => Verify::Nothing,
        SslMode::VerifyCa => Verify::Chain,
        SslMode::VerifyFull => Verify::ChainAndHost,
    }
}

/// Negotiates TLS on `tcp` per `settings`. `server_name` is the conninfo's
/// `host` (or `hostaddr` when there is no host); `target` names the endpoint
/// in errors.
pub async fn establish(
    mut tcp: TcpStream,
    settings: &TlsSettings,
    server_name: &str,
    target: &str,
) -> Result<Negotiated, PgError> {
    if settings.mode == SslMode::Disable {
        return Ok(Negotiated::Plain(tcp));
    }
    // Build the connector first: a bad sslrootcert is a configuration error
    // and should be reported as such, not after a round trip.
    let connector = connector(settings, target)?;

    let io_error = |action, source| PgError::Io {
        target: target.to_owned(),
        action,
        source,
    };
    let mut request = bytes::BytesMut::new();
    postgres_protocol::message::frontend::ssl_request(&mut request);
    tcp.write_all(&request)
        .await
        .map_err(|e| io_error("sending SSLRequest", e))?;
    let answer = tcp
        .read_u8()
        .await
        .map_err(|e| io_error("reading the answer to SSLRequest", e))?;
    match answer {
        b'S' => {}
        b'N' if settings.mode == SslMode::Prefer => return Ok(Negotiated::Plain(tcp)),
        b'N' => {
            return Err(PgError::TlsNotOffered {
                target: target.to_owned(),
                sslmode: settings.mode.as_str(),
            });
        }
        other => {
            return Err(PgError::Protocol {
                target: target.to_owned(),
                action: "negotiating TLS",
                reason: format!("answer {other:#04x} to SSLRequest, expected 'S' or 'N'"),
            });
        }
    }

    let tls_error = |reason: String| PgError::Tls {
        target: target.to_owned(),
        reason,
    };
    let mut config = connector
        .configure()
        .map_err(|e| tls_error(e.to_string()))?;
    config.set_verify_hostname(verification(settings) == Verify::ChainAndHost);
    let ssl = config
        .into_ssl(server_name)
        .map_err(|e| tls_error(e.to_string()))?;
    let mut stream = SslStream::new(ssl, tcp).map_err(|e| tls_error(e.to_string()))?;
    if let Err(error) = Pin::new(&mut stream).connect().await {
        let verify = stream.ssl().verify_result();
        if verify != X509VerifyResult::OK {
            return Err(PgError::TlsVerify {
                target: target.to_owned(),
                server_name: server_name.to_owned(),
                reason: verify.error_string().to_owned(),
            });
        }
        return Err(match error.into_io_error() {
            // Reset or EOF mid-handshake: the network, not the configuration.
            Ok(io) => io_error("in the TLS handshake", io),
            Err(error) => tls_error(error.to_string()),
        });
    }
    Ok(Negotiated::Tls(Box::new(TlsStream(stream))))
}

fn connector(settings: &TlsSettings, target: &str) -> Result<SslConnector, PgError> {
    let error = |what: &str, path: Option<&Path>, e: String| PgError::Tls {
        target: target.to_owned(),
        reason: match path {
            Some(p) => format!("cannot load {what} {}: {e}", p.display()),
            None => format!("cannot set up TLS: {e}"),
        },
    };
    // `SslConnector::builder` loads the system trust store.
    let mut builder = SslConnector::builder(SslMethod::tls_client())
        .map_err(|e| error("", None, e.to_string()))?;
    match verification(settings) {
        Verify::Nothing => builder.set_verify(SslVerifyMode::NONE),
        Verify::Chain | Verify::ChainAndHost => {
            builder.set_verify(SslVerifyMode::PEER);
            match &settings.root_cert {
                Some(RootCert::System) => {}
                Some(RootCert::File(root)) => {
                    let store =
                        file_store(root).map_err(|e| error("sslrootcert", Some(root), e))?;
                    builder.set_cert_store(store);
                }
                None => {
                    return Err(PgError::TlsRootCertMissing {
                        target: target.to_owned(),
                        sslmode: settings.mode.as_str(),
                    });
                }
            }
        }
    }
    if let (Some(cert), Some(key)) = (&settings.cert, &settings.key) {
        builder
            .set_certificate_chain_file(cert)
            .map_err(|e| error("sslcert", Some(cert), e.to_string()))?;
        builder
            .set_private_key_file(key, SslFiletype::PEM)
            .map_err(|e| error("sslkey", Some(key), e.to_string()))?;
        builder
            .check_private_key()
            .map_err(|e| error("sslkey (does it match sslcert?)", Some(key), e.to_string()))?;
    }
    Ok(builder.build())
}

/// A certificate store with the CA certificates of the PEM file at `path`
/// and nothing else: set in place of the system's store, which
/// `SslConnector::builder` loaded.
fn file_store(path: &Path) -> Result<X509Store, String> {
    let pem = std::fs::read(path).map_err(|e| e.to_string())?;
    let certs = X509::stack_from_pem(&pem).map_err(|e| e.to_string())?;
    if certs.is_empty() {
        return Err("no PEM certificate in it".into());
    }
    let mut store = X509StoreBuilder::new().map_err(|e| e.to_string())?;
    for cert in certs {
        store.add_cert(cert).map_err(|e| e.to_string())?;
    }
    Ok(store.build())
}

/// RFC 5929 `tls-server-end-point`: the certificate hashed with the hash
/// function of its signature algorithm, SHA-256 when that is MD5 or SHA-1.
/// Signature algorithms without a separate hash (Ed25519, ...) have no
/// defined end-point data; PostgreSQL refuses them the same way.
fn server_end_point(cert: &X509Ref) -> Result<Vec<u8>, String> {
    let algorithm = cert.signature_algorithm().object().nid();
    let digest = algorithm
        .signature_algorithms()
        .map(|algorithms| algorithms.digest)
        .filter(|digest| *digest != Nid::UNDEF)
        .ok_or_else(|| {
            format!(
                "the server certificate's signature algorithm {} has no hash for \
                 tls-server-end-point",
                algorithm.long_name().unwrap_or("(unknown)")
            )
        })?;
    let digest = match digest {
        Nid::MD5 | Nid::SHA1 => MessageDigest::sha256(),
        other => MessageDigest::from_nid(other).ok_or_else(|| {
            format!(
                "no hash function {} for tls-server-end-point",
                other.long_name().unwrap_or("(unknown)")
            )
        })?,
    };
    cert.digest(digest)
        .map(|hash| hash.to_vec())
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn require_with_a_root_cert_verifies_the_chain_like_libpq() {
        let mut settings = TlsSettings {
            mode: SslMode::Require,
            ..TlsSettings::default()
        };
        assert_eq!(verification(&settings), Verify::Nothing);
        settings.root_cert = Some(RootCert::File(PathBuf::from("/ca.pem")));
        assert_eq!(verification(&settings), Verify::Chain);
        settings.mode = SslMode::VerifyFull;
        assert_eq!(verification(&settings), Verify::ChainAndHost);
    }

    #[test]
    fn a_missing_root_cert_file_is_a_fatal_error_naming_it() {
        let settings = TlsSettings {
            mode: SslMode::VerifyFull,
            root_cert: Some(RootCert::File(PathBuf::from("/nonexistent/ca.pem"))),
            ..TlsSettings::default()
        };
        let err = connector(&settings, "h:1").err().unwrap();
        assert_eq!(err.kind(), super::super::ErrorKind::Fatal);
        assert!(err.to_string().contains("/nonexistent/ca.pem"), "{err}");
    }

    #[test]
    fn verification_without_a_root_cert_is_refused_naming_the_fix() {
        for mode in [SslMode::VerifyCa, SslMode::VerifyFull] {
            let settings = TlsSettings {
                mode,
                ..TlsSettings::default()
            };
            let err = connector(&settings, "h:1").err().unwrap();
            assert!(matches!(err, PgError::TlsRootCertMissing { .. }), "{err}");
            assert_eq!(err.kind(), super::super::ErrorKind::Fatal);
            let text = err.to_string();
            assert!(
                text.contains(&format!("sslmode={}", mode.as_str()))
                    && text.contains("sslrootcert=<path")
                    && text.contains("sslrootcert=system"),
                "{text}"
            );
        }
        // Nothing to verify against is fine when nothing is verified.
        for mode in [SslMode::Prefer, SslMode::Require] {
            let settings = TlsSettings {
                mode,
                ..TlsSettings::default()
            };
            assert!(connector(&settings, "h:1").is_ok());
        }
        let system = TlsSettings {
            mode: SslMode::VerifyFull,
            root_cert: Some(RootCert::System),
            ..TlsSettings::default()
        };
        assert!(connector(&system, "h:1").is_ok());
    }

    /// A self-signed certificate signed with `digest`, or with a key type
    /// that has no separate hash (`None`: Ed25519).
    fn certificate(digest: Option<MessageDigest>) -> X509 {
        use openssl::ec::{EcGroup, EcKey};
        use openssl::pkey::PKey;
        let key = match digest {
            Some(_) => {
                let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap();
                PKey::from_ec_key(EcKey::generate(&group).unwrap()).unwrap()
            }
            None => PKey::generate_ed25519().unwrap(),
        };
        let mut name = openssl::x509::X509NameBuilder::new().unwrap();
        name.append_entry_by_text("CN", "localhost").unwrap();
        let name = name.build();
        let mut builder = X509::builder().unwrap();
        builder.set_version(2).unwrap();
        builder.set_subject_name(&name).unwrap();
        builder.set_issuer_name(&name).unwrap();
        builder.set_pubkey(&key).unwrap();
        let now = openssl::asn1::Asn1Time::days_from_now(0).unwrap();
        let later = openssl::asn1::Asn1Time::days_from_now(1).unwrap();
        builder.set_not_before(&now).unwrap();
        builder.set_not_after(&later).unwrap();
        builder
            .sign(&key, digest.unwrap_or_else(MessageDigest::null))
            .unwrap();
        builder.build()
    }

    #[test]
    fn end_point_hash_follows_the_signature_digest_and_upgrades_sha1_like_rfc_5929() {
        for (signed_with, hashed_with) in [
            (MessageDigest::sha1(), MessageDigest::sha256()),
            (MessageDigest::sha256(), MessageDigest::sha256()),
            (MessageDigest::sha384(), MessageDigest::sha384()),
            (MessageDigest::sha512(), MessageDigest::sha512()),
        ] {
            let cert = certificate(Some(signed_with));
            let expected = cert.digest(hashed_with).unwrap().to_vec();
            let got = server_end_point(&cert).unwrap();
            assert_eq!(got, expected);
            assert_eq!(got.len(), hashed_with.size());
        }
        let ed25519 = certificate(None);
        let err = server_end_point(&ed25519).unwrap_err();
        assert!(err.contains("tls-server-end-point"), "{err}");
    }
}
