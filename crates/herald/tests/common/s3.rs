//! A real S3-compatible server for tests: versitygw over a temporary folder,
//! started through `scripts/s3.sh` (which builds it once into a cache) on a
//! free loopback port, with a bucket; stopped by pid when dropped.

use std::path::PathBuf;
use std::process::Command;

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/s3.sh")
}

/// Test credentials (`scripts/s3.sh`'s defaults, said again here so a test
/// can sign with them).
pub const ACCESS_KEY: &str = "herald-test";
pub const SECRET_KEY: &str = "herald-test-secret-0123456789";
pub const BUCKET: &str = "herald";

pub struct S3Server {
    /// The `--files-s3` URL: keys, endpoint and bucket.
    pub url: String,
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    dir: tempfile::TempDir,
}

impl S3Server {
    /// Starts a server with an empty bucket [`BUCKET`].
    pub fn start() -> S3Server {
        Self::start_with_cors("")
    }

    /// The same, the bucket with the CORS rule docs/operations.md gives for
    /// these origins (comma-separated; none when empty).
    pub fn start_with_cors(origins: &str) -> S3Server {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = super::free_port();
        let out = Command::new(script())
            .arg("start")
            .arg(dir.path())
            .arg(port.to_string())
            .env("S3_ACCESS_KEY", ACCESS_KEY)
            .env("S3_SECRET_KEY", SECRET_KEY)
            .env("S3_BUCKET", BUCKET)
            .env("S3_CORS_ORIGINS", origins)
            .output()
            .expect("run s3.sh");
        assert!(out.status.success(), "s3.sh start failed: {}", String::from_utf8_lossy(&out.stderr));
        let url = String::from_utf8(out.stdout).expect("s3.sh prints a URL").trim().to_string();
        S3Server { url, endpoint: format!("http://127.0.0.1:{port}"), dir }
    }

    /// The server's process id (from `versitygw.pid`).
    pub fn pid(&self) -> Option<u32> {
        std::fs::read_to_string(self.dir.path().join("versitygw.pid")).ok()?.trim().parse().ok()
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = Command::new(script()).arg("stop").arg(self.dir.path()).output();
    }
}
