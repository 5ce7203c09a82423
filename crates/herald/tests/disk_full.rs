//! The embedded store on a full disk, as an operator meets it: a small tmpfs
//! the test mounts (as root), filled while herald runs, then freed.
//!
//! - Sends are refused with `unavailable`, and nothing acknowledged is lost.
//! - `/readyz` answers 503 while the store cannot commit, and 200 once it can.
//! - The failures are counted by kind (`disk_full`), and logged at most once a second.
//! - herald started on a full disk refuses with one line, no backtrace.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use serde_json::json;

/// A tmpfs of `mib` MiB, unmounted and removed when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(mib: u32) -> Tmpfs {
        let dir = tempfile::tempdir().expect("tempdir").keep();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(&dir)
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "mount a tmpfs (this test runs as root): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs(dir)
    }

    /// Fills it up to the last byte with one file; answers the file.
    fn fill(&self) -> PathBuf {
        let file = self.0.join("filler");
        let _ = Command::new("dd").arg("if=/dev/zero").arg(format!("of={}", file.display())).arg("bs=64k").output();
        file
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).output();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn readyz(addr: std::net::SocketAddr) -> u16 {
    try_http(addr, "GET", "/readyz", None, Duration::from_secs(2)).await.map_or(0, |(status, _)| status)
}

async fn wait_readyz(addr: std::net::SocketAddr, want: u16, what: &str) -> Duration {
    let started = Instant::now();
    while readyz(addr).await != want {
        assert!(started.elapsed() < WAIT, "{what}: /readyz never answered {want}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    started.elapsed()
}

#[tokio::test]
#[ignore = "mounts a tmpfs (root); scripts/test.sh runs it"]
async fn a_full_disk_refuses_writes_leaves_rotation_and_comes_back_when_freed() {
    let fs = Tmpfs::mount(16);
    let data = fs.0.join("data");
    let server = BinServer::start(&data, &[], &[]);
    server.wait_ready().await;
    let addr = server.addr;
    let token = token_at(addr, "w", "alice").await;
    let mut alice = Client::connect(&format!("ws://{addr}/v1/ws?ws=w")).await;
    alice.ok(json!({"op": "hello", "token": token})).await;
    alice.ok(json!({"op": "join", "chat": "g"})).await;
    let mut acked = vec![alice.ok(json!({"op": "send", "chat": "g", "body": "before"})).await["seq"].as_u64().unwrap()];

    let filler = fs.fill();
    let full_since = Instant::now();
    // Sends are refused, as many as come, and /readyz takes the node out of rotation.
    let body = "x".repeat(4000);
    let mut refused = 0;
    for i in 0..50 {
        let r = alice.request(json!({"op": "send", "chat": "g", "body": body, "client_id": format!("full-{i}")})).await;
        match r.get("ok") {
            Some(ok) => acked.push(ok["seq"].as_u64().unwrap()),
            None => {
                assert_eq!(r["err"]["code"], "unavailable", "{r}");
                refused += 1;
            }
        }
    }
    assert!(refused > 0, "a full disk refuses sends");
    wait_readyz(addr, 503, "a store that cannot commit").await;
    let (_, text) = http_raw(addr, "GET", "/metrics", None, None).await;
    // (Sends behind a refused one are held back on their connection, not sent to the store.)
    assert!(metric(&text, "herald_store_errors_total{kind=\"disk_full\"}") >= 1.0, "counted by kind: {text}");

    // Logged at most once a second, not once per refused send.
    let lines = server.stderr_all().lines().filter(|l| l.contains("store commit failed")).count();
    let most = full_since.elapsed().as_secs() as usize + 1;
    assert!(
        lines >= 1 && lines <= most,
        "{lines} error lines for {refused} refused sends in {:?}",
        full_since.elapsed()
    );

    // Space comes back: the node returns to rotation and takes writes.
    std::fs::remove_file(&filler).unwrap();
    let back = wait_readyz(addr, 200, "a store with room again").await;
    let seq = alice.ok(json!({"op": "send", "chat": "g", "body": "after", "client_id": "after"})).await["seq"]
        .as_u64()
        .unwrap();
    acked.push(seq);
    eprintln!("refused {refused} sends on the full disk; ready again {back:?} after space came back");
    // Nothing acknowledged is lost.
    let page = alice.ok(json!({"op": "fetch", "chat": "g", "after": 0})).await;
    let stored: Vec<u64> = page["events"].as_array().unwrap().iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    for q in acked {
        assert!(stored.contains(&q), "acknowledged seq {q} is stored");
    }
}

#[tokio::test]
#[ignore = "mounts a tmpfs (root); scripts/test.sh runs it"]
async fn herald_started_on_a_full_disk_refuses_in_one_line() {
    let fs = Tmpfs::mount(1);
    fs.fill();
    let out = Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(Path::new(&fs.0).join("data"))
        .env("HERALD_JWT_SECRET", SECRET)
        .env("HERALD_API_KEY", API_KEY)
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("run herald");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line, no backtrace: {stderr}");
    assert!(lines[0].contains("refusing to start") && lines[0].contains("is full"), "{stderr}");
}
