//! Which node a client should use. Nodes of a cell announce themselves and
//! their load on the cell's bus ([`Topic::Nodes`]) every second; a node not heard from for three seconds
//! is gone. `GET /v1/gateway?ws=` answers with the node that owns the
//! workspace under rendezvous hashing, unless that node is above 1.25x the
//! mean load, in which case the next node in the workspace's own order takes
//! it (consistent hashing with bounded loads). A workspace's users therefore
//! land together and most fan-out stays inside one node, and adding a fourth
//! node moves about a quarter of the workspaces, not most of them.
//!
//! Not here: moving connections (the gateway drains), how the bus carries
//! announcements (NATS or in process: [`crate::broker::bus`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::broker::bus::{Bus, Topic};
use crate::hashing::rendezvous;

/// How often a node announces itself.
const ANNOUNCE_EVERY: Duration = Duration::from_secs(1);
/// A node not heard from for this long is taken out of routing.
const NODE_TTL: Duration = Duration::from_secs(3);
/// No node gets more than this times the mean load.
pub const LOAD_BOUND: f64 = 1.25;

/// What a node says of itself.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Announce {
    pub node: String,
    /// Base URL of its WebSocket, e.g. `ws://10.0.0.5:8080`.
    pub url: String,
    /// Open connections.
    pub load: u64,
    /// The node is draining: route nobody to it.
    #[serde(default)]
    pub leaving: bool,
    /// When the node process started (ms since the epoch): tells a restarted
    /// node (a join) from one whose announcements were delayed (not a join).
    #[serde(default)]
    pub started_ms: u64,
}

/// A live node as routing sees it.
#[derive(Debug, Clone)]
pub struct Node {
    pub name: String,
    pub url: String,
    pub load: u64,
}

/// This node's view of its cell.
pub struct Cluster {
    /// Every node incarnation heard of: name to start time.
    incarnations: Mutex<HashMap<String, u64>>,
    /// When each node name was last heard of, with the incarnation heard,
    /// leaving nodes included (their watchers are still there while they drain).
    heard_at: Mutex<HashMap<String, (u64, Instant)>>,
    /// Bumped with the name of each node that joins, for rebalancing.
    joined: tokio::sync::watch::Sender<Option<String>>,
    me: Mutex<Announce>,
    peers: Mutex<HashMap<String, (Announce, Instant)>>,
    /// The cell's bus; none for a node alone.
    bus: Option<Arc<dyn Bus>>,
}

impl Cluster {
    /// A cell of one node.
    pub fn single(node: &str, url: &str) -> Arc<Cluster> {
        Arc::new(Cluster {
            incarnations: Mutex::new(HashMap::new()),
            heard_at: Mutex::new(HashMap::new()),
            joined: tokio::sync::watch::Sender::new(None),
            me: Mutex::new(me(node, url)),
            peers: Mutex::new(HashMap::new()),
            bus: None,
        })
    }

