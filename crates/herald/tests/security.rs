//! Running a server safely: start-up refusals of the real binary, public-key
//! tokens, allowed origins, and the limits on connections and watches.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Starts the binary with `args` and `env` (no secrets of the harness's own)
/// and returns its exit status and what it printed, or panics if it keeps running.
fn refused_start(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let data = data_dir();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_herald"));
    cmd.args(["serve", "--data"]).arg(data.path()).args(args);
    if !args.contains(&"--listen") {
        cmd.args(["--listen", &format!("127.0.0.1:{}", free_port())]);
    }
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("HERALD_")) {
        cmd.env_remove(k);
    }
    cmd.envs(env.iter().copied());
    let mut child = cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
            return (status.code().unwrap_or(-1), text);
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("herald started with {args:?} {env:?}; it should have refused");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_binary_refuses_missing_empty_and_short_secrets_by_name() {
    let long = "0123456789abcdef0123456789abcdef";
    for (env, expected) in [
        (vec![("HERALD_API_KEY", "")], "--api-key (HERALD_API_KEY) is set but empty"),
        (vec![("HERALD_JWT_SECRET", long)], "no api key"),
        (vec![("HERALD_API_KEY", long)], "no way to verify client tokens"),
        (
            vec![("HERALD_API_KEY", long), ("HERALD_JWT_SECRET", "")],
            "--jwt-secret (HERALD_JWT_SECRET) is set but empty",
        ),
        (vec![("HERALD_API_KEY", long), ("HERALD_JWT_SECRET", "too-short")], "is 9 bytes long"),
    ] {
        let (code, out) = refused_start(&[], &env);
        assert_ne!(code, 0, "{env:?}");
        assert!(out.contains(expected), "{env:?}: expected {expected:?} in {out}");
    }
    let env = [("HERALD_API_KEY", long), ("HERALD_JWT_SECRET", long)];
    let (code, out) = refused_start(&["--heartbeat-ms", "0"], &env);
    assert!(code != 0 && out.contains("heartbeat-ms"), "{out}");
    let (code, out) = refused_start(&["--frame-limit", "8192", "--body-limit", "16384"], &env);
    assert!(code != 0 && out.contains("frame-limit (8192) must be at least body-limit (16384)"), "{out}");
    let (code, out) = refused_start(&["--broker", "nats://127.0.0.1:1"], &env);
    assert!(code != 0 && out.contains("--store"), "{out}");
    let (code, out) = refused_start(&[], &[("HERALD_JWT_SECRET", long), ("HERALD_API_KEY", "short-key")]);
    assert!(code != 0 && out.contains("--api-key (HERALD_API_KEY) is 9 bytes long"), "{out}");
    // A cluster node on a wildcard address, with no --public-url for other nodes' clients.
    let cluster = ["--broker", "nats://127.0.0.1:1", "--store", "postgres://127.0.0.1:1/db"];
    let (code, out) = refused_start(&[&cluster[..], &["--listen", "0.0.0.0:1"]].concat(), &env);
    assert!(code != 0 && out.contains("needs --public-url"), "{out}");
    let (code, out) = refused_start(&[&cluster[..], &["--public-url", "ws://0.0.0.0:1"]].concat(), &env);
    assert!(code != 0 && out.contains("wildcard"), "{out}");
    let (code, out) = refused_start(&["--jwt-public-key", "/nonexistent.pem"], &[("HERALD_API_KEY", long)]);
    assert!(code != 0 && out.contains("--jwt-public-key: reading /nonexistent.pem"), "{out}");
}

/// A WebSocket upgrade request with `headers`; the status and the open stream.
async fn upgrade(addr: SocketAddr, headers: &str) -> (u16, TcpStream) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "GET /v1/ws HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{headers}\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(WAIT, s.read(&mut byte)).await.expect("an answer").unwrap();
        assert_eq!(n, 1, "closed before the end of the head: {}", String::from_utf8_lossy(&head));
        head.push(byte[0]);
    }
    let status = String::from_utf8_lossy(&head).split(' ').nth(1).unwrap().parse().unwrap();
    (status, s)
}

