//! A PostgreSQL primary with a streaming standby for failover tests, both
//! real servers started by `scripts/pg.sh` (`standby`, `sync`, `promote`):
//! kill or freeze the primary, promote the standby, rebuild the old primary
//! as the new one's standby from a fresh base backup, and again.
//!
//! Not here: single clusters and databases on them (`pg.rs`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::pg::script;

/// Longest a [`PgPair`] waits for a server to reach a state (streaming, sync,
/// replayed, gone) before the test fails.
const PAIR_WAIT: Duration = Duration::from_secs(30);

/// One server of a [`PgPair`]: its name (its `application_name` as a
/// standby), data directory and port never change; its role does.
struct PgNode {
    name: &'static str,
    dir: PathBuf,
    port: u16,
}

/// Who is who in a [`PgPair`] right now.
struct PairState {
    /// Index in `nodes` of the primary.
    primary: usize,
    /// Whether the other node is a standby of the primary (false from a
    /// failover until [`PgPair::rebuild_old_primary`]).
    standby_up: bool,
}

/// A primary and a streaming standby on loopback (nodes "a" and "b"), whose
/// roles swap on failover. Faults act on the machine's processes (SIGKILL,
/// SIGSTOP); a failed primary comes back as a standby from a fresh base
/// backup. Methods block (call them in `spawn_blocking` from async tests) and
/// take `&self`, so one pair can be shared in an `Arc`. Dropping it kills
/// both servers and removes their data.
pub struct PgPair {
    root: PathBuf,
    nodes: [PgNode; 2],
    /// With `sync`, the standby is the primary's synchronous standby.
    sync: bool,
    state: Mutex<PairState>,
}

impl PgPair {
    /// Starts node "a" as the primary and "b" as its standby; with `sync`,
    /// "b" is its synchronous standby (commits wait for it). Returns once the
    /// standby streams (and, with `sync`, is the primary's `sync` standby).
    pub fn start(sync: bool) -> PgPair {
        let root = tempfile::tempdir().expect("tempdir").keep();
        let root = root.canonicalize().expect("canonical tempdir");
        let node = |name| PgNode { name, dir: root.join(name), port: super::free_port() };
        let nodes = [node("a"), node("b")];
        let pair = PgPair { nodes, sync, root, state: Mutex::new(PairState { primary: 0, standby_up: false }) };
        let a = &pair.nodes[0];
        pg_sh(&["start", &path_arg(&a.dir), &a.port.to_string()]);
        pair.start_standby(0, 1);
        pair
    }

    /// Starts node `standby` as a fresh standby of the primary `primary`, makes
    /// it synchronous when the pair is, and waits until it streams.
    fn start_standby(&self, primary: usize, standby: usize) {
        let (p, s) = (&self.nodes[primary], &self.nodes[standby]);
        pg_sh(&["standby", &path_arg(&s.dir), &s.port.to_string(), &p.port.to_string(), s.name]);
        if self.sync {
            pg_sh(&["sync", &path_arg(&p.dir), s.name]);
        }
        let want = if self.sync { "sync" } else { "async" };
        let sql = format!(
            "SELECT sync_state FROM pg_stat_replication WHERE application_name = '{}' AND state = 'streaming'",
            s.name
        );
        wait_for(&format!("standby {} streams ({want}) from {}", s.name, p.name), || {
            psql(p.port, &sql).is_ok_and(|out| out == want)
        });
        self.state.lock().unwrap().standby_up = true;
    }

    fn primary_index(&self) -> usize {
        self.state.lock().unwrap().primary
    }

    fn primary(&self) -> &PgNode {
        &self.nodes[self.primary_index()]
    }

    fn standby(&self) -> &PgNode {
        &self.nodes[1 - self.primary_index()]
    }

    /// The URL of database `db` on both nodes, in the fixed order a then b,
    /// that connects to whichever takes writes. Note: tokio-postgres's
    /// `connect_timeout` bounds only the TCP connect, so a frozen node (whose
    /// kernel still accepts) stalls a connect that tries it first.
    pub fn hosts_url(&self, db: &str) -> String {
        let [a, b] = &self.nodes;
        format!("postgres://herald@127.0.0.1:{},127.0.0.1:{}/{db}?target_session_attrs=read-write", a.port, b.port)
    }

    /// The URL of database `db` on the current primary.
    pub fn primary_url(&self, db: &str) -> String {
        format!("postgres://herald@127.0.0.1:{}/{db}", self.primary().port)
    }

    /// The URL of database `db` on the other node (the standby, or the old
    /// primary between a failover and its rebuild).
    pub fn standby_url(&self, db: &str) -> String {
        format!("postgres://herald@127.0.0.1:{}/{db}", self.standby().port)
    }

