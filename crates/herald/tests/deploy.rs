//! The example deployment in `deploy/`, run for real: each file is read from
//! the repository, its addresses, ports and paths swapped for the test's own
//! (every swap must find its text, so a file the test no longer fits fails
//! here), and handed to the real program: systemd-analyze, nginx with TLS,
//! three nats-server processes, psql against PostgreSQL, and the `herald`
//! binary with its `backup` command.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::nats::NatsCluster;
use common::nginx::Nginx;
use common::pg::{PgCluster, TestPki};
use common::tls::{connect_wss, https_get};
use common::*;
use serde_json::{Value, json};

fn deploy_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy").join(name)
}

fn deploy_file(name: &str) -> String {
    std::fs::read_to_string(deploy_path(name)).unwrap_or_else(|e| panic!("deploy/{name}: {e}"))
}

/// `text` with every `(from, to)` swapped; each `from` must occur.
fn render(name: &str, text: &str, swaps: &[(&str, String)]) -> String {
    let mut out = text.to_string();
    for (from, to) in swaps {
        assert!(out.contains(from), "deploy/{name} no longer contains {from:?}: update this test with it");
        out = out.replace(from, to);
    }
    out
}

/// `key = value` (or `key=value`) lines of an INI-like file, comments dropped.
fn settings(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with(';') && !l.starts_with('['))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

fn setting<'a>(all: &'a [(String, String)], key: &str) -> &'a str {
    all.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str()).unwrap_or_else(|| panic!("no {key}"))
}

/// The number after `directive` in an nginx config (`worker_rlimit_nofile 1048576;`).
fn nginx_number(conf: &str, directive: &str) -> u64 {
    conf.lines()
        .map(str::trim)
        .find_map(|l| l.strip_prefix(directive)?.trim().strip_suffix(';')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("nginx-tls.conf has no {directive}"))
}

/// The settings herald would run with from `deploy/herald.toml` (secrets as the env file gives them).
fn example_settings() -> herald::Config {
    let file = deploy_path("herald.toml");
    let args = ["serve".into(), "--config".into(), file.into_os_string(), "--api-key".into(), API_KEY.into()];
    let args: Vec<std::ffi::OsString> = args.into_iter().chain(["--jwt-secret".into(), SECRET.into()]).collect();
    herald::config::ServeArgs::parse_from(args)
        .expect("deploy/herald.toml parses")
        .resolve()
        .expect("deploy/herald.toml resolves")
}

/// The unit is what `systemd-analyze verify` accepts without a word, and its
/// limits fit herald: a stop timeout past the drain and the close grace, a
/// descriptor limit past the connection cap, secrets from the env file.
#[test]
fn the_systemd_unit_passes_systemd_analyze_verify_and_outlasts_a_drain() {
    let unit = deploy_file("herald.service");
    let keys = settings(&unit);
    let config = example_settings();
    assert!(!config.dev_mode && config.server.public_url.as_deref() == Some("wss://chat.example.com"));

    let stop: u64 = setting(&keys, "TimeoutStopSec").trim_end_matches('s').parse().expect("TimeoutStopSec in seconds");
    let needed = config.server.drain_window() + herald::server::CLOSE_GRACE;
    assert!(Duration::from_secs(stop) > needed, "TimeoutStopSec={stop}s must outlast the drain ({needed:?})");
    let nofile: usize = setting(&keys, "LimitNOFILE").parse().unwrap();
    assert!(
        nofile >= 2 * config.gateway.limits.max_connections,
        "LimitNOFILE {nofile} for {}",
        config.gateway.limits.max_connections
    );
    for (key, want) in [
        ("User", "herald"),
        ("EnvironmentFile", "/etc/herald/herald.env"),
        ("Restart", "on-failure"),
        ("KillSignal", "SIGTERM"),
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("ReadWritePaths", "/var/lib/herald"),
        ("PrivateTmp", "yes"),
    ] {
        assert_eq!(setting(&keys, key), want, "{key}");
    }
    assert_eq!(config.store.data, Path::new("/var/lib/herald"), "herald.toml's data is the unit's writable path");

    // verify checks that ExecStart's program exists: the binary under test stands in.
    let exec = "/usr/local/bin/herald";
    let unit = render("herald.service", &unit, &[(exec, env!("CARGO_BIN_EXE_herald").to_string())]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("herald.service");
    std::fs::write(&path, unit).unwrap();
    let out = match std::process::Command::new("systemd-analyze").arg("verify").arg(&path).output() {
        Ok(out) => out,
        Err(e) => {
            // Not silently green: say that only the keys above were checked.
            eprintln!("systemd-analyze not available ({e}): the unit's keys were checked by parsing only");
            return;
        }
    };
    let said = String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "systemd-analyze verify failed:\n{said}");
    let about_unit: Vec<&str> = said.lines().filter(|l| l.contains("herald.service")).collect();
    assert!(about_unit.is_empty(), "systemd-analyze verify complains:\n{}", about_unit.join("\n"));
}