#[tokio::test]
async fn only_allowed_origins_may_open_a_websocket() {
    let server = TestServer::start_with(|c| {
        c.gateway.limits.allowed_origins = vec!["https://app.example.com".into(), "http://localhost:5173".into()];
    })
    .await;
    assert_eq!(upgrade(server.addr, "Origin: https://evil.example.com\r\n").await.0, 403);
    assert_eq!(upgrade(server.addr, "Origin: https://app.example.com.evil.net\r\n").await.0, 403);
    assert_eq!(upgrade(server.addr, "Origin: null\r\n").await.0, 403);
    assert_eq!(upgrade(server.addr, "Origin: https://app.example.com\r\n").await.0, 101);
    assert_eq!(upgrade(server.addr, "Origin: HTTPS://APP.example.com:443\r\n").await.0, 101);
    assert_eq!(upgrade(server.addr, "Origin: http://localhost:5173\r\n").await.0, 101);
    // Not a browser: no Origin, nothing to check.
    assert_eq!(upgrade(server.addr, "").await.0, 101);
    let (_, metrics) = http(server.addr, "GET", "/metrics", None, None).await;
    let refused = metric(metrics.as_str().unwrap(), r#"herald_upgrades_refused_total{reason="origin"}"#);
    assert_eq!(refused, 3.0, "{metrics}");
}

#[tokio::test]
async fn max_connections_answers_503_until_one_closes() {
    let server = TestServer::start_with(|c| c.gateway.limits.max_connections = 2).await;
    let a = server.client("w", "a").await;
    let (status, b) = upgrade(server.addr, "").await;
    assert_eq!(status, 101);
    assert_eq!(upgrade(server.addr, "").await.0, 503);
    drop(b);
    // The closed socket's place comes back once its task ends.
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let (status, _s) = upgrade(server.addr, "").await;
        if status == 101 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the place never came back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(a);
}

#[tokio::test]
async fn connections_without_hello_are_capped_apart_from_the_rest() {
    let server = TestServer::start_with(|c| c.gateway.limits.max_pending_hellos = 2).await;
    let (_, silent_1) = upgrade(server.addr, "").await;
    let mut ok = server.client("w", "a").await;
    let (_, silent_2) = upgrade(server.addr, "").await;
    assert_eq!(upgrade(server.addr, "").await.0, 503, "two are waiting to say hello");
    // The client that said hello does not count, and works.
    assert!(ok.request(json!({"op": "ping"})).await.get("ok").is_some());
    // A silent one leaving gives its place back.
    drop(silent_1);
    let deadline = std::time::Instant::now() + WAIT;
    let _silent_3 = loop {
        let (status, s) = upgrade(server.addr, "").await;
        if status == 101 {
            break s;
        }
        assert!(std::time::Instant::now() < deadline, "the place never came back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    drop(silent_2);
}

#[tokio::test]
async fn one_address_past_its_connect_rate_gets_429() {
    let server = TestServer::start_with(|c| c.gateway.limits.ip_connect_rate = 1).await;
    let mut open = Vec::new();
    for i in 0..4 {
        let (status, s) = upgrade(server.addr, "").await;
        assert_eq!(status, 101, "upgrade {i} of the burst of 4");
        open.push(s);
    }
    assert_eq!(upgrade(server.addr, "").await.0, 429);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(upgrade(server.addr, "").await.0, 101, "one more a second");
}

#[tokio::test]
async fn a_connection_watches_at_most_max_watches_chats() {
    let server = TestServer::start_with(|c| c.gateway.max_watches = 2).await;
    let mut c = server.client("w", "a").await;
    for chat in ["c1", "c2", "c3"] {
        assert!(c.request(json!({"op": "join", "chat": chat})).await.get("ok").is_some());
    }
    assert!(c.request(json!({"op": "watch", "chat": "c1"})).await.get("ok").is_some());
    assert!(c.request(json!({"op": "watch", "chat": "c2"})).await.get("ok").is_some());
    let r = c.request(json!({"op": "watch", "chat": "c3"})).await;
    assert_eq!(r["err"]["code"], "throttled", "{r}");
    assert!(r["err"]["retry_after_ms"].as_u64().is_some(), "{r}");
    // Watching a watched chat again replaces that watch; an unwatch makes room.
    assert!(c.request(json!({"op": "watch", "chat": "c2", "after": 0})).await.get("ok").is_some());
    assert!(c.request(json!({"op": "unwatch", "chat": "c1"})).await.get("ok").is_some());
    assert!(c.request(json!({"op": "watch", "chat": "c3"})).await.get("ok").is_some());
}

fn key(name: &str) -> Vec<u8> {
    std::fs::read(format!("{}/tests/keys/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

fn sign(alg: jsonwebtoken::Algorithm, key: &jsonwebtoken::EncodingKey, sub: &str) -> String {
    let exp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() + 600;
    let claims = json!({"sub": sub, "ws": "w", "exp": exp});
    jsonwebtoken::encode(&jsonwebtoken::Header::new(alg), &claims, key).unwrap()
}

#[tokio::test]
async fn tokens_signed_by_an_identity_providers_key_open_websockets() {
    use jsonwebtoken::{Algorithm, EncodingKey};
    let server = TestServer::start_with(|c| {
        c.tokens.secret = None;
        c.tokens.public_key_pem = Some(key("rsa-public.pem"));
    })
    .await;
    let rsa = EncodingKey::from_rsa_pem(&key("rsa-private.pem")).unwrap();
    let mut c = Client::connect(&server.ws_url("w")).await;
    let r = c.request(json!({"op": "hello", "token": sign(Algorithm::RS256, &rsa, "alice")})).await;
    assert_eq!(r["ok"]["user"], "alice", "{r}");

    // HS256 "signed" with the public key's text: refused, and the connection closed with 4001.
    let forged = sign(Algorithm::HS256, &EncodingKey::from_secret(&key("rsa-public.pem")), "mallory");
    let mut c = Client::connect(&server.ws_url("w")).await;
    let r = c.request(json!({"op": "hello", "token": forged})).await;
    assert_eq!(r["err"]["code"], "unauthenticated", "{r}");
    assert_eq!(c.closed_with().await, 4001);
}

#[tokio::test]
async fn ed25519_tokens_work_beside_a_secret() {
    use jsonwebtoken::{Algorithm, EncodingKey};
    let server = TestServer::start_with(|c| c.tokens.public_key_pem = Some(key("ed25519-public.pem"))).await;
    let ed = EncodingKey::from_ed_pem(&key("ed25519-private.pem")).unwrap();
    let mut c = Client::connect(&server.ws_url("w")).await;
    let r = c.request(json!({"op": "hello", "token": sign(Algorithm::EdDSA, &ed, "erin")})).await;
    assert_eq!(r["ok"]["user"], "erin", "{r}");
    // The secret still verifies (and issues) HS256 tokens.
    let _bob = server.client("w", "bob").await;
    // An RS256 token is refused: no RSA key is configured.
    let rsa = EncodingKey::from_rsa_pem(&key("rsa-private.pem")).unwrap();
    let mut c = Client::connect(&server.ws_url("w")).await;
    let r = c.request(json!({"op": "hello", "token": sign(Algorithm::RS256, &rsa, "mallory")})).await;
    assert_eq!(r["err"]["code"], "unauthenticated", "{r}");
    assert_eq!(c.closed_with().await, 4001);
}

/// A hello with an HS256 token of the test secret whose `exp` and `nbf` are `exp_in` and `nbf_in` seconds from now.
async fn hello_at(server: &TestServer, exp_in: i64, nbf_in: i64) -> serde_json::Value {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    let claims = json!({"sub": "alice", "ws": "w", "exp": now + exp_in, "nbf": now + nbf_in});
    let key = jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes());
    let token = jsonwebtoken::encode(&jsonwebtoken::Header::default(), &claims, &key).unwrap();
    let mut c = Client::connect(&server.ws_url("w")).await;
    c.request(json!({"op": "hello", "token": token})).await
}

#[tokio::test]
async fn exp_and_nbf_allow_the_leeway_and_no_more() {
    let default = TestServer::start().await;
    // Expired 2 s ago, or valid 2 s from now: within the default 5 s.
    assert!(hello_at(&default, -2, -60).await.get("ok").is_some());
    assert!(hello_at(&default, 60, 2).await.get("ok").is_some());
    // 30 s past either: refused.
    assert_eq!(hello_at(&default, -30, -60).await["err"]["code"], "unauthenticated");
    assert_eq!(hello_at(&default, 60, 30).await["err"]["code"], "unauthenticated");
    let strict = TestServer::start_with(|c| c.tokens.leeway_ms = 0).await;
    assert_eq!(hello_at(&strict, -2, -60).await["err"]["code"], "unauthenticated");
    assert_eq!(hello_at(&strict, 60, 2).await["err"]["code"], "unauthenticated");
    assert!(hello_at(&strict, 60, -1).await.get("ok").is_some());
}

#[tokio::test]
async fn a_public_key_only_server_issues_no_tokens() {
    let server = TestServer::start_with(|c| {
        c.tokens.secret = None;
        c.tokens.public_key_pem = Some(key("ed25519-public.pem"));
    })
    .await;
    // Without a secret the server issues no tokens, and says why.
    let (status, body) = server.http("POST", "/v1/tokens", Some(json!({"workspace": "w", "user": "x"}))).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "forbidden", "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("--jwt-secret"), "{body}");
}
