//! TLS fixtures: a throwaway certificate authority made with the openssl
//! command, for tests of certificate verification against the real
//! PostgreSQL.

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
