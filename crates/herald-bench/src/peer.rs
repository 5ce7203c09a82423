//! The peers herald is measured against, side by side in the same run: which
//! server a scenario targets (`--peer`), and starting and stopping a peer's
//! server. A peer is installed into the cache and started by its scripts under
//! `bench/peers/<name>/` (`install.sh`, `start.sh PORT`); `start.sh` execs the
//! server, so the pid this module holds is the server's own (for RSS and CPU).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::ValueEnum;
use serde::Serialize;
use tokio::process::{Child, Command};

use crate::machine::rss_kib;

/// Time a peer gets to accept connections after its start.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// Time a peer gets to exit on SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);

/// The server a scenario measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Peer {
    /// herald itself.
    Herald,
    /// Socket.IO v4 on Node 20 (Engine.IO v4 over WebSocket), `bench/peers/socketio`.
    Socketio,
    /// nats-server's WebSocket listener, one subject per chat, `bench/peers/nats`.
    Nats,
    /// Sockudo (Rust, Pusher protocol), one channel per chat, `bench/peers/sockudo`.
    Sockudo,
}

impl Peer {
    pub fn as_str(self) -> &'static str {
        match self {
            Peer::Herald => "herald",
            Peer::Socketio => "socketio",
            Peer::Nats => "nats",
            Peer::Sockudo => "sockudo",
        }
    }

    /// The room (channel) name a chat has on this server. Sockudo's fan-out goes
    /// through client events, which Pusher allows on private channels only.
    pub fn room(self, chat: &str, publishing: bool) -> String {
        if self == Peer::Sockudo && publishing { format!("private-{chat}") } else { chat.to_string() }
    }

    /// The room a chat's members join: Sockudo keeps a member list only for a
    /// presence channel, so its nearest equivalent of a member join is subscribing to one.
    pub fn member_room(self, chat: &str) -> String {
        if self == Peer::Sockudo { format!("presence-{chat}") } else { chat.to_string() }
    }
}

/// Where `bench/peers` is: `$HERALD_PEERS_DIR`, else the first `bench/peers`
/// above the working directory or above this binary.
pub fn peers_dir() -> anyhow::Result<PathBuf> {
    if let Ok(d) = std::env::var("HERALD_PEERS_DIR") {
        return Ok(PathBuf::from(d));
    }
    let mut starts = vec![std::env::current_dir()?];
    if let Ok(exe) = std::env::current_exe() {
        starts.push(exe);
    }
    for start in starts {
        for dir in start.ancestors() {
            let candidate = dir.join("bench/peers");
            if candidate.is_dir() {
                return Ok(candidate);
            }
        }
    }
    anyhow::bail!("no bench/peers found above the working directory; set HERALD_PEERS_DIR")
}

/// A started peer server.
pub struct PeerServer {
    pub peer: Peer,
    pub pid: u32,
    pub addr: SocketAddr,
    child: Child,
    /// Its stdout and stderr, removed with it.
    log: tempfile::NamedTempFile,
}

impl PeerServer {
    /// Starts `peer` (not herald) on a free loopback port and waits until it accepts.
    pub async fn start(peer: Peer) -> anyhow::Result<PeerServer> {
        anyhow::ensure!(peer != Peer::Herald, "herald is started by server.rs");
        let script = peers_dir()?.join(peer.as_str()).join("start.sh");
        anyhow::ensure!(script.exists(), "no {}", script.display());
        // A free port: bind, read, release. Loopback only, and nothing else here races for it.
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let log = tempfile::NamedTempFile::with_prefix("herald-bench-peer-")?;
        let child = Command::new("bash")
            .arg(&script)
            .arg(port.to_string())
            .stdin(Stdio::null())
            .stdout(log.reopen()?)
            .stderr(log.reopen()?)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", script.display()))?;
        let pid = child.id().context("the peer exited at once")?;
        let mut server = PeerServer { peer, pid, addr, child, log };
        let started = Instant::now();
        loop {
            if tokio::net::TcpStream::connect(addr).await.is_ok() {
                break;
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                anyhow::bail!("{} exited ({status}) before listening: {}", peer.as_str(), server.log_tail());
            }
            if started.elapsed() > START_TIMEOUT {
                let tail = server.log_tail();
                let _ = server.stop().await;
                anyhow::bail!("{} did not listen in {START_TIMEOUT:?}: {tail}", peer.as_str());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(server)
    }

    pub fn rss_kib(&self) -> anyhow::Result<u64> {
        rss_kib(self.pid).with_context(|| format!("peer {} is gone: {}", self.pid, self.log_tail()))
    }

    /// The last lines of what the peer printed.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.log.path()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(5)..].join(" | ")
    }

    /// Stops the peer by pid: SIGTERM, then SIGKILL after [`STOP_TIMEOUT`].
    pub async fn stop(mut self) -> anyhow::Result<()> {
        // SAFETY: kill(2) with a pid this process spawned and has not reaped.
        unsafe { libc::kill(self.pid as libc::pid_t, libc::SIGTERM) };
        if tokio::time::timeout(STOP_TIMEOUT, self.child.wait()).await.is_err() {
            eprintln!("peer {} did not exit in {STOP_TIMEOUT:?} after SIGTERM; killing it", self.pid);
            self.child.kill().await?;
        }
        Ok(())
    }
}

/// CPU time (user + system) process `pid` has used so far, in seconds, from `/proc/PID/stat`.
pub fn cpu_s(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat(5); `rest` starts at field 3.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Some((utime + stime) as f64 / hz)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_cpu_is_readable() {
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        assert!(x != 1);
        assert!(cpu_s(std::process::id()).is_some());
    }
}
