//! Real PostgreSQL for tests: fresh databases on a running cluster, whole
//! clusters a test can stop and start (through `scripts/pg.sh`), with TLS
//! when asked (certificates made by the `openssl` command), and a primary
//! with a streaming standby that a test fails over ([`PgPair`]). Not herald's
//! own PostgreSQL code: that is `src/store/postgres`.

use std::path::{Path, PathBuf};
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

pub(crate) fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/pg.sh")
}

/// A PostgreSQL cluster of its own, stopped and removed when dropped.
/// The suite's PostgreSQL (`HERALD_TEST_PG_URL`, an admin URL) or, without
/// one, a cluster of this test's own: its admin URL, and the cluster to keep
/// alive (and stop) with the test.
pub fn suite_or_own() -> (Option<PgCluster>, String) {
    match std::env::var("HERALD_TEST_PG_URL") {
        Ok(url) => (None, url),
        Err(_) => {
            let pg = PgCluster::start();
            let url = pg.admin_url.clone();
            (Some(pg), url)
        }
    }
}

pub struct PgCluster {
    pub dir: PathBuf,
    pub port: u16,
    pub admin_url: String,
    /// With ssl on: the directory of its `server.crt` and `server.key`.
    tls: Option<PathBuf>,
}

impl PgCluster {
    pub fn start() -> PgCluster {
        Self::start_with(None)
    }

    /// A cluster with ssl on, serving the certificate of `tls` (see [`TestPki`]).
    /// Plain connections are still accepted.
    pub fn start_tls(tls: &Path) -> PgCluster {
        Self::start_with(Some(tls.to_path_buf()))
    }

    fn start_with(tls: Option<PathBuf>) -> PgCluster {
        let dir = tempfile::tempdir().expect("tempdir").keep().join("pg");
        let port = super::free_port();
        let mut c = PgCluster { dir, port, admin_url: String::new(), tls };
        c.admin_url = c.up();
        c
    }

    fn up(&self) -> String {
        let mut cmd = Command::new(script());
        cmd.arg("start").arg(&self.dir).arg(self.port.to_string());
        if let Some(tls) = &self.tls {
            cmd.arg(tls);
        }
        let out = cmd.output().expect("run pg.sh");
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

/// A throwaway CA and a server certificate it signed for `127.0.0.1` and
/// `localhost`, made with the `openssl` command in a directory of their own.
pub struct TestPki {
    /// The CA's certificate (PEM): what `sslrootcert` names.
    pub ca: PathBuf,
    /// Holds `server.crt` and `server.key`: what [`PgCluster::start_tls`] takes.
    pub server: PathBuf,
    dir: tempfile::TempDir,
}

impl TestPki {
    pub fn new() -> TestPki {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let openssl = |args: &[&str]| {
            let out = Command::new("openssl").args(args).current_dir(d).output().expect("run openssl");
            assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        let p256 = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
        let ca_ext =
            ["-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"];
        // A name of its own: another test CA must not pass for this one's issuer.
        let subject = format!("/CN=herald test CA {:016x}", rand::random::<u64>());
        let ca_out = ["-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", &subject];
        openssl(&[&["req", "-x509"], &p256[..], &ca_ext[..], &ca_out[..]].concat());
        std::fs::write(
            d.join("server.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\nbasicConstraints=critical,CA:FALSE\n",
        )
        .unwrap();
        openssl(
            &[&["req"], &p256[..], &["-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost"]].concat(),
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
            "-out",
            "server.crt",
            "-days",
            "2",
            "-extfile",
            "server.ext",
        ]);
        TestPki { ca: d.join("ca.crt"), server: d.to_path_buf(), dir }
    }
}
