//! A PostgreSQL shard whose pooled connections went bad while the node was
//! not looking: closed by the server (every herald session terminated, or
//! the server restarted), or silenced by the network after sitting idle.
//! Clients never hear `unavailable` for it: a request whose connection was
//! gone runs again on a new one (counted), and an idle connection is checked
//! before it is lent. Real PostgreSQL (Debian's), one cluster per test.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::pg::{PgCluster, create_database};
use common::*;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Clients making requests at once: enough that the pool holds several connections.
const CLIENTS: usize = 4;

/// A shard name no other test of this binary uses (they share the metrics recorder).
fn unique(tag: &str) -> String {
    format!("{tag}{:08x}", rand::random::<u32>())
}

/// A server whose one shard is `url`, named `name`, and `CLIENTS` members of chat `g`.
async fn server_on(name: &str, url: &str) -> (TestServer, Vec<Client>) {
    let store = format!("{name}={url}");
    let s = TestServer::start_with(|c| c.store.stores = vec![store]).await;
    let mut clients = Vec::new();
    for i in 0..CLIENTS {
        let mut c = s.client("w", &format!("u{i}")).await;
        c.ok(json!({"op": "join", "chat": "g"})).await;
        clients.push(c);
    }
    (s, clients)
}

/// What a client asks of the shard, each once: a send (with its
/// `client_id`), a fetch, the inbox, the member list and the pins. Returns
/// each request with its reply.
async fn round(c: &mut Client, tag: &str) -> Vec<(Value, Value)> {
    let requests = [
        json!({"op": "send", "chat": "g", "body": tag, "client_id": tag}),
        json!({"op": "fetch", "chat": "g", "after": 0}),
        json!({"op": "inbox"}),
        json!({"op": "members", "chat": "g"}),
        json!({"op": "pins", "chat": "g"}),
    ];
    let mut out = Vec::new();
    for req in requests {
        let reply = c.request(req.clone()).await;
        out.push((req, reply));
    }
    out
}

/// Every client makes a round at once; answers every request with its reply.
async fn rounds(clients: &mut [Client], tag: &str) -> Vec<(Value, Value)> {
    let all = clients.iter_mut().enumerate().map(|(i, c)| async move { round(c, &format!("{tag}-{i}")).await });
    futures_util::future::join_all(all).await.into_iter().flatten().collect()
}

fn assert_all_ok(replies: &[(Value, Value)], when: &str) {
    for (req, reply) in replies {
        assert!(reply.get("ok").is_some(), "{when}: {req} was answered {reply}");
    }
}

