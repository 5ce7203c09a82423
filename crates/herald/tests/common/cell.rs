//! A cell in this test process: several herald nodes, each served by
//! `herald::server::run_in_cell` on 127.0.0.1:0, joined by the in-process
//! bus (standing in for NATS) over one shared store (SQLite in a temp dir,
//! standing in for the cell's shards). No nats-server and no PostgreSQL:
//! whatever crosses nodes (events, presence, typing, join notices,
//! liveness, revocations, the webhook's `offline` asks) goes through the
//! bus, which loses nothing, so a story runs the same way every time.
//!
//! Not here: the real-NATS cell (tests/cluster.rs builds its own).

use std::sync::Arc;
use std::time::{Duration, Instant};

use herald::broker::memory::{MemoryBroker, MemoryCell};
use herald::store::Store;
use herald::store::sqlite::SqliteStore;
use tokio::sync::oneshot;

use super::{API_KEY, SECRET, TestServer};

/// Nodes of one cell, all in this process.
pub struct LocalCell {
    pub bus: Arc<MemoryCell>,
    pub store: Arc<dyn Store>,
    pub nodes: Vec<TestServer>,
    /// Each node's place on the bus, by the node's index.
    seats: Vec<Arc<MemoryBroker>>,
    /// The shared store's directory.
    _data: tempfile::TempDir,
}

impl LocalCell {
    /// A cell of `n` nodes that all see each other.
    pub async fn start(n: usize) -> LocalCell {
        Self::start_with(n, |_, _| {}).await
    }

    /// A cell of `n` nodes; `tweak` may change node `i`'s config.
    pub async fn start_with(n: usize, tweak: impl Fn(usize, &mut herald::Config)) -> LocalCell {
        let data = tempfile::tempdir().expect("tempdir");
        let store = Arc::new(SqliteStore::open(data.path()).expect("open the cell's store"));
        let mut cell = LocalCell { bus: MemoryCell::new(), store, nodes: Vec::new(), seats: Vec::new(), _data: data };
        for i in 0..n {
            cell.add_node(|c| tweak(i, c)).await;
        }
        cell.wait_members(n).await;
        cell
    }

    /// Adds node `node-<i>` (i its position); `tweak` may change its config.
    /// Rebalancing is off: clients here are pinned to nodes on purpose.
    pub async fn add_node(&mut self, tweak: impl FnOnce(&mut herald::Config)) {
        let data = tempfile::tempdir().expect("tempdir");
        let mut config = herald::Config::for_tests(data.path().to_path_buf(), SECRET, API_KEY);
        config.server.node = format!("node-{}", self.nodes.len());
        config.server.drain_window_ms = 200;
        config.server.rebalance = false;
        config.gateway.rate = 100_000;
        config.gateway.burst = 100_000;
        tweak(&mut config);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("bound address");
        let (stop, stopped) = oneshot::channel::<()>();
        let seat = MemoryBroker::join(&self.bus);
        let run = herald::server::run_in_cell(listener, config, seat.clone(), self.store.clone(), async move {
            let _ = stopped.await;
        });
        let task = tokio::spawn(run);
        self.seats.push(seat);
        self.nodes.push(TestServer { addr, data, stop: Some(stop), task: Some(task) });
    }

    /// Cuts node `i` off the bus, as a `kill -9` looks to the other nodes:
    /// they stop hearing it (and it them), its connections stay open.
    pub fn cut_off(&self, i: usize) {
        self.seats[i].cut_off();
    }

    /// While `on`, node `i` loses the chats' signals the others send it (see
    /// [`MemoryBroker::lose_signals`]).
    pub fn lose_signals(&self, i: usize, on: bool) {
        self.seats[i].lose_signals(on);
    }

    /// Waits until every node lists `n` live nodes (each announces itself every second).
    pub async fn wait_members(&self, n: usize) {
        let deadline = Instant::now() + super::WAIT;
        'outer: loop {
            for node in &self.nodes {
                let (_, v) = node.http("GET", "/v1/admin/nodes", None).await;
                if v["nodes"].as_array().map_or(0, Vec::len) != n {
                    assert!(Instant::now() < deadline, "nodes did not see each other: {} says {v}", node.addr);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue 'outer;
                }
            }
            return;
        }
    }
}
