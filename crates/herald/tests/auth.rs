//! `hello`: tokens, forgeries, and what happens before a valid hello.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use serde_json::{Value, json};

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

fn b64(bytes: &[u8]) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |acc, (i, &c)| acc | (c as u32) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

/// HMAC-SHA256, written out so the test does not share the server's JWT library.
fn hmac_sha256(key: &[u8], msg: &[u8]) -> [u8; 32] {
    fn sha256(data: &[u8]) -> [u8; 32] {
        const K: [u32; 64] = [
            0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
            0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
            0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
            0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
            0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
            0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
            0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
            0xc67178f2,
        ];
        let mut h: [u32; 8] =
            [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19];
        let mut m = data.to_vec();
        m.push(0x80);
        while m.len() % 64 != 56 {
            m.push(0);
        }
        m.extend_from_slice(&((data.len() as u64) * 8).to_be_bytes());
        for block in m.chunks(64) {
            let mut w = [0u32; 64];
            for i in 0..16 {
                w[i] = u32::from_be_bytes(block[i * 4..i * 4 + 4].try_into().unwrap());
            }
            for i in 16..64 {
                let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
                let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
                w[i] = w[i - 16].wrapping_add(s0).wrapping_add(w[i - 7]).wrapping_add(s1);
            }
            let mut v = h;
            for i in 0..64 {
                let s1 = v[4].rotate_right(6) ^ v[4].rotate_right(11) ^ v[4].rotate_right(25);
                let ch = (v[4] & v[5]) ^ (!v[4] & v[6]);
                let t1 = v[7].wrapping_add(s1).wrapping_add(ch).wrapping_add(K[i]).wrapping_add(w[i]);
                let s0 = v[0].rotate_right(2) ^ v[0].rotate_right(13) ^ v[0].rotate_right(22);
                let maj = (v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]);
                let t2 = s0.wrapping_add(maj);
                v = [t1.wrapping_add(t2), v[0], v[1], v[2], v[3].wrapping_add(t1), v[4], v[5], v[6]];
            }
            for i in 0..8 {
                h[i] = h[i].wrapping_add(v[i]);
            }
        }
        let mut out = [0u8; 32];
        for i in 0..8 {
            out[i * 4..i * 4 + 4].copy_from_slice(&h[i].to_be_bytes());
        }
        out
    }
    let mut k = [0u8; 64];
    k[..key.len()].copy_from_slice(key);
    let ipad: Vec<u8> = k.iter().map(|b| b ^ 0x36).chain(msg.iter().copied()).collect();
    let inner = sha256(&ipad);
    let opad: Vec<u8> = k.iter().map(|b| b ^ 0x5c).chain(inner.iter().copied()).collect();
    sha256(&opad)
}

fn jwt(header: Value, claims: Value, secret: &str) -> String {
    let signing = format!("{}.{}", b64(header.to_string().as_bytes()), b64(claims.to_string().as_bytes()));
    let sig = hmac_sha256(secret.as_bytes(), signing.as_bytes());
    format!("{signing}.{}", b64(&sig))
}

async fn hello_with(s: &TestServer, token: &str) -> (Value, u16) {
    let mut c = Client::connect(&s.ws_url("w")).await;
    let r = c.request(json!({"op": "hello", "token": token})).await;
    if r.get("ok").is_some() {
        return (r, 0);
    }
    let code = c.closed_with().await;
    (r, code)
}

#[tokio::test]
async fn a_hand_signed_token_is_accepted() {
    let s = TestServer::start().await;
    let t = jwt(json!({"alg": "HS256", "typ": "JWT"}), json!({"sub": "alice", "ws": "w", "exp": now() + 60}), SECRET);
    let (r, _) = hello_with(&s, &t).await;
    assert_eq!(r["ok"]["user"], "alice");
}

