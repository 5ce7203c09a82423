//! Real PostgreSQL for tests: fresh databases on a running cluster, and
//! whole clusters a test can stop and start (through `scripts/pg.sh`).

use std::path::PathBuf;
use std::process::Command;

/// Creates a database with a fresh name on the cluster at `admin`; returns its URL.
pub async fn create_database(admin: &str) -> String {
    let (client, conn) =
        tokio_postgres::connect(admin, tokio_postgres::NoTls).await.expect("connect to the test cluster");
    tokio::spawn(conn);
    let name = format!("herald_test_{:016x}", rand::random::<u64>());
    client.batch_execute(&format!("CREATE DATABASE {name}")).await.expect("create database");
    let base = admin.rsplit_once('/').expect("URL with a database").0;
    format!("{base}/{name}")
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/pg.sh")
}

/// A PostgreSQL cluster of its own, stopped and removed when dropped.
pub struct PgCluster {
    pub dir: PathBuf,
    pub port: u16,
    pub admin_url: String,
}

impl PgCluster {
    pub fn start() -> PgCluster {
        let dir = tempfile::tempdir().expect("tempdir").keep().join("pg");
        let port = super::free_port();
        let mut c = PgCluster { dir, port, admin_url: String::new() };
        c.admin_url = c.up();
        c
    }

    fn up(&self) -> String {
        let out =
            Command::new(script()).arg("start").arg(&self.dir).arg(self.port.to_string()).output().expect("run pg.sh");
        assert!(out.status.success(), "pg.sh start failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    /// Stops the server (fast shutdown: connections are cut).
    pub fn stop(&self) {
        let out = Command::new(script()).arg("stop").arg(&self.dir).output().expect("run pg.sh");
        assert!(out.status.success(), "pg.sh stop failed: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// The postmaster's process id while it runs (the first line of `postmaster.pid`).
    pub fn postmaster_pid(&self) -> Option<u32> {
        std::fs::read_to_string(self.dir.join("postmaster.pid")).ok()?.lines().next()?.trim().parse().ok()
    }

    /// Starts it again on the same port and data.
    pub fn restart(&self) {
        self.up();
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let _ = Command::new(script()).arg("stop").arg(&self.dir).output();
        if let Some(parent) = self.dir.parent() {
            let _ = std::fs::remove_dir_all(parent);
        }
    }
}
