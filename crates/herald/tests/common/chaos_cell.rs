//! The cell the chaos test deals its faults to: three nats-servers, two
//! PostgreSQL shards (each a primary with a synchronous standby of its own,
//! so that one can be stopped or failed over while the other runs), and
//! three `herald` binaries on fixed ports, each of which can be killed with
//! SIGKILL and started again on the same port with the same flags, or frozen
//! with SIGSTOP (its machine hung: its sockets stay open, nothing answers)
//! and woken with SIGCONT. Every process is stopped when the cell is dropped.
//!
//! Not here: which fault comes when (`chaos_faults.rs`), the clients
//! (`chaos_client.rs` and the files of the load) and the audit (`chaos_audit.rs`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::nats::NatsCluster;
use crate::common::pg_pair::PgPair;
use crate::common::{API_KEY, SECRET, free_port, try_http};

/// Drain and rebalance windows of the nodes: a client asked to move waits at
/// most this long, so that a rebalance right before the load stops cannot by
/// itself hold a watcher back past the auditor's 10 s.
pub const DRAIN_WINDOW_MS: u64 = 2_000;

/// One herald process, restartable on its port.
pub struct Node {
    pub name: String,
    pub addr: SocketAddr,
    data: PathBuf,
    stores: Vec<String>,
    brokers: Vec<String>,
    /// stdout and stderr of every incarnation, appended.
    pub log: PathBuf,
    child: Option<Child>,
    /// Starts so far (1 after the first).
    pub incarnation: u32,
    /// Stopped with SIGSTOP and not woken yet.
    frozen: bool,
}

