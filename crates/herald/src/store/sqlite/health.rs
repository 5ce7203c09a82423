//! Whether the embedded store can commit, for `/readyz` and the logs. A
//! full disk (or another write error) fails every commit while reads still
//! answer; a node in that state must leave the load balancer's rotation, and
//! must not log an error line per refused write.
//!
//! - Every failed commit is counted by kind (`herald_store_errors_total`:
//!   `disk_full`, `io`, `commit`) and logged at most once a second per kind,
//!   with the number of failures since the last line.
//! - The store is not ready from a failed commit until a commit succeeds,
//!   or until the data directory has room again ([`ROOM`]) and the failure
//!   is [`QUIET_AFTER`] old: a node with no writes coming must not stay out
//!   of rotation for ever once space is back.
//!
//! Not here: the writer (`writer.rs`), the readiness answer (`mod.rs`).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::log_every::LogEvery;
use std::time::{Duration, Instant};

/// Free space below which a data directory counts as full.
const ROOM: u64 = 1024 * 1024;
/// A failure this old no longer keeps the store out of rotation once there is room.
const QUIET_AFTER: Duration = Duration::from_secs(2);

/// The writer's record of its commits.
pub(super) struct Health {
    dir: PathBuf,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The last commit failed: when, and of which kind.
    failing: Option<(Instant, &'static str)>,
    /// Per kind, its log gate.
    logged: Vec<(&'static str, Arc<LogEvery>)>,
}

/// The kind a failed commit is counted as.
pub(super) fn kind_of(e: &rusqlite::Error) -> &'static str {
    match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::DiskFull) => "disk_full",
        Some(rusqlite::ErrorCode::SystemIoFailure) => "io",
        _ => "commit",
    }
}

impl Health {
    pub(super) fn new(dir: PathBuf) -> Health {
        Health { dir, state: Mutex::new(State::default()) }
    }

    /// A commit succeeded.
    pub(super) fn committed(&self) {
        let mut s = self.state.lock().expect("health lock poisoned");
        if let Some((since, kind)) = s.failing.take() {
            tracing::info!(kind, failing_for_ms = since.elapsed().as_millis() as u64, "the store commits again");
        }
    }

    /// A commit failed with `e`: counted, logged at most once a second per kind.
    pub(super) fn failed(&self, e: &rusqlite::Error, writes: usize) {
        let kind = kind_of(e);
        metrics::counter!("herald_store_errors_total", "kind" => kind).increment(1);
        let gate = {
            let mut s = self.state.lock().expect("health lock poisoned");
            if s.failing.is_none() {
                s.failing = Some((Instant::now(), kind));
            }
            match s.logged.iter().find(|(k, _)| *k == kind) {
                Some((_, gate)) => gate.clone(),
                None => {
                    let gate = Arc::new(LogEvery::default());
                    s.logged.push((kind, gate.clone()));
                    gate
                }
            }
        };
        if let Some(failures) = gate.note() {
            tracing::error!(kind, error = %e, writes, failures, "store commit failed (at most one line a second)");
        }
    }

    /// Why the store cannot take writes now, if it cannot.
    pub(super) fn cannot_commit(&self) -> Option<String> {
        let (since, kind) = self.state.lock().expect("health lock poisoned").failing?;
        let room = free_bytes(&self.dir).is_none_or(|free| !is_full(free));
        if room && since.elapsed() >= QUIET_AFTER {
            return None;
        }
        Some(match kind {
            "disk_full" => "the store cannot commit: its disk is full".to_string(),
            other => format!("the store cannot commit ({other} failure)"),
        })
    }
}

/// Whether `free` bytes leave a data directory full.
pub(super) fn is_full(free: u64) -> bool {
    free < ROOM
}

/// Bytes an unprivileged writer may still use in `dir`'s file system.
pub(super) fn free_bytes(dir: &std::path::Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: statvfs fills `st` from a NUL-terminated path; nothing else is touched.
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some(st.f_bavail as u64 * st.f_frsize as u64)
}
