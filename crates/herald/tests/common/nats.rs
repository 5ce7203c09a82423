//! A real NATS cluster of three servers (Debian's nats-server) on free
//! loopback ports, each restartable, all killed when dropped.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::free_port;

pub struct NatsServer {
    pub port: u16,
    cluster_port: u16,
    monitor_port: u16,
    routes: String,
    child: Option<Child>,
}

pub struct NatsCluster {
    pub servers: Vec<NatsServer>,
}

fn binary() -> &'static str {
    for p in ["/usr/sbin/nats-server", "/usr/bin/nats-server"] {
        if std::path::Path::new(p).exists() {
            return p;
        }
    }
    panic!("nats-server not found: apt-get install nats-server (scripts/test.sh does)")
}

impl NatsServer {
    fn spawn(&mut self) {
        let child = Command::new(binary())
            .args(["-a", "127.0.0.1", "-p", &self.port.to_string(), "-m", &self.monitor_port.to_string()])
            .args(["--cluster_name", "herald", "--cluster", &format!("nats://127.0.0.1:{}", self.cluster_port)])
            .args(["--routes", &self.routes])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nats-server");
        self.child = Some(child);
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Routes this server has to the others.
    async fn routes(&self) -> usize {
        let addr: std::net::SocketAddr = format!("127.0.0.1:{}", self.monitor_port).parse().unwrap();
        if tokio::net::TcpStream::connect(addr).await.is_err() {
            return 0;
        }
        match tokio::time::timeout(Duration::from_secs(1), super::http(addr, "GET", "/routez", None, None)).await {
            Ok((200, v)) => v["num_routes"].as_u64().unwrap_or(0) as usize,
            _ => 0,
        }
    }
}

impl NatsCluster {
    pub async fn start() -> NatsCluster {
        let ports: Vec<(u16, u16, u16)> = (0..3).map(|_| (free_port(), free_port(), free_port())).collect();
        let mut servers: Vec<NatsServer> = ports
            .iter()
            .map(|&(port, cluster_port, monitor_port)| NatsServer {
                port,
                cluster_port,
                monitor_port,
                routes: ports
                    .iter()
                    .filter(|p| p.1 != cluster_port)
                    .map(|p| format!("nats://127.0.0.1:{}", p.1))
                    .collect::<Vec<_>>()
                    .join(","),
                child: None,
            })
            .collect();
        for s in &mut servers {
            s.spawn();
        }
        let c = NatsCluster { servers };
        c.wait_routed().await;
        c
    }

    /// Waits until every server routes to both others.
    pub async fn wait_routed(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let mut all = true;
            for s in &self.servers {
                all &= s.routes().await >= 2;
            }
            if all {
                return;
            }
            assert!(Instant::now() < deadline, "NATS cluster did not form");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().map(NatsServer::url).collect()
    }
}

impl Drop for NatsCluster {
    fn drop(&mut self) {
        for s in &mut self.servers {
            s.kill();
        }
    }
}