    /// Joins the cell over `bus`; `load` reports this node's connections.
    pub fn join(
        bus: Arc<dyn Bus>,
        node: &str,
        url: &str,
        load: impl Fn() -> u64 + Send + Sync + 'static,
    ) -> Arc<Cluster> {
        let cluster = Arc::new(Cluster {
            incarnations: Mutex::new(HashMap::new()),
            heard_at: Mutex::new(HashMap::new()),
            joined: tokio::sync::watch::Sender::new(None),
            me: Mutex::new(me(node, url)),
            peers: Mutex::new(HashMap::new()),
            bus: Some(bus.clone()),
        });
        let weak = Arc::downgrade(&cluster);
        tokio::spawn(async move {
            let mut notes = bus.follow(Topic::Nodes).await;
            while let Some(note) = notes.next().await {
                let Some(cluster) = weak.upgrade() else { return };
                match serde_json::from_slice::<Announce>(&note.payload) {
                    Ok(a) => cluster.heard(a),
                    Err(e) => tracing::warn!(error = %e, "bad node announcement"),
                }
            }
        });
        let weak = Arc::downgrade(&cluster);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(ANNOUNCE_EVERY);
            loop {
                tick.tick().await;
                let Some(cluster) = weak.upgrade() else { return };
                let announce = {
                    let mut me = cluster.me.lock().expect("me lock");
                    me.load = load();
                    me.clone()
                };
                cluster.announce(&announce).await;
            }
        });
        cluster
    }

    async fn announce(&self, a: &Announce) {
        if let Some(bus) = &self.bus {
            let payload = serde_json::to_vec(a).expect("announcements serialize");
            if let Err(e) = bus.post(Topic::Nodes, payload.into()).await {
                tracing::warn!(error = %e, "cannot announce this node");
            }
        }
    }

    fn heard(&self, a: Announce) {
        let mut peers = self.peers.lock().expect("peers lock");
        if a.node == self.me.lock().expect("me lock").node {
            return;
        }
        self.heard_at.lock().expect("heard_at lock").insert(a.node.clone(), (a.started_ms, Instant::now()));
        if a.leaving {
            if peers.remove(&a.node).is_some() {
                tracing::info!(node = %a.node, "node is leaving the cell");
            }
            return;
        }
        let (name, started) = (a.node.clone(), a.started_ms);
        peers.insert(a.node.clone(), (a, Instant::now()));
        drop(peers);
        // A join is a node, or a restart of it, not heard of before; a node
        // whose announcements were late (a NATS blip) is only back in routing.
        let first = self.incarnations.lock().expect("incarnations lock").insert(name.clone(), started) != Some(started);
        if first {
            tracing::info!(node = %name, "node joined the cell");
            self.joined.send_replace(Some(name));
        }
    }

    /// Tells the cell this node is draining, so routing skips it from now on.
    pub async fn leave(&self) {
        let a = {
            let mut me = self.me.lock().expect("me lock");
            me.leaving = true;
            me.clone()
        };
        self.announce(&a).await;
    }

    /// Names of nodes as they join (the latest one; `changed()` wakes on each).
    pub fn joins(&self) -> tokio::sync::watch::Receiver<Option<String>> {
        self.joined.subscribe()
    }

    /// This node's incarnation, `name@started_ms`: a restarted node is another one.
    pub fn incarnation(&self) -> String {
        let me = self.me.lock().expect("me lock");
        format!("{}@{}", me.node, me.started_ms)
    }

    /// Whether incarnation `inc` (as [`Cluster::incarnation`] writes it) was
    /// heard of within the last [`NODE_TTL`]; a restart of it ends it.
    pub fn live(&self, inc: &str) -> bool {
        let Some((name, started)) = inc.rsplit_once('@') else { return false };
        let heard = self.heard_at.lock().expect("heard_at lock");
        heard.get(name).is_some_and(|(s, at)| s.to_string() == started && at.elapsed() < NODE_TTL)
    }

    /// This node's name.
    pub fn name(&self) -> String {
        self.me.lock().expect("me lock").node.clone()
    }

    /// This node as it announces itself (its name and URL), leaving or not.
    /// `load` is what it last announced: 0 on a node without a cell.
    pub fn this_node(&self) -> Node {
        let me = self.me.lock().expect("me lock");
        Node { name: me.node.clone(), url: me.url.clone(), load: me.load }
    }

    /// Live nodes, this one included unless it is leaving, sorted by name.
    pub fn nodes(&self) -> Vec<Node> {
        let now = Instant::now();
        let mut peers = self.peers.lock().expect("peers lock");
        peers.retain(|_, (_, seen)| now.duration_since(*seen) < NODE_TTL);
        let me = self.me.lock().expect("me lock");
        let mut nodes: Vec<Node> =
            peers.values().map(|(a, _)| Node { name: a.node.clone(), url: a.url.clone(), load: a.load }).collect();
        if !me.leaving {
            nodes.push(Node { name: me.node.clone(), url: me.url.clone(), load: me.load });
        }
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        nodes
    }

    /// The node workspace `ws`'s clients should use.
    pub fn route(&self, ws: &str) -> Option<Node> {
        route(ws, &self.nodes())
    }

    /// The node that owns `ws` by rendezvous alone, whatever the loads: what
    /// rebalancing asks. Loads are a second old and move as clients come and
    /// go; a workspace's owner changes only when a node joins or leaves, and
    /// not even then unless that node is the one it prefers.
    pub fn owner(&self, ws: &str) -> Option<String> {
        let nodes = self.nodes();
        rendezvous(&[ws.as_bytes()], nodes.iter().map(|n| n.name.as_str())).map(|i| nodes[i].name.clone())
    }
}

fn me(node: &str, url: &str) -> Announce {
    let started_ms =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
    Announce { node: node.into(), url: url.into(), load: 0, leaving: false, started_ms }
}

