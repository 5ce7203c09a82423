//! The cell's services, started on free loopback ports under one temp dir:
//! a NATS cluster of three routed `nats-server`s (with their monitoring
//! ports) and the PostgreSQL shards, one server each, through the
//! repository's `scripts/pg.sh`. It owns starting them, their pids and data
//! dirs, and stopping every one it started, by pid or by `pg.sh stop`, also
//! when dropped on an error, before the temp dir goes. The herald nodes and
//! the load workers are `cell`'s.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};

use crate::http;
use crate::{pg_script, procstat};

/// NATS servers of the cell: three, so that one may fail (a later part of the issue).
const NATS_SERVERS: usize = 3;
/// The cluster forms (every server routes to both others) within this.
const NATS_FORM_TIMEOUT: Duration = Duration::from_secs(20);
/// How often the cluster's routes are asked meanwhile.
const POLL: Duration = Duration::from_millis(100);
/// Where Debian puts nats-server.
const NATS_BINS: &[&str] = &["/usr/sbin/nats-server", "/usr/bin/nats-server"];

/// One started nats-server.
pub struct NatsServer {
    pub port: u16,
    pub monitor: SocketAddr,
    child: Child,
}

impl NatsServer {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }
}

/// The cell's services; stops them all when dropped.
pub struct Services {
    pub nats: Vec<NatsServer>,
    /// `sN=postgres://...` for each shard, as `--store` takes it.
    pub stores: Vec<String>,
    /// Each shard's URL (of its `herald` database).
    pub shard_urls: Vec<String>,
    /// Each shard's data dir (its processes work there: their CPU is read by it).
    shard_dirs: Vec<PathBuf>,
    script: PathBuf,
    /// Holds every data dir and log; removed after `drop` has stopped the servers.
    dir: tempfile::TempDir,
}

impl Services {
    /// Starts three routed NATS servers and `shards` PostgreSQL servers (with `pg_script`).
    pub async fn start(pg_script: &Path, shards: usize) -> anyhow::Result<Services> {
        let script = pg_script.canonicalize().with_context(|| {
            format!("no {} (run from the repository's root, or pass --pg-script)", pg_script.display())
        })?;
        let dir = tempfile::TempDir::with_prefix("herald-bench-cell-")?;
        let mut s = Services {
            nats: Vec::new(),
            stores: Vec::new(),
            shard_urls: Vec::new(),
            shard_dirs: Vec::new(),
            script,
            dir,
        };
        s.start_nats()?;
        s.wait_routed().await?;
        for k in 0..shards {
            s.start_shard(k).await.with_context(|| format!("starting shard {k}"))?;
        }
        Ok(s)
    }

    fn start_nats(&mut self) -> anyhow::Result<()> {
        let bin =
            NATS_BINS.iter().find(|p| Path::new(p).exists()).context("no nats-server (apt-get install nats-server)")?;
        let ports: Vec<(u16, u16, u16)> =
            (0..NATS_SERVERS).map(|_| Ok((free_port()?, free_port()?, free_port()?))).collect::<anyhow::Result<_>>()?;
        for (i, &(port, cluster, monitor)) in ports.iter().enumerate() {
            let routes: Vec<String> =
                ports.iter().filter(|p| p.1 != cluster).map(|p| format!("nats://127.0.0.1:{}", p.1)).collect();
            let log = std::fs::File::create(self.dir.path().join(format!("nats-{i}.log")))?;
            let child = Command::new(bin)
                .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-m", &monitor.to_string()])
                .args(["--cluster_name", "herald-cell", "--cluster", &format!("nats://127.0.0.1:{cluster}")])
                .args(["--routes", &routes.join(",")])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .context("starting nats-server")?;
            self.nats.push(NatsServer { port, monitor: SocketAddr::from((Ipv4Addr::LOCALHOST, monitor)), child });
        }
        Ok(())
    }

    /// Waits until every NATS server routes to both others.
    async fn wait_routed(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + NATS_FORM_TIMEOUT;
        loop {
            let mut formed = true;
            for s in &self.nats {
                let routes = match http::get(s.monitor, "/routez", None).await {
                    Ok(a) if a.status == 200 => serde_json::from_str::<serde_json::Value>(&a.body)
                        .ok()
                        .and_then(|v| v["num_routes"].as_u64())
                        .unwrap_or(0),
                    _ => 0,
                };
                formed &= routes as usize >= NATS_SERVERS - 1;
            }
            if formed {
                return Ok(());
            }
            ensure!(Instant::now() < deadline, "the NATS cluster did not form in {NATS_FORM_TIMEOUT:?}");
            tokio::time::sleep(POLL).await;
        }
    }

    /// Starts shard `k`'s server and creates its `herald` database.
    async fn start_shard(&mut self, k: usize) -> anyhow::Result<()> {
        let data = self.dir.path().join(format!("pg-{k}"));
        self.shard_dirs.push(data.clone());
        let data_str = data.to_str().context("the temp dir is not UTF-8")?;
        let admin = self.pg(&["start", data_str, &free_port()?.to_string()]).await?;
        let (client, conn) = tokio_postgres::connect(&admin, tokio_postgres::NoTls).await?;
        tokio::spawn(conn);
        client.batch_execute("CREATE DATABASE herald").await?;
        let base = admin.rsplit_once('/').context("pg.sh printed a URL without a database")?.0;
        let url = format!("{base}/herald");
        self.stores.push(format!("s{k}={url}"));
        self.shard_urls.push(url);
        Ok(())
    }

    /// CPU seconds the shards' PostgreSQL processes used so far.
    pub fn pg_cpu_s(&self) -> f64 {
        self.shard_dirs.iter().map(|d| procstat::cpu_in(d)).sum()
    }

    /// CPU seconds the NATS servers used so far.
    pub fn nats_cpu_s(&self) -> f64 {
        self.nats.iter().map(|n| procstat::cpu_s(n.pid())).sum()
    }

    /// The NATS client URLs, comma-separated, as `--broker` takes them.
    pub fn broker(&self) -> String {
        self.nats.iter().map(NatsServer::url).collect::<Vec<_>>().join(",")
    }

    /// Runs `pg.sh ARGS`; its standard output, trimmed.
    async fn pg(&self, args: &[&str]) -> anyhow::Result<String> {
        pg_script::run(&self.script, args).await
    }
}

impl Drop for Services {
    fn drop(&mut self) {
        // Blocking, but only at the end of the bench (or on its way out with an error).
        for n in &mut self.nats {
            let _ = n.child.kill();
            let _ = n.child.wait();
        }
        for dir in self.shard_dirs.iter().rev() {
            let stopped = Command::new(&self.script).arg("stop").arg(dir).stdout(Stdio::null()).status();
            if !stopped.as_ref().is_ok_and(|s| s.success()) {
                eprintln!("cell: pg.sh stop {} failed: {stopped:?}", dir.display());
            }
        }
    }
}

/// A loopback port free now (bound, read back, released): nats-server and pg.sh need a number.
fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?.local_addr()?.port())
}
