//! herald's log lines as an operator reads them from a file: plain text,
//! without the ANSI colour codes a terminal would get. Not here: what is
//! logged (each module's own tests).

mod common;

use std::time::{Duration, Instant};

use common::*;

/// The binary with its logs (standard output) and standard error going to a
/// file, as under a process manager or `herald serve > herald.log 2>&1`:
/// nothing in the file is a colour code.
#[tokio::test]
async fn logs_written_to_a_file_carry_no_colour_codes() {
    let data = data_dir();
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("herald.log");
    let file = std::fs::File::create(&log).unwrap();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(["serve", "--listen", &addr.to_string(), "--data"])
        .arg(data.path())
        .env("HERALD_JWT_SECRET", SECRET)
        .env("HERALD_API_KEY", API_KEY)
        // A terminal's settings must not decide this test: the file alone must.
        .env_remove("NO_COLOR")
        .env_remove("RUST_LOG")
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .expect("start herald");
    let deadline = Instant::now() + WAIT;
    while try_http(addr, "GET", "/readyz", None, Duration::from_secs(1)).await.is_none_or(|(status, _)| status != 200) {
        assert!(Instant::now() < deadline, "herald not ready:\n{}", std::fs::read_to_string(&log).unwrap_or_default());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("herald serving"), "no log line in the file:\n{text}");
    assert!(!text.contains('\u{1b}'), "colour codes in the log file:\n{text:?}");
}