    /// The admin URL (database `postgres`) of the current primary.
    pub fn admin_url_primary(&self) -> String {
        self.primary_url("postgres")
    }

    /// The admin URL (database `postgres`) of the other node.
    pub fn admin_url_standby(&self) -> String {
        self.standby_url("postgres")
    }

    /// The current primary's port.
    pub fn primary_port(&self) -> u16 {
        self.primary().port
    }

    /// The other node's port.
    pub fn standby_port(&self) -> u16 {
        self.standby().port
    }

    /// The current primary's name ("a" or "b").
    pub fn primary_name(&self) -> &'static str {
        self.primary().name
    }

    /// The current primary's postmaster pid while its `postmaster.pid` is there
    /// (still there, stale, after a SIGKILL).
    pub fn primary_pid(&self) -> Option<u32> {
        std::fs::read_to_string(self.primary().dir.join("postmaster.pid")).ok()?.lines().next()?.trim().parse().ok()
    }

    /// Runs `sql` in database `postgres` of the primary; its rows, `|`
    /// between columns, one a line. Panics when it fails.
    pub fn query_primary(&self, sql: &str) -> String {
        psql(self.primary_port(), sql).unwrap_or_else(|e| panic!("on the primary: {sql}: {e}"))
    }

    /// Runs `sql` in database `postgres` of the other node, as [`Self::query_primary`].
    pub fn query_standby(&self, sql: &str) -> String {
        psql(self.standby_port(), sql).unwrap_or_else(|e| panic!("on the standby: {sql}: {e}"))
    }

    /// The data directories of nodes a and b (for [`pids_in`] after a drop).
    pub fn dirs(&self) -> [PathBuf; 2] {
        [self.nodes[0].dir.clone(), self.nodes[1].dir.clone()]
    }

    /// Creates a database with a fresh name on the primary and, while the
    /// standby streams, waits until the standby has replayed it. Returns its name.
    pub fn create_database(&self) -> String {
        let name = format!("herald_test_{:016x}", rand::random::<u64>());
        self.query_primary(&format!("CREATE DATABASE {name}"));
        if self.state.lock().unwrap().standby_up {
            let port = self.standby_port();
            let sql = format!("SELECT count(*) FROM pg_database WHERE datname = '{name}'");
            wait_for(&format!("the standby replays database {name}"), || psql(port, &sql).is_ok_and(|n| n == "1"));
        }
        name
    }

    /// The primary's machine dies: its postmaster and every child are
    /// stopped, then SIGKILLed together; returns once they have exited. The
    /// roles stay until [`Self::promote_standby`].
    pub fn kill9_primary(&self) {
        let dir = &self.primary().dir;
        freeze(dir);
        kill_all(dir);
    }

    /// The primary's machine hangs: SIGSTOP to its postmaster and every child.
    /// Its port still accepts TCP connections, which then get no answer.
    pub fn freeze_primary(&self) {
        freeze(&self.primary().dir);
    }

    /// SIGCONT to every process of the pair: a frozen primary, promoted over
    /// or not, runs again (and an old primary then competes with the new one:
    /// split brain, unless it was rebuilt first).
    pub fn thaw_old_primary(&self) {
        for node in &self.nodes {
            for pid in pids_in(&node.dir) {
                signal(pid, libc::SIGCONT);
            }
        }
    }

    /// The standby stops receiving WAL (its `primary_conninfo` emptied and
    /// reloaded; returns once its walreceiver is gone), while the primary
    /// keeps committing: a promotion then comes up without those commits.
    /// Only for a pair started with `sync` false: a synchronous primary's
    /// commits would wait for the standby forever.
    pub fn pause_replication(&self) {
        assert!(!self.sync, "pause_replication on a synchronous pair: every commit would hang");
        self.cut_replication();
    }

    /// The standby stops receiving WAL, as [`Self::pause_replication`], on
    /// any pair: a synchronous primary's commits then wait for it (commit
    /// locally, visible, unacknowledged), as when its standby is unreachable.
    pub fn cut_replication(&self) {
        self.query_standby("ALTER SYSTEM SET primary_conninfo = ''");
        self.query_standby("SELECT pg_reload_conf()");
        let (port, primary) = (self.standby_port(), self.primary_port());
        let gone =
            format!("SELECT count(*) FROM pg_stat_replication WHERE application_name = '{}'", self.standby().name);
        wait_for("the standby's walreceiver stops", || {
            psql(port, "SELECT count(*) FROM pg_stat_wal_receiver").is_ok_and(|n| n == "0")
                && psql(primary, &gone).is_ok_and(|n| n == "0")
        });
        self.state.lock().unwrap().standby_up = false;
    }

    /// Promotes the standby (`pg.sh promote`: returns once it takes writes);
    /// the roles swap. The new primary has no synchronous standby until
    /// [`Self::rebuild_old_primary`], so its commits do not wait.
    pub fn promote_standby(&self) {
        let standby = 1 - self.primary_index();
        pg_sh(&["promote", &path_arg(&self.nodes[standby].dir)]);
        let mut state = self.state.lock().unwrap();
        state.primary = standby;
        state.standby_up = false;
    }

    /// Fast shutdown of the primary (its connections cut, `pg_ctl -m fast`);
    /// returns once it is down. The standby waits for it to come back.
    pub fn stop_primary(&self) {
        pg_sh(&["stop", &path_arg(&self.primary().dir)]);
    }

    /// Starts the primary again on its port and data, after [`Self::stop_primary`].
    pub fn start_primary(&self) {
        let p = self.primary();
        pg_sh(&["start", &path_arg(&p.dir), &p.port.to_string()]);
    }

    /// Waits until the standby has replayed all the primary has written so far.
    pub fn wait_replayed(&self) {
        let lsn = self.query_primary("SELECT pg_current_wal_lsn()");
        let sql = format!("SELECT pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn");
        let port = self.standby_port();
        wait_for("the standby replays the primary's WAL", || psql(port, &sql).is_ok_and(|v| v == "t"));
    }

    /// Brings the old primary back as a standby of the new one: SIGKILLs what
    /// is left of it (frozen or not) and waits until it has exited, wipes its
    /// data, takes a fresh base backup on its old port, and (with `sync`)
    /// makes it the synchronous standby. Then the pair can fail over again.
    pub fn rebuild_old_primary(&self) {
        let primary = self.primary_index();
        kill_all(&self.nodes[1 - primary].dir);
        self.start_standby(primary, 1 - primary);
    }
}