/// Every setting names a knob this kernel has (`-` marks one that may be
/// absent), every value is numbers, and the descriptor limits of the unit and
/// of nginx fit under the kernel's ceiling; herald's port is never handed out
/// as a source port.
#[test]
fn the_sysctl_file_sets_only_what_the_kernel_has_and_agrees_with_the_other_files() {
    let text = deploy_file("sysctl-herald.conf");
    let all = settings(&text);
    assert!(all.len() >= 10, "{all:?}");
    for (key, value) in &all {
        let (optional, key) = match key.strip_prefix('-') {
            Some(k) => (true, k),
            None => (false, key.as_str()),
        };
        let proc = Path::new("/proc/sys").join(key.replace('.', "/"));
        assert!(optional || proc.exists(), "{key}: this kernel has no {}", proc.display());
        for part in value.split([' ', ',']).filter(|p| !p.is_empty()) {
            part.parse::<u64>().unwrap_or_else(|_| panic!("{key} = {value}: {part} is not a number"));
        }
    }
    let number = |key: &str| -> u64 { setting(&all, key).parse().unwrap() };
    let unit = settings(&deploy_file("herald.service"));
    let nginx = deploy_file("nginx-tls.conf");
    let unit_nofile: u64 = setting(&unit, "LimitNOFILE").parse().unwrap();
    let nginx_nofile = nginx_number(&nginx, "worker_rlimit_nofile");
    assert!(number("fs.nr_open") >= unit_nofile.max(nginx_nofile));
    assert!(number("fs.file-max") >= unit_nofile + nginx_nofile, "herald and an nginx worker, each at its limit");
    assert!(number("net.core.somaxconn") >= 65535, "nginx's backlog=65535 is not cut");
    let listen = example_settings().server.listen.port().to_string();
    let reserved = setting(&all, "net.ipv4.ip_local_reserved_ports");
    assert!(reserved.split(',').any(|p| p == listen), "herald's port {listen} is reserved: {reserved}");
    let rmem: Vec<u64> = setting(&all, "net.ipv4.tcp_rmem").split_whitespace().map(|v| v.parse().unwrap()).collect();
    assert!(rmem[2] as usize >= herald_protocol::limits::FRAME_LIMIT, "a whole frame fits the receive buffer");
}