/// Rendezvous order for `ws`, taking the first node under the load bound.
pub fn route(ws: &str, nodes: &[Node]) -> Option<Node> {
    if nodes.is_empty() {
        return None;
    }
    let total: u64 = nodes.iter().map(|n| n.load).sum::<u64>() + 1;
    let cap = (LOAD_BOUND * total as f64 / nodes.len() as f64).ceil() as u64;
    let mut order: Vec<&Node> = nodes.iter().collect();
    // The workspace's own preference order: highest score first.
    order.sort_by_key(|n| std::cmp::Reverse(crate::hashing::stable_hash(&[n.name.as_bytes(), ws.as_bytes()])));
    debug_assert_eq!(
        order.first().map(|n| n.name.as_str()),
        rendezvous(&[ws.as_bytes()], nodes.iter().map(|n| n.name.as_str())).map(|i| nodes[i].name.as_str())
    );
    order.iter().find(|n| n.load < cap).or(order.first()).map(|n| (*n).clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(n: usize) -> Vec<Node> {
        (0..n).map(|i| Node { name: format!("node-{i}"), url: format!("ws://n{i}"), load: 0 }).collect()
    }

    #[test]
    fn a_fourth_node_takes_about_a_quarter_of_the_workspaces() {
        let (three, four) = (nodes(3), nodes(4));
        let n = 4000;
        let moved = (0..n)
            .filter(|i| {
                let ws = format!("ws-{i}");
                route(&ws, &three).unwrap().name != route(&ws, &four).unwrap().name
            })
            .count();
        assert!((800..1200).contains(&moved), "{moved} of {n} moved");
    }

    #[test]
    fn no_node_goes_far_above_the_mean() {
        let mut ns = nodes(3);
        // Place 3,000 workspaces one client each, updating loads as they land.
        for i in 0..3000 {
            let pick = route(&format!("ws-{i}"), &ns).unwrap();
            ns.iter_mut().find(|n| n.name == pick.name).unwrap().load += 1;
        }
        let mean = 1000.0;
        assert!(ns.iter().all(|n| (n.load as f64) <= mean * LOAD_BOUND + 1.0), "{ns:?}");
    }

    #[tokio::test]
    async fn a_late_node_is_not_a_join_but_a_restart_is() {
        let c = Cluster::single("me", "ws://me");
        let mut joins = c.joins();
        let b = |started_ms| Announce { node: "b".into(), url: "ws://b".into(), load: 0, leaving: false, started_ms };
        c.heard(b(1));
        assert!(joins.has_changed().unwrap(), "first heard: a join");
        joins.borrow_and_update();
        c.peers.lock().unwrap().clear(); // its announcements stopped for a while
        c.heard(b(1));
        assert!(!joins.has_changed().unwrap(), "back after a blip: no join, no rebalance");
        c.heard(b(2));
        assert!(joins.has_changed().unwrap(), "restarted: a join");
    }

    #[test]
    fn an_overloaded_owner_passes_its_workspace_on() {
        let mut ns = nodes(3);
        let owner = route("acme", &ns).unwrap().name;
        ns.iter_mut().find(|n| n.name == owner).unwrap().load = 1000;
        assert_ne!(route("acme", &ns).unwrap().name, owner);
    }
}

/// The cells of a deployment and which one this node is in. A workspace
/// belongs to one cell, chosen by rendezvous hashing over the cells' names,
/// so adding a cell moves only the workspaces it wins. A node serves only
/// its own cell's workspaces: nothing crosses cells.
#[derive(Debug, Clone, Default)]
pub struct Cells {
    me: String,
    /// Every cell's name and, when known, the base URL its clients use.
    all: Vec<(String, Option<String>)>,
}

impl Cells {
    /// `specs` are `name` or `name=url`; empty means no cell mapping (this node serves every workspace).
    pub fn new(me: &str, specs: &[String]) -> anyhow::Result<Cells> {
        let all: Vec<(String, Option<String>)> = specs
            .iter()
            .map(|s| match s.split_once('=') {
                Some((name, url)) => (name.to_string(), Some(url.trim_end_matches('/').to_string())),
                None => (s.clone(), None),
            })
            .collect();
        anyhow::ensure!(
            all.is_empty() || all.iter().any(|(n, _)| n == me),
            "--cells must include this node's --cell {me}"
        );
        Ok(Cells { me: me.to_string(), all })
    }

    /// This node's cell.
    pub fn name(&self) -> &str {
        &self.me
    }

    /// The cell workspace `ws` belongs to.
    pub fn owner(&self, ws: &str) -> &str {
        match rendezvous(&[ws.as_bytes()], self.all.iter().map(|(n, _)| n.as_str())) {
            Some(i) => &self.all[i].0,
            None => &self.me,
        }
    }

    /// Whether this node's cell serves `ws`.
    pub fn serves(&self, ws: &str) -> bool {
        self.owner(ws) == self.me
    }

    /// The base URL of the cell that serves `ws`, when it is another cell and its URL is known.
    pub fn elsewhere(&self, ws: &str) -> Option<(&str, Option<&str>)> {
        let owner = self.owner(ws);
        if owner == self.me {
            return None;
        }
        let url = self.all.iter().find(|(n, _)| n == owner).and_then(|(_, u)| u.as_deref());
        Some((owner, url))
    }
}

#[cfg(test)]
mod cell_tests {
    use super::*;

    #[test]
    fn workspaces_split_over_cells_and_a_new_cell_takes_only_its_share() {
        let two = Cells::new("a", &["a".into(), "b=ws://b:8080".into()]).unwrap();
        let three = Cells::new("a", &["a".into(), "b".into(), "c".into()]).unwrap();
        let (mut mine, mut moved) = (0, 0);
        for i in 0..3000 {
            let ws = format!("ws-{i}");
            mine += two.serves(&ws) as usize;
            if two.owner(&ws) != three.owner(&ws) {
                assert_eq!(three.owner(&ws), "c");
                moved += 1;
            }
        }
        assert!((1300..1700).contains(&mine), "{mine}");
        assert!((800..1200).contains(&moved), "{moved}");
        let foreign = (0..).map(|i| format!("ws-{i}")).find(|w| !two.serves(w)).unwrap();
        assert_eq!(two.elsewhere(&foreign), Some(("b", Some("ws://b:8080"))));
        assert!(Cells::new("z", &["a".into()]).is_err());
        assert!(Cells::new("a", &[]).unwrap().serves("anything"));
    }
}
