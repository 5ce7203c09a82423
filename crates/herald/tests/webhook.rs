//! The webhook as a receiver sees it: a real HTTP server started by the
//! test on a loopback port, herald POSTing stored events to it.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use common::*;
use serde_json::{Value, json};

const HOOK_SECRET: &str = "hook-secret-0123456789abcdef0123456789abcdef";

/// How the receiver answers its next requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Ok,
    /// Answers 500.
    Fail,
    /// Answers nothing for a long time (herald's timeout runs out first).
    Hang,
}

/// One request the receiver got.
#[derive(Debug, Clone)]
struct Hit {
    at: Instant,
    /// The `Herald-Signature` header checked against the raw body.
    signed: bool,
    /// The signature's timestamp, unix seconds.
    t: u64,
    events: Vec<Value>,
    status: u16,
}

#[derive(Default)]
struct Seen {
    hits: Vec<Hit>,
    /// Answers to give before falling back to `mode`: a script of outages.
    script: Vec<Mode>,
}

struct Receiver {
    addr: SocketAddr,
    seen: Arc<Mutex<Seen>>,
    mode: Arc<Mutex<Mode>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

#[derive(Clone)]
struct RecvState {
    seen: Arc<Mutex<Seen>>,
    mode: Arc<Mutex<Mode>>,
}

async fn receive(State(s): State<RecvState>, headers: HeaderMap, body: Bytes) -> (StatusCode, &'static str) {
    let mode = {
        let mut seen = s.seen.lock().unwrap();
        if seen.script.is_empty() { *s.mode.lock().unwrap() } else { seen.script.remove(0) }
    };
    let sig = headers.get("herald-signature").and_then(|v| v.to_str().ok()).unwrap_or("");
    let t: u64 = sig.strip_prefix("t=").and_then(|r| r.split(',').next()).and_then(|t| t.parse().ok()).unwrap_or(0);
    let signed = sig == herald::hooks::signature(HOOK_SECRET.as_bytes(), t, &body);
    let events =
        serde_json::from_slice::<Value>(&body).ok().and_then(|v| v["events"].as_array().cloned()).unwrap_or_default();
    let status = match mode {
        Mode::Ok => 200,
        Mode::Fail => 500,
        Mode::Hang => 0,
    };
    s.seen.lock().unwrap().hits.push(Hit { at: Instant::now(), signed, t, events, status });
    match mode {
        Mode::Ok => (StatusCode::OK, "ok"),
        Mode::Fail => (StatusCode::INTERNAL_SERVER_ERROR, "down for maintenance"),
        Mode::Hang => {
            tokio::time::sleep(Duration::from_secs(30)).await;
            (StatusCode::OK, "too late")
        }
    }
}

impl Receiver {
    async fn start() -> Receiver {
        Self::start_on(0).await
    }

    async fn start_on(port: u16) -> Receiver {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let mode = Arc::new(Mutex::new(Mode::Ok));
        let mut r = Receiver { addr: SocketAddr::from(([127, 0, 0, 1], port)), seen, mode, task: None };
        r.listen().await;
        r
    }

    /// (Re)opens the listener on the receiver's address.
    async fn listen(&mut self) {
        let listener = tokio::net::TcpListener::bind(self.addr).await.expect("bind the receiver");
        self.addr = listener.local_addr().unwrap();
        let app = axum::Router::new()
            .route("/hook", axum::routing::post(receive))
            .with_state(RecvState { seen: self.seen.clone(), mode: self.mode.clone() });
        self.task = Some(tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        }));
    }

    /// Closes the listener: new connections are refused.
    fn close(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }

    fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    fn hits(&self) -> Vec<Hit> {
        self.seen.lock().unwrap().hits.clone()
    }

    /// Events of acknowledged requests, in the order they arrived.
    fn delivered(&self) -> Vec<Value> {
        self.hits().into_iter().filter(|h| h.status == 200).flat_map(|h| h.events).collect()
    }

    /// Waits until acknowledged requests carried `n` distinct events.
    async fn wait_for(&self, n: usize) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let got = self.delivered();
            if distinct(&got) >= n {
                return got;
            }
            assert!(Instant::now() < deadline, "{} of {n} events delivered", distinct(&got));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.close();
    }
}

