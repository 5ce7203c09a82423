//! Cluster mode with real parts: a three-server NATS cluster, PostgreSQL,
//! three (or four) herald nodes, and nginx in front of them.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::nats::NatsCluster;
use common::pg::{PgCluster, create_database, suite_or_own};
use common::stories::{self, presence_count_within, push_of};
use common::*;
use serde_json::{Value, json};

/// A cell: NATS, a PostgreSQL cluster (ours, or the suite's shared one), and nodes.
struct Cell {
    nats: NatsCluster,
    _pg: Option<PgCluster>,
    stores: Vec<String>,
    nodes: Vec<TestServer>,
}

impl Cell {
    async fn start(n: usize) -> Cell {
        let mut cell = Cell::start_with(0).await;
        for _ in 0..n {
            cell.add_node().await;
        }
        cell.wait_members(n).await;
        cell
    }

    /// NATS, PostgreSQL and `n` nodes... of which none yet when `n` is 0.
    async fn start_with(n: usize) -> Cell {
        let nats = NatsCluster::start().await;
        let (pg, admin) = suite_or_own();
        let stores = vec![create_database(&admin).await, create_database(&admin).await];
        let mut cell = Cell { nats, _pg: pg, stores, nodes: Vec::new() };
        for _ in 0..n {
            cell.add_node().await;
        }
        cell.wait_members(n).await;
        cell
    }

    /// Adds a node. Rebalancing is off (clients here are pinned to nodes on
    /// purpose) except in the test about it.
    async fn add_node(&mut self) {
        self.add_node_with(false).await
    }

    async fn add_node_with(&mut self, rebalance: bool) {
        let (brokers, stores, i) = (self.nats.urls(), self.stores.clone(), self.nodes.len());
        let node = TestServer::start_with(move |c| {
            c.server.rebalance = rebalance;
            c.broker.brokers = brokers;
            c.store.stores = stores;
            c.server.node = format!("node-{i}");
            c.gateway.rate = 100_000;
            c.gateway.burst = 100_000;
            c.broker.broker_linger_ms = 500;
        })
        .await;
        self.nodes.push(node);
    }

    /// Waits until every node sees `n` live nodes.
    async fn wait_members(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(15);
        'outer: loop {
            assert!(Instant::now() < deadline, "nodes did not see each other");
            tokio::time::sleep(Duration::from_millis(100)).await;
            for node in &self.nodes {
                let (_, v) = node.http("GET", "/v1/admin/nodes", None).await;
                if v["nodes"].as_array().map_or(0, Vec::len) != n {
                    continue 'outer;
                }
            }
            return;
        }
    }
}

async fn gateway(node: &TestServer, ws: &str) -> Value {
    http(node.addr, "GET", &format!("/v1/gateway?ws={ws}"), None, None).await.1
}

/// `n` senders on `node`, each its own user, each sending `per` messages to `chat`.
async fn senders(node: &TestServer, tag: &str, chat: &str, n: usize, per: usize) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    for u in 0..n {
        let mut c = node.client("w", &format!("{tag}{u}")).await;
        c.ok(json!({"op": "join", "chat": chat})).await;
        let chat = chat.to_string();
        tasks.push(tokio::spawn(async move {
            for i in 0..per {
                c.ok(json!({"op": "send", "chat": chat, "body": {"i": i}})).await;
            }
        }));
    }
    tasks
}

