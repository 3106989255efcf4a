//! A throwaway PostgreSQL cluster of one test's own, for server settings the
//! shared cluster must keep (e.g. `wal_level = replica`): `initdb` into a
//! temporary directory, `pg_ctl start` on a free port, stopped and deleted
//! on drop. Like `scripts/services`, the cluster is owned by the `postgres`
//! user when the tests run as root (initdb refuses root).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::free_port;
use super::random_name;

/// A running cluster; `postgres` may connect over TCP without a password.
pub struct Cluster {
    dir: PathBuf,
    bindir: PathBuf,
    pub port: u16,
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// The newest PostgreSQL server binaries on the machine.
fn bindir() -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.path().join("bin"))
                .filter(|bin| bin.join("initdb").exists() && bin.join("pg_ctl").exists())
                .collect()
        })
        .unwrap_or_default();
    dirs.sort_by_key(|d| {
        d.parent()
            .and_then(|v| v.file_name())
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0)
    });
    if let Some(dir) = dirs.pop() {
        return dir;
    }
    let output = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .expect("no PostgreSQL server binaries in /usr/lib/postgresql and no pg_config");
    PathBuf::from(String::from_utf8_lossy(&output.stdout).trim())
}

/// Runs a PostgreSQL binary as the cluster's owner.
fn as_owner(program: &Path, args: &[&str]) -> std::process::Output {
    let mut command = if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    };
    command
        .args(args)
        .output()
        .expect("run a PostgreSQL binary")
}

impl Cluster {
    /// initdb and start, with `settings` lines appended to postgresql.conf.
    pub fn start(settings: &[&str]) -> Self {
        let bindir = bindir();
        let dir = std::env::temp_dir().join(random_name("cluster"));
        std::fs::create_dir_all(&dir).unwrap();
        if is_root() {
            let status = Command::new("chown")
                .arg("postgres:")
                .arg(&dir)
                .status()
                .unwrap();
            assert!(status.success(), "chown {}", dir.display());
        }
        let data = dir.join("data");
        let initdb = as_owner(
            &bindir.join("initdb"),
            &[
                "-D",
                data.to_str().unwrap(),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C",
            ],
        );
        assert!(
            initdb.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&initdb.stderr)
        );
        let port = free_port();
        let mut conf = format!(
            "listen_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = '{}'\n\
             fsync = off\n",
            dir.display()
        );
        for line in settings {
            conf.push_str(line);
            conf.push('\n');
        }
        // Appending keeps the file's owner.
        use std::io::Write as _;
        std::fs::OpenOptions::new()
            .append(true)
            .open(data.join("postgresql.conf"))
            .unwrap()
            .write_all(conf.as_bytes())
            .unwrap();
        let cluster = Cluster { dir, bindir, port };
        let log = cluster.dir.join("server.log");
        let started = as_owner(
            &cluster.bindir.join("pg_ctl"),
            &[
                "-D",
                data.to_str().unwrap(),
                "-l",
                log.to_str().unwrap(),
                "-w",
                "-t",
                "60",
                "start",
            ],
        );
        assert!(
            started.status.success(),
            "pg_ctl start: {}; log: {}",
            String::from_utf8_lossy(&started.stderr),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        cluster
    }

    /// The superuser's URL (trust authentication).
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    pub async fn client(&self) -> tokio_postgres::Client {
        let (client, conn) = tokio_postgres::connect(&self.url(), tokio_postgres::NoTls)
            .await
            .expect("connect to the throwaway cluster");
        tokio::spawn(conn);
        client
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let data = self.dir.join("data");
        let _ = as_owner(
            &self.bindir.join("pg_ctl"),
            &[
                "-D",
                data.to_str().unwrap(),
                "-m",
                "immediate",
                "-w",
                "stop",
            ],
        );
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