/// A client on the open internet's side: wss:// through nginx's TLS (a
/// certificate from a test CA, made with the openssl command), `/v1/gateway`
/// answering with nginx's wss:// address, a conversation through it; plain
/// HTTP redirected, and herald's private routes not served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs nginx and openssl (Debian packages); scripts/test.sh runs it"]
async fn a_client_talks_to_herald_over_wss_through_nginx_with_the_tls_config() {
    let pki = TestPki::new();
    let (http_port, https_port) = (free_port(), free_port());
    let public_url = format!("wss://127.0.0.1:{https_port}");
    let data = data_dir();
    let node =
        BinServer::start(data.path(), &[], &[("HERALD_PUBLIC_URL", public_url.as_str()), ("HERALD_NODE", "node-tls")]);
    node.wait_ready().await;

    let conf = render(
        "nginx-tls.conf",
        &deploy_file("nginx-tls.conf"),
        &[
            // Workers as the test's user (as root: nobody), sized for a test.
            ("user www-data;", String::new()),
            ("worker_processes auto;", "worker_processes 1;".into()),
            ("worker_rlimit_nofile 1048576;", "worker_rlimit_nofile 4096;".into()),
            ("worker_connections 262144;", "worker_connections 1024;".into()),
            ("server 10.0.0.11:8080", format!("server {}", node.addr)),
            ("        server 10.0.0.12:8080 max_fails=1 fail_timeout=5s;\n", String::new()),
            ("        server 10.0.0.13:8080 max_fails=1 fail_timeout=5s;\n", String::new()),
            ("listen 80;", format!("listen 127.0.0.1:{http_port};")),
            ("listen 443 ssl", format!("listen 127.0.0.1:{https_port} ssl")),
            (
                "/etc/letsencrypt/live/chat.example.com/fullchain.pem",
                pki.server.join("server.crt").display().to_string(),
            ),
            ("/etc/letsencrypt/live/chat.example.com/privkey.pem", pki.server.join("server.key").display().to_string()),
        ],
    );
    let https: std::net::SocketAddr = format!("127.0.0.1:{https_port}").parse().unwrap();
    let plain: std::net::SocketAddr = format!("127.0.0.1:{http_port}").parse().unwrap();
    let mut nginx = Nginx::start(&conf, &[plain, https]).await;

    let (status, _) = http_raw(plain, "GET", "/v1/ws?ws=acme", None, None).await;
    assert_eq!(status, 301, "plain HTTP is sent to TLS");

    let (status, body) = https_get(https, "127.0.0.1", "/v1/gateway?ws=acme", &pki.ca).await;
    assert_eq!(status, 200, "{body}");
    let gateway: Value = serde_json::from_str(&body).unwrap();
    let url = gateway["url"].as_str().unwrap().to_string();
    assert_eq!(url, format!("{public_url}/v1/ws?ws=acme"), "the gateway sends clients back through nginx");
    for private in ["/metrics", "/readyz", "/v1/admin/nodes", "/v1/tokens"] {
        let (status, _) = https_get(https, "127.0.0.1", private, &pki.ca).await;
        assert_eq!(status, 404, "{private} is not public");
    }

    let mut alice = connect_wss(&url, &pki.ca).await;
    let hello = alice.ok(json!({"op": "hello", "token": token_at(node.addr, "acme", "alice").await})).await;
    assert_eq!(hello["node"], "node-tls");
    alice.ok(json!({"op": "join", "chat": "general"})).await;
    alice.ok(json!({"op": "watch", "chat": "general"})).await;
    let mut bob = connect_wss(&url, &pki.ca).await;
    bob.ok(json!({"op": "hello", "token": token_at(node.addr, "acme", "bob").await})).await;
    bob.ok(json!({"op": "join", "chat": "general"})).await;
    let sent = bob.ok(json!({"op": "send", "chat": "general", "body": "over TLS"})).await;
    let events = alice.events("general", 2).await;
    assert_eq!((events[0]["type"].clone(), events[0]["user"].clone()), (json!("join"), json!("bob")));
    assert_eq!((events[1]["body"].clone(), events[1]["seq"].clone()), (json!("over TLS"), sent["seq"].clone()));

    drop((alice, bob));
    nginx.stop();
}