impl Node {
    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).expect("node log");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_herald"));
        cmd.args(["serve", "--listen", &self.addr.to_string(), "--data"])
            .arg(&self.data)
            .env("HERALD_JWT_SECRET", SECRET)
            .env("HERALD_API_KEY", API_KEY)
            .env("HERALD_NODE", &self.name)
            .env("HERALD_BROKER", self.brokers.join(","))
            .env("HERALD_DRAIN_WINDOW_MS", DRAIN_WINDOW_MS.to_string())
            // Clients are spread over the nodes on purpose, so that events cross NATS; a rebalance
            // would herd them back to their workspace's node at every restart (and, by the
            // reconnect and replay, mend for them what the broker lost).
            .env("HERALD_REBALANCE", "false")
            .env("NO_COLOR", "1")
            .env_remove("RUST_LOG")
            .stdout(log.try_clone().expect("node log"))
            .stderr(log);
        for url in &self.stores {
            cmd.arg("--store").arg(url);
        }
        self.child = Some(cmd.spawn().expect("start herald"));
        self.incarnation += 1;
    }

    /// SIGKILL, and waits for the process to be gone (a frozen one is woken
    /// first, so that nothing of it is left stopped).
    pub fn kill9(&mut self) {
        self.thaw();
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port, data and flags.
    pub fn restart(&mut self) {
        self.kill9();
        self.spawn();
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// SIGSTOP: the process stops where it is; the kernel still accepts
    /// connections on its port and keeps its sockets open.
    pub fn freeze(&mut self) {
        if let Some(c) = &self.child {
            signal(c.id(), libc::SIGSTOP);
            self.frozen = true;
        }
    }

    /// SIGCONT to a frozen process; nothing otherwise.
    pub fn thaw(&mut self) {
        if self.frozen
            && let Some(c) = &self.child
        {
            signal(c.id(), libc::SIGCONT);
        }
        self.frozen = false;
    }

    /// Appends a line to the node's log, so that its own lines read against the test's faults.
    pub fn mark(&self, line: &str) {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(&self.log) {
            let _ = writeln!(f, "=== chaos: {line}");
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// NATS, two shards and three nodes.
pub struct Cell {
    pub nats: tokio::sync::Mutex<NatsCluster>,
    pub shards: Vec<Arc<PgPair>>,
    /// The shards as the nodes get them: `NAME=` and both hosts' URL.
    pub stores: Vec<String>,
    /// The shards' names as herald routes chats over them.
    pub shard_names: Vec<String>,
    pub nodes: Vec<Mutex<Node>>,
    /// The nodes' addresses: fixed for the life of the cell.
    pub addrs: Vec<SocketAddr>,
    /// Node logs and anything else worth keeping when a run fails.
    pub dir: PathBuf,
}

impl Cell {
    /// Starts everything and waits until every node is ready and sees the others.
    pub async fn start(nodes: usize) -> Cell {
        let dir = tempfile::Builder::new().prefix("herald-chaos-").tempdir().expect("tempdir").keep();
        let (nats, shards) = tokio::join!(
            NatsCluster::start(),
            tokio::task::spawn_blocking(|| {
                let shards = [0, 1].map(|_| std::thread::spawn(|| Arc::new(PgPair::start(true))));
                shards.map(|s| s.join().expect("a PostgreSQL pair starts"))
            })
        );
        let shards: Vec<Arc<PgPair>> = shards.expect("PostgreSQL pairs start").into();
        let shard_names: Vec<String> = (0..shards.len()).map(|i| format!("s{i}")).collect();
        let mut stores = Vec::new();
        for (i, name) in shard_names.iter().enumerate() {
            let pair = shards[i].clone();
            let db = tokio::task::spawn_blocking(move || pair.create_database()).await.expect("create a database");
            stores.push(format!("{name}={}", shards[i].hosts_url(&db)));
        }
        let brokers = nats.urls();
        let mut list = Vec::new();
        let mut addrs = Vec::new();
        for i in 0..nodes {
            let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
            let data = dir.join(format!("node-{i}-data"));
            std::fs::create_dir_all(&data).unwrap();
            let mut node = Node {
                name: format!("node-{i}"),
                addr,
                data,
                stores: stores.clone(),
                brokers: brokers.clone(),
                log: dir.join(format!("node-{i}.log")),
                child: None,
                incarnation: 0,
                frozen: false,
            };
            node.spawn();
            addrs.push(addr);
            list.push(Mutex::new(node));
        }
        let cell = Cell { nats: tokio::sync::Mutex::new(nats), shards, stores, shard_names, nodes: list, addrs, dir };
        for i in 0..nodes {
            assert!(cell.wait_ready(i, Duration::from_secs(20)).await, "node-{i} did not become ready");
        }
        cell.wait_members(nodes, Duration::from_secs(15)).await;
        cell
    }

    /// Waits until node `i` answers `/readyz` with 200.
    pub async fn wait_ready(&self, i: usize, within: Duration) -> bool {
        self.wait_status(i, "/readyz", within).await
    }

    /// Waits until node `i` answers `/healthz` (its process serves HTTP).
    pub async fn wait_serving(&self, i: usize, within: Duration) -> bool {
        self.wait_status(i, "/healthz", within).await
    }

    async fn wait_status(&self, i: usize, path: &str, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        loop {
            if let Some((200, _)) = try_http(self.addrs[i], "GET", path, None, Duration::from_secs(1)).await {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until every node lists `n` live nodes.
    pub async fn wait_members(&self, n: usize, within: Duration) {
        let deadline = Instant::now() + within;
        'outer: loop {
            assert!(Instant::now() < deadline, "nodes did not see each other");
            tokio::time::sleep(Duration::from_millis(100)).await;
            for &addr in &self.addrs {
                match try_http(addr, "GET", "/v1/admin/nodes", None, Duration::from_secs(1)).await {
                    Some((200, v)) if v["nodes"].as_array().map_or(0, Vec::len) == n => {}
                    _ => continue 'outer,
                }
            }
            return;
        }
    }

    pub fn kill_node(&self, i: usize, note: &str) {
        let mut node = self.nodes[i].lock().unwrap();
        node.kill9();
        node.mark(note);
    }

    pub fn restart_node(&self, i: usize, note: &str) {
        let mut node = self.nodes[i].lock().unwrap();
        node.mark(note);
        node.restart();
    }

    /// SIGSTOP node `i` (see [`Node::freeze`]).
    pub fn freeze_node(&self, i: usize, note: &str) {
        let mut node = self.nodes[i].lock().unwrap();
        node.mark(note);
        node.freeze();
    }

    /// SIGCONT node `i`.
    pub fn thaw_node(&self, i: usize, note: &str) {
        let mut node = self.nodes[i].lock().unwrap();
        node.thaw();
        node.mark(note);
    }

    pub async fn kill_nats(&self, i: usize) {
        self.nats.lock().await.servers[i].kill();
    }

    /// Starts NATS server `i` again (on its ports).
    pub async fn start_nats(&self, i: usize) {
        self.nats.lock().await.servers[i].restart();
    }

    /// Waits (at most `within`) until every NATS server routes to both others.
    pub async fn nats_formed(&self, within: Duration) -> bool {
        self.nats.lock().await.formed_within(within).await
    }

    /// Stops shard `i`'s primary (fast shutdown: its connections are cut).
    /// The signal goes to the postmaster at once, so the stop lands when the
    /// caller aimed it; then `pg.sh stop` waits until the server is down.
    pub async fn stop_shard(&self, i: usize) {
        self.signal_shard_stop(i);
        self.on_shard(i, |s| s.stop_primary()).await;
    }

    /// Runs a blocking step of shard `i`'s pair (kill, freeze, promote, rebuild) off the async workers.
    pub async fn on_shard<T: Send + 'static>(&self, i: usize, step: impl FnOnce(&PgPair) -> T + Send + 'static) -> T {
        let shard = self.shards[i].clone();
        tokio::task::spawn_blocking(move || step(&shard)).await.expect("a PostgreSQL step")
    }

    /// The NATS server node `i` is connected to now, if it is: found by the
    /// remote ports of the node process's established TCP sockets (Linux `/proc`).
    pub async fn nats_server_of_node(&self, i: usize) -> Option<usize> {
        let pid = self.nodes[i].lock().unwrap().child.as_ref()?.id();
        let ports: Vec<u16> = self.nats.lock().await.servers.iter().map(|s| s.port).collect();
        let mut inodes = std::collections::HashSet::new();
        for fd in std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.flatten() {
            if let Ok(link) = std::fs::read_link(fd.path())
                && let Some(inode) = link.to_str().and_then(|l| l.strip_prefix("socket:[")?.strip_suffix(']'))
            {
                inodes.insert(inode.to_string());
            }
        }
        let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
        for line in table.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // sl, local, remote, state, ..., inode (the 10th field); state 01 is ESTABLISHED.
            if f.len() < 10 || f[3] != "01" || !inodes.contains(f[9]) {
                continue;
            }
            let port = f[2].rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok());
            if let Some(server) = port.and_then(|p| ports.iter().position(|&q| q == p)) {
                return Some(server);
            }
        }
        None
    }

    /// Asks shard `i`'s primary's postmaster for a fast shutdown (SIGINT) and returns at once.
    pub fn signal_shard_stop(&self, i: usize) {
        if let Some(pid) = self.shards[i].primary_pid() {
            let _ = Command::new("kill").args(["-INT", &pid.to_string()]).status();
        }
    }

    /// Starts shard `i`'s primary again on its port and data.
    pub async fn start_shard(&self, i: usize) {
        self.on_shard(i, |s| s.start_primary()).await;
    }

    /// The last `lines` lines of each node's log, for a failure message.
    pub fn log_tails(&self, lines: usize) -> String {
        let mut out = String::new();
        for node in &self.nodes {
            let node = node.lock().unwrap();
            out.push_str(&format!("--- {} ({}), last {lines} lines:\n", node.name, node.log.display()));
            out.push_str(&tail(&node.log, lines));
        }
        out
    }

    /// Removes the logs (a run that passed).
    pub fn remove_dir(&self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) only sends a signal; a pid that has exited meanwhile gives ESRCH.
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    let mut out = String::new();
    for l in &all[all.len().saturating_sub(lines)..] {
        out.push_str(l);
        out.push('\n');
    }
    out
}
