//! The send hook against a real HTTP receiver started by each test (axum on
//! a free loopback port): what each answer does to a client's `send` and
//! `edit`, failures in closed and open mode, signatures, the server API
//! skipping the hook, and one kept-alive connection for many sends.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::serve::ListenerExt;
use common::*;
use herald::hooks::{FailMode, HookSettings, SendHookSettings, signature};
use serde_json::{Value, json};

const HOOK_SECRET: &str = "hook-secret-0123456789abcdef0123456789abcdef";

/// How the receiver answers.
#[derive(Clone)]
enum Mode {
    /// This JSON, with 200.
    Json(Value),
    /// Waits this long, then accepts.
    Slow(Duration),
    /// HTTP 500.
    Status500,
    /// 200 with a body that is not JSON.
    Garbage,
}

#[derive(Default)]
struct Seen {
    /// Every request's JSON body.
    requests: Vec<Value>,
    /// Requests whose `Herald-Signature` did not verify.
    bad_signatures: usize,
}

/// An app's send-hook endpoint: records what it is sent, checks each
/// signature with the shared secret, answers as its mode says.
struct Receiver {
    addr: SocketAddr,
    mode: Arc<Mutex<Mode>>,
    seen: Arc<Mutex<Seen>>,
    /// TCP connections accepted.
    connections: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Clone)]
struct Shared {
    mode: Arc<Mutex<Mode>>,
    seen: Arc<Mutex<Seen>>,
}

async fn hook_endpoint(State(s): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let verified = headers
        .get("Herald-Signature")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let t: u64 = v.strip_prefix("t=")?.split(',').next()?.parse().ok()?;
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
            // Recent, and signed over "<t>.<raw body>" with the secret.
            (now.abs_diff(t) <= 300 && signature(HOOK_SECRET.as_bytes(), t, &body) == v).then_some(())
        })
        .is_some();
    {
        let mut seen = s.seen.lock().unwrap();
        seen.requests.push(serde_json::from_slice(&body).unwrap_or(Value::Null));
        if !verified {
            seen.bad_signatures += 1;
        }
    }
    let mode = s.mode.lock().unwrap().clone();
    match mode {
        Mode::Json(v) => axum::Json(v).into_response(),
        Mode::Slow(wait) => {
            tokio::time::sleep(wait).await;
            axum::Json(json!({"action": "accept"})).into_response()
        }
        Mode::Status500 => (StatusCode::INTERNAL_SERVER_ERROR, "down").into_response(),
        Mode::Garbage => (StatusCode::OK, "<html>not json</html>").into_response(),
    }
}

