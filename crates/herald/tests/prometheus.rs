//! The monitoring configs in `deploy/`: Debian's `prometheus`, started with
//! `deploy/prometheus.yml`, scrapes a herald on a PostgreSQL shard while
//! clients use it, and every query of every panel of
//! `deploy/grafana-dashboard.json` must be valid and return data.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::pg::{PgCluster, create_database};
use common::*;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const DEPLOY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy");

/// Every panel's queries, with the panel's title.
fn dashboard_queries() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(format!("{DEPLOY}/grafana-dashboard.json")).unwrap();
    let dash: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    assert_eq!(dash["uid"], "herald-overview");
    let mut queries = Vec::new();
    for panel in dash["panels"].as_array().expect("panels") {
        let title = panel["title"].as_str().expect("a panel has a title").to_string();
        let targets = panel["targets"].as_array().unwrap_or_else(|| panic!("{title}: no targets"));
        assert!(!targets.is_empty(), "{title}: no targets");
        for t in targets {
            assert_eq!(t["datasource"]["uid"], "${DS_PROMETHEUS}", "{title}: the datasource is the input");
            assert!(t["refId"].is_string(), "{title}: a target without refId");
            queries.push((title.clone(), t["expr"].as_str().unwrap_or_else(|| panic!("{title}: no expr")).into()));
        }
    }
    assert!(queries.len() >= 10, "{queries:?}");
    queries
}

/// Prometheus started on `config`, stopped by pid when dropped.
struct Prometheus {
    child: std::process::Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    fn start(config: &str) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("prometheus.yml");
        std::fs::write(&file, config).unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let child = std::process::Command::new("prometheus")
            .arg(format!("--config.file={}", file.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start prometheus (apt-get install prometheus)");
        Prometheus { child, addr, _dir: dir }
    }

    /// The `data.result` of an instant query (panics if the query is not valid).
    async fn query(&self, expr: &str) -> Vec<Value> {
        let path = format!("/api/v1/query?query={}", urlencode(expr));
        let (status, body) = http(self.addr, "GET", &path, None, None).await;
        assert_eq!(status, 200, "{expr}: {body}");
        assert_eq!(body["status"], "success", "{expr}: {body}");
        body["data"]["result"].as_array().cloned().unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Whether a result has a sample with a real number (not NaN).
fn has_number(result: &[Value]) -> bool {
    result.iter().any(|r| r["value"][1].as_str().and_then(|v| v.parse::<f64>().ok()).is_some_and(|v| !v.is_nan()))
}

#[tokio::test]
#[ignore = "needs prometheus and PostgreSQL (Debian packages); scripts/test.sh runs it"]
async fn every_dashboard_panel_queries_prometheus_scraping_herald() {
    let queries = dashboard_queries();
    let pg = PgCluster::start();
    let shard = create_database(&pg.admin_url).await;
    let server = TestServer::start_with(|c| {
        c.store.stores = vec![shard];
        c.gateway.limits.allowed_origins = vec!["https://app.example.com".into()];
    })
    .await;

    // Traffic for every panel: hellos, joins, watches, sends (pushes and
    // stored events), a refused token (close 4001), a refused origin.
    let mut alice = server.client("w", "alice").await;
    alice.ok(json!({"op": "join", "chat": "c"})).await;
    alice.ok(json!({"op": "watch", "chat": "c"})).await;
    let mut bob = server.client("w", "bob").await;
    bob.ok(json!({"op": "join", "chat": "c"})).await;
    let mut bad = Client::connect(&server.ws_url("w")).await;
    bad.request(json!({"op": "hello", "token": "not.a.token"})).await;
    assert_eq!(bad.closed_with().await, 4001);
    let mut s = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let req = "GET /v1/ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
               Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
               Origin: https://evil.example.com\r\n\r\n";
    s.write_all(req.as_bytes()).await.unwrap();
    let mut head = [0u8; 12];
    s.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 403");

    let config = std::fs::read_to_string(format!("{DEPLOY}/prometheus.yml"))
        .unwrap()
        .replace("'127.0.0.1:8080'", &format!("'{}'", server.addr))
        .replace("scrape_interval: 15s", "scrape_interval: 1s");
    assert!(config.contains(&server.addr.to_string()), "the target line of deploy/prometheus.yml moved");
    let prometheus = Prometheus::start(&config);

    // Sends keep coming while Prometheus scrapes, so rates and quantiles have data.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut pending = queries.clone();
    let mut n = 0;
    while !pending.is_empty() {
        assert!(Instant::now() < deadline, "panels without data after 60 s: {pending:#?}");
        // A send refused under load (a busy machine) is fine: only traffic matters here.
        for _ in 0..5 {
            n += 1;
            bob.request(json!({"op": "send", "chat": "c", "body": {"n": n}})).await;
        }
        while alice.push_within(Duration::from_millis(1)).await.is_some() {}
        // Prometheus answers 503 until it has loaded its storage (slow on a busy machine).
        if try_http(prometheus.addr, "GET", "/-/ready", None, Duration::from_secs(1)).await.map(|(s, _)| s) != Some(200)
        {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        let mut still = Vec::new();
        for (title, expr) in pending {
            if !has_number(&prometheus.query(&expr).await) {
                still.push((title, expr));
            }
        }
        pending = still;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // The scrape saw this node's shard breaker closed, under the shard's name.
    let breakers = prometheus.query("herald_store_shard_breaker").await;
    assert_eq!(breakers.len(), 1, "{breakers:?}");
    assert_eq!(breakers[0]["value"][1], "0");
}