/// A cell from the example files: three NATS servers from
/// deploy/nats-cluster.conf, two shard databases made by
/// deploy/postgres-shard.sql (herald then creates its tables as the role the
/// file made, no superuser), and two nodes, each on a different NATS server:
/// an event sent on one node reaches a watcher on the other over the route.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs nats-server and PostgreSQL (Debian packages); scripts/test.sh runs it"]
async fn an_event_sent_on_one_node_reaches_a_watcher_on_the_other_across_the_example_cell() {
    let pg = tokio::task::spawn_blocking(PgCluster::start);
    let conf = deploy_file("nats-cluster.conf");
    let nats = NatsCluster::start_from_config(move |p| {
        render(
            "nats-cluster.conf",
            &conf,
            &[
                ("0.0.0.0:4222", format!("127.0.0.1:{}", p.client)),
                ("0.0.0.0:8222", format!("127.0.0.1:{}", p.monitor)),
                ("0.0.0.0:6222", format!("127.0.0.1:{}", p.cluster)),
                ("nats-1.internal:6222", format!("127.0.0.1:{}", p.cluster_ports[0])),
                ("nats-2.internal:6222", format!("127.0.0.1:{}", p.cluster_ports[1])),
                ("nats-3.internal:6222", format!("127.0.0.1:{}", p.cluster_ports[2])),
            ],
        )
    })
    .await;
    let monitor: std::net::SocketAddr = format!("127.0.0.1:{}", nats.servers[0].monitor_port).parse().unwrap();
    let (_, varz) = http(monitor, "GET", "/varz", None, None).await;
    let max_payload = varz["max_payload"].as_u64().unwrap() as usize;
    assert!(max_payload >= herald_protocol::limits::FRAME_LIMIT + 1024, "max_payload {max_payload}");

    let pg = pg.await.unwrap();
    let base = pg.admin_url.rsplit_once('/').unwrap().0.to_string();
    let (role, password) = ("herald_cell", "cell-password-0123456789abcdef0123456789");
    for shard in ["herald_a", "herald_b"] {
        let out = std::process::Command::new("psql")
            .args(["-q", "-v", "ON_ERROR_STOP=1"])
            .args(["-v", &format!("shard={shard}"), "-v", &format!("role={role}"), "-v"])
            .arg(format!("password={password}"))
            .arg("-f")
            .arg(deploy_path("postgres-shard.sql"))
            .arg(&pg.admin_url)
            .output()
            .expect("run psql (apt-get install postgresql-client)");
        assert!(out.status.success(), "postgres-shard.sql: {}", String::from_utf8_lossy(&out.stderr));
    }
    let stores: Vec<String> = ["a", "b"]
        .iter()
        .map(|s| {
            let host = base.strip_prefix("postgres://herald@").unwrap();
            format!("{s}=postgres://{role}:{password}@{host}/herald_{s}")
        })
        .collect();

    let node = |i: usize, nats_url: String| {
        let stores = stores.clone();
        TestServer::start_with(move |c| {
            c.server.node = format!("node-{i}");
            c.broker.brokers = vec![nats_url];
            c.store.stores = stores;
            c.server.rebalance = false;
        })
    };
    let a = node(0, nats.servers[0].url()).await;
    let b = node(1, nats.servers[2].url()).await;

    let mut watcher = b.client("acme", "watcher").await;
    watcher.ok(json!({"op": "join", "chat": "c"})).await;
    watcher.ok(json!({"op": "watch", "chat": "c"})).await;
    let mut sender = a.client("acme", "sender").await;
    sender.ok(json!({"op": "join", "chat": "c"})).await;
    let sent = sender.ok(json!({"op": "send", "chat": "c", "body": "across the cell"})).await;
    let events = watcher.events("c", 2).await;
    assert_eq!((events[1]["body"].clone(), events[1]["seq"].clone()), (json!("across the cell"), sent["seq"].clone()));

    // The tables are the role's: herald made them as it, with no more rights than the file gave.
    let (client, conn) =
        tokio_postgres::connect(&format!("{base}/herald_a"), tokio_postgres::NoTls).await.expect("connect as admin");
    tokio::spawn(conn);
    let owner: String = client
        .query_one("SELECT tableowner::text FROM pg_tables WHERE tablename = 'events'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(owner, role);
    let rights: (bool, bool) = client
        .query_one("SELECT rolsuper, rolcreatedb FROM pg_roles WHERE rolname = $1", &[&role])
        .await
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!(rights, (false, false));
    // Nodes first, so PostgreSQL and NATS stop without clients.
    drop((watcher, sender));
    let (mut a, mut b) = (a, b);
    a.stop().await;
    b.stop().await;
}

/// What one sender had acknowledged: seq to body.
type Acked = Arc<Mutex<BTreeMap<u64, String>>>;

/// Reads the events of chat `c` of workspace `acme` from a backup file,
/// checking it is a sound store first: (seq, type, body) in seq order.
fn backup_events(file: &Path) -> Vec<(u64, String, String)> {
    let db = rusqlite::Connection::open_with_flags(file, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let check: String = db.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
    assert_eq!(check, "ok");
    let mode: String = db.query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
    assert_eq!(mode, "delete", "one self-contained file");
    let (id, latest): (i64, i64) = db
        .query_row("SELECT id, seq FROM chats WHERE ws = 'acme' AND chat = 'c'", [], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap();
    let mut stmt = db.prepare("SELECT seq, type, body FROM events WHERE chat_id = ?1 ORDER BY seq").unwrap();
    let events: Vec<(u64, String, String)> = stmt
        .query_map([id], |r| Ok((r.get::<_, i64>(0)? as u64, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(events.last().map_or(0, |e| e.0), latest as u64, "the chat's seq is its last event's: one commit");
    events
}

/// `herald backup` of a server taking sends: the file is a valid store
/// holding a gap-free prefix (seq 1..N) of what was acknowledged, with
/// everything acknowledged before the backup began; herald started on a copy
/// of it serves exactly those events and goes on from N.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_taken_while_herald_takes_sends_is_a_gap_free_prefix_that_herald_serves() {
    let data = data_dir();
    let fast = [("HERALD_RATE", "100000"), ("HERALD_BURST", "100000")];
    let node = BinServer::start(data.path(), &[], &fast);
    node.wait_ready().await;
    let mut senders = Vec::new();
    for u in 0..4 {
        let token = token_at(node.addr, "acme", &format!("s{u}")).await;
        let mut c = Client::connect(&format!("ws://{}/v1/ws?ws=acme", node.addr)).await;
        c.ok(json!({"op": "hello", "token": token})).await;
        c.ok(json!({"op": "join", "chat": "c"})).await;
        senders.push(c);
    }
    let acked: Acked = Default::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for (u, mut c) in senders.into_iter().enumerate() {
        let (acked, stop) = (acked.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // A few hundred bytes each, so the store has pages to copy.
                let body = format!("s{u}-{i}-{}", "x".repeat(300));
                let seq = c.ok(json!({"op": "send", "chat": "c", "body": body})).await["seq"].as_u64().unwrap();
                acked.lock().unwrap().insert(seq, serde_json::to_string(&body).unwrap());
                i += 1;
            }
            c
        }));
    }
    let count = || acked.lock().unwrap().len();
    let latest = || acked.lock().unwrap().keys().next_back().copied().unwrap_or(0);
    let deadline = Instant::now() + WAIT;
    while count() < 300 {
        assert!(Instant::now() < deadline, "sends too slow: {}", count());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let backups = data_dir();
    let inside = tokio::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(["backup", "--data"])
        .arg(data.path())
        .arg("--to")
        .arg(data.path().join("copy.db"))
        .output()
        .await
        .unwrap();
    assert!(!inside.status.success(), "a backup inside --data could replace the live store");

    // Backups until one ran while sends were acknowledged (the first, as a rule).
    let mut taken = None;
    for attempt in 0..5 {
        let file = backups.path().join(format!("herald-{attempt}.db"));
        let (before, acks_before) = (latest(), count());
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_herald"))
            .args(["backup", "--data"])
            .arg(data.path())
            .arg("--to")
            .arg(&file)
            .output()
            .await
            .unwrap();
        let acks_during = count() - acks_before;
        assert!(out.status.success(), "herald backup: {}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stdout).contains(" chats=1 "));
        assert!(!backups.path().join(format!("herald-{attempt}.db.partial")).exists());
        let events = backup_events(&file);
        let n = events.len() as u64;
        assert!(n >= before, "everything acknowledged before the backup is in it: {n} < {before}");
        for (i, (seq, kind, body)) in events.iter().enumerate() {
            assert_eq!(*seq, i as u64 + 1, "gap-free from 1");
            match acked.lock().unwrap().get(seq) {
                Some(sent) => assert_eq!((kind.as_str(), body), ("message", sent), "seq {seq} as acknowledged"),
                None => assert_eq!(kind, "join", "seq {seq} is one of the four joins"),
            }
        }
        if acks_during > 0 {
            taken = Some((file, events));
            break;
        }
    }
    let (file, events) = taken.expect("no backup overlapped acknowledged sends in 5 tries");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    let n = events.len() as u64;
    assert!(n < latest(), "sends went on after the snapshot");

    // Restore: the file as herald.db in an empty directory.
    let restored = data_dir();
    std::fs::copy(&file, restored.path().join("herald.db")).unwrap();
    let node2 = BinServer::start(restored.path(), &[], &fast);
    node2.wait_ready().await;
    let token = token_at(node2.addr, "acme", "s0").await;
    let mut c = Client::connect(&format!("ws://{}/v1/ws?ws=acme", node2.addr)).await;
    c.ok(json!({"op": "hello", "token": token})).await;
    let mut served = Vec::new();
    loop {
        let page = c.ok(json!({"op": "fetch", "chat": "c", "after": served.len(), "limit": 500})).await;
        assert_eq!(page["seq"], n, "the restored log ends where the backup does");
        for e in page["events"].as_array().unwrap() {
            served.push((e["seq"].as_u64().unwrap(), e["type"].as_str().unwrap().to_string(), e["body"].to_string()));
        }
        if page["more"] != true {
            break;
        }
    }
    assert_eq!(served, events, "herald serves the backup's events, all of them, as stored");
    let next = c.ok(json!({"op": "send", "chat": "c", "body": "after the restore"})).await;
    assert_eq!(next["seq"], n + 1);
}
