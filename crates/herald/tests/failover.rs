//! A PostgreSQL shard that loses its primary: real primaries and standbys
//! (Debian's PostgreSQL, streaming replication set up by the harness), a
//! primary killed or frozen, its standby promoted as a failover manager
//! would, and the old primary rebuilt as the new one's standby.
//!
//! - With a synchronous standby nothing acknowledged is lost or stored
//!   twice, writes to the shard's chats resume within seconds of the
//!   promotion, the other shard keeps its latency, and a node started while
//!   the old primary hangs becomes ready.
//! - With an asynchronous standby acknowledged events can be lost; herald
//!   says so and never hands their seqs out again.
//! - A host that is another database is refused, not written to.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::pg::{PgCluster, create_database};
use common::pg_pair::PgPair;
use common::*;
use serde_json::{Value, json};

/// A chat name that lands on shard `want` of the shards named `names`.
fn chat_on(names: &[&str], want: usize, tag: &str) -> String {
    (0..)
        .map(|i| format!("{tag}{i}"))
        .find(|c| herald::hashing::rendezvous(&[b"w", c.as_bytes()], names.iter().copied()) == Some(want))
        .unwrap()
}

fn p99(mut v: Vec<Duration>) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    v.sort();
    v[(v.len() * 99 / 100).min(v.len() - 1)]
}

/// One answered send: when it went out, when it was answered, and how.
#[derive(Clone, Debug)]
struct Sent {
    at: Instant,
    took: Duration,
    client_id: String,
    outcome: Result<u64, String>,
}

/// A client as the protocol asks: each send is resent with its `client_id`
/// until it is acknowledged, waiting `retry_after_ms` after a refusal.
async fn sender(mut c: Client, chat: String, tag: String, stop: Arc<AtomicBool>) -> Vec<Sent> {
    let mut log = Vec::new();
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        let client_id = format!("{tag}-{i}");
        let at = Instant::now();
        let r = c.request(json!({"op": "send", "chat": chat, "body": i, "client_id": client_id})).await;
        let took = at.elapsed();
        match r.get("ok") {
            Some(ok) => {
                log.push(Sent { at, took, client_id, outcome: Ok(ok["seq"].as_u64().unwrap()) });
                i += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            None => {
                let wait = r["err"]["retry_after_ms"].as_u64().unwrap_or(100).min(250);
                log.push(Sent { at, took, client_id, outcome: Err(r["err"]["code"].as_str().unwrap_or("?").into()) });
                tokio::time::sleep(Duration::from_millis(wait)).await;
            }
        }
    }
    // The last send, if it was refused, gets its chances until it is acknowledged.
    if let Some(last) = log.last().cloned()
        && last.outcome.is_err()
    {
        for _ in 0..100 {
            let at = Instant::now();
            let r = c.request(json!({"op": "send", "chat": chat, "body": i, "client_id": last.client_id})).await;
            if let Some(ok) = r.get("ok") {
                let outcome = Ok(ok["seq"].as_u64().unwrap());
                log.push(Sent { at, took: at.elapsed(), client_id: last.client_id.clone(), outcome });
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    log
}

/// Every event of `chat`, read through the server API, page by page.
async fn stored(s: &TestServer, chat: &str) -> Vec<Value> {
    let mut all = Vec::new();
    let mut after = 0;
    loop {
        let (status, page) =
            s.http("GET", &format!("/v1/workspaces/w/chats/{chat}/events?after={after}&limit=500"), None).await;
        assert_eq!(status, 200, "{page}");
        for e in page["events"].as_array().unwrap() {
            after = e["seq"].as_u64().unwrap();
            all.push(e.clone());
        }
        if page["more"] == false {
            return all;
        }
    }
}

/// Checks what a user would see of `chat`: every acknowledged send stored
/// once, at the seq it was acknowledged with; seqs 1, 2, 3, ... with no gap.
/// Answers the number of acknowledged sends.
fn audit(chat: &str, events: &[Value], logs: &[Vec<Sent>]) -> usize {
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["seq"].as_u64(), Some(i as u64 + 1), "{chat}: seqs without a gap");
    }
    let mut by_cid: HashMap<&str, Vec<u64>> = HashMap::new();
    for e in events {
        if let Some(cid) = e["client_id"].as_str() {
            by_cid.entry(cid).or_default().push(e["seq"].as_u64().unwrap());
        }
    }
    let mut acked = 0;
    for log in logs {
        for s in log {
            if let Ok(seq) = s.outcome {
                acked += 1;
                let at = by_cid.get(s.client_id.as_str()).cloned().unwrap_or_default();
                assert_eq!(at, vec![seq], "{chat}: {} acknowledged with seq {seq} is stored at {at:?}", s.client_id);
            }
        }
    }
    for (cid, seqs) in &by_cid {
        assert_eq!(seqs.len(), 1, "{chat}: {cid} stored once, not at {seqs:?}");
    }
    acked
}

/// The first acknowledged send answered after `since`, as a delay from it.
fn resumed(logs: &[Vec<Sent>], since: Instant) -> Option<Duration> {
    logs.iter()
        .flatten()
        .filter(|s| s.outcome.is_ok() && s.at + s.took >= since)
        .map(|s| (s.at + s.took).duration_since(since))
        .min()
}

/// Runs a blocking step of `pair` (kill, freeze, promote, rebuild) off the async workers.
async fn on_pair<T: Send + 'static>(pair: &Arc<PgPair>, step: impl FnOnce(&PgPair) -> T + Send + 'static) -> T {
    let pair = pair.clone();
    tokio::task::spawn_blocking(move || step(&pair)).await.expect("a PostgreSQL step")
}

