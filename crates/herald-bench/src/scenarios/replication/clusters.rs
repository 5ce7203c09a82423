//! The PostgreSQL setups that `replication` compares, made with the
//! repository's `scripts/pg.sh` on free loopback ports in a temp dir: a server
//! alone, a primary with a synchronous standby, a primary with an asynchronous
//! one. It owns starting them, checking that each standby streams in the mode
//! its setup names, the CPU time of their processes, and stopping every one
//! it started (on drop too, so an error stops them) before the temp dir goes.
//! What runs against them is the scenario's.

use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use clap::ValueEnum;
use serde::Serialize;

use crate::{pg_script, procstat};

/// A standby reaches the state its setup names within this (it starts from a base backup).
const STREAMING_TIMEOUT: Duration = Duration::from_secs(60);
/// How often the primary is asked meanwhile.
const POLL: Duration = Duration::from_millis(100);

/// One way of running a shard's PostgreSQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Setup {
    /// A server with no standby.
    Alone,
    /// A primary whose commits wait for a standby's flush (`synchronous_standby_names`).
    Sync,
    /// A primary streaming to a standby that commits do not wait for.
    Async,
}

impl Setup {
    pub fn name(self) -> &'static str {
        match self {
            Setup::Alone => "alone",
            Setup::Sync => "sync",
            Setup::Async => "async",
        }
    }

    /// The `pg_stat_replication.sync_state` its standby must show, if it has one.
    fn standby_state(self) -> Option<&'static str> {
        match self {
            Setup::Alone => None,
            Setup::Sync => Some("sync"),
            Setup::Async => Some("async"),
        }
    }
}

/// One started setup: where to create databases, and its servers' data dirs.
pub struct Cluster {
    pub setup: Setup,
    /// `postgres://herald@127.0.0.1:PORT/postgres` of the primary (or the lone server).
    pub admin_url: String,
    /// The primary's data dir, then the standby's if any.
    dirs: Vec<PathBuf>,
}

impl Cluster {
    /// The standby's name (its `application_name`) in `synchronous_standby_names`.
    fn standby_name(&self) -> String {
        format!("bench_{}", self.setup.name())
    }

    /// Fails unless the standby (if any) streams in the setup's mode now.
    pub async fn check(&self) -> anyhow::Result<()> {
        let Some(want) = self.setup.standby_state() else { return Ok(()) };
        let got = replication_state(&self.admin_url, &self.standby_name()).await?;
        ensure!(
            got.as_ref().is_some_and(|(state, sync)| state == "streaming" && sync == want),
            "{}: the standby is not streaming as {want}: {got:?}",
            self.setup.name()
        );
        Ok(())
    }

    /// CPU seconds (user + system) that this setup's PostgreSQL processes have
    /// used, with the backends that have exited (the postmaster reaps them, so
    /// they count in its children's time).
    pub fn cpu_s(&self) -> f64 {
        self.dirs.iter().map(|d| procstat::cpu_in(d)).sum()
    }

    /// `SHOW server_version` of the primary.
    pub async fn version(&self) -> anyhow::Result<String> {
        let client = connect(&self.admin_url).await?;
        Ok(client.query_one("SHOW server_version", &[]).await?.get(0))
    }
}

/// The setups of one bench run; stops all of them when dropped.
pub struct Setups {
    pub list: Vec<Cluster>,
    script: PathBuf,
    /// Every data dir a server may have been started in, stopped in reverse order.
    started: Vec<PathBuf>,
    /// Holds every data dir; removed after `drop` has stopped their servers.
    dir: tempfile::TempDir,
}

impl Setups {
    /// Starts each of `setups` with `script` (pg.sh) and waits until every standby streams as its setup says.
    pub async fn start(script: &Path, setups: &[Setup]) -> anyhow::Result<Setups> {
        let script = script.canonicalize().with_context(|| format!("no {}", script.display()))?;
        let dir = tempfile::TempDir::with_prefix("herald-bench-replication-")?;
        let mut out = Setups { list: Vec::new(), script, started: Vec::new(), dir };
        for &setup in setups {
            let cluster = out.start_one(setup).await.with_context(|| format!("starting the {} setup", setup.name()))?;
            out.list.push(cluster);
        }
        Ok(out)
    }

    async fn start_one(&mut self, setup: Setup) -> anyhow::Result<Cluster> {
        let primary = self.dir.path().join(format!("{}-primary", setup.name()));
        self.started.push(primary.clone());
        let port = free_port()?;
        let admin_url = self.pg(&["start", path_str(&primary)?, &port.to_string()]).await?;
        let mut cluster = Cluster { setup, admin_url, dirs: vec![primary.clone()] };
        if setup.standby_state().is_none() {
            return Ok(cluster);
        }
        let standby = self.dir.path().join(format!("{}-standby", setup.name()));
        self.started.push(standby.clone());
        cluster.dirs.push(standby.clone());
        let name = cluster.standby_name();
        self.pg(&["standby", path_str(&standby)?, &free_port()?.to_string(), &port.to_string(), &name]).await?;
        if setup == Setup::Sync {
            self.pg(&["sync", path_str(&primary)?, &name]).await?;
        }
        let deadline = Instant::now() + STREAMING_TIMEOUT;
        while cluster.check().await.is_err() {
            ensure!(Instant::now() < deadline, "the standby did not stream in {STREAMING_TIMEOUT:?}");
            tokio::time::sleep(POLL).await;
        }
        cluster.check().await?;
        Ok(cluster)
    }

    /// Runs `pg.sh ARGS`; its standard output, trimmed.
    async fn pg(&self, args: &[&str]) -> anyhow::Result<String> {
        pg_script::run(&self.script, args).await
    }
}

impl Drop for Setups {
    fn drop(&mut self) {
        // Blocking, but only at the end of the bench (or on its way out with an error).
        for dir in self.started.iter().rev() {
            let stopped = std::process::Command::new(&self.script).arg("stop").arg(dir).status();
            if !stopped.as_ref().is_ok_and(|s| s.success()) {
                eprintln!("replication: pg.sh stop {} failed: {stopped:?}", dir.display());
            }
        }
    }
}

fn path_str(p: &Path) -> anyhow::Result<&str> {
    p.to_str().with_context(|| format!("{} is not UTF-8", p.display()))
}

/// A loopback port free now (bound, read back, released): pg.sh needs a number.
fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?.local_addr()?.port())
}

async fn connect(url: &str) -> anyhow::Result<tokio_postgres::Client> {
    let (client, conn) =
        tokio_postgres::connect(url, tokio_postgres::NoTls).await.with_context(|| format!("connecting to {url}"))?;
    tokio::spawn(conn);
    Ok(client)
}

/// `(state, sync_state)` of the standby named `name` in the primary's `pg_stat_replication`.
async fn replication_state(url: &str, name: &str) -> anyhow::Result<Option<(String, String)>> {
    let client = connect(url).await?;
    let row = client
        .query_opt("SELECT state, sync_state FROM pg_stat_replication WHERE application_name = $1", &[&name])
        .await?;
    Ok(row.map(|r| (r.get(0), r.get(1))))
}
