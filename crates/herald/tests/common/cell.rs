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

use herald::broker::memory::MemoryCell;
use herald::server::InProcessCell;
use herald::store::sqlite::SqliteStore;
use tokio::sync::oneshot;

use super::{API_KEY, SECRET, TestServer};

/// Nodes of one cell, all in this process.
pub struct LocalCell {
    pub shared: InProcessCell,
    pub nodes: Vec<TestServer>,
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
        let shared = InProcessCell { bus: MemoryCell::new(), store };
        let mut cell = LocalCell { shared, nodes: Vec::new(), _data: data };
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
        config.node = format!("node-{}", self.nodes.len());
        config.drain_window = Duration::from_millis(200);
        config.rebalance = false;
        config.rate = 100_000;
        config.burst = 100_000;
        tweak(&mut config);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("bound address");
        let (stop, stopped) = oneshot::channel::<()>();
        let shared = self.shared.clone();
        let task = tokio::spawn(async move {
            herald::server::run_in_cell(listener, config, &shared, async move {
                let _ = stopped.await;
            })
            .await
        });
        self.nodes.push(TestServer { addr, data, stop: Some(stop), task: Some(task) });
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