fn key(e: &Value) -> (String, String, u64) {
    (e["workspace"].as_str().unwrap().into(), e["chat"].as_str().unwrap().into(), e["seq"].as_u64().unwrap())
}

fn distinct(events: &[Value]) -> usize {
    events.iter().map(key).collect::<std::collections::HashSet<_>>().len()
}

/// Every chat's seqs as first delivered, in arrival order.
fn first_order(events: &[Value]) -> BTreeMap<String, Vec<u64>> {
    let mut seen = std::collections::HashSet::new();
    let mut out: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for e in events {
        if seen.insert(key(e)) {
            out.entry(e["chat"].as_str().unwrap().into()).or_default().push(e["seq"].as_u64().unwrap());
        }
    }
    out
}

fn with_webhook(url: &str) -> Box<dyn FnOnce(&mut herald::Config)> {
    let url = url.to_owned();
    Box::new(move |c: &mut herald::Config| {
        c.gateway.rate = 100_000;
        c.gateway.burst = 100_000;
        c.hooks.secret = Some(HOOK_SECRET.into());
        c.hooks.webhook = Some(herald::hooks::WebhookSettings {
            url,
            events: None,
            offline_max: herald::hooks::DEFAULT_WEBHOOK_OFFLINE_MAX,
            timeout: Duration::from_millis(300),
            retry_first: Duration::from_millis(40),
            retry_max: Duration::from_millis(400),
        });
    })
}

/// Creates chat `chat` of `w` with `members`.
async fn chat_with(s: &TestServer, chat: &str, members: &[&str]) {
    chat_with_at(s.addr, chat, members).await;
}

/// Creates chat `chat` of `w` with `members` on the server at `addr`.
async fn chat_with_at(addr: SocketAddr, chat: &str, members: &[&str]) {
    let (st, v) =
        http(addr, "PUT", &format!("/v1/workspaces/w/chats/{chat}"), Some(API_KEY), Some(json!({"open": true}))).await;
    assert!(st == 200 || st == 201, "{st} {v}");
    for m in members {
        let (st, v) =
            http(addr, "PUT", &format!("/v1/workspaces/w/chats/{chat}/members/{m}"), Some(API_KEY), None).await;
        assert!(st == 200 || st == 201, "{st} {v}");
    }
}

async fn post(s: &TestServer, chat: &str, user: &str, body: Value) -> u64 {
    post_as(s.addr, chat, user, body).await
}

/// Posts a message and answers its seq. A store that is briefly slow (a
/// shared machine's fsync) answers `unavailable`: the post is retried, as
/// the contract says, with a `client_id` so that a retry stores nothing twice.
async fn post_as(addr: SocketAddr, chat: &str, user: &str, body: Value) -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let client_id = format!("p{}", NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    let req = json!({"type": "message", "user": user, "body": body, "client_id": client_id});
    for _ in 0..10 {
        let (st, v) =
            http(addr, "POST", &format!("/v1/workspaces/w/chats/{chat}/events"), Some(API_KEY), Some(req.clone()))
                .await;
        if st == 503 {
            tokio::time::sleep(Duration::from_millis(v["error"]["retry_after_ms"].as_u64().unwrap_or(200))).await;
            continue;
        }
        assert_eq!(st, 200, "{v}");
        return v["seq"].as_u64().unwrap();
    }
    panic!("the store stayed unavailable");
}

