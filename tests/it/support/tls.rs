//! TLS fixtures: a throwaway certificate authority made with the openssl
//! command, and a TLS man in the middle that terminates the client's TLS
//! with a certificate of its own, for tests of certificate verification and
//! channel binding against the real PostgreSQL.

/// A throwaway CA and a `localhost` certificate it signed, made with the
/// openssl command in a fresh temporary directory.
pub struct ThrowawayCa {
    dir: std::path::PathBuf,
    pub ca_cert: std::path::PathBuf,
    pub server_cert: std::path::PathBuf,
    pub server_key: std::path::PathBuf,
}

impl ThrowawayCa {
    pub fn create() -> ThrowawayCa {
        let dir = std::env::temp_dir().join(format!(
            "repl_ca_{}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        ));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("san.ext"),
            "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
        )
        .unwrap();
        let openssl = |args: &[&str]| {
            let out = std::process::Command::new("openssl")
                .args(args)
                .current_dir(&dir)
                .output()
                .expect("run openssl");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
        openssl(
            &[
                &[
                    "req",
                    "-x509",
                    "-nodes",
                    "-days",
                    "1",
                    "-subj",
                    "/CN=throwaway-ca",
                ][..],
                &ec[..],
                &["-keyout", "ca.key", "-out", "ca.crt"][..],
            ]
            .concat(),
        );
        openssl(
            &[
                &["req", "-new", "-nodes", "-subj", "/CN=localhost"][..],
                &ec[..],
                &["-keyout", "server.key", "-out", "server.csr"][..],
            ]
            .concat(),
        );
        openssl(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            "san.ext",
            "-out",
            "server.crt",
        ]);
        ThrowawayCa {
            ca_cert: dir.join("ca.crt"),
            server_cert: dir.join("server.crt"),
            server_key: dir.join("server.key"),
            dir,
        }
    }
}

impl Drop for ThrowawayCa {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A TLS man in the middle: accepts the client's SSLRequest and TLS with its
/// own certificate, opens TLS to the server itself, and relays the bytes in
/// between. Only channel binding can tell the client that the certificate
/// it saw is not the server's. Returns the port clients connect to.
pub async fn tls_man_in_the_middle(upstream: (String, u16), ca: &ThrowawayCa) -> u16 {
    use openssl::ssl::{SslAcceptor, SslConnector, SslFiletype, SslMethod, SslVerifyMode};
    use std::pin::Pin;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let mut acceptor = SslAcceptor::mozilla_intermediate_v5(SslMethod::tls_server()).unwrap();
    acceptor
        .set_certificate_chain_file(&ca.server_cert)
        .unwrap();
    acceptor
        .set_private_key_file(&ca.server_key, SslFiletype::PEM)
        .unwrap();
    let acceptor = acceptor.build();
    let mut connector = SslConnector::builder(SslMethod::tls_client()).unwrap();
    connector.set_verify(SslVerifyMode::NONE);
    let connector = connector.build();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let (acceptor, connector, upstream) =
                (acceptor.clone(), connector.clone(), upstream.clone());
            tokio::spawn(async move {
                let relay = async {
                    let mut request = [0u8; 8];
                    client.read_exact(&mut request).await?;
                    client.write_all(b"S").await?;
                    let ssl = openssl::ssl::Ssl::new(acceptor.context())?;
                    let mut client = tokio_openssl::SslStream::new(ssl, client)?;
                    Pin::new(&mut client)
                        .accept()
                        .await
                        .map_err(std::io::Error::other)?;
                    let mut server = tokio::net::TcpStream::connect(upstream).await?;
                    server.write_all(&request).await?;
                    let mut answer = [0u8; 1];
                    server.read_exact(&mut answer).await?;
                    let ssl = connector
                        .configure()?
                        .verify_hostname(false)
                        .into_ssl("localhost")?;
                    let mut server = tokio_openssl::SslStream::new(ssl, server)?;
                    Pin::new(&mut server)
                        .connect()
                        .await
                        .map_err(std::io::Error::other)?;
                    tokio::io::copy_bidirectional(&mut client, &mut server).await?;
                    Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
                };
                let _ = relay.await;
            });
        }
    });
    port
}
