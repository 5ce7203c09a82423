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
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Free space below which a data directory counts as full.
const ROOM: u64 = 1024 * 1024;
/// A failure this old no longer keeps the store out of rotation once there is room.
const QUIET_AFTER: Duration = Duration::from_secs(2);
/// At most one log line per kind of failure this often.
const LOG_EVERY: Duration = Duration::from_secs(1);

/// The writer's record of its commits.
pub(super) struct Health {
    dir: PathBuf,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The last commit failed: when, and of which kind.
    failing: Option<(Instant, &'static str)>,
    /// Per kind: the last log line, and failures since.
    logged: Vec<(&'static str, Instant, u64)>,
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
        let mut s = self.state.lock().expect("health lock poisoned");
        let now = Instant::now();
        if s.failing.is_none() {
            s.failing = Some((now, kind));
        }
        let slot = match s.logged.iter().position(|(k, _, _)| *k == kind) {
            Some(i) => i,
            None => {
                s.logged.push((kind, now - LOG_EVERY, 0));
                s.logged.len() - 1
            }
        };
        let (_, last, since) = &mut s.logged[slot];
        *since += 1;
        if now.duration_since(*last) >= LOG_EVERY {
            tracing::error!(kind, error = %e, writes, failures = *since, "store commit failed (at most one line a second)");
            *last = now;
            *since = 0;
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