/// The sum of `name`'s samples labelled with shard `shard`.
async fn shard_metric(s: &TestServer, name: &str, shard: &str) -> f64 {
    let (_, v) = s.http("GET", "/metrics", None).await;
    let text = v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string());
    let label = format!("shard=\"{shard}\"");
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Waits until `/readyz` shows every shard's breaker closed: a restart's
/// failed background reads (revocations, every second) may have opened it.
async fn breakers_closed(s: &TestServer) {
    let deadline = Instant::now() + WAIT;
    loop {
        let (_, v) = http(s.addr, "GET", "/readyz", None, None).await;
        if v["shards"].as_array().is_some_and(|a| a.iter().all(|s| s["breaker"] == "closed")) {
            return;
        }
        assert!(Instant::now() < deadline, "the breaker did not close: {v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// An admin session on the shard's database, its own backend apart.
async fn admin(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.expect("admin connection");
    tokio::spawn(conn);
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL (Debian's postgresql); scripts/test.sh runs it"]
async fn connections_the_server_closed_cost_clients_nothing() {
    let pg = tokio::task::spawn_blocking(PgCluster::start).await.unwrap();
    let url = create_database(&pg.admin_url).await;
    let name = unique("closed");
    let (s, mut clients) = server_on(&name, &url).await;
    assert_all_ok(&rounds(&mut clients, "before").await, "before");

    // Every herald session is ended by the server, as an operator or a pooler would end them.
    let admin = admin(&url).await;
    let ended: Vec<i32> = admin
        .query(
            "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity \
              WHERE datname = current_database() AND pid <> pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(ended.len() >= 2, "the writer's connection and pooled reads' were ended: {ended:?}");
    let deadline = Instant::now() + WAIT;
    loop {
        let left: i64 = admin
            .query_one("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)", &[&ended])
            .await
            .unwrap()
            .get(0);
        if left == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the ended sessions are gone");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    assert_all_ok(&rounds(&mut clients, "after").await, "after the server closed herald's connections");
    let retries = shard_metric(&s, "herald_store_pg_retries_total", &name).await;
    assert!(retries >= 1.0, "the requests that met a closed connection were retried and counted: {retries}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL (Debian's postgresql); scripts/test.sh runs it"]
async fn the_first_requests_after_a_server_restart_succeed() {
    let pg = Arc::new(tokio::task::spawn_blocking(PgCluster::start).await.unwrap());
    let url = create_database(&pg.admin_url).await;
    let name = unique("restart");
    let (s, mut clients) = server_on(&name, &url).await;
    assert_all_ok(&rounds(&mut clients, "before").await, "before");

    // Every pooled connection, and the writer's, dies with the server.
    let p = pg.clone();
    tokio::task::spawn_blocking(move || {
        p.stop();
        p.restart();
    })
    .await
    .unwrap();
    breakers_closed(&s).await;

    assert_all_ok(&rounds(&mut clients, "after").await, "the first requests after the restart");
    let retries = shard_metric(&s, "herald_store_pg_retries_total", &name).await;
    assert!(retries >= 1.0, "the writes that met a dead connection were retried and counted: {retries}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL (Debian's postgresql); scripts/test.sh runs it"]
async fn idle_connections_the_network_silenced_are_checked_before_use() {
    let pg = tokio::task::spawn_blocking(PgCluster::start).await.unwrap();
    let direct = create_database(&pg.admin_url).await;
    let proxy = Silencer::start(pg.port).await;
    let url = direct.replace(&format!(":{}/", pg.port), &format!(":{}/", proxy.port));
    let name = unique("idle");
    let (s, mut clients) = server_on(&name, &url).await;
    assert_all_ok(&rounds(&mut clients, "before").await, "before");

    // The pool's connections sit idle past the pool's threshold (15 s; the
    // revocation poll keeps one busy), then the network drops every one idle
    // for a while without a word: no reset, no close, no answer.
    tokio::time::sleep(Duration::from_secs(16)).await;
    let silenced = proxy.silence_idle(Duration::from_secs(5));
    assert!(silenced >= 1, "the writer's connection, idle since its last batch, was silenced: {silenced}");

    let started = Instant::now();
    assert_all_ok(&rounds(&mut clients, "after").await, "after the network dropped idle connections");
    let took = started.elapsed();
    assert!(took < Duration::from_secs(5), "no request waited on a silent connection: {took:?}");
    let closed = shard_metric(&s, "herald_store_pg_idle_closed_total", &name).await;
    assert!(closed >= 1.0, "the idle check closed a silent connection: {closed}");
}

/// A TCP relay to PostgreSQL that can silence the connections it carries,
/// as a firewall that forgot them would: their bytes go nowhere, and neither
/// end hears a thing. New connections are relayed as before.
struct Silencer {
    port: u16,
    links: Arc<Mutex<Vec<Arc<Link>>>>,
}

/// One relayed connection: when it last carried a byte (ms since `born`), and whether it is silenced.
struct Link {
    born: Instant,
    last_ms: AtomicU64,
    silent: AtomicBool,
}

impl Silencer {
    async fn start(to: u16) -> Silencer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let links: Arc<Mutex<Vec<Arc<Link>>>> = Arc::default();
        let all = links.clone();
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let Ok(outbound) = TcpStream::connect(("127.0.0.1", to)).await else { continue };
                let link =
                    Arc::new(Link { born: Instant::now(), last_ms: AtomicU64::new(0), silent: AtomicBool::new(false) });
                all.lock().unwrap().push(link.clone());
                let (ri, wi) = inbound.into_split();
                let (ro, wo) = outbound.into_split();
                tokio::spawn(relay(ri, wo, link.clone()));
                tokio::spawn(relay(ro, wi, link));
            }
        });
        Silencer { port, links }
    }

    /// Silences every connection that carried nothing for `quiet`; answers how many.
    fn silence_idle(&self, quiet: Duration) -> usize {
        let links = self.links.lock().unwrap();
        let mut n = 0;
        for l in links.iter() {
            let idle = l.born.elapsed().saturating_sub(Duration::from_millis(l.last_ms.load(Ordering::SeqCst)));
            if idle >= quiet && !l.silent.swap(true, Ordering::SeqCst) {
                n += 1;
            }
        }
        n
    }
}

/// Copies `from` to `to` until either ends; once the link is silenced, swallows what comes and holds both open.
async fn relay(mut from: tokio::net::tcp::OwnedReadHalf, mut to: tokio::net::tcp::OwnedWriteHalf, link: Arc<Link>) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if link.silent.load(Ordering::SeqCst) {
            // Held, not closed: the peer sees neither an answer nor an end.
            std::future::pending::<()>().await;
        }
        link.last_ms.store(link.born.elapsed().as_millis() as u64, Ordering::SeqCst);
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// A node frozen (SIGSTOP) in the middle of a write batch holds its chat's
/// row locked. The server ends a transaction idle for 3 s, so another node
/// joins and sends to that chat while the first is still frozen (before,
/// it was locked out until the frozen node woke); the frozen node's batch,
/// run again on waking, loses nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL (Debian's postgresql); scripts/test.sh runs it"]
async fn a_node_frozen_mid_batch_does_not_lock_the_others_out_of_its_chat() {
    let pg = tokio::task::spawn_blocking(PgCluster::start).await.unwrap();
    let url = create_database(&pg.admin_url).await;
    let name = unique("frozen");
    let store = format!("{name}={url}");
    let data = data_dir();
    let frozen = BinServer::start(data.path(), std::slice::from_ref(&store), &[]);
    frozen.wait_ready().await;
    let token = token_at(frozen.addr, "w", "alice").await;
    let mut alice = Client::connect(&format!("ws://{}/v1/ws?ws=w", frozen.addr)).await;
    alice.ok(json!({"op": "hello", "token": token})).await;
    alice.ok(json!({"op": "join", "chat": "g"})).await;

    // Alice sends back to back, each send until acknowledged with its client_id.
    let acked = Arc::new(Mutex::new(Vec::<u64>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let sender = {
        let (acked, stop) = (acked.clone(), stop.clone());
        tokio::spawn(async move {
            for i in 0..100_000u32 {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                let req = json!({"op": "send", "chat": "g", "body": format!("m{i}"), "client_id": format!("a{i}")});
                for _ in 0..20 {
                    let r = alice.request(req.clone()).await;
                    if let Some(seq) = r["ok"]["seq"].as_u64() {
                        acked.lock().unwrap().push(seq);
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        })
    };

    // Freeze it until it is caught inside a write batch (its session idle in a transaction that holds
    // row locks; not the search indexer's).
    let admin = admin(&url).await;
    let pid = frozen.child.id() as i32;
    let mut caught = false;
    for _ in 0..200 {
        while acked.lock().unwrap().len() < 3 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // SAFETY: signals to the child this test started.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
        tokio::time::sleep(Duration::from_millis(20)).await;
        let idle_in_tx: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                  AND state = 'idle in transaction' AND backend_xid IS NOT NULL \
                  AND query NOT ILIKE '%search%'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if idle_in_tx > 0 {
            caught = true;
            break;
        }
        assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
        tokio::time::sleep(Duration::from_millis(rand::random::<u64>() % 7)).await;
    }
    assert!(caught, "the node was never frozen inside a transaction in 200 tries");
    let froze = Instant::now();

    // Another node joins the chat and sends to it while the first is frozen.
    let other = TestServer::start_with(|c| c.store.stores = vec![store.clone()]).await;
    let mut bob = other.client("w", "bob").await;
    let done = loop {
        let r = bob.request(json!({"op": "join", "chat": "g"})).await;
        if r.get("ok").is_some() {
            let r = bob.request(json!({"op": "send", "chat": "g", "body": "bob", "client_id": "bob"})).await;
            if r.get("ok").is_some() {
                break froze.elapsed();
            }
        }
        assert!(
            froze.elapsed() < Duration::from_secs(9),
            "bob is still locked out {:?} after the freeze: {r}",
            froze.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(froze.elapsed() < Duration::from_secs(10), "the node is still frozen while bob is in");
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);

    // The frozen node's sends go on and nothing acknowledged is lost or stored twice.
    let before = acked.lock().unwrap().len();
    let deadline = Instant::now() + WAIT;
    while acked.lock().unwrap().len() < before + 5 {
        assert!(Instant::now() < deadline, "alice's sends did not go on after the wake");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::SeqCst);
    sender.await.unwrap();
    let stored: Vec<(i64, Option<String>)> = admin
        .query(
            "SELECT e.seq, e.client_id FROM events e JOIN chats c ON c.id = e.chat_id WHERE c.ws = 'w' AND c.chat = 'g' ORDER BY e.seq",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let seqs: std::collections::HashSet<i64> = stored.iter().map(|(s, _)| *s).collect();
    for seq in acked.lock().unwrap().iter() {
        assert!(seqs.contains(&(*seq as i64)), "acknowledged seq {seq} is stored");
    }
    let mut ids: Vec<&String> = stored.iter().filter_map(|(_, id)| id.as_ref()).collect();
    let n = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n, "no client_id stored twice");
    eprintln!("bob joined and sent {done:?} after the node froze inside a transaction");
}
