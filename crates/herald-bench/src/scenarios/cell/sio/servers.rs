//! The Socket.IO cell's servers: one `redis-server` (no persistence, in a
//! temp dir) and the Node processes of `bench/peers/socketio/start.sh`, each
//! on a free loopback port with `HERALD_BENCH_REDIS` pointing at that Redis;
//! readings of their CPU, RSS and open files at one moment; and their stop,
//! by pid (SIGTERM, then SIGKILL). What the figures mean is `report`'s.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::process::{Child, Command};

use crate::machine::rss_kib;
use crate::peer::peers_dir;
use crate::procstat::{self, TcpSockets};

/// Time a server gets to listen after its start.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// Time a server gets to exit on SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// One started process and where its output goes.
struct Proc {
    child: Child,
    pid: u32,
    addr: SocketAddr,
    log: tempfile::NamedTempFile,
}

impl Proc {
    /// Starts `cmd` (already given its arguments), logging to a temp file, and waits until `addr` accepts.
    async fn start(mut cmd: Command, addr: SocketAddr, what: &str) -> anyhow::Result<Proc> {
        let log = tempfile::NamedTempFile::with_prefix("herald-bench-sio-")?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log.reopen()?)
            .stderr(log.reopen()?)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {what}"))?;
        let pid = child.id().with_context(|| format!("{what} exited at once"))?;
        let mut p = Proc { child, pid, addr, log };
        let started = Instant::now();
        while tokio::net::TcpStream::connect(addr).await.is_err() {
            if let Ok(Some(status)) = p.child.try_wait() {
                anyhow::bail!("{what} exited ({status}) before listening: {}", p.tail());
            }
            if started.elapsed() > START_TIMEOUT {
                let tail = p.tail();
                p.stop().await;
                anyhow::bail!("{what} did not listen in {START_TIMEOUT:?}: {tail}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(p)
    }

    fn tail(&self) -> String {
        let text = std::fs::read_to_string(self.log.path()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(5)..].join(" | ")
    }

    async fn stop(&mut self) {
        // SAFETY: kill(2) with a pid this process spawned and has not reaped.
        unsafe { libc::kill(self.pid as libc::pid_t, libc::SIGTERM) };
        if tokio::time::timeout(STOP_TIMEOUT, self.child.wait()).await.is_err() {
            eprintln!("{} did not exit in {STOP_TIMEOUT:?} after SIGTERM; killing it", self.pid);
            let _ = self.child.kill().await;
        }
    }
}

/// A free loopback port: bind, read, release (nothing else here races for it).
fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Redis and the Socket.IO nodes.
pub struct Servers {
    redis: Proc,
    nodes: Vec<Proc>,
    _dir: tempfile::TempDir,
}

/// The servers at one moment.
pub struct Reading {
    pub at: Instant,
    pub node_cpu_s: Vec<f64>,
    pub node_rss_kib: Vec<u64>,
    /// Open files of each node: its connections, and a few of its own.
    pub node_fds: Vec<u64>,
    pub redis_cpu_s: f64,
    pub redis_rss_kib: u64,
    pub sockets: TcpSockets,
    pub slab_kib: u64,
}

impl Servers {
    /// Starts Redis, then `nodes` Socket.IO nodes on it.
    pub async fn start(nodes: usize) -> anyhow::Result<Servers> {
        let dir = tempfile::Builder::new().prefix("herald-bench-sio-redis-").tempdir()?;
        let port = free_port()?;
        let mut cmd = Command::new("redis-server");
        cmd.args(["--bind", "127.0.0.1", "--port", &port.to_string(), "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path());
        let redis = Proc::start(cmd, (Ipv4Addr::LOCALHOST, port).into(), "redis-server").await?;
        let url = format!("redis://127.0.0.1:{port}");
        let script = peers_dir()?.join("socketio/start.sh");
        anyhow::ensure!(script.exists(), "no {}: is bench/peers here?", script.display());
        let mut servers = Servers { redis, nodes: Vec::new(), _dir: dir };
        for i in 0..nodes {
            let port = free_port()?;
            let mut cmd = Command::new("bash");
            cmd.arg(&script).arg(port.to_string()).env("HERALD_BENCH_REDIS", &url);
            match Proc::start(cmd, (Ipv4Addr::LOCALHOST, port).into(), &format!("socket.io node {i}")).await {
                Ok(p) => servers.nodes.push(p),
                Err(e) => {
                    servers.stop().await;
                    return Err(e);
                }
            }
        }
        Ok(servers)
    }

    /// The nodes' addresses, in node order.
    pub fn addrs(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.addr.to_string()).collect()
    }

    pub fn read(&self) -> Reading {
        let fds = |pid: u32| std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count() as u64).unwrap_or(0);
        Reading {
            at: Instant::now(),
            node_cpu_s: self.nodes.iter().map(|n| procstat::cpu_s(n.pid)).collect(),
            node_rss_kib: self.nodes.iter().map(|n| rss_kib(n.pid).unwrap_or(0)).collect(),
            node_fds: self.nodes.iter().map(|n| fds(n.pid)).collect(),
            redis_cpu_s: procstat::cpu_s(self.redis.pid),
            redis_rss_kib: rss_kib(self.redis.pid).unwrap_or(0),
            sockets: procstat::tcp_sockets(),
            slab_kib: procstat::slab_kib(),
        }
    }

    /// Stops every node, then Redis; each node's last lines.
    pub async fn stop(mut self) -> Vec<String> {
        let mut logs = Vec::new();
        for n in &mut self.nodes {
            logs.push(n.tail());
            n.stop().await;
        }
        self.redis.stop().await;
        logs
    }
}
