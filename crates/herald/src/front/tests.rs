//! The front's deadlines and caps on real loopback sockets, with short
//! timeouts: what a client sees (an answer, or the socket closed) and when.

use std::net::SocketAddr;
use std::time::Duration;

use axum::routing::{get, post};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::*;
use crate::timers::Timers;

fn settings() -> FrontSettings {
    FrontSettings {
        header_timeout_ms: 300,
        body_timeout_ms: 300,
        body_min_rate: 1024,
        keepalive_timeout_ms: 400,
        max_pending_requests: 1_000,
        max_pending_requests_per_ip: 0,
    }
}

/// A front serving `/hi` and `POST /echo` (which reads the whole body) with `s`.
async fn start(s: FrontSettings) -> (Arc<Front>, SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new()
        .route("/hi", get(|| async { "hi" }))
        .route("/echo", post(|body: axum::body::Bytes| async move { body.len().to_string() }));
    let front = Front::new(s, Timers::new());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let f = front.clone();
    tokio::spawn(async move {
        f.serve(listener, app, async move {
            let _ = stopped.await;
        })
        .await
    });
    (front, addr, stop)
}

/// Reads until the server closes the socket; how long that took, at most `within`.
async fn closed_within(s: &mut TcpStream, within: Duration) -> Option<Duration> {
    let start = std::time::Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at(
            tokio::time::Instant::now() + within - start.elapsed().min(within),
            s.read(&mut buf),
        )
        .await
        {
            Ok(Ok(0)) | Ok(Err(_)) => return Some(start.elapsed()),
            Ok(Ok(_)) => continue,
            Err(_) => return None,
        }
    }
}

/// Sends `GET /hi` and reads its answer; the socket stays open (keep-alive).
async fn get_hi(s: &mut TcpStream) -> String {
    s.write_all(b"GET /hi HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = s.read(&mut buf).await.unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[tokio::test]
async fn silent_half_sent_and_idle_sockets_are_closed_at_their_deadlines() {
    let (front, addr, _stop) = start(settings()).await;
    let mut silent = TcpStream::connect(addr).await.unwrap();
    let mut half = TcpStream::connect(addr).await.unwrap();
    half.write_all(b"GET /hi HTTP/1.1\r\nhost: x\r\n").await.unwrap();
    let mut idle = TcpStream::connect(addr).await.unwrap();
    assert!(get_hi(&mut idle).await.ends_with("hi"));
    let idle_since = std::time::Instant::now();
    let took = closed_within(&mut silent, Duration::from_secs(3)).await.expect("a silent socket is closed");
    assert!(took >= Duration::from_millis(250), "not before its header timeout: {took:?}");
    closed_within(&mut half, Duration::from_secs(3)).await.expect("half-sent headers are closed");
    closed_within(&mut idle, Duration::from_secs(3)).await.expect("an idle kept-alive socket is closed");
    let took = idle_since.elapsed();
    assert!(took >= Duration::from_millis(350), "after its keep-alive time: {took:?}");
    for _ in 0..100 {
        if front.waiting() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(front.waiting(), 0);
}

#[tokio::test]
async fn a_kept_alive_socket_that_keeps_asking_stays_open() {
    let (_front, addr, _stop) = start(settings()).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    // Six requests 200 ms apart: 1.2 s, three times the keep-alive time, each gap within it.
    for _ in 0..6 {
        assert!(get_hi(&mut s).await.ends_with("hi"));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(get_hi(&mut s).await.ends_with("hi"));
}

#[tokio::test]
async fn a_trickled_body_is_closed_and_one_at_the_rate_is_served() {
    let (_front, addr, _stop) = start(settings()).await;
    // 4,000 bytes announced, 10 a second: far below 1 KiB/s.
    let mut slow = TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 4000\r\n\r\n").await.unwrap();
    let trickle = async {
        for _ in 0..30 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if slow.write_all(&[b'a'; 1]).await.is_err() {
                return;
            }
        }
    };
    let (_, ()) = tokio::join!(tokio::time::sleep(Duration::from_millis(10)), trickle);
    assert!(closed_within(&mut slow, Duration::from_secs(1)).await.is_some(), "the trickle was cut");
    // 4,000 bytes over 1.2 s in 400-byte steps: slower than 300 ms in all, but at 3 KiB/s.
    let mut steady = TcpStream::connect(addr).await.unwrap();
    steady.write_all(b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 4000\r\n\r\n").await.unwrap();
    for _ in 0..10 {
        steady.write_all(&[b'a'; 400]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(120)).await;
    }
    let mut buf = vec![0u8; 4096];
    let n = steady.read(&mut buf).await.unwrap();
    let answer = String::from_utf8_lossy(&buf[..n]);
    assert!(answer.starts_with("HTTP/1.1 200") && answer.ends_with("4000"), "{answer}");
}

#[tokio::test]
async fn past_the_cap_per_address_the_oldest_waiting_socket_is_closed_first() {
    let s = FrontSettings { max_pending_requests_per_ip: 3, header_timeout_ms: 30_000, ..settings() };
    let (front, addr, _stop) = start(s).await;
    let mut first = TcpStream::connect(addr).await.unwrap();
    let mut others = Vec::new();
    for _ in 0..3 {
        others.push(TcpStream::connect(addr).await.unwrap());
    }
    assert!(closed_within(&mut first, Duration::from_secs(2)).await.is_some(), "the oldest went");
    let mut second = others.remove(0);
    let mut newest = TcpStream::connect(addr).await.unwrap();
    assert!(closed_within(&mut second, Duration::from_secs(2)).await.is_some(), "then the next oldest");
    assert!(get_hi(&mut newest).await.ends_with("hi"), "the newest is served");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(front.waiting() <= 3);
}

#[tokio::test]
async fn out_of_files_sheds_the_oldest_waiting_sockets() {
    let (front, addr, _stop) = start(FrontSettings { header_timeout_ms: 30_000, ..settings() }).await;
    let mut old = Vec::new();
    for _ in 0..20 {
        old.push(TcpStream::connect(addr).await.unwrap());
    }
    let mut young = TcpStream::connect(addr).await.unwrap();
    for _ in 0..100 {
        if front.waiting() == 21 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let emfile = std::io::Error::from_raw_os_error(EMFILE);
    front.accept_failed(&emfile).await;
    for s in old.iter_mut().take(SHED_BATCH) {
        assert!(closed_within(s, Duration::from_secs(2)).await.is_some(), "the oldest are shed");
    }
    assert!(get_hi(&mut young).await.ends_with("hi"), "the youngest is kept");
}

#[tokio::test]
async fn past_the_cap_per_node_the_oldest_waiting_socket_is_closed_first() {
    let s = FrontSettings { max_pending_requests: 4, header_timeout_ms: 30_000, ..settings() };
    let (front, addr, _stop) = start(s).await;
    let mut oldest = TcpStream::connect(addr).await.unwrap();
    let mut waiting = Vec::new();
    for _ in 0..4 {
        waiting.push(TcpStream::connect(addr).await.unwrap());
    }
    assert!(closed_within(&mut oldest, Duration::from_secs(2)).await.is_some(), "the oldest went");
    // One more closes the next oldest; the newest is served.
    let mut fifth = TcpStream::connect(addr).await.unwrap();
    assert!(closed_within(&mut waiting[0], Duration::from_secs(2)).await.is_some());
    assert!(get_hi(&mut fifth).await.ends_with("hi"));
    for _ in 0..100 {
        if front.waiting() <= 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(front.waiting() <= 4, "{}", front.waiting());
}
