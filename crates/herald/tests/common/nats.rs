//! A real NATS cluster of three servers (Debian's nats-server) on free
//! loopback ports, each restartable, all killed when dropped. Started with
//! flags, or from config files a test renders (`start_from_config`).

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::free_port;

pub struct NatsServer {
    pub port: u16,
    cluster_port: u16,
    pub monitor_port: u16,
    routes: String,
    log: std::path::PathBuf,
    /// Started with `-c` this file instead of flags.
    conf: Option<std::path::PathBuf>,
    child: Option<Child>,
}

/// One server's ports, and the cluster ports of all three (its own among
/// them), for rendering its config file.
pub struct NatsPorts {
    pub client: u16,
    pub cluster: u16,
    pub monitor: u16,
    pub cluster_ports: Vec<u16>,
}

/// Makes a server's config file text from its ports.
type Render = Arc<dyn Fn(&NatsPorts) -> String + Send + Sync>;

pub struct NatsCluster {
    pub servers: Vec<NatsServer>,
    _logs: tempfile::TempDir,
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
        let mut cmd = Command::new(binary());
        match &self.conf {
            Some(conf) => {
                cmd.arg("-c").arg(conf);
            }
            None => {
                cmd.args(["-a", "127.0.0.1", "-p", &self.port.to_string(), "-m", &self.monitor_port.to_string()])
                    .args(["--cluster_name", "herald", "--cluster", &format!("nats://127.0.0.1:{}", self.cluster_port)])
                    .args(["--routes", &self.routes]);
            }
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(std::fs::OpenOptions::new().create(true).append(true).open(&self.log).expect("nats log"))
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
    /// Starts three routed servers. A cluster that has not formed in 15 s is
    /// stopped and started again on fresh ports (at most three tries); the
    /// servers' own logs are printed when it never forms.
    pub async fn start() -> NatsCluster {
        Self::start_with(None).await
    }

    /// [`NatsCluster::start`] with each server started from the config file
    /// `render` makes from its ports.
    pub async fn start_from_config(render: impl Fn(&NatsPorts) -> String + Send + Sync + 'static) -> NatsCluster {
        Self::start_with(Some(Arc::new(render))).await
    }

    async fn start_with(render: Option<Render>) -> NatsCluster {
        let mut logs = String::new();
        for attempt in 1..=3 {
            let c = NatsCluster::spawn(render.as_ref());
            if c.wait_routed(Duration::from_secs(15)).await {
                return c;
            }
            for (i, s) in c.servers.iter().enumerate() {
                let text = std::fs::read_to_string(&s.log).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(20).collect();
                logs.push_str(&format!("--- try {attempt}, server {i} (port {}):\n", s.port));
                for line in tail.into_iter().rev() {
                    logs.push_str(line);
                    logs.push('\n');
                }
            }
            eprintln!("NATS cluster did not form on try {attempt}; starting it again on fresh ports");
        }
        panic!("NATS cluster did not form in three tries; server logs:\n{logs}");
    }

    fn spawn(render: Option<&Render>) -> NatsCluster {
        let logs = tempfile::tempdir().expect("tempdir");
        let ports: Vec<(u16, u16, u16)> = (0..3).map(|_| (free_port(), free_port(), free_port())).collect();
        let cluster_ports: Vec<u16> = ports.iter().map(|p| p.1).collect();
        let mut servers: Vec<NatsServer> = ports
            .iter()
            .enumerate()
            .map(|(i, &(port, cluster_port, monitor_port))| NatsServer {
                port,
                cluster_port,
                monitor_port,
                routes: ports
                    .iter()
                    .filter(|p| p.1 != cluster_port)
                    .map(|p| format!("nats://127.0.0.1:{}", p.1))
                    .collect::<Vec<_>>()
                    .join(","),
                log: logs.path().join(format!("nats-{i}.log")),
                conf: render.map(|render| {
                    let path = logs.path().join(format!("nats-{i}.conf"));
                    let ports = NatsPorts {
                        client: port,
                        cluster: cluster_port,
                        monitor: monitor_port,
                        cluster_ports: cluster_ports.clone(),
                    };
                    std::fs::write(&path, render(&ports)).expect("write a NATS config");
                    path
                }),
                child: None,
            })
            .collect();
        for s in &mut servers {
            s.spawn();
        }
        NatsCluster { servers, _logs: logs }
    }

    /// Waits until every server routes to both others (after a restart, say).
    pub async fn wait_formed(&self) {
        assert!(self.wait_routed(Duration::from_secs(20)).await, "NATS cluster did not form again");
    }

    /// Whether every server routes to both others within `within` (no panic when not).
    pub async fn formed_within(&self, within: Duration) -> bool {
        self.wait_routed(within).await
    }

    async fn wait_routed(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        loop {
            let mut all = true;
            for s in &self.servers {
                all &= s.routes().await >= 2;
            }
            if all {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
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