/// Sends `req` until it is acknowledged (within [`WAIT`]); its seq.
async fn send_until_acknowledged(c: &mut Client, req: &Value, what: &str) -> u64 {
    let deadline = Instant::now() + WAIT;
    loop {
        let r = c.request(req.clone()).await;
        if let Some(ok) = r.get("ok") {
            return ok["seq"].as_u64().unwrap();
        }
        assert!(Instant::now() < deadline, "{what}: {r}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A pair (synchronous with `sync`) holding one shard named `name`, and a
/// server on it with `tweak` applied. A name of its own per test: the tests
/// of this file share one process's metrics.
async fn one_pair(
    sync: bool,
    name: &str,
    tweak: impl FnOnce(&mut herald::Config),
) -> (Arc<PgPair>, TestServer, Client) {
    let pair = Arc::new(tokio::task::spawn_blocking(move || PgPair::start(sync)).await.expect("start PostgreSQL"));
    let db = on_pair(&pair, |p| p.create_database()).await;
    let url = format!("{name}={}", pair.hosts_url(&db));
    let s = TestServer::start_with(|c| {
        c.store.stores = vec![url];
        tweak(c);
    })
    .await;
    let mut alice = s.client("w", "alice").await;
    alice.ok(json!({"op": "join", "chat": "g"})).await;
    (pair, s, alice)
}

async fn metrics_text(s: &TestServer) -> String {
    let (_, v) = s.http("GET", "/metrics", None).await;
    v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string())
}

// Two workers: the harness's blocking steps (pg_ctl, base backups) must not freeze the senders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL (Debian's postgresql); scripts/test.sh runs it"]
async fn a_shard_fails_over_to_its_synchronous_standby_with_nothing_acknowledged_lost() {
    let (pair, plain) =
        tokio::task::spawn_blocking(|| (PgPair::start(true), PgCluster::start())).await.expect("start PostgreSQL");
    let pair = Arc::new(pair);
    let db = tokio::task::block_in_place(|| pair.create_database());
    let stores = vec![format!("a={}", pair.hosts_url(&db)), format!("b={}", create_database(&plain.admin_url).await)];
    let (hook_url, hooked) = webhook_receiver().await;
    let s = TestServer::start_with(|c| {
        c.store.stores = stores.clone();
        c.gateway.rate = 100_000;
        c.gateway.burst = 100_000;
        c.hooks.secret = Some("a-webhook-secret-of-at-least-32-bytes".into());
        c.hooks.webhook = Some(herald::hooks::WebhookSettings {
            url: hook_url,
            events: None,
            offline_max: herald::hooks::DEFAULT_WEBHOOK_OFFLINE_MAX,
            timeout: Duration::from_millis(500),
            retry_first: Duration::from_millis(40),
            retry_max: Duration::from_millis(400),
        });
    })
    .await;
    let (chat_a, chat_b) = (chat_on(&["a", "b"], 0, "a"), chat_on(&["a", "b"], 1, "b"));

    // A watcher of the failing shard's chat, and senders on both shards' chats.
    let mut watcher = s.client("w", "watcher").await;
    watcher.ok(json!({"op": "join", "chat": chat_a})).await;
    watcher.ok(json!({"op": "watch", "chat": chat_a})).await;
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks: BTreeMap<String, Vec<_>> = BTreeMap::new();
    for chat in [&chat_a, &chat_b] {
        for u in 0..3 {
            let mut c = s.client("w", &format!("{chat}-u{u}")).await;
            c.ok(json!({"op": "join", "chat": chat})).await;
            let task = tokio::spawn(sender(c, chat.clone(), format!("{chat}-u{u}"), stop.clone()));
            tasks.entry(chat.clone()).or_default().push(task);
        }
    }

    // Quiet, then a primary killed (a machine gone) and a primary frozen (a machine hung), each
    // promoted away from by a failover manager that notices after a second, then rebuilt as a standby.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut windows = Vec::new();
    let mut promotions = Vec::new();
    for fault in ["kill", "freeze"] {
        let (old, new) = (pair.primary_port(), pair.standby_port());
        let struck = Instant::now();
        on_pair(&pair, move |p| if fault == "kill" { p.kill9_primary() } else { p.freeze_primary() }).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let took = on_pair(&pair, |p| {
            let t = Instant::now();
            p.promote_standby();
            t.elapsed()
        })
        .await;
        let promoted = Instant::now();
        eprintln!("{fault}: standby promoted in {took:?}");
        if fault == "freeze" {
            // A node started now, its hosts listed frozen one first, in one HERALD_STORE value.
            let data = data_dir();
            let frozen_first =
                format!("a=postgres://herald@127.0.0.1:{old},127.0.0.1:{new}/{db}?target_session_attrs=read-write");
            let env = format!("{frozen_first},{}", stores[1]);
            let node = BinServer::start(data.path(), &[], &[("HERALD_STORE", env.as_str())]);
            let t = Instant::now();
            node.wait_ready().await;
            eprintln!("a node started while the old primary hangs was ready in {:?}", t.elapsed());
        }
        tokio::time::sleep(Duration::from_secs(4)).await;
        windows.push((fault, struck, Instant::now()));
        promotions.push((fault, promoted));
        on_pair(&pair, |p| p.rebuild_old_primary()).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut logs: BTreeMap<String, Vec<Vec<Sent>>> = BTreeMap::new();
    for (chat, ts) in tasks {
        for t in ts {
            logs.entry(chat.clone()).or_default().push(t.await.unwrap());
        }
    }

    // Nothing acknowledged lost or stored twice, on either shard.
    let events_a = stored(&s, &chat_a).await;
    let events_b = stored(&s, &chat_b).await;
    let acked_a = audit(&chat_a, &events_a, &logs[&chat_a]);
    let acked_b = audit(&chat_b, &events_b, &logs[&chat_b]);

    // The webhook went on from its stored positions on the new primary: every event, in order, at least once.
    let deadline = Instant::now() + WAIT;
    let mut firsts = BTreeMap::<String, Vec<u64>>::new();
    let mut again;
    loop {
        firsts.clear();
        again = 0;
        let mut seen = std::collections::HashSet::new();
        for e in hooked.lock().unwrap().iter() {
            let (chat, seq) = (e["chat"].as_str().unwrap_or("").to_string(), e["seq"].as_u64().unwrap_or(0));
            if seen.insert((chat.clone(), seq)) {
                firsts.entry(chat).or_default().push(seq);
            } else {
                again += 1;
            }
        }
        let whole = |chat: &str, n: usize| firsts.get(chat).map_or(0, Vec::len) == n;
        if (whole(&chat_a, events_a.len()) && whole(&chat_b, events_b.len())) || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for (chat, n) in [(&chat_a, events_a.len()), (&chat_b, events_b.len())] {
        let want: Vec<u64> = (1..=n as u64).collect();
        assert_eq!(firsts.get(chat.as_str()), Some(&want), "{chat}: the webhook delivered every event, in seq order");
    }
    eprintln!("webhook: every event delivered; {again} delivered again (at least once)");
    let resends: usize = logs[&chat_a].iter().flatten().filter(|s| s.outcome.is_err()).count();
    eprintln!("acknowledged: shard a {acked_a}, shard b {acked_b}; refused (then resent) on a: {resends}");

    // Writes to the failed shard resumed within 5 s of each promotion.
    for (fault, promoted) in &promotions {
        let back = resumed(&logs[&chat_a], *promoted).expect("writes resumed after the promotion");
        eprintln!("{fault}: writes to shard a resumed {back:?} after the promotion");
        assert!(back <= Duration::from_secs(5), "{fault}: writes resumed {back:?} after the promotion");
    }
    // The other shard kept its latency while the failed one failed over.
    let b: Vec<&Sent> = logs[&chat_b].iter().flatten().collect();
    let quiet = p99(b.iter().filter(|s| s.at < windows[0].1).map(|s| s.took).collect());
    let during = p99(b.iter().filter(|s| windows.iter().any(|w| s.at >= w.1 && s.at < w.2)).map(|s| s.took).collect());
    eprintln!("shard b p99: quiet {quiet:?}, during the failovers {during:?}");
    assert!(b.iter().all(|s| s.outcome.is_ok()), "shard b never refused a send");
    assert!(
        during <= quiet.mul_f64(3.0).max(Duration::from_millis(25)),
        "shard b's p99 during the failovers {during:?} against {quiet:?} quiet"
    );

    // The watcher holds every stored event, in order, once.
    let mut got = Vec::new();
    while got.len() < events_a.len() {
        let Some(p) = watcher.push_within(Duration::from_secs(5)).await else { break };
        if p["ev"] == "event" && p["chat"] == chat_a.as_str() {
            got.push(p["seq"].as_u64().unwrap());
        }
    }
    let want: Vec<u64> = (1..=events_a.len() as u64).collect();
    let first_join = want.iter().position(|&q| got.first() == Some(&q)).unwrap_or(0);
    assert_eq!(got, want[first_join..], "the watcher holds every event after its watch, in order, once");

    let text = metrics_text(&s).await;
    assert!(
        metric(&text, "herald_store_pg_primary_changes_total{shard=\"a\"}") >= 2.0,
        "the primary changes are counted"
    );
    assert_eq!(
        metric(&text, "herald_store_seq_rewinds_total{shard=\"a\"}"),
        0.0,
        "a synchronous standby loses nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL (Debian's postgresql); scripts/test.sh runs it"]
async fn an_asynchronous_standby_loses_acknowledged_events_and_their_seqs_are_not_handed_out_again() {
    let (pair, s, mut alice) = one_pair(false, "lossy", |_| {}).await;
    let mut bob = s.client("w", "bob").await;
    bob.ok(json!({"op": "join", "chat": "g"})).await;
    bob.ok(json!({"op": "watch", "chat": "g"})).await;
    let mut acked = Vec::new();
    for i in 0..5 {
        acked.push(alice.ok(json!({"op": "send", "chat": "g", "body": i})).await["seq"].as_u64().unwrap());
    }
    tokio::task::block_in_place(|| pair.wait_replayed());
    // The standby stops receiving; the primary goes on acknowledging; then it dies and the standby is promoted.
    on_pair(&pair, |p| p.pause_replication()).await;
    for i in 5..8 {
        acked.push(alice.ok(json!({"op": "send", "chat": "g", "body": i})).await["seq"].as_u64().unwrap());
    }
    let seen = *acked.last().unwrap();
    let pushed: Vec<u64> = bob.events("g", acked.len()).await.iter().map(|p| p["seq"].as_u64().unwrap()).collect();
    assert_eq!(pushed.last(), Some(&seen), "bob was pushed every acknowledged event");
    on_pair(&pair, |p| {
        p.kill9_primary();
        p.promote_standby();
    })
    .await;

    // The loss: acknowledged events missing from the promoted shard.
    let deadline = Instant::now() + WAIT;
    let events = loop {
        let (status, page) = s.http("GET", "/v1/workspaces/w/chats/g/events?after=0&limit=100", None).await;
        if status == 200 {
            break page["events"].as_array().unwrap().clone();
        }
        assert!(Instant::now() < deadline, "the promoted shard answers reads: {page}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let head = events.last().and_then(|e| e["seq"].as_u64()).unwrap_or(0);
    let lost: Vec<u64> = acked.iter().copied().filter(|&q| q > head).collect();
    eprintln!("acknowledged up to seq {seen}; the promoted standby holds up to {head}; lost {lost:?}");
    assert!(!lost.is_empty(), "an asynchronous standby promoted without the last commits loses them");

    // herald's answer: the next event comes after every seq it handed out, never at a lost one.
    let after = json!({"op": "send", "chat": "g", "body": "after", "client_id": "after"});
    let next = send_until_acknowledged(&mut alice, &after, "writes resume on the promoted standby").await;
    assert_eq!(next, seen + 1, "the first event after the loss comes after seq {seen}, never reusing a lost seq");
    let pushed = bob.events("g", 1).await;
    assert_eq!(pushed[0]["seq"], next, "the watcher, who holds the lost events, is pushed the new one");
    let text = metrics_text(&s).await;
    assert_eq!(metric(&text, "herald_store_seq_rewinds_total{shard=\"lossy\"}"), 1.0, "the rewind is counted once");
    // Fetching from before the loss reads the gap as it is: the lost seqs are gone, the new event follows.
    let (_, page) = s.http("GET", &format!("/v1/workspaces/w/chats/g/events?after={head}&limit=10"), None).await;
    let seqs: Vec<u64> = page["events"].as_array().unwrap().iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, vec![next]);
}

/// A send hook that accepts every message as sent.
async fn accepting_send_hook() -> String {
    let app = axum::Router::new().route("/hook", axum::routing::post(|| async { r#"{"action":"accept"}"# }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    url
}

// A commit waiting for its synchronous standby becomes visible on the primary when its wait is
// cancelled (an operator's pg_cancel_backend, a statement_timeout): committed locally, not on the
// standby. A resend of it found there must not be acknowledged until the standby has it: the
// primary may die first. With a send hook, a resend is looked up before the hook is asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL (Debian's postgresql); scripts/test.sh runs it"]
async fn a_resend_is_not_acknowledged_from_a_commit_the_synchronous_standby_lacks() {
    let hook = accepting_send_hook().await;
    let (pair, s, mut alice) = one_pair(true, "unreplicated", |c| {
        c.hooks = herald::hooks::HookSettings {
            secret: Some("a-send-hook-secret-of-at-least-32-bytes".into()),
            webhook: None,
            send_hook: Some(herald::hooks::SendHookSettings {
                url: hook,
                timeout: Duration::from_secs(2),
                fail: herald::hooks::FailMode::Closed,
            }),
        };
    })
    .await;
    alice.ok(json!({"op": "send", "chat": "g", "body": 1, "client_id": "first"})).await;
    // The standby is cut off: the primary commits the next send locally and waits for it.
    on_pair(&pair, |p| p.cut_replication()).await;
    let send = json!({"op": "send", "chat": "g", "body": 2, "client_id": "waits"});
    let r = alice.request(send.clone()).await;
    assert_eq!(r["err"]["code"], "unavailable", "a send waiting for the standby is not acknowledged: {r}");
    // Its wait is cancelled: the row is visible on the primary, and on the primary only.
    on_pair(&pair, |p| {
        let cancel = "SELECT count(pg_cancel_backend(pid)) FROM pg_stat_activity WHERE wait_event = 'SyncRep'";
        let deadline = Instant::now() + WAIT;
        while p.query_primary(cancel) == "0" {
            assert!(Instant::now() < deadline, "a commit waits for the standby");
            std::thread::sleep(Duration::from_millis(50));
        }
    })
    .await;
    for attempt in 0..4 {
        let r = alice.request(send.clone()).await;
        assert_eq!(r["err"]["code"], "unavailable", "attempt {attempt} is not acknowledged: {r}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The primary dies; the standby, which never got that commit, is promoted.
    on_pair(&pair, |p| {
        p.kill9_primary();
        p.promote_standby();
    })
    .await;
    let seq = send_until_acknowledged(&mut alice, &send, "the resend is stored on the promoted standby").await;
    let events = stored(&s, "g").await;
    let waits: Vec<u64> =
        events.iter().filter(|e| e["client_id"] == "waits").map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(waits, vec![seq], "acknowledged once, and stored where it was acknowledged");
}

// A primary that stops taking writes while it runs (made read-only, as a demoted or fenced primary
// answers): the write batch that meets SQLSTATE 25006 drops its connection and the pool's, and writes
// go to whichever host takes them once there is one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL (Debian's postgresql); scripts/test.sh runs it"]
async fn a_primary_that_turns_read_only_is_left_for_the_one_that_takes_writes() {
    let (pair, s, mut alice) = one_pair(true, "readonly", |_| {}).await;
    alice.ok(json!({"op": "send", "chat": "g", "body": 1})).await;
    on_pair(&pair, |p| {
        p.query_primary("ALTER SYSTEM SET default_transaction_read_only = on");
        p.query_primary("SELECT pg_reload_conf()");
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = alice.request(json!({"op": "send", "chat": "g", "body": 2, "client_id": "ro"})).await;
    assert_eq!(r["err"]["code"], "unavailable", "a read-only primary takes no write: {r}");
    on_pair(&pair, |p| p.promote_standby()).await;
    let send = json!({"op": "send", "chat": "g", "body": 2, "client_id": "ro"});
    let seq = send_until_acknowledged(&mut alice, &send, "writes go to the promoted standby").await;
    assert_eq!(seq, 3);
    let text = metrics_text(&s).await;
    assert!(metric(&text, "herald_store_pg_fence_total{shard=\"readonly\",reason=\"write\"}") >= 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL (Debian's postgresql); scripts/test.sh runs it"]
async fn a_host_of_another_database_is_refused_not_written_to() {
    let (x, y) = tokio::task::spawn_blocking(|| (PgCluster::start(), PgCluster::start())).await.unwrap();
    // The same database name on both servers, each a herald shard of its own.
    for admin in [&x.admin_url, &y.admin_url] {
        let (client, conn) = tokio_postgres::connect(admin, tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(conn);
        client.batch_execute("CREATE DATABASE herald_same").await.unwrap();
    }
    let y_url = format!("postgres://herald@127.0.0.1:{}/herald_same", y.port);
    {
        let other = TestServer::start_with(|c| c.store.stores = vec![format!("a={y_url}")]).await;
        let mut c = other.client("w", "carol").await;
        c.ok(json!({"op": "join", "chat": "g"})).await;
    }
    let both = format!("a=postgres://herald@127.0.0.1:{},127.0.0.1:{}/herald_same", x.port, y.port);
    let s = TestServer::start_with(|c| c.store.stores = vec![both.clone()]).await;
    let mut alice = s.client("w", "alice").await;
    alice.ok(json!({"op": "join", "chat": "g"})).await;
    alice.ok(json!({"op": "send", "chat": "g", "body": 1})).await;
    // The primary goes; the other host answers as a primary, but it is another database.
    tokio::task::spawn_blocking(move || x.stop()).await.unwrap();
    for _ in 0..5 {
        let r = alice.request(json!({"op": "send", "chat": "g", "body": 2, "client_id": "x"})).await;
        assert_eq!(r["err"]["code"], "unavailable", "{r}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let text = metrics_text(&s).await;
    assert!(metric(&text, "herald_store_errors_total{kind=\"shard_identity\"}") >= 1.0, "the refusal is counted");
    let (client, conn) = tokio_postgres::connect(&y_url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    let members: i64 = client.query_one("SELECT count(*) FROM members", &[]).await.unwrap().get(0);
    assert_eq!(members, 1, "only carol: nothing of alice's reached the other database");
}