#[tokio::test]
async fn a_receiver_gets_every_event_signed_batched_and_in_order_per_chat() {
    let recv = Receiver::start().await;
    // Down at first, so that events pile up and go out in full batches.
    recv.set(Mode::Fail);
    let s = TestServer::start_with(with_webhook(&recv.url())).await;
    let chats = ["a", "b", "c"];
    for c in chats {
        chat_with(&s, c, &["alice", "bob"]).await;
    }
    let mut last = HashMap::new();
    for i in 0..1200 {
        let chat = chats[i % 3];
        last.insert(chat, post(&s, chat, "alice", json!({"text": format!("m{i}")})).await);
    }
    recv.set(Mode::Ok);
    let total: u64 = last.values().sum();
    let got = recv.wait_for(total as usize).await;

    // Every stored event of each chat, in seq order, the joins included.
    for (chat, seqs) in first_order(&got) {
        assert_eq!(seqs, (1..=last[chat.as_str()]).collect::<Vec<_>>(), "chat {chat}");
    }
    let hits = recv.hits();
    let ok: Vec<&Hit> = hits.iter().filter(|h| h.status == 200).collect();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    assert!(hits.iter().all(|h| h.signed), "every request carries a valid signature");
    assert!(hits.iter().all(|h| now.abs_diff(h.t) < 60), "signatures carry the time they were made");
    assert!(ok.iter().all(|h| h.events.len() <= 500), "at most 500 events a batch");
    assert!(
        ok.iter().any(|h| h.events.len() == 500),
        "a backlog goes out in full batches: {:?}",
        ok.iter().map(|h| h.events.len()).collect::<Vec<_>>()
    );

    // An event as the contract shows it.
    let m = got.iter().find(|e| e["chat"] == "b" && e["type"] == "message").unwrap();
    assert_eq!(m["workspace"], "w");
    assert_eq!(m["user"], "alice");
    assert!(m["ts"].as_i64().unwrap() > 1_600_000_000_000);
    assert!(m["body"]["text"].as_str().unwrap().starts_with('m'));
    assert_eq!(m["offline"], json!(["bob"]), "bob has no connection");
    let j = got.iter().find(|e| e["type"] == "join").unwrap();
    assert!(j.get("offline").is_none(), "offline is on message events only: {j}");

    // Caught up: the metrics and the admin status say so.
    let (_, status) = s.http("GET", "/v1/admin/status", None).await;
    let wh = &status["webhook"];
    assert_eq!(wh["host"], recv.addr.to_string(), "{status}");
    assert!(wh["last_success_ms"].as_i64().is_some(), "{wh}");
    // One node delivers every shard: the embedded store's one, or each PostgreSQL shard.
    let shards = status["shards"].as_array().map_or(0, Vec::len).max(1);
    assert_eq!(wh["owned_shards"].as_array().map(Vec::len), Some(shards), "{wh}");
    assert!(!wh.to_string().contains(HOOK_SECRET) && !wh.to_string().contains("/hook"), "no secret, no path: {wh}");
    let metrics = http_raw(s.addr, "GET", "/metrics", None, None).await.1;
    assert!(herald::metrics::sum(&metrics, "herald_webhook_events_total") >= total as f64, "{metrics}");
    assert!(herald::metrics::sum(&metrics, "herald_webhook_retries_total") >= 1.0);
}

