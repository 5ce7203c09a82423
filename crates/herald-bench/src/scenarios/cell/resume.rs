//! How a cell user gets a connection back after losing its node, as a client
//! would: after a full-jitter wait (as the SDK's backoff: a killed node's
//! users do not all come back in the same millisecond) unless a `reconnect`
//! push already said when, the other nodes first (starting at one that
//! depends on the user, so a lost node's users spread over the rest), the
//! lost one last, each connect-and-hello bounded; a round that finds none
//! waits a doubled backoff and goes again, until [`RESUME_BOUND`]. What is asked on the new
//! connection (the re-watch with `after`, presence, the live inbox, resending
//! what went unanswered) is `session`'s.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::workload::Rng;
use crate::client::Client;

/// A session gives up getting a connection back after this long: counted as never resumed.
pub const RESUME_BOUND: Duration = Duration::from_secs(60);
/// One node's connect and hello get this long.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);
/// The backoff before the first round and after each round where no node answered: full
/// jitter up to this, doubling (the SDK's base), up to the cap.
const BACKOFF_FIRST: Duration = Duration::from_millis(500);
const BACKOFF_CAP: Duration = Duration::from_secs(4);

/// What a session needs to connect again.
pub struct Dial {
    /// Every node of the cell, in node order.
    pub nodes: Arc<[SocketAddr]>,
    /// The path clients upgrade at.
    pub path: Arc<str>,
    /// The user's loopback source address.
    pub source: Ipv4Addr,
    /// The user's token (an hour long: beyond any run).
    pub token: String,
}

impl Dial {
    /// The nodes to try after losing `lost`, in order.
    pub fn order(&self, lost: u32, user: u32) -> Vec<u32> {
        order(self.nodes.len() as u32, lost, user)
    }

    /// A connection that said hello to some node, tried in [`Dial::order`] with backoff before
    /// the first round (unless `waited`: a `reconnect` push said when) and between rounds; with
    /// the node, or `None` after [`RESUME_BOUND`].
    pub async fn reconnect(&self, lost: u32, user: u32, waited: bool) -> Option<(Client, u32)> {
        let give_up = Instant::now() + RESUME_BOUND;
        let mut rng = Rng::new(u64::from(user) ^ super::follow::now_us());
        let mut cap = BACKOFF_FIRST;
        if !waited {
            tokio::time::sleep(Duration::from_secs_f64(cap.as_secs_f64() * rng.unit())).await;
        }
        while Instant::now() < give_up {
            for node in self.order(lost, user) {
                let addr = self.nodes[node as usize];
                let attempt = async {
                    let mut client = Client::connect(addr, &self.path, self.source).await.ok()?;
                    client.hello(&self.token).await.ok()?;
                    Some(client)
                };
                if let Ok(Some(client)) = tokio::time::timeout(ATTEMPT_TIMEOUT, attempt).await {
                    return Some((client, node));
                }
            }
            let wait = Duration::from_secs_f64(cap.as_secs_f64() * rng.unit());
            tokio::time::sleep(wait.min(give_up.saturating_duration_since(Instant::now()))).await;
            cap = (cap * 2).min(BACKOFF_CAP);
        }
        None
    }
}

/// `nodes` nodes in the order a user who lost `lost` tries them: the others from one picked by
/// the user, then `lost`.
fn order(nodes: u32, lost: u32, user: u32) -> Vec<u32> {
    let others: Vec<u32> = (1..nodes).map(|k| (lost + k) % nodes).collect();
    let mut out = Vec::with_capacity(nodes as usize);
    if !others.is_empty() {
        let start = user as usize % others.len();
        out.extend(others[start..].iter().chain(&others[..start]));
    }
    if lost < nodes {
        out.push(lost);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lost_node_is_tried_last_and_its_users_spread() {
        assert_eq!(order(3, 0, 0), vec![1, 2, 0]);
        assert_eq!(order(3, 0, 1), vec![2, 1, 0]);
        assert_eq!(order(3, 2, 4), vec![0, 1, 2]);
        assert_eq!(order(1, 0, 5), vec![0]);
        let firsts: Vec<u32> = (0..6).map(|u| order(4, 1, u)[0]).collect();
        assert_eq!(firsts, vec![2, 3, 0, 2, 3, 0]);
    }
}