fn assert_consecutive(events: &[Value], from: u64) {
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["seq"].as_u64().unwrap(), from + i as u64, "in order, no gaps, no repeats");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs nats-server, PostgreSQL and nginx (Debian packages); scripts/test.sh runs it"]
async fn a_watcher_on_one_node_gets_every_event_sent_on_the_others_in_order() {
    let cell = Cell::start(3).await;
    let mut w = cell.nodes[0].client("w", "watcher").await;
    w.ok(json!({"op": "join", "chat": "c"})).await;
    let start = w.ok(json!({"op": "watch", "chat": "c"})).await["seq"].as_u64().unwrap();
    let mut tasks = senders(&cell.nodes[1], "b", "c", 4, 50).await;
    tasks.extend(senders(&cell.nodes[2], "c", "c", 4, 50).await);
    for t in tasks {
        t.await.unwrap();
    }
    // 8 joins and 400 messages, from two other nodes, interleaved.
    let events = w.events("c", 408).await;
    assert_consecutive(&events, start + 1);
    assert_eq!(events.iter().filter(|e| e["type"] == "message").count(), 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs nats-server, PostgreSQL and nginx (Debian packages); scripts/test.sh runs it"]
async fn restarting_a_nats_server_under_load_loses_nothing() {
    let mut cell = Cell::start(3).await;
    let mut watchers = Vec::new();
    for node in &cell.nodes {
        let mut w = node.client("w", &format!("watcher-{}", watchers.len())).await;
        w.ok(json!({"op": "join", "chat": "c"})).await;
        let start = w.ok(json!({"op": "watch", "chat": "c"})).await["seq"].as_u64().unwrap();
        watchers.push((w, start));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for (i, node) in cell.nodes.iter().enumerate() {
        let mut c = node.client("w", &format!("s{i}")).await;
        c.ok(json!({"op": "join", "chat": "c"})).await;
        let stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            let mut last = 0;
            while !stop.load(Ordering::Relaxed) {
                last = c.ok(json!({"op": "send", "chat": "c", "body": "x"})).await["seq"].as_u64().unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            last
        }));
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    cell.nats.servers[0].restart();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    cell.nats.wait_formed().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    let mut last = 0;
    for t in tasks {
        last = last.max(t.await.unwrap());
    }
    for (w, start) in &mut watchers {
        let want = (last - *start) as usize;
        let events = w.events("c", want).await;
        assert_consecutive(&events, *start + 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs nats-server, PostgreSQL and nginx (Debian packages); scripts/test.sh runs it"]
async fn a_drained_node_moves_its_clients_over_the_window_not_at_once() {
    let cell = Cell::start(3).await;
    let victim = &cell.nodes[0];
    let mut clients = Vec::new();
    for i in 0..30 {
        clients.push(victim.client(&format!("ws{i}"), "u").await);
    }
    let (st, v) = victim.http("POST", "/v1/admin/drain", Some(json!({"window_ms": 3000}))).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["draining"], 30);
    let mut delays = Vec::new();
    for c in &mut clients {
        let p = c.push().await;
        assert_eq!(p["ev"], "reconnect");
        delays.push(p["after_ms"].as_u64().unwrap());
        assert_eq!(c.closed_with().await, 4012);
    }
    delays.sort();
    assert!(delays.last().unwrap() - delays.first().unwrap() > 1500, "spread over the window: {delays:?}");
    let within_300ms = delays.windows(10).map(|w| w[9] - w[0]).min().unwrap();
    assert!(within_300ms > 300, "never a third of the clients at once: {delays:?}");
    // Routing no longer sends anyone to the drained node.
    let victim_name = "node-0";
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut any = false;
        for i in 0..50 {
            any |= gateway(&cell.nodes[1], &format!("ws{i}")).await["node"] == victim_name;
        }
        if !any {
            break;
        }
        assert!(Instant::now() < deadline, "the drained node is still routed to");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // And the drained node refuses new connections.
    let (st, _) = http_raw(victim.addr, "GET", "/v1/ws?ws=w", None, None).await;
    assert_ne!(st, 101);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs nats-server, PostgreSQL and nginx (Debian packages); scripts/test.sh runs it"]
async fn adding_a_fourth_node_moves_about_a_quarter_of_the_workspaces() {
    let mut cell = Cell::start(3).await;
    let wss: Vec<String> = (0..400).map(|i| format!("team-{i}")).collect();
    let mut before = Vec::new();
    for ws in &wss {
        let g = gateway(&cell.nodes[0], ws).await;
        assert!(g["url"].as_str().unwrap().ends_with(&format!("/v1/ws?ws={ws}")));
        before.push(g["node"].as_str().unwrap().to_string());
    }
    let used: std::collections::HashSet<_> = before.iter().collect();
    assert_eq!(used.len(), 3, "workspaces spread over all nodes");
    cell.add_node().await;
    cell.wait_members(4).await;
    let mut moved = 0;
    for (ws, was) in wss.iter().zip(&before) {
        let now = gateway(&cell.nodes[1], ws).await["node"].as_str().unwrap().to_string();
        if &now != was {
            assert_eq!(now, "node-3", "a workspace only moves to the new node");
            moved += 1;
        }
    }
    assert!((60..=140).contains(&moved), "about a quarter of 400 moved: {moved}");
}

/// When a node joins, it takes its share: the clients of the workspaces that
/// now route to it are asked to reconnect (spread over the window), no others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs nats-server, PostgreSQL and nginx (Debian packages); scripts/test.sh runs it"]
async fn a_joining_node_takes_exactly_its_share_of_clients() {
    use herald::cluster::{Node, route};
    let mut cell = Cell::start_with(0).await;
    for _ in 0..3 {
        cell.add_node_with(true).await;
    }
    cell.wait_members(3).await;
    let names = |n: usize| -> Vec<Node> {
        (0..n).map(|i| Node { name: format!("node-{i}"), url: String::new(), load: 0 }).collect()
    };
    // Two workspaces per node that stay and two that will move to node-3: four
    // clients a node, under the load bound before and after the join.
    let (mut stay, mut go) = (vec![Vec::new(); 3], vec![Vec::new(); 3]);
    for i in 0.. {
        let ws = format!("team-{i}");
        let owner: usize = route(&ws, &names(3)).unwrap().name[5..].parse().unwrap();
        let moves = route(&ws, &names(4)).unwrap().name == "node-3";
        let bucket = if moves { &mut go[owner] } else { &mut stay[owner] };
        if bucket.len() < 2 {
            bucket.push(ws);
        }
        if stay.iter().chain(&go).all(|b| b.len() == 2) {
            break;
        }
    }
    let mut clients = Vec::new();
    for (owner, list) in stay.iter().chain(&go).enumerate() {
        for ws in list {
            let node = &cell.nodes[owner % 3];
            let token = node.token(ws, "u").await;
            let mut c = Client::connect(&node.ws_url(ws)).await;
            c.ok(json!({"op": "hello", "token": token})).await;
            clients.push((ws.clone(), owner >= 3, c));
        }
    }
    cell.add_node().await;
    cell.wait_members(4).await;
    // The rebalancer waits 2 s for the cell to settle, then spreads moves over the 200 ms window.
    tokio::time::sleep(Duration::from_secs(4)).await;
    for (ws, should_move, c) in &mut clients {
        match c.push_within(Duration::from_millis(200)).await {
            Some(p) => {
                assert!(*should_move, "{ws} stays on its node but was asked to move: {p}");
                assert_eq!((p["ev"].clone(), p["reason"].clone()), (json!("reconnect"), json!("rebalance")));
                assert_eq!(c.closed_with().await, 4012);
            }
            None => assert!(!*should_move, "{ws} now belongs to node-3 but its client was not moved"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs nats-server, PostgreSQL and nginx (Debian packages); scripts/test.sh runs it"]
async fn kill_9_of_a_node_under_load_its_clients_resume_on_the_others_with_nothing_missing() {
    let cell = Cell::start(2).await;
    // The victim is a real process, in the same cell.
    let data = data_dir();
    let env = [
        ("HERALD_BROKER", cell.nats.urls().join(",")),
        ("HERALD_NODE", "victim".to_string()),
        ("HERALD_RATE", "100000".to_string()),
        ("HERALD_BURST", "100000".to_string()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut victim = BinServer::start(data.path(), &cell.stores, &env);
    victim.wait_ready().await;
    let victim_url = format!("ws://{}/v1/ws?ws=w", victim.addr);

    let mut watchers = Vec::new();
    for i in 0..5 {
        let token = cell.nodes[0].token("w", &format!("watcher{i}")).await;
        let mut c = Client::connect(&victim_url).await;
        c.ok(json!({"op": "hello", "token": token})).await;
        c.ok(json!({"op": "join", "chat": "c"})).await;
        let start = c.ok(json!({"op": "watch", "chat": "c"})).await["seq"].as_u64().unwrap();
        watchers.push((c, start, Vec::<Value>::new()));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mut sender = cell.nodes[1].client("w", "sender").await;
    sender.ok(json!({"op": "join", "chat": "c"})).await;
    let stop2 = stop.clone();
    let send_task = tokio::spawn(async move {
        let mut last = 0;
        while !stop2.load(Ordering::Relaxed) {
            last = sender.ok(json!({"op": "send", "chat": "c", "body": "x"})).await["seq"].as_u64().unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        last
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Kill the node under the watchers, then take everything they got before it died.
    victim.kill9();
    for (c, _, got) in &mut watchers {
        // Bounded: the stream ends with the dead socket.
        let deadline = Instant::now() + Duration::from_secs(5);
        while c.closed.is_none() && Instant::now() < deadline {
            if let Some(p) = c.push_within(Duration::from_millis(200)).await {
                got.push(p);
            }
        }
        assert!(c.closed.is_some(), "the watcher saw its node die");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Resume: ask a live node where to go, watch again after the last seq held.
    for (i, (c, _, got)) in watchers.iter_mut().enumerate() {
        let g = gateway(&cell.nodes[0], "w").await;
        let url = g["url"].as_str().unwrap().to_string();
        assert!(!url.contains(&victim.addr.to_string()) || g["node"] != "victim");
        let token = cell.nodes[0].token("w", &format!("watcher{i}")).await;
        let mut fresh = Client::connect(&url).await;
        fresh.ok(json!({"op": "hello", "token": token})).await;
        let last = got.last().map_or(0, |e| e["seq"].as_u64().unwrap());
        fresh.ok(json!({"op": "watch", "chat": "c", "after": last})).await;
        *c = fresh;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    let last = send_task.await.unwrap();
    for (c, start, got) in &mut watchers {
        let have = got.last().map_or(*start, |e| e["seq"].as_u64().unwrap());
        got.extend(c.events("c", (last - have) as usize).await);
        assert_consecutive(got, *start + 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs nats-server, PostgreSQL and nginx (Debian packages); scripts/test.sh runs it"]
async fn nginx_keeps_a_workspace_on_one_node_and_spreads_workspaces() {
    let cell = Cell::start(3).await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut conf = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/nginx.conf")).unwrap();
    for (i, node) in cell.nodes.iter().enumerate() {
        conf = conf.replace(&format!("127.0.0.1:808{}", i + 1), &node.addr.to_string());
    }
    conf = conf.replace("listen 127.0.0.1:8080;", &format!("listen 127.0.0.1:{port};"));
    conf = conf.replace("worker_processes auto;", "worker_processes 1;");
    conf = conf.replace("worker_connections 65536;", "worker_connections 1024;");
    let conf_path = dir.path().join("nginx.conf");
    std::fs::write(&conf_path, conf).unwrap();
    let mut nginx = std::process::Command::new("nginx")
        .arg("-p")
        .arg(dir.path())
        .arg("-c")
        .arg(&conf_path)
        .arg("-e")
        .arg(dir.path().join("error.log"))
        .arg("-g")
        .arg(format!("daemon off; pid {};", dir.path().join("nginx.pid").display()))
        .spawn()
        .expect("start nginx (apt-get install nginx)");
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while tokio::net::TcpStream::connect(addr).await.is_err() {
        assert!(Instant::now() < deadline, "nginx did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let mut nodes_by_ws: std::collections::HashMap<String, std::collections::HashSet<String>> = Default::default();
    for i in 0..20 {
        let ws = format!("org-{i}");
        for u in 0..3 {
            let token = cell.nodes[0].token(&ws, &format!("u{u}")).await;
            let mut c = Client::connect(&format!("ws://{addr}/v1/ws?ws={ws}")).await;
            let hello = c.ok(json!({"op": "hello", "token": token})).await;
            nodes_by_ws.entry(ws.clone()).or_default().insert(hello["node"].as_str().unwrap().to_string());
        }
    }
    assert!(nodes_by_ws.values().all(|n| n.len() == 1), "each workspace's users land on one node: {nodes_by_ws:?}");
    let used: std::collections::HashSet<_> = nodes_by_ws.values().flatten().collect();
    assert!(used.len() >= 2, "workspaces spread over nodes: {used:?}");

    // A conversation through nginx.
    let token = cell.nodes[0].token("org-1", "alice").await;
    let mut a = Client::connect(&format!("ws://{addr}/v1/ws?ws=org-1")).await;
    a.ok(json!({"op": "hello", "token": token})).await;
    a.ok(json!({"op": "join", "chat": "c"})).await;
    a.ok(json!({"op": "watch", "chat": "c"})).await;
    a.ok(json!({"op": "send", "chat": "c", "body": "through nginx"})).await;
    assert_eq!(a.push().await["body"], "through nginx");

    // SIGTERM, not SIGKILL: the master must stop its workers, or they outlive the test.
    let _ = std::process::Command::new("kill").args(["-TERM", &nginx.id().to_string()]).status();
    let deadline = Instant::now() + Duration::from_secs(10);
    while nginx.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "nginx did not stop");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs nats-server, PostgreSQL and nginx (Debian packages); scripts/test.sh runs it"]
async fn presence_and_typing_reach_the_other_nodes() {
    let cell = Cell::start(3).await;
    stories::presence_and_typing_reach_the_other_nodes(&cell.nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs nats-server, PostgreSQL and nginx (Debian packages); scripts/test.sh runs it"]
async fn the_users_of_a_killed_node_stop_being_present_within_10_s() {
    let cell = Cell::start(2).await;
    let data = data_dir();
    let env = [("HERALD_BROKER", cell.nats.urls().join(",")), ("HERALD_NODE", "victim".to_string())];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut victim = BinServer::start(data.path(), &cell.stores, &env);
    victim.wait_ready().await;

    let mut alice = cell.nodes[0].client("w", "alice").await;
    alice.ok(json!({"op": "join", "chat": "g"})).await;
    alice.ok(json!({"op": "watch", "chat": "g"})).await;
    alice.ok(json!({"op": "presence", "chat": "g"})).await;
    let mut on_victim = Vec::new();
    for user in ["carol", "dave"] {
        let token = cell.nodes[0].token("w", user).await;
        let mut c = Client::connect(&format!("ws://{}/v1/ws?ws=w", victim.addr)).await;
        c.ok(json!({"op": "hello", "token": token})).await;
        c.ok(json!({"op": "join", "chat": "g"})).await;
        c.ok(json!({"op": "watch", "chat": "g"})).await;
        on_victim.push(c);
    }
    for node in &cell.nodes {
        presence_count_within(node, "g", 3, Duration::from_secs(2)).await;
    }
    for _ in 0..2 {
        assert_eq!(push_of(&mut alice, "presence", Duration::from_secs(2)).await.unwrap()["present"], true);
    }

    victim.kill9();
    let killed = Instant::now();
    let mut gone = Vec::new();
    while gone.len() < 2 {
        let left = Duration::from_secs(10).saturating_sub(killed.elapsed());
        let p = push_of(&mut alice, "presence", left).await.expect("the victim's users stop being present within 10 s");
        assert_eq!(p["present"], false, "{p}");
        gone.push(p["user"].as_str().unwrap().to_string());
    }
    gone.sort();
    assert_eq!(gone, ["carol", "dave"]);
    let took = killed.elapsed();
    for node in &cell.nodes {
        presence_count_within(node, "g", 1, Duration::from_secs(10).saturating_sub(killed.elapsed())).await;
    }
    eprintln!("a killed node's users stopped being present after {took:?}");
}

/// The users present in `chat` as `addr`'s presence route answers, sorted.
async fn present_at(addr: std::net::SocketAddr, chat: &str) -> Vec<String> {
    let path = format!("/v1/workspaces/w/chats/{chat}/presence");
    let (status, body) = http(addr, "GET", &path, Some(API_KEY), None).await;
    assert_eq!(status, 200, "{body}");
    let mut users: Vec<String> =
        body["users"].as_array().unwrap().iter().map(|u| u.as_str().unwrap().to_string()).collect();
    users.sort();
    users
}

/// A node frozen (SIGSTOP) long enough for the others to drop its users,
/// then woken: within 3 s every node, the woken one included, agrees on who
/// is present again, and the woken node's watcher is not told that the
/// others' users left (they never did). Before the fix the woken node
/// trusted its stale view and expired every other node's users on waking
/// (here the cell then repaired it; in the field it stayed wrong).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs nats-server and PostgreSQL (Debian packages); scripts/test.sh runs it"]
async fn a_frozen_node_agrees_on_presence_again_soon_after_it_wakes() {
    let cell = Cell::start(2).await;
    let data = data_dir();
    let env = [("HERALD_BROKER", cell.nats.urls().join(",")), ("HERALD_NODE", "frozen".to_string())];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let frozen = BinServer::start(data.path(), &cell.stores, &env);
    frozen.wait_ready().await;
    cell.wait_members(3).await;
    // The frozen node knows the others too, before it is frozen.
    let started = Instant::now();
    loop {
        let (_, v) = http(frozen.addr, "GET", "/v1/admin/nodes", Some(API_KEY), None).await;
        if v["nodes"].as_array().map_or(0, Vec::len) == 3 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "the frozen node never saw the others: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let mut on_nodes = Vec::new();
    for (i, user) in ["alice", "bob"].into_iter().enumerate() {
        let mut c = cell.nodes[i].client("w", user).await;
        c.ok(json!({"op": "join", "chat": "g"})).await;
        c.ok(json!({"op": "watch", "chat": "g"})).await;
        on_nodes.push(c);
    }
    let token = cell.nodes[0].token("w", "carol").await;
    let mut carol = Client::connect(&format!("ws://{}/v1/ws?ws=w", frozen.addr)).await;
    carol.ok(json!({"op": "hello", "token": token})).await;
    carol.ok(json!({"op": "join", "chat": "g"})).await;
    carol.ok(json!({"op": "watch", "chat": "g"})).await;
    let everyone = ["alice", "bob", "carol"];
    let started = Instant::now();
    while present_at(frozen.addr, "g").await != everyone {
        assert!(started.elapsed() < Duration::from_secs(5), "the frozen node never saw everyone");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // From now on carol's watch is told of every change.
    let seen = carol.ok(json!({"op": "presence", "chat": "g"})).await;
    assert_eq!(seen["users"], json!(everyone), "{seen}");

    // Frozen long enough that the others drop carol, and that everything it heard is stale.
    let pid = frozen.child.id() as i32;
    // SAFETY: a signal to the child this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    for node in &cell.nodes {
        presence_count_within(node, "g", 2, Duration::from_secs(10)).await;
    }
    let freeze =
        Duration::from_secs(std::env::var("HERALD_FREEZE_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(4));
    tokio::time::sleep(freeze).await;
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    let woke = Instant::now();

    // Every node agrees again within 3 s: carol is back on the others, and the woken node still
    // holds alice and bob (or has them back).
    let bound = Duration::from_secs(3);
    loop {
        let mut views = vec![present_at(frozen.addr, "g").await];
        for node in &cell.nodes {
            views.push(present_at(node.addr, "g").await);
        }
        if views.iter().all(|v| v == &everyone) {
            break;
        }
        assert!(woke.elapsed() < bound, "{:?} after waking the nodes say {views:?}", woke.elapsed());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let agreed = woke.elapsed();
    // Alice and bob never left: carol, on the woken node, is not told they did.
    let mut told = Vec::new();
    while let Some(p) = push_of(&mut carol, "presence", Duration::from_secs(1)).await {
        told.push(p);
    }
    assert!(told.is_empty(), "carol was told of changes that did not happen: {told:?}");
    let (_, text) = http_raw(frozen.addr, "GET", "/metrics", None, None).await;
    assert!(metric(&text, "herald_node_pauses_total") >= 1.0, "the pause is counted");
    eprintln!("every node agreed on presence {agreed:?} after the frozen node woke");
}

/// An event whose broker hint never reaches a node still reaches its watchers and live inboxes, from
/// the log, within two tail checks; and a node with many quiet chats reads none of their heads, only
/// which chats moved. Two nodes of one shard on two NATS clusters that never meet: every hint of one
/// is lost to the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs nats-server and PostgreSQL (Debian packages); scripts/test.sh runs it"]
async fn a_node_that_never_hears_a_hint_reads_the_event_from_the_log_without_reading_every_chat() {
    let (nats_a, nats_b) = (NatsCluster::start().await, NatsCluster::start().await);
    let (_pg, admin) = suite_or_own();
    let store = create_database(&admin).await;
    let start = |brokers: Vec<String>, name: &'static str| {
        let store = store.clone();
        TestServer::start_with(move |c| {
            c.broker.brokers = brokers;
            c.store.stores = vec![store];
            c.server.node = name.into();
            c.server.rebalance = false;
            c.gateway.rate = 100_000;
            c.gateway.burst = 100_000;
        })
    };
    let a = start(nats_a.urls(), "node-a").await;
    let b = start(nats_b.urls(), "node-b").await;
    let mut bob = b.client("w", "bob").await;
    let mut alice = a.client("w", "alice").await;
    alice.ok(json!({"op": "join", "chat": "quiet"})).await;
    bob.ok(json!({"op": "join", "chat": "quiet"})).await;
    for i in 0..200 {
        bob.ok(json!({"op": "join", "chat": format!("c{i}")})).await;
        bob.ok(json!({"op": "watch", "chat": format!("c{i}")})).await;
    }
    bob.ok(json!({"op": "watch", "chat": "quiet"})).await;
    bob.ok(json!({"op": "inbox", "live": true})).await;
    while push_of(&mut bob, "inbox", Duration::from_millis(200)).await.is_some() {}

    // Past the first check (which reads every head once), a quiet cell reads no heads.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let heads = |text: &str| metric(text, "herald_hub_tail_heads_total");
    let (_, before) = http_raw(b.addr, "GET", "/metrics", None, None).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (_, after) = http_raw(b.addr, "GET", "/metrics", None, None).await;
    assert_eq!(heads(&after), heads(&before), "4 checks of 201 watched chats read no head");

    let sent_at = Instant::now();
    let m = alice.ok(json!({"op": "send", "chat": "quiet", "body": "never announced to node-b"})).await;
    // The event and bob's inbox push, from the one catch-up, in either order.
    let (mut event, mut inbox) = (None, None);
    let deadline = sent_at + Duration::from_secs(6);
    while event.is_none() || inbox.is_none() {
        let left = deadline.saturating_duration_since(Instant::now());
        let p = bob.push_within(left).await.unwrap_or_else(|| panic!("event {event:?}, inbox {inbox:?}"));
        match p["ev"].as_str() {
            Some("event") => {
                assert!(event.is_none(), "nothing twice: {p}");
                event = Some((p, sent_at.elapsed()));
            }
            Some("inbox") if p["chat"] == "quiet" => inbox = Some(p),
            _ => {}
        }
    }
    let ((e, took), p) = (event.expect("looped until both"), inbox.expect("looped until both"));
    assert_eq!((e["chat"].clone(), e["seq"].clone()), (json!("quiet"), m["seq"].clone()), "{e}");
    assert!(took < Duration::from_millis(2_500), "two checks of 750 ms and a read: {took:?}");
    assert_eq!((p["seq"].clone(), p["unread"].clone()), (m["seq"].clone(), json!(1)), "{p}");
    assert_eq!(push_of(&mut bob, "event", Duration::from_millis(1_600)).await, None, "nothing twice");
    let (_, text) = http_raw(b.addr, "GET", "/metrics", None, None).await;
    assert!(metric(&text, "herald_hub_tail_repairs_total") >= 1.0, "counted as a repair");
    assert_eq!(heads(&text), heads(&before), "still no head read");
    eprintln!("node-b pushed an event it never heard of {took:?} after its send");

    // A commit that comes late, as one held by a synchronous standby or by a frozen node: its
    // transaction takes its id before several checks and commits after them. Written by hand here.
    let (db, conn) = tokio_postgres::connect(&store, tokio_postgres::NoTls).await.expect("connect");
    tokio::spawn(conn);
    db.batch_execute(
        r#"BEGIN;
           INSERT INTO events (chat_id, seq, type, "user", ts, body)
             SELECT id, seq + 1, 'message', 'alice', 0, '"late"' FROM chats WHERE chat = 'quiet';
           UPDATE chats SET seq = seq + 1 WHERE chat = 'quiet';"#,
    )
    .await
    .expect("a transaction left open");
    // Later transactions commit meanwhile (a read that only remembered the newest id it saw would pass
    // the open one over).
    alice.ok(json!({"op": "join", "chat": "busy"})).await;
    for i in 0..3 {
        alice.ok(json!({"op": "send", "chat": "busy", "body": i})).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let committed = Instant::now();
    db.batch_execute("COMMIT").await.expect("commit");
    let e = push_of(&mut bob, "event", Duration::from_secs(3)).await.expect("the late commit's event");
    assert_eq!((e["seq"].clone(), e["body"].clone()), (json!(m["seq"].as_u64().unwrap() + 1), json!("late")), "{e}");
    eprintln!("node-b pushed a commit that came 3 s late {:?} after it", committed.elapsed());
}

/// The admin page's view of a cell: every node with its connections (the
/// others' as they announce them), each shard's breaker, and a node that
/// drains shown as draining by itself and gone from the others' lists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs nats-server and PostgreSQL (Debian packages); scripts/test.sh runs it"]
async fn admin_status_shows_every_node_of_the_cell_with_its_connections() {
    let cell = Cell::start(2).await;
    let (a, b) = (&cell.nodes[0], &cell.nodes[1]);
    let mut clients = Vec::new();
    for i in 0..3 {
        clients.push(b.client("w", &format!("u{i}")).await);
    }
    let deadline = Instant::now() + WAIT;
    let seen = loop {
        let (st, v) = a.http("GET", "/v1/admin/status", None).await;
        assert_eq!(st, 200, "{v}");
        if v["nodes"].as_array().is_some_and(|n| n.len() == 2) && v["nodes"][1]["connections"] == 3 {
            break v;
        }
        assert!(Instant::now() < deadline, "node-0 never saw node-1's 3 connections: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(seen["node"], "node-0");
    assert_eq!(seen["connections"], 0);
    assert_eq!(seen["nodes"][0]["node"], "node-0");
    assert_eq!((seen["nodes"][0]["this"].clone(), seen["nodes"][1]["this"].clone()), (json!(true), json!(false)));
    assert_eq!(seen["nodes"][1]["node"], "node-1");
    assert_eq!(seen["nodes"][1]["url"], format!("ws://{}", b.addr));
    let shards = seen["shards"].as_array().unwrap();
    assert_eq!(shards.len(), 2, "{seen}");
    assert!(shards.iter().all(|s| s["breaker"] == "closed"), "{seen}");

    let (st, _) = b.http("POST", "/v1/admin/drain", Some(json!({"window_ms": 200}))).await;
    assert_eq!(st, 200);
    let (_, v) = b.http("GET", "/v1/admin/status", None).await;
    assert_eq!(v["draining"], true);
    assert_eq!(v["nodes"].as_array().map(Vec::len), Some(2), "a draining node still lists itself: {v}");
    let deadline = Instant::now() + WAIT;
    loop {
        let (_, v) = a.http("GET", "/v1/admin/status", None).await;
        if v["nodes"].as_array().map(Vec::len) == Some(1) {
            break;
        }
        assert!(Instant::now() < deadline, "node-0 still lists the drained node-1: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs nats-server, PostgreSQL and nginx (Debian packages); scripts/test.sh runs it"]
async fn a_live_inbox_hears_of_what_happens_on_the_other_nodes() {
    let cell = Cell::start(2).await;
    stories::a_live_inbox_hears_of_what_happens_on_the_other_nodes(&cell.nodes, Duration::from_millis(500)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs nats-server, PostgreSQL and nginx (Debian packages); scripts/test.sh runs it"]
async fn conversations_look_the_same_from_every_node() {
    let cell = Cell::start(2).await;
    stories::conversations_look_the_same_from_every_node(&cell.nodes, Duration::from_millis(500)).await;
}