#[tokio::test]
async fn outages_are_retried_with_growing_waits_until_every_event_is_acknowledged() {
    let mut recv = Receiver::start().await;
    // Three 500s, then two answers too late (herald waits 300 ms here), then a closed port.
    recv.seen.lock().unwrap().script = vec![Mode::Fail, Mode::Fail, Mode::Fail, Mode::Hang, Mode::Hang];
    let s = TestServer::start_with(with_webhook(&recv.url())).await;
    chat_with(&s, "g", &["alice"]).await;
    for i in 0..5 {
        post(&s, "g", "alice", json!(i)).await;
    }
    // Wait for the script to play out, then refuse connections for a while.
    let deadline = Instant::now() + WAIT;
    while recv.hits().len() < 5 {
        assert!(Instant::now() < deadline, "herald kept retrying");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    recv.close();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    post(&s, "g", "alice", json!("during the outage")).await;
    recv.listen().await;
    let got = recv.wait_for(7).await;
    assert_eq!(first_order(&got)["g"], (1..=7).collect::<Vec<_>>(), "nothing lost, in order");

    let hits = recv.hits();
    let failed: Vec<&Hit> = hits.iter().take(5).collect();
    assert!(failed.iter().all(|h| h.status != 200));
    // The waits grow: each gap between the three 500s longer than the one before.
    let gaps: Vec<Duration> = failed.windows(2).map(|w| w[1].at - w[0].at).collect();
    assert!(gaps[1] > gaps[0] && gaps[0] >= Duration::from_millis(35), "growing waits: {gaps:?}");
    let metrics = http_raw(s.addr, "GET", "/metrics", None, None).await.1;
    let tries = |outcome| deliveries(&metrics, outcome);
    assert!(tries("timeout") >= 2.0 && tries("error") >= 4.0 && tries("ok") >= 1.0, "{metrics}");
}

/// `herald_webhook_deliveries_total{outcome=...}` in `/metrics` text: the POSTs that ended so.
fn deliveries(metrics: &str, outcome: &str) -> f64 {
    let label = format!("outcome=\"{outcome}\"");
    metrics
        .lines()
        .filter(|l| l.starts_with("herald_webhook_deliveries_total") && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn webhook_events_filters_types_and_still_moves_past_the_others() {
    let recv = Receiver::start().await;
    let s = TestServer::start_with(|c| {
        with_webhook(&recv.url())(c);
        c.hooks.webhook.as_mut().unwrap().events = Some(vec!["message".into()]);
    })
    .await;
    chat_with(&s, "g", &["alice", "bob"]).await; // joins 1, 2
    post(&s, "g", "alice", json!("hi")).await; // 3
    let (st, _) = s.http("DELETE", "/v1/workspaces/w/chats/g/members/bob", None).await; // leave 4
    assert_eq!(st, 200);
    post(&s, "g", "alice", json!("bye")).await; // 5
    recv.wait_for(2).await;
    // A moment more, for a filtered-out event to show if one were sent.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let got = recv.delivered();
    assert!(got.iter().all(|e| e["type"] == "message"), "{got:?}");
    assert_eq!(first_order(&got)["g"], vec![3, 5]);
    // The receiver's answer is stored as a position after it; on a busy machine that takes a moment.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let status = loop {
        let (_, status) = s.http("GET", "/v1/admin/status", None).await;
        if status["webhook"]["lag_seconds"] == 0.0 || tokio::time::Instant::now() > deadline {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(status["webhook"]["lag_seconds"], 0.0, "the filtered-out events were passed, not owed: {status}");
    assert_eq!(status["webhook"]["events"], json!(["message"]));
}

#[tokio::test]
async fn offline_lists_members_without_a_connection_in_small_chats_only() {
    let recv = Receiver::start().await;
    let s = TestServer::start_with(|c| {
        with_webhook(&recv.url())(c);
        c.hooks.webhook.as_mut().unwrap().offline_max = 3;
    })
    .await;
    chat_with(&s, "small", &["alice", "bob", "carol"]).await;
    chat_with(&s, "big", &["alice", "bob", "carol", "dave"]).await;
    let mut bob = s.client("w", "bob").await;
    let mut alice = s.client("w", "alice").await;
    alice.ok(json!({"op": "send", "chat": "small", "body": "hello"})).await;
    alice.ok(json!({"op": "send", "chat": "big", "body": "hello all"})).await;
    let got = recv.wait_for(3 + 4 + 2).await;
    let msg = |chat: &str| got.iter().find(|e| e["chat"] == chat && e["type"] == "message").unwrap().clone();
    assert_eq!(msg("small")["offline"], json!(["carol"]), "alice sent it, bob is connected");
    assert!(msg("big").get("offline").is_none(), "4 members is above --webhook-offline-max 3");
    // Once bob leaves, he counts offline.
    bob.ws.close(None).await.unwrap();
    drop(bob);
    tokio::time::sleep(Duration::from_millis(200)).await;
    alice.ok(json!({"op": "send", "chat": "small", "body": "still there?"})).await;
    let got = recv.wait_for(10).await;
    let last = got.iter().rfind(|e| e["chat"] == "small" && e["type"] == "message").unwrap();
    let mut offline: Vec<String> = serde_json::from_value(last["offline"].clone()).unwrap();
    offline.sort();
    assert_eq!(offline, vec!["bob", "carol"]);
}

/// A server on `data` that can be stopped and started again.
type Running = (SocketAddr, tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<anyhow::Result<()>>);

async fn start_on(data: &std::path::Path, stores: &[String], url: &str) -> Running {
    let mut config = herald::Config::for_tests(data.to_path_buf(), SECRET, API_KEY);
    with_webhook(url)(&mut config);
    config.store.stores = stores.to_vec();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(herald::run(listener, config, async move {
        let _ = rx.await;
    }));
    (addr, tx, task)
}

async fn resumes_after_a_restart(stores: Vec<String>) {
    let recv = Receiver::start().await;
    let data = tempfile::tempdir().unwrap();
    let (addr, stop, task) = start_on(data.path(), &stores, &recv.url()).await;
    chat_with_at(addr, "g", &["alice"]).await;
    for i in 0..20 {
        post_at(addr, "g", json!(i)).await;
    }
    recv.wait_for(21).await;
    let before = recv.delivered().len();
    // The receiver goes down; events keep coming; the server restarts.
    recv.set(Mode::Fail);
    for i in 20..40 {
        post_at(addr, "g", json!(i)).await;
    }
    let _ = stop.send(());
    task.await.unwrap().unwrap();
    recv.set(Mode::Ok);
    let (addr, stop, task) = start_on(data.path(), &stores, &recv.url()).await;
    for i in 40..50 {
        post_at(addr, "g", json!(i)).await;
    }
    let got = recv.wait_for(51).await;
    assert_eq!(first_order(&got)["g"], (1..=51).collect::<Vec<_>>(), "nothing skipped, in order");
    assert_eq!(distinct(&got[..before]), before, "no duplicates before the restart");
    assert_eq!(got.len(), 51, "what was acknowledged before the restart was not sent again");
    let _ = stop.send(());
    task.await.unwrap().unwrap();
}

async fn post_at(addr: SocketAddr, chat: &str, body: Value) -> u64 {
    post_as(addr, chat, "alice", body).await
}

#[tokio::test]
async fn a_restarted_server_resumes_after_the_last_acknowledged_batch() {
    resumes_after_a_restart(Vec::new()).await;
}

#[tokio::test]
#[ignore = "needs PostgreSQL (Debian's postgresql); scripts/test.sh runs it"]
async fn on_postgres_a_restarted_server_resumes_after_the_last_acknowledged_batch() {
    let (_own, dbs) = two_pg_databases().await;
    resumes_after_a_restart(dbs.to_vec()).await;
}

/// Two fresh databases, as two shards' URLs, on the suite's PostgreSQL
/// cluster when scripts/test.sh gives one, else on one of this test's own
/// (returned, to keep it running).
async fn two_pg_databases() -> (Option<common::pg::PgCluster>, [String; 2]) {
    let (own, admin) = common::pg::suite_or_own();
    let dbs = [common::pg::create_database(&admin).await, common::pg::create_database(&admin).await];
    (own, dbs)
}

/// The settings of a webhook, as a spawned binary takes them.
fn webhook_env(url: &str) -> Vec<(&'static str, String)> {
    vec![
        ("HERALD_HOOK_SECRET", HOOK_SECRET.into()),
        ("HERALD_WEBHOOK_URL", url.into()),
        ("HERALD_WEBHOOK_RETRY_MS", "40".into()),
        ("HERALD_WEBHOOK_RETRY_MAX_MS", "400".into()),
        ("HERALD_RATE", "100000".into()),
        ("HERALD_BURST", "100000".into()),
    ]
}

fn env_refs<'a>(vars: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    vars.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

async fn killed_process_resumes(stores: Vec<String>) {
    let recv = Receiver::start().await;
    let data = tempfile::tempdir().unwrap();
    let vars = webhook_env(&recv.url());
    let mut bin = BinServer::start(data.path(), &stores, &env_refs(&vars));
    bin.wait_ready().await;
    chat_with_at(bin.addr, "g", &["alice"]).await;
    // Sends acknowledged while the receiver stops taking them: the kill
    // comes with events stored and not delivered, and a batch in flight.
    let mut acked = 1; // the join
    for i in 0..300 {
        acked = post_at(bin.addr, "g", json!(i)).await;
        if i == 150 {
            recv.set(Mode::Fail);
        }
    }
    bin.kill9();
    recv.set(Mode::Ok);
    let mut bin = BinServer::start(data.path(), &stores, &env_refs(&vars));
    bin.wait_ready().await;
    let got = recv.wait_for(acked as usize).await;
    assert_eq!(first_order(&got)["g"], (1..=acked).collect::<Vec<_>>(), "every acknowledged send, in order");
    bin.kill9();
}

#[tokio::test]
async fn a_killed_server_process_resumes_and_skips_nothing() {
    killed_process_resumes(Vec::new()).await;
}

#[tokio::test]
#[ignore = "needs PostgreSQL (Debian's postgresql); scripts/test.sh runs it"]
async fn on_postgres_a_killed_server_process_resumes_and_skips_nothing() {
    let (_own, dbs) = two_pg_databases().await;
    killed_process_resumes(dbs.to_vec()).await;
}

/// A node's admin status.
async fn status_of(addr: SocketAddr) -> Value {
    http(addr, "GET", "/v1/admin/status", Some(API_KEY), None).await.1
}

fn owned(status: &Value) -> Vec<String> {
    serde_json::from_value(status["webhook"]["owned_shards"].clone()).unwrap_or_default()
}

/// Two nodes of a NATS cell on two PostgreSQL shards, one webhook receiver.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs nats-server and PostgreSQL (scripts/test.sh runs it)"]
async fn two_nodes_deliver_each_event_once_and_a_dead_nodes_share_is_taken_over() {
    let nats = common::nats::NatsCluster::start().await;
    let (_own, [db0, db1]) = two_pg_databases().await;
    let stores = vec![format!("s0={db0}"), format!("s1={db1}")];
    let recv = Receiver::start().await;
    let (d0, d1) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let node = |i: usize, dir: &std::path::Path| {
        let mut vars = webhook_env(&recv.url());
        vars.push(("HERALD_BROKER", nats.urls().join(",")));
        vars.push(("HERALD_NODE", format!("node-{i}")));
        BinServer::start(dir, &stores, &env_refs(&vars))
    };
    let mut nodes = vec![node(0, d0.path()), node(1, d1.path())];
    for n in &nodes {
        n.wait_ready().await;
    }
    // Each shard gets one owner once the nodes have heard of each other.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (a, b) = (owned(&status_of(nodes[0].addr).await), owned(&status_of(nodes[1].addr).await));
        let mut all: Vec<String> = a.iter().chain(&b).cloned().collect();
        all.sort();
        if all == ["s0", "s1"] {
            break;
        }
        assert!(Instant::now() < deadline, "shards not shared out: {a:?} {b:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let owner_of = |shard: &str| {
        let names = ["node-0", "node-1"];
        herald::hashing::rendezvous(&[b"webhook", shard.as_bytes()], names).unwrap()
    };
    // A chat on each shard (where herald's routing puts it).
    let chat_on = |shard: usize, tag: &str| {
        (0..)
            .map(|i| format!("{tag}{i}"))
            .find(|c| herald::hashing::rendezvous(&[b"w", c.as_bytes()], ["s0", "s1"]) == Some(shard))
            .unwrap()
    };
    let (a, b) = (chat_on(0, "a"), chat_on(1, "b"));
    let victim = owner_of("s0");
    let survivor = 1 - victim;
    for chat in [&a, &b] {
        chat_with_at(nodes[0].addr, chat, &["alice", "bob", "carol"]).await;
    }
    // bob is connected to the node that does not deliver chat a: the
    // delivering node must hear it from the other one.
    let token = token_at(nodes[survivor].addr, "w", "bob").await;
    let mut bob = Client::connect(&format!("ws://{}/v1/ws?ws=w", nodes[survivor].addr)).await;
    bob.ok(json!({"op": "hello", "token": token})).await;

    // A crowd of 200 members on s0 too, none connected: what an `offline` ask costs.
    let crowd = chat_on(0, "crowd");
    let members: Vec<String> = (0..200).map(|i| format!("member-{i:03}")).collect();
    chat_with_at(nodes[0].addr, &crowd, &members.iter().map(String::as_str).collect::<Vec<_>>()).await;
    let figures = |m: &str| {
        (
            herald::metrics::sum(m, "herald_webhook_presence_requests_total"),
            herald::metrics::sum(m, "herald_webhook_presence_bytes_total"),
            herald::metrics::sum(m, "herald_webhook_presence_missing_total"),
        )
    };
    let victim_metrics = || async { http_raw(nodes[victim].addr, "GET", "/metrics", None, None).await.1 };
    let before = victim_metrics().await;

    let mut heads: HashMap<String, u64> = HashMap::new();
    heads.insert(crowd.clone(), members.len() as u64);
    for i in 0..100 {
        for chat in [&a, &b] {
            heads.insert(chat.clone(), post_at(nodes[i % 2].addr, chat, json!(i)).await);
        }
        if i % 2 == 0 {
            heads.insert(crowd.clone(), post_as(nodes[i % 2].addr, &crowd, "member-000", json!(i)).await);
        }
    }
    let total: u64 = heads.values().sum();
    recv.wait_for(total as usize).await;
    // A moment more, for a second delivery to show if there were one.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let got_now = recv.delivered();
    assert_eq!(distinct(&got_now), got_now.len(), "each event delivered once in steady state");
    let crowd_msg = got_now.iter().find(|e| e["chat"] == crowd.as_str() && e["type"] == "message").unwrap();
    assert_eq!(crowd_msg["offline"].as_array().map(Vec::len), Some(199), "every member but the sender");

    // What asking the cell cost the node delivering s0: one ask per batch at most.
    let after = victim_metrics().await;
    let (r0, b0, m0) = figures(&before);
    let (r1, b1, m1) = figures(&after);
    let batches = deliveries(&after, "ok") - deliveries(&before, "ok");
    let (asks, bytes) = (r1 - r0, b1 - b0);
    assert!(asks >= 1.0 && asks <= batches, "{asks} asks for {batches} batches");
    assert_eq!(m1 - m0, 0.0, "every node answered in time");
    eprintln!(
        "offline asks in steady state: {asks} asks for {batches} batches (2 nodes), {bytes} bytes in all, {:.0} bytes per ask \
         (candidates: a chat of 3 members and one of 200)",
        bytes / asks
    );
    let m = got_now.iter().find(|e| e["chat"] == a.as_str() && e["type"] == "message").unwrap();
    assert_eq!(m["offline"], json!(["carol"]), "bob is connected to the other node: {m}");

    // The receiver stops answering, events pile up, the owner of s0 dies.
    recv.set(Mode::Fail);
    for i in 0..50 {
        for chat in [&a, &b] {
            heads.insert(chat.clone(), post_at(nodes[survivor].addr, chat, json!(100 + i)).await);
        }
    }
    nodes[victim].kill9();
    recv.set(Mode::Ok);
    for i in 0..20 {
        for chat in [&a, &b] {
            heads.insert(chat.clone(), post_at(nodes[survivor].addr, chat, json!(200 + i)).await);
        }
    }
    let total: u64 = heads.values().sum();
    let got = recv.wait_for(total as usize).await;
    let order = first_order(&got);
    for chat in [&a, &b] {
        assert_eq!(order[chat.as_str()], (1..=heads[chat.as_str()]).collect::<Vec<_>>(), "chat {chat}: none skipped");
    }
    let mut mine = owned(&status_of(nodes[survivor].addr).await);
    mine.sort();
    assert_eq!(mine, ["s0", "s1"], "the survivor delivers both shards");
    let last = got.iter().rfind(|e| e["chat"] == a.as_str() && e["type"] == "message").unwrap();
    assert_eq!(last["offline"], json!(["carol"]), "bob is still connected: {last}");
}

#[tokio::test]
async fn webhook_events_carry_mentions_and_a_streams_message_and_end_not_its_appends() {
    let recv = Receiver::start().await;
    let s = TestServer::start_with(with_webhook(&recv.url())).await;
    chat_with(&s, "v12", &["alice", "bob"]).await; // seq 1 and 2
    let mut alice = s.client("w", "alice").await;
    alice.ok(json!({"op": "send", "chat": "v12", "body": {"text": "hi @bob"}, "mentions": ["bob"]})).await; // 3
    let target = alice.ok(json!({"op": "send", "chat": "v12", "body": {"text": ""}, "stream": true})).await["seq"]
        .as_u64()
        .unwrap(); // 4
    for t in ["a", "b", "c"] {
        alice.ok(json!({"op": "append", "chat": "v12", "target": target, "text": t})).await;
    }
    alice.ok(json!({"op": "append", "chat": "v12", "target": target, "text": "d", "done": true})).await; // 5
    let got = recv.wait_for(5).await;
    let seqs: Vec<u64> = first_order(&got)["v12"].clone();
    assert_eq!(seqs, [1, 2, 3, 4, 5], "the message and its final edit are events; appends are not");
    let m = got.iter().find(|e| e["seq"] == 3).unwrap();
    assert_eq!(m["mentions"], json!(["bob"]), "{m}");
    let end = got.iter().find(|e| e["seq"] == 5).unwrap();
    assert_eq!((end["type"].clone(), end["body"]["body"]["text"].clone()), (json!("edit"), json!("abcd")));
}