impl Receiver {
    async fn start() -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mode = Arc::new(Mutex::new(Mode::Json(json!({"action": "accept"}))));
        let seen = Arc::new(Mutex::new(Seen::default()));
        let connections = Arc::new(AtomicUsize::new(0));
        let counted = connections.clone();
        let listener = listener.tap_io(move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
        });
        let app = axum::Router::new()
            .route("/hook", axum::routing::post(hook_endpoint))
            .with_state(Shared { mode: mode.clone(), seen: seen.clone() });
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Receiver { addr, mode, seen, connections, task }
    }

    fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    fn answer(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    fn requests(&self) -> Vec<Value> {
        self.seen.lock().unwrap().requests.clone()
    }

    fn bad_signatures(&self) -> usize {
        self.seen.lock().unwrap().bad_signatures
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A herald whose send hook is `receiver`.
async fn herald_with_hook(receiver: &Receiver, timeout: Duration, fail: FailMode) -> TestServer {
    let url = receiver.url();
    TestServer::start_with(move |c| {
        c.hooks = HookSettings {
            secret: Some(HOOK_SECRET.into()),
            webhook: None,
            send_hook: Some(SendHookSettings { url, timeout, fail }),
        };
    })
    .await
}

/// The events of `chat` as `c` fetches them.
async fn fetch(c: &mut Client, chat: &str) -> Vec<Value> {
    c.ok(json!({"op": "fetch", "chat": chat, "after": 0})).await["events"].as_array().unwrap().clone()
}

fn messages(events: &[Value]) -> Vec<Value> {
    events.iter().filter(|e| e["type"] == "message").map(|e| e["body"].clone()).collect()
}

/// The value of one labelled sample (`name{labels}`) in `/metrics`, 0 when absent.
async fn sample(s: &TestServer, sample: &str) -> f64 {
    metric(&http_raw(s.addr, "GET", "/metrics", None, None).await.1, sample)
}

#[tokio::test]
async fn accept_reject_and_replace_decide_what_a_send_stores_and_pushes() {
    let r = Receiver::start().await;
    let s = herald_with_hook(&r, Duration::from_secs(2), FailMode::Closed).await;
    let mut alice = s.client("acme", "alice").await;
    let mut bob = s.client("acme", "bob").await;
    alice.ok(json!({"op": "join", "chat": "g"})).await;
    bob.ok(json!({"op": "join", "chat": "g"})).await;
    bob.ok(json!({"op": "watch", "chat": "g"})).await;

    // accept: stored as sent; the hook saw the whole request.
    let seq = alice.ok(json!({"op": "send", "chat": "g", "body": {"text": "hi"}, "client_id": "m-1"})).await["seq"]
        .as_u64()
        .unwrap();
    let pushed = bob.events("g", 1).await;
    assert_eq!(pushed[0]["body"], json!({"text": "hi"}));
    let asked = r.requests();
    assert_eq!(
        asked.last().unwrap(),
        &json!({"workspace": "acme", "chat": "g", "user": "alice", "op": "send", "body": {"text": "hi"}, "client_id": "m-1"})
    );

    // reject: forbidden with the app's message, nothing stored.
    r.answer(Mode::Json(json!({"action": "reject", "message": "no shouting"})));
    let err = alice.err(json!({"op": "send", "chat": "g", "body": {"text": "HEY"}}), "forbidden").await;
    assert_eq!(err["message"], "no shouting");

    // replace: stored, pushed and fetched with the app's body.
    r.answer(Mode::Json(json!({"action": "replace", "body": {"text": "[link removed]"}})));
    alice.ok(json!({"op": "send", "chat": "g", "body": {"text": "buy at spam.example"}})).await;
    let pushed = bob.events("g", 1).await;
    assert_eq!(pushed[0]["body"], json!({"text": "[link removed]"}));
    let stored = messages(&fetch(&mut alice, "g").await);
    assert_eq!(stored, vec![json!({"text": "hi"}), json!({"text": "[link removed]"})], "the rejected one is absent");
    assert!(!fetch(&mut bob, "g").await.iter().any(|e| e.to_string().contains("spam.example")));

    // edit: the hook is asked with op edit and the target.
    r.answer(Mode::Json(json!({"action": "reject", "message": "edits are closed"})));
    let err = alice.err(json!({"op": "edit", "chat": "g", "target": seq, "body": {"text": "hi!"}}), "forbidden").await;
    assert_eq!(err["message"], "edits are closed");
    let asked = r.requests();
    let last = asked.last().unwrap();
    assert_eq!((&last["op"], &last["target"], &last["body"]), (&json!("edit"), &json!(seq), &json!({"text": "hi!"})));
    r.answer(Mode::Json(json!({"action": "replace", "body": {"text": "hi (edited by the app)"}})));
    alice.ok(json!({"op": "edit", "chat": "g", "target": seq, "body": {"text": "hi!!"}})).await;
    let pushed = bob.events("g", 1).await;
    assert_eq!(pushed[0]["type"], "edit");
    assert_eq!(pushed[0]["body"], json!({"target": seq, "body": {"text": "hi (edited by the app)"}}));
    r.answer(Mode::Json(json!({"action": "accept"})));
    alice.ok(json!({"op": "edit", "chat": "g", "target": seq, "body": {"text": "hi, final"}})).await;
    let events = fetch(&mut bob, "g").await;
    let original = events.iter().find(|e| e["seq"] == seq).unwrap();
    assert_eq!(original["body"], json!({"text": "hi, final"}));

    assert_eq!(r.bad_signatures(), 0, "every request verified with the secret");
    assert_eq!(r.requests().len(), 6);
}

#[tokio::test]
async fn a_hook_that_times_out_or_fails_refuses_the_send_when_closed() {
    let r = Receiver::start().await;
    let s = herald_with_hook(&r, Duration::from_millis(300), FailMode::Closed).await;
    let mut alice = s.client("acme", "alice").await;
    alice.ok(json!({"op": "join", "chat": "g"})).await;
    let timeouts = sample(&s, r#"herald_send_hook_total{outcome="timeout"}"#).await;
    let errors = sample(&s, r#"herald_send_hook_total{outcome="error"}"#).await;

    for (mode, what) in [
        (Mode::Slow(Duration::from_secs(2)), "a hook slower than the timeout"),
        (Mode::Status500, "HTTP 500"),
        (Mode::Garbage, "an answer that is not JSON"),
        (Mode::Json(json!({"action": "shrug"})), "an unknown action"),
        (
            Mode::Json(json!({"action": "replace", "body": {"text": "x".repeat(20_000)}})),
            "a replacement over the body limit",
        ),
    ] {
        r.answer(mode);
        let started = std::time::Instant::now();
        let err = alice.err(json!({"op": "send", "chat": "g", "body": {"text": "hello"}}), "unavailable").await;
        assert!(err["retry_after_ms"].as_u64().unwrap() > 0, "{what}: {err}");
        assert!(started.elapsed() < Duration::from_secs(2), "{what}: waited {:?}", started.elapsed());
    }
    let stored = messages(&fetch(&mut alice, "g").await);
    assert!(stored.is_empty(), "nothing stored while the hook fails: {stored:?}");
    // Counted (other tests of this process count too: at least ours).
    assert!(sample(&s, r#"herald_send_hook_total{outcome="timeout"}"#).await - timeouts >= 1.0);
    assert!(sample(&s, r#"herald_send_hook_total{outcome="error"}"#).await - errors >= 4.0);
    // And a hook that is back is asked again at once.
    r.answer(Mode::Json(json!({"action": "accept"})));
    alice.ok(json!({"op": "send", "chat": "g", "body": {"text": "hello"}})).await;
}

#[tokio::test]
async fn a_hook_that_times_out_or_fails_lets_the_send_through_as_sent_when_open() {
    let r = Receiver::start().await;
    let s = herald_with_hook(&r, Duration::from_millis(300), FailMode::Open).await;
    let mut alice = s.client("acme", "alice").await;
    alice.ok(json!({"op": "join", "chat": "g"})).await;
    for (i, mode) in [Mode::Slow(Duration::from_secs(2)), Mode::Status500, Mode::Garbage].into_iter().enumerate() {
        r.answer(mode);
        alice.ok(json!({"op": "send", "chat": "g", "body": {"n": i}})).await;
    }
    assert_eq!(messages(&fetch(&mut alice, "g").await), vec![json!({"n": 0}), json!({"n": 1}), json!({"n": 2})]);
    // A reject is an answer: open mode does not override it.
    r.answer(Mode::Json(json!({"action": "reject", "message": "no"})));
    alice.err(json!({"op": "send", "chat": "g", "body": {"n": 3}}), "forbidden").await;
    assert_eq!(messages(&fetch(&mut alice, "g").await).len(), 3);
}

#[tokio::test]
async fn server_api_posts_and_edits_skip_the_hook() {
    let r = Receiver::start().await;
    r.answer(Mode::Json(json!({"action": "reject", "message": "clients only"})));
    let s = herald_with_hook(&r, Duration::from_secs(1), FailMode::Closed).await;
    let (status, _) = s.http("PUT", "/v1/workspaces/acme/chats/news", Some(json!({"open": true}))).await;
    assert_eq!(status, 200);
    s.http("PUT", "/v1/workspaces/acme/chats/news/members/alice", None).await;
    let (status, body) = s
        .http(
            "POST",
            "/v1/workspaces/acme/chats/news/events",
            Some(json!({"type": "message", "user": "alice", "body": {"text": "from the app"}})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let seq = body["seq"].as_u64().unwrap();
    let (status, body) = s
        .http("PATCH", &format!("/v1/workspaces/acme/chats/news/events/{seq}"), Some(json!({"body": {"text": "v2"}})))
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(r.requests().is_empty(), "the hook was asked: {:?}", r.requests());
    // The same send from a client is asked (and here refused).
    let mut alice = s.client("acme", "alice").await;
    alice.err(json!({"op": "send", "chat": "news", "body": {"text": "x"}}), "forbidden").await;
    assert_eq!(r.requests().len(), 1);
}

#[tokio::test]
async fn many_sends_reuse_one_connection_to_the_hook() {
    let r = Receiver::start().await;
    let s = herald_with_hook(&r, Duration::from_secs(2), FailMode::Closed).await;
    let mut alice = s.client("acme", "alice").await;
    alice.ok(json!({"op": "join", "chat": "g"})).await;
    for i in 0..30 {
        alice.ok(json!({"op": "send", "chat": "g", "body": {"n": i}})).await;
    }
    assert_eq!(r.requests().len(), 30);
    assert_eq!(r.connections.load(Ordering::SeqCst), 1, "keep-alive: one TCP connection for 30 sends");
}

#[tokio::test]
async fn a_repeated_client_id_and_a_non_member_do_not_reach_the_hook() {
    let r = Receiver::start().await;
    let s = herald_with_hook(&r, Duration::from_secs(2), FailMode::Closed).await;
    let mut alice = s.client("acme", "alice").await;
    alice.ok(json!({"op": "join", "chat": "g"})).await;
    let first = alice.ok(json!({"op": "send", "chat": "g", "body": {"t": 1}, "client_id": "c-1"})).await;
    let again = alice.ok(json!({"op": "send", "chat": "g", "body": {"t": 1}, "client_id": "c-1"})).await;
    assert_eq!(first["seq"], again["seq"], "idempotent");
    assert_eq!(r.requests().len(), 1, "the retry was answered without asking the hook again");
    let mut mallory = s.client("acme", "mallory").await;
    mallory.err(json!({"op": "send", "chat": "g", "body": {"t": 2}}), "forbidden").await;
    assert_eq!(r.requests().len(), 1, "a send that cannot be stored is not sent to the app");
    assert_eq!(messages(&fetch(&mut alice, "g").await).len(), 1);
}

/// The answers that change storage, on two PostgreSQL shards.
#[tokio::test]
#[ignore = "needs PostgreSQL (Debian's postgresql); scripts/test.sh runs it"]
async fn on_postgres_shards_a_reject_stores_nothing_and_a_replace_stores_the_new_body() {
    let (_pg, admin) = common::pg::suite_or_own();
    let stores = vec![common::pg::create_database(&admin).await, common::pg::create_database(&admin).await];
    let r = Receiver::start().await;
    let url = r.url();
    let s = TestServer::start_with(move |c| {
        c.store.stores = stores;
        c.hooks = HookSettings {
            secret: Some(HOOK_SECRET.into()),
            webhook: None,
            send_hook: Some(SendHookSettings { url, timeout: Duration::from_secs(2), fail: FailMode::Closed }),
        };
    })
    .await;
    let mut alice = s.client("acme", "alice").await;
    for chat in ["a", "b", "c", "d"] {
        alice.ok(json!({"op": "join", "chat": chat})).await;
        r.answer(Mode::Json(json!({"action": "reject", "message": "nope"})));
        alice.err(json!({"op": "send", "chat": chat, "body": {"t": "raw"}}), "forbidden").await;
        r.answer(Mode::Json(json!({"action": "replace", "body": {"t": "clean"}})));
        let seq = alice.ok(json!({"op": "send", "chat": chat, "body": {"t": "raw"}, "client_id": "k"})).await["seq"]
            .as_u64()
            .unwrap();
        let again = alice.ok(json!({"op": "send", "chat": chat, "body": {"t": "raw"}, "client_id": "k"})).await;
        assert_eq!(again["seq"], seq);
        assert_eq!(messages(&fetch(&mut alice, chat).await), vec![json!({"t": "clean"})], "chat {chat}");
    }
    assert_eq!(r.requests().len(), 8, "two per chat: the retry with the same client_id did not ask");
}