impl Drop for PgPair {
    fn drop(&mut self) {
        // Throwaway data: SIGKILL (which also ends stopped processes) is the fastest stop.
        for node in &self.nodes {
            freeze(&node.dir);
            for pid in pids_in(&node.dir) {
                signal(pid, libc::SIGKILL);
            }
        }
        // No panic here (a drop while unwinding would abort): a process still
        // there after the wait leaves its directory behind.
        let gone = poll(|| self.nodes.iter().all(|n| pids_in(&n.dir).is_empty()));
        if gone {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}

/// The live processes working in `dir`. Every PostgreSQL process runs in its
/// data directory, so this finds all of a server's processes, the children a
/// SIGKILLed postmaster left too. Zombies have no working directory and are
/// not listed.
pub fn pids_in(dir: &Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|e| {
            let e = e.ok()?;
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            (std::fs::read_link(e.path().join("cwd")).ok()? == dir).then_some(pid)
        })
        .collect()
}

fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) only sends a signal; a pid that has exited meanwhile gives ESRCH.
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}

/// SIGSTOP to every process in `dir`, again until no new one shows up (the
/// postmaster may fork between the listing and its stop).
fn freeze(dir: &Path) {
    let mut stopped = std::collections::HashSet::new();
    loop {
        let fresh: Vec<u32> = pids_in(dir).into_iter().filter(|p| !stopped.contains(p)).collect();
        if fresh.is_empty() {
            return;
        }
        for pid in fresh {
            signal(pid, libc::SIGSTOP);
            stopped.insert(pid);
        }
    }
}

/// SIGKILL to every process in `dir`; returns once all have exited.
fn kill_all(dir: &Path) {
    freeze(dir);
    for pid in pids_in(dir) {
        signal(pid, libc::SIGKILL);
    }
    wait_for(&format!("the processes in {} exit", dir.display()), || pids_in(dir).is_empty());
}

/// Polls `done` every 20 ms; panics naming `what` after [`PAIR_WAIT`].
fn wait_for(what: &str, done: impl FnMut() -> bool) {
    assert!(poll(done), "timed out waiting until {what}");
}

/// Polls `done` every 20 ms for up to [`PAIR_WAIT`]; whether it came true.
fn poll(mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + PAIR_WAIT;
    while !done() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

fn path_arg(p: &Path) -> String {
    p.to_str().expect("UTF-8 temp path").to_string()
}

/// Runs `scripts/pg.sh` with `args`; panics with its stderr when it fails.
fn pg_sh(args: &[&str]) -> String {
    let out = Command::new(script()).args(args).output().expect("run pg.sh");
    assert!(out.status.success(), "pg.sh {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Runs `sql` with psql in database `postgres` on 127.0.0.1:`port`: the
/// unaligned rows, or psql's error. Gives up on a server that does not
/// answer within 5 s.
fn psql(port: u16, sql: &str) -> Result<String, String> {
    let out = Command::new("psql")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "herald", "-d", "postgres"])
        .args(["-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-c", sql])
        .env("PGCONNECT_TIMEOUT", "5")
        .output()
        .map_err(|e| format!("run psql: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}
