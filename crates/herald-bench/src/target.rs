//! The server of one run, whichever it is: a herald (`server`) or a peer
//! (`peer`), behind one type so that a scenario starts, samples and stops
//! either the same way. What the clients say to it is `conn`'s.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::peer::{Peer, PeerServer, cpu_s};
use crate::server::{Server, TargetArgs};
use crate::token::Signer;

/// A server counts as quiet below this share of a core.
const QUIET_CORES: f64 = 0.1;
/// The window over which quietness is sampled.
const QUIET_SAMPLE: Duration = Duration::from_millis(250);

/// The server of one run.
pub enum Target {
    Herald(Server),
    Peer(PeerServer),
}

impl Target {
    /// Starts `peer`; herald gets `flags` added to its command line (or is the running one `target` names).
    pub async fn start(peer: Peer, target: &TargetArgs, flags: &[String]) -> anyhow::Result<Target> {
        Ok(match peer {
            Peer::Herald => Target::Herald(Server::open(target, flags).await?),
            peer => Target::Peer(PeerServer::start(peer).await?),
        })
    }

    pub fn peer(&self) -> Peer {
        match self {
            Target::Herald(_) => Peer::Herald,
            Target::Peer(p) => p.peer,
        }
    }

    pub fn pid(&self) -> u32 {
        match self {
            Target::Herald(s) => s.pid,
            Target::Peer(p) => p.pid,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        match self {
            Target::Herald(s) => s.addr,
            Target::Peer(p) => p.addr,
        }
    }

    pub fn rss_kib(&self) -> anyhow::Result<u64> {
        match self {
            Target::Herald(s) => s.rss_kib(),
            Target::Peer(p) => p.rss_kib(),
        }
    }

    /// herald's JWT secret; a peer has none ("unused").
    pub fn jwt_secret(&self) -> String {
        match self {
            Target::Herald(s) => s.jwt_secret.clone(),
            Target::Peer(_) => "unused".to_string(),
        }
    }

    /// A token signer for `workspace` (herald only: peers take no tokens).
    pub fn signer(&self, workspace: &str) -> Option<Signer> {
        match self {
            Target::Herald(s) => Some(Signer::new(&s.jwt_secret, workspace)),
            Target::Peer(_) => None,
        }
    }

    /// Waits until the server uses less than [`QUIET_CORES`] (the last step's
    /// backlog is worked off), or `limit` passes; returns the time waited.
    pub async fn settle(&self, limit: Duration) -> Duration {
        let started = Instant::now();
        while started.elapsed() < limit {
            let before = cpu_s(self.pid()).unwrap_or(0.0);
            tokio::time::sleep(QUIET_SAMPLE).await;
            let used = cpu_s(self.pid()).unwrap_or(0.0) - before;
            if used < QUIET_CORES * QUIET_SAMPLE.as_secs_f64() {
                break;
            }
        }
        started.elapsed()
    }

    /// Stops the server by pid; herald's warnings and errors, or null for a peer.
    pub async fn stop(self) -> anyhow::Result<Value> {
        Ok(match self {
            Target::Herald(s) => json!(s.stop().await?),
            Target::Peer(p) => {
                p.stop().await?;
                Value::Null
            }
        })
    }
}