#[tokio::test]
async fn forgeries_are_refused_with_4001() {
    let s = TestServer::start().await;
    let hs = json!({"alg": "HS256", "typ": "JWT"});
    let good = json!({"sub": "alice", "ws": "w", "exp": now() + 60});
    let cases = vec![
        ("wrong secret", jwt(hs.clone(), good.clone(), "not-the-secret")),
        ("alg none", format!("{}.{}.", b64(br#"{"alg":"none","typ":"JWT"}"#), b64(good.to_string().as_bytes()))),
        ("alg HS512 header", jwt(json!({"alg": "HS512", "typ": "JWT"}), good.clone(), SECRET)),
        // Past the default leeway on exp (5 s).
        ("expired", jwt(hs.clone(), json!({"sub": "alice", "ws": "w", "exp": now() - 30}), SECRET)),
        (
            "not yet valid",
            jwt(hs.clone(), json!({"sub": "alice", "ws": "w", "exp": now() + 60, "nbf": now() + 30}), SECRET),
        ),
        (
            "issued in the future",
            jwt(hs.clone(), json!({"sub": "alice", "ws": "w", "exp": now() + 7200, "iat": now() + 3600}), SECRET),
        ),
        ("no sub", jwt(hs.clone(), json!({"ws": "w", "exp": now() + 60}), SECRET)),
        ("no ws", jwt(hs.clone(), json!({"sub": "alice", "exp": now() + 60}), SECRET)),
        ("no exp", jwt(hs.clone(), json!({"sub": "alice", "ws": "w"}), SECRET)),
        ("tampered payload", {
            let t = jwt(hs.clone(), good.clone(), SECRET);
            let parts: Vec<&str> = t.split('.').collect();
            let evil = b64(json!({"sub": "root", "ws": "w", "exp": now() + 60}).to_string().as_bytes());
            format!("{}.{}.{}", parts[0], evil, parts[2])
        }),
        ("garbage", "not.a.token".to_string()),
    ];
    for (name, token) in cases {
        let (r, code) = hello_with(&s, &token).await;
        assert_eq!(r["err"]["code"], "unauthenticated", "{name}: {r}");
        assert_eq!(code, 4001, "{name}");
    }
}

#[tokio::test]
async fn anything_before_hello_is_refused_with_4001() {
    let s = TestServer::start().await;
    let mut c = Client::connect(&s.ws_url("w")).await;
    c.err(json!({"op": "join", "chat": "c"}), "unauthenticated").await;
    assert_eq!(c.closed_with().await, 4001);
    let mut c = Client::connect(&s.ws_url("w")).await;
    c.send_text("garbage").await;
    assert_eq!(c.closed_with().await, 4001);
}

#[tokio::test]
async fn no_hello_in_time_is_closed_with_4001() {
    let s = TestServer::start_with(|c| c.gateway.hello_timeout_ms = 300).await;
    let mut c = Client::connect(&s.ws_url("w")).await;
    let started = std::time::Instant::now();
    assert_eq!(c.closed_with().await, 4001);
    assert!(started.elapsed() >= Duration::from_millis(250));
}

#[tokio::test]
async fn the_server_pings_and_closes_silent_connections() {
    let s = TestServer::start_with(|c| {
        c.gateway.heartbeat_ms = 200;
        c.gateway.idle_timeout_ms = 700;
    })
    .await;
    let mut c = s.client("w", "alice").await;
    // tokio-tungstenite answers pings while we read, so this connection stays alive...
    assert!(c.push_within(Duration::from_millis(1200)).await.is_none());
    assert!(c.closed.is_none(), "a client that answers pings stays open");
    c.ok(json!({"op": "ping"})).await;
    // ...and one that reads nothing (so answers nothing) is closed.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let code = c.closed_with().await;
    assert!(code == 1001 || code == 1006, "{code}");
}

#[tokio::test]
async fn a_refused_token_is_told_why_in_plain_words() {
    let s = TestServer::start().await;
    let hs = json!({"alg": "HS256", "typ": "JWT"});
    let good = jwt(hs.clone(), json!({"sub": "alice", "ws": "w", "exp": now() + 60}), SECRET);
    let expired_at = now() - 30;
    let cases = vec![
        // The whole answer of POST /v1/tokens instead of its "token" field.
        ("the JSON answer", json!({"token": good}).to_string(), "pass the \"token\" field"),
        ("a Bearer header", format!("Bearer {good}"), "drop the \"Bearer \" prefix"),
        ("two parts", "abc.def".to_string(), "three base64url parts"),
        ("empty", String::new(), "the token is empty"),
        ("expired", jwt(hs.clone(), json!({"sub": "alice", "ws": "w", "exp": expired_at}), SECRET), "expired at 20"),
        ("another secret", jwt(hs.clone(), json!({"sub": "alice", "ws": "w", "exp": now() + 60}), "nope"), "signature"),
        ("no ws", jwt(hs.clone(), json!({"sub": "alice", "exp": now() + 60}), SECRET), "\"ws\""),
        (
            "HS512",
            jwt(json!({"alg": "HS512"}), json!({"sub": "a", "ws": "w", "exp": now() + 60}), SECRET),
            "accepts HS256",
        ),
    ];
    for (name, token, says) in cases {
        let (r, code) = hello_with(&s, &token).await;
        assert_eq!((r["err"]["code"].as_str(), code), (Some("unauthenticated"), 4001), "{name}: {r}");
        let message = r["err"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{name}: {message:?} does not say {says:?}");
        // The library's own names of its internals stay out of it.
        assert!(!message.contains("InvalidToken") && !message.contains("Base64 error"), "{name}: {message:?}");
    }
    // The workspace of an expired token, and of one opened on another `?ws=`.
    let expired = jwt(hs.clone(), json!({"sub": "alice", "ws": "w", "exp": expired_at}), SECRET);
    let (r, _) = hello_with(&s, &expired).await;
    assert!(r["err"]["message"].as_str().unwrap().contains("workspace w"), "{r}");
    let mut c = Client::connect(&s.ws_url("other")).await;
    let r = c.request(json!({"op": "hello", "token": good})).await;
    let message = r["err"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("workspace w") && message.contains("?ws=other"), "{message:?}");
}
