//! `herald backup`: a consistent copy of the embedded store while a server
//! writes to it, with SQLite's online backup API.
//!
//! The copy is taken in one backup step: SQLite holds one read transaction on
//! the store for the whole step, so the file holds exactly the events of one
//! commit and everything before it (in WAL mode the server's writer goes on
//! meanwhile; readers never block it). A copy in many small steps would be
//! restarted whenever the server commits, and under steady writes might never
//! finish. The copy is written beside its destination, checked, synced and
//! then renamed into place, so the destination is either the previous backup
//! or a whole new one.
//!
//! Not here: restoring (a backup is a store file: copy it to `herald.db` in an
//! empty `--data` directory and start herald there, see docs/deploy.md), or
//! PostgreSQL shards (pg_dump and point-in-time recovery are PostgreSQL's own).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use rusqlite::backup::{Backup, StepResult};
use rusqlite::{Connection, OpenFlags};

use crate::store::sqlite::DB_FILE;

/// Copy every remaining page in one step (see the module comment).
const ALL_PAGES: std::ffi::c_int = -1;
/// How long a backup waits for a store that is locked (a WAL recovery in
/// progress, say) before it gives up.
const BUSY_WAIT: Duration = Duration::from_secs(10);
/// Pause between tries while the store is locked.
const BUSY_PAUSE: Duration = Duration::from_millis(50);

/// What a backup holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub chats: u64,
    pub events: u64,
    pub bytes: u64,
    pub took: Duration,
}

/// Copies the store in `data` to the file `to` (replacing it once the copy is
/// whole and checked). Safe while a server runs on `data`.
pub fn backup(data: &Path, to: &Path) -> anyhow::Result<Summary> {
    let started = Instant::now();
    let source_path = data.join(DB_FILE);
    anyhow::ensure!(
        source_path.is_file(),
        "{} does not exist: --data must be the directory a server stores into",
        source_path.display()
    );
    refuse_inside(data, to)?;
    let partial = partial_path(to)?;
    let _ = std::fs::remove_file(&partial);
    let result = copy(&source_path, &partial).and_then(|summary| {
        publish(&partial, to)?;
        Ok(summary)
    });
    if result.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    result.map(|s| Summary { took: started.elapsed(), ..s })
}

/// The copy, checked and synced, at `partial`.
fn copy(source_path: &Path, partial: &Path) -> anyhow::Result<Summary> {
    // Read-only: a backup never writes to the server's store.
    let source = Connection::open_with_flags(source_path, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .with_context(|| format!("opening {}", source_path.display()))?;
    source.busy_timeout(BUSY_WAIT)?;
    // Created first, to learn this process's user id before SQLite touches the store.
    std::fs::File::create(partial).with_context(|| format!("creating {}", partial.display()))?;
    check_owner(source_path, partial)?;
    let mut dest = Connection::open(partial).with_context(|| format!("opening {}", partial.display()))?;
    {
        let backup = Backup::new(&source, &mut dest)?;
        let deadline = Instant::now() + BUSY_WAIT;
        loop {
            match backup.step(ALL_PAGES).context("copying the store")? {
                StepResult::Done => break,
                StepResult::More => {}
                StepResult::Busy | StepResult::Locked => {
                    anyhow::ensure!(Instant::now() < deadline, "the store stayed locked for {BUSY_WAIT:?}");
                    std::thread::sleep(BUSY_PAUSE);
                }
                other => anyhow::bail!("unexpected backup step result {other:?}"),
            }
        }
    }
    // One self-contained file: no -wal beside it to forget when it is moved.
    dest.pragma_update(None, "journal_mode", "DELETE")?;
    let check: String = dest.query_row("PRAGMA quick_check", [], |r| r.get(0))?;
    anyhow::ensure!(check == "ok", "the copy fails SQLite's check: {check}");
    let count = |table: &str| -> anyhow::Result<u64> {
        let n: i64 = dest.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))?;
        Ok(n as u64)
    };
    let (chats, events) = (count("chats")?, count("events")?);
    dest.close().map_err(|(_, e)| e)?;
    let file = std::fs::File::open(partial)?;
    file.sync_all()?;
    Ok(Summary { chats, events, bytes: file.metadata()?.len(), took: Duration::ZERO })
}

/// Renames the finished copy over `to`, and syncs the directory so the rename survives a crash.
fn publish(partial: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::rename(partial, to).with_context(|| format!("renaming {} to {}", partial.display(), to.display()))?;
    if let Some(dir) = to.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// `FILE.partial` beside `FILE`: the same file system, so the rename is atomic.
fn partial_path(to: &Path) -> anyhow::Result<PathBuf> {
    let name = to.file_name().ok_or_else(|| anyhow::anyhow!("--to {} names no file", to.display()))?;
    let mut partial = name.to_os_string();
    partial.push(".partial");
    Ok(to.with_file_name(partial))
}

/// A backup inside the data directory could be renamed over the live store.
fn refuse_inside(data: &Path, to: &Path) -> anyhow::Result<()> {
    let data = data.canonicalize().with_context(|| format!("--data {}", data.display()))?;
    let parent = match to.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(p) => p.canonicalize().with_context(|| format!("--to: directory {}", p.display()))?,
        None => std::env::current_dir()?,
    };
    anyhow::ensure!(
        !parent.starts_with(&data),
        "--to {} is inside --data {}: write backups elsewhere",
        to.display(),
        data.display()
    );
    Ok(())
}

/// Refuses to run as another user than the store's owner. Against a stopped
/// server, SQLite creates the store's `-wal` and `-shm` files for its read;
/// made by root, they would keep the server's own user from opening its store.
#[cfg(unix)]
fn check_owner(source: &Path, ours: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    // The file just created carries this process's user id.
    let (owner, me) = (std::fs::metadata(source)?.uid(), std::fs::metadata(ours)?.uid());
    anyhow::ensure!(
        owner == me,
        "{} belongs to user id {owner}, and this runs as {me}: run the backup as the server's user \
         (e.g. `runuser -u herald -- herald backup ...`)",
        source.display()
    );
    Ok(())
}

#[cfg(not(unix))]
fn check_owner(_: &Path, _: &Path) -> anyhow::Result<()> {
    Ok(())
}
