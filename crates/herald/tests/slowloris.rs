//! Sockets that never finish a request, as an attacker holds them: the real
//! binary, with its open-file limit lowered, under more such sockets from one
//! address than it has files (silent ones, half-sent headers, kept-alive and
//! idle, each re-opened as soon as herald closes it), keeps serving a real
//! client; and a body over the limit is answered, not reset.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::*;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// herald's open-file limit in this test.
const FILES: u64 = 256;
/// Attack sockets held at once: well past the limit.
const ATTACK: usize = 420;
/// How long the attack lasts.
const ATTACK_FOR: Duration = Duration::from_secs(14);
/// herald's header, body and keep-alive deadlines in this test.
const TIMEOUT_MS: &str = "2000";

#[derive(Clone, Copy)]
enum Kind {
    /// Connects and sends nothing.
    Silent,
    /// Sends a request line and some headers, then a header byte now and then, never the end.
    HalfHeaders,
    /// Sends one whole request, reads its answer, then idles.
    IdleKeepAlive,
}

/// One attack socket's life: connect, do its kind's thing until herald
/// closes it, and again, until `stop`. Counts the closes it saw.
async fn attacker(addr: SocketAddr, kind: Kind, stop: Arc<AtomicBool>, closed: Arc<AtomicUsize>) {
    while !stop.load(Ordering::Relaxed) {
        let Ok(Ok(mut s)) = tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(addr)).await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        match kind {
            Kind::Silent => {}
            Kind::HalfHeaders => {
                let _ = s.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-a: ").await;
            }
            Kind::IdleKeepAlive => {
                if s.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n").await.is_err() {
                    continue;
                }
            }
        }
        // Read (and for half headers, dribble) until herald closes it.
        let mut buf = [0u8; 1024];
        loop {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            match tokio::time::timeout(Duration::from_millis(500), s.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => {
                    closed.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                Ok(Ok(_)) => {}
                Err(_) => {
                    if matches!(kind, Kind::HalfHeaders) && s.write_all(b"a").await.is_err() {
                        closed.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                }
            }
        }
    }
}

/// A real client: connects, says hello, joins and sends; how long that took, or why it failed.
async fn real_client(addr: SocketAddr, token: &str, n: usize) -> Result<(Duration, u64), String> {
    let start = Instant::now();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut c = Client::try_connect(&format!("ws://{addr}/v1/ws?ws=w"), Duration::from_secs(5)).await?;
    let mut ask = async |req: serde_json::Value| -> Result<serde_json::Value, String> {
        let id = c.try_send(req.clone()).await?;
        match c.reply_before(id, deadline).await {
            Ok(Some(r)) if r.get("ok").is_some() => Ok(r["ok"].clone()),
            Ok(Some(r)) => Err(format!("{req}: {r}")),
            Ok(None) => Err(format!("{req}: no answer within 5 s")),
            Err(closed) => Err(format!("{req}: closed {closed:?}")),
        }
    };
    ask(json!({"op": "hello", "token": token})).await?;
    ask(json!({"op": "join", "chat": "c"})).await?;
    let ok = ask(json!({"op": "send", "chat": "c", "body": {"n": n}, "client_id": format!("real-{n}")})).await?;
    let seq = ok["seq"].as_u64().ok_or("no seq")?;
    Ok((start.elapsed(), seq))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_client_is_served_throughout_an_attack_of_more_sockets_than_files() {
    let data = data_dir();
    let env = [
        ("HERALD_HEADER_TIMEOUT_MS", TIMEOUT_MS),
        ("HERALD_BODY_TIMEOUT_MS", TIMEOUT_MS),
        ("HERALD_KEEPALIVE_TIMEOUT_MS", TIMEOUT_MS),
    ];
    let server = BinServer::start_with_files(data.path(), &[], &env, Some(FILES));
    server.wait_ready().await;
    let addr = server.addr;
    let token = token_at(addr, "w", "real").await;

    let stop = Arc::new(AtomicBool::new(false));
    let closed = Arc::new(AtomicUsize::new(0));
    let mut attackers = Vec::new();
    for i in 0..ATTACK {
        let kind = [Kind::Silent, Kind::HalfHeaders, Kind::IdleKeepAlive][i % 3];
        attackers.push(tokio::spawn(attacker(addr, kind, stop.clone(), closed.clone())));
    }
    let started = Instant::now();
    // The first deadline passes (2 s) before the real client is timed: until
    // then the node may be full of sockets it has no reason yet to close.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let mut acked = Vec::new();
    let mut times = Vec::new();
    let mut n = 0;
    while started.elapsed() < ATTACK_FOR {
        n += 1;
        match real_client(addr, &token, n).await {
            Ok((took, seq)) => {
                times.push(took);
                acked.push((n, seq));
            }
            Err(why) => {
                panic!("a real client was not served within 5 s, {:?} into the attack: {why}", started.elapsed())
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let closed_by_herald = closed.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    for a in attackers {
        let _ = a.await;
    }
    times.sort();
    eprintln!(
        "real clients: {} served, median {:?}, slowest {:?}; attack sockets closed by herald: {closed_by_herald}",
        times.len(),
        times[times.len() / 2],
        times[times.len() - 1]
    );
    assert!(times.len() >= 10, "real clients were served all along: {}", times.len());
    // Every attack socket outlived its deadline at least once: herald closed them, over and over.
    assert!(closed_by_herald >= ATTACK, "herald closed {closed_by_herald} attack sockets");

    let metrics = http(addr, "GET", "/metrics", None, None).await.1;
    let text = metrics.as_str().unwrap_or_default().to_string();
    let timed_out = metric(&text, "herald_http_closed_total");
    let shed = metric(&text, "herald_http_shed_total");
    assert!(timed_out + shed >= closed_by_herald as f64 * 0.9, "closes are counted: {timed_out} + {shed}");
    assert!(metric(&text, "herald_accept_failures_total") > 0.0, "the attack did exhaust the files");

    // Nothing acknowledged was lost.
    let (_, page) = http(addr, "GET", "/v1/workspaces/w/chats/c/events?limit=500", Some(API_KEY), None).await;
    let stored: std::collections::HashMap<String, u64> = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| Some((e["client_id"].as_str()?.to_string(), e["seq"].as_u64()?)))
        .collect();
    for (n, seq) in acked {
        assert_eq!(stored.get(&format!("real-{n}")), Some(&seq), "acked send {n} is stored at its seq");
    }
}

#[tokio::test]
async fn a_body_over_the_limit_is_answered_413_with_the_json_error_not_a_reset() {
    let server = TestServer::start().await;
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    let total = 50 * 1024 * 1024;
    let head = format!(
        "POST /v1/workspaces/w/chats/c/events HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {API_KEY}\r\n\
         content-type: application/json\r\ncontent-length: {total}\r\n\r\n"
    );
    s.write_all(head.as_bytes()).await.unwrap();
    // The whole body first, then the answer, as some clients (Python's
    // http.client) do: herald must neither reset the socket while the body
    // comes nor lose its answer.
    let body = vec![b' '; total];
    let sent = tokio::time::timeout(WAIT, s.write_all(&body)).await.expect("the body is taken in time");
    assert!(sent.is_ok(), "the socket was reset while the body was sent: {sent:?}");
    let mut answer = Vec::new();
    let read = tokio::time::timeout(WAIT, s.read_to_end(&mut answer)).await.expect("an answer in time");
    let text = String::from_utf8_lossy(&answer);
    assert!(read.is_ok(), "read failed after {text:?}: {read:?}");
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    assert!(text.contains("\"code\":\"too_large\""), "{text}");
}
