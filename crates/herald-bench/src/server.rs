//! The server under test: either a `herald` this bench starts for a run (free
//! port, temp data dir, secrets through env, stopped by pid at the end), or
//! one already running that the user names by pid and URL. Either way it
//! answers the same questions: where to connect, its RSS, its open
//! connections, a chat's view through the HTTP API.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use herald_protocol::reply::ChatView;
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};

use crate::http;
use crate::machine::rss_kib;

/// Time a started server gets to print that it listens.
const START_TIMEOUT: Duration = Duration::from_secs(15);
/// Time a server gets to exit on SIGTERM before it is killed: its drain
/// window (10 s by default) plus slack, since its clients are already gone.
const STOP_TIMEOUT: Duration = Duration::from_secs(20);
/// Warning and error lines of the server's log kept for the report.
const KEPT_LOG_LINES: usize = 8;
/// What a started server prints once it listens; `main.rs` of herald.
const LISTENING: &str = "herald listening on ";
/// The request rate and burst of [`raised_limits`]: far above what one
/// connection can do waiting for each ack, so the limiter is not what is measured.
const RAISED_RATE: u32 = 100_000;
/// A free loopback port, chosen by the kernel when the server binds.
const LOOPBACK_ANY: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 0);

/// Flags that raise a started server's per-connection request limits, for
/// scenarios whose clients send back to back.
pub fn raised_limits() -> Vec<String> {
    let r = RAISED_RATE.to_string();
    vec!["--rate".into(), r.clone(), "--burst".into(), r]
}

/// Which server a scenario measures.
#[derive(Debug, Clone, Args, Serialize)]
pub struct TargetArgs {
    /// The herald binary to start for each run [default: `herald` beside this binary].
    #[arg(long, conflicts_with = "pid")]
    pub server_bin: Option<PathBuf>,
    /// Measure an already running server with this pid (for its RSS); needs --url.
    #[arg(long, requires = "url")]
    pub pid: Option<u32>,
    /// The running server's base URL, e.g. ws://127.0.0.1:8080 (with --pid).
    #[arg(long, requires = "pid")]
    pub url: Option<String>,
    /// The JWT secret of a running server (a started one gets a random one).
    #[arg(long, env = "HERALD_JWT_SECRET", hide_env_values = true)]
    #[serde(skip)]
    pub jwt_secret: Option<String>,
    /// The api key of a running server, for checks through the HTTP API.
    #[arg(long, env = "HERALD_API_KEY", hide_env_values = true)]
    #[serde(skip)]
    pub api_key: Option<String>,
    /// An extra flag for a started server, e.g. --server-arg=--ws-read-buffer=4096 (repeatable).
    #[arg(long = "server-arg", allow_hyphen_values = true)]
    pub server_args: Vec<String>,
    /// The workspace every client belongs to.
    #[arg(long, default_value = "bench")]
    pub workspace: String,
    /// Start herald with its own hot-chat default instead of pinning it off
    /// (set by the `hot` scenario, not a flag).
    #[arg(skip)]
    pub hot_default: bool,
}

impl TargetArgs {
    /// Whether each run gets a server of its own.
    pub fn starts_server(&self) -> bool {
        self.pid.is_none()
    }
}

/// What a started server wrote at warn level or above.
#[derive(Debug, Default, Clone, Serialize)]
pub struct LogSummary {
    pub warnings: u64,
    pub errors: u64,
    /// The first few such lines, as printed.
    pub first: Vec<String>,
}

/// A started server's process and what it needs kept alive.
struct Started {
    child: Child,
    /// Removed when the server is stopped.
    _data: Option<tempfile::TempDir>,
    log: Arc<Mutex<LogSummary>>,
}

/// The server of one run.
pub struct Server {
    pub pid: u32,
    pub addr: SocketAddr,
    pub jwt_secret: String,
    pub api_key: Option<String>,
    started: Option<Started>,
}

impl Server {
    /// Starts a server (with `flags` added to its command line) or attaches to
    /// the running one `target` names.
    pub async fn open(target: &TargetArgs, flags: &[String]) -> anyhow::Result<Server> {
        match (target.pid, &target.url) {
            (Some(pid), Some(url)) => {
                let jwt_secret = target.jwt_secret.clone().context("a running server needs --jwt-secret")?;
                rss_kib(pid).with_context(|| format!("no process {pid}"))?;
                Ok(Server { pid, addr: parse_ws_url(url)?, jwt_secret, api_key: target.api_key.clone(), started: None })
            }
            _ => Server::open_at(target, flags, LOOPBACK_ANY).await,
        }
    }

    /// Starts a server listening on `listen` (a node restarted on the port it had), with a data
    /// directory of its own.
    pub async fn open_at(target: &TargetArgs, flags: &[String], listen: SocketAddr) -> anyhow::Result<Server> {
        let data = tempfile::TempDir::with_prefix("herald-bench-")?;
        Server::start(target, flags, listen, data.path().to_path_buf(), Some(data)).await
    }

    /// Starts a server on the data directory `data` (a store the scenario
    /// prepares and removes itself).
    pub async fn start_in(target: &TargetArgs, flags: &[String], data: &std::path::Path) -> anyhow::Result<Server> {
        Server::start(target, flags, LOOPBACK_ANY, data.to_path_buf(), None).await
    }

    async fn start(
        target: &TargetArgs,
        flags: &[String],
        listen: SocketAddr,
        data_path: PathBuf,
        data: Option<tempfile::TempDir>,
    ) -> anyhow::Result<Server> {
        let bin = match &target.server_bin {
            Some(b) => b.clone(),
            None => std::env::current_exe()?.with_file_name("herald"),
        };
        anyhow::ensure!(bin.exists(), "no server binary at {} (build it, or pass --server-bin)", bin.display());
        // A second node of a cluster gets the first one's secrets (fanout --nodes 2).
        let jwt_secret = target.jwt_secret.clone().unwrap_or_else(random_hex);
        let api_key = target.api_key.clone().unwrap_or_else(random_hex);
        let mut command = Command::new(&bin);
        command
            .args(["serve", "--listen", &listen.to_string(), "--data"])
            .arg(&data_path)
            .args(flags)
            .args(&target.server_args)
            .env("HERALD_JWT_SECRET", &jwt_secret)
            .env("HERALD_API_KEY", &api_key)
            // The per-chat join cap (2,000/s by default) off, so join floods
            // measure the store, not the cap; `--server-arg
            // --chat-join-rate=N` measures the cap instead (a flag wins over env).
            .env("HERALD_CHAT_JOIN_RATE", "0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        // Hot-chat coalescing off too, unless the scenario measures herald's
        // default: fan-out measures the push path, every event pushed and checked by seq.
        if target.hot_default {
            command.env_remove("HERALD_HOT_CHAT_DELIVERIES");
        } else {
            command.env("HERALD_HOT_CHAT_DELIVERIES", "0");
        }
        let mut child = command.spawn().with_context(|| format!("starting {}", bin.display()))?;
        let pid = child.id().context("server exited at once")?;
        let log = Arc::new(Mutex::new(LogSummary::default()));
        let mut stdout = BufReader::new(child.stdout.take().context("piped stdout")?).lines();
        // Port 0 then reading the bound address back: no race for a free port.
        let addr = tokio::time::timeout(START_TIMEOUT, async {
            while let Some(line) = stdout.next_line().await? {
                note_line(&log, &line);
                if let Some(a) = line.split(LISTENING).nth(1) {
                    return a.trim().parse::<SocketAddr>().context("bad listen address");
                }
            }
            bail!("the server exited before listening")
        })
        .await
        .context("the server did not listen in time")??;
        // The log keeps coming (tracing writes to stdout): drain both pipes so the server never blocks on them.
        tokio::spawn(drain(stdout.into_inner(), log.clone()));
        tokio::spawn(drain(BufReader::new(child.stderr.take().context("piped stderr")?), log.clone()));
        Ok(Server { pid, addr, jwt_secret, api_key: Some(api_key), started: Some(Started { child, _data: data, log }) })
    }

    /// The path `workspace`'s clients upgrade at; the `ws` parameter is the contract's routing hint.
    pub fn ws_path(workspace: &str) -> String {
        format!("/v1/ws?ws={workspace}")
    }

    /// The server's resident memory now, in KiB.
    pub fn rss_kib(&self) -> anyhow::Result<u64> {
        rss_kib(self.pid).with_context(|| format!("server {} is gone", self.pid))
    }

    /// Open WebSocket connections as the server counts them (`herald_connections`).
    pub async fn connections(&self) -> anyhow::Result<Option<u64>> {
        Ok(self.metric("herald_connections").await?.map(|v| v as u64))
    }

    /// The value of the unlabelled metric `name` at `GET /metrics`, if it has one yet.
    pub async fn metric(&self, name: &str) -> anyhow::Result<Option<f64>> {
        let answer = http::get(self.addr, "/metrics", None).await?;
        Ok(answer.body.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse::<f64>().ok()))
    }

    /// A chat as `GET /v1/workspaces/{ws}/chats/{chat}` shows it.
    pub async fn chat(&self, workspace: &str, chat: &str) -> anyhow::Result<ChatView> {
        let key = self.api_key.as_deref().context("checking a chat needs --api-key")?;
        let answer = http::get(self.addr, &format!("/v1/workspaces/{workspace}/chats/{chat}"), Some(key)).await?;
        anyhow::ensure!(answer.status == 200, "GET chat {chat}: {} {}", answer.status, answer.body);
        Ok(serde_json::from_str(&answer.body)?)
    }

    /// The member count of `chat` through the HTTP API (`None` without an api key).
    pub async fn members(&self, workspace: &str, chat: &str) -> anyhow::Result<Option<u64>> {
        Ok(match self.api_key {
            Some(_) => Some(self.chat(workspace, chat).await?.members),
            None => None,
        })
    }

    /// Opens a server (with `flags`), runs `measure` on it, stops it, and
    /// adds what it logged to the result as `server_log`.
    pub async fn measured<F>(target: &TargetArgs, flags: &[String], measure: F) -> anyhow::Result<serde_json::Value>
    where
        F: AsyncFnOnce(&Server) -> anyhow::Result<serde_json::Value>,
    {
        let server = Server::open(target, flags).await?;
        let out = measure(&server).await;
        let log = server.stop().await?;
        let mut out = out?;
        out["server_log"] = serde_json::to_value(log)?;
        Ok(out)
    }

    /// Stops a started server by pid (SIGTERM, then SIGKILL after
    /// [`STOP_TIMEOUT`]) and returns what it logged; leaves a running one alone.
    pub async fn stop(self) -> anyhow::Result<Option<LogSummary>> {
        let Some(mut s) = self.started else { return Ok(None) };
        // SAFETY: kill(2) with a pid this process spawned and has not reaped.
        unsafe { libc::kill(self.pid as libc::pid_t, libc::SIGTERM) };
        if tokio::time::timeout(STOP_TIMEOUT, s.child.wait()).await.is_err() {
            eprintln!("server {} did not exit in {STOP_TIMEOUT:?} after SIGTERM; killing it", self.pid);
            s.child.kill().await?;
        }
        let log = s.log.lock().expect("log lock").clone();
        Ok(Some(log))
    }
}

/// `ws://IP:PORT[/...]` to its socket address. Only IP literals: this bench
/// talks to loopback servers.
fn parse_ws_url(url: &str) -> anyhow::Result<SocketAddr> {
    let rest = url.strip_prefix("ws://").context("the URL must start with ws://")?;
    let host = rest.split('/').next().unwrap_or(rest);
    host.parse().with_context(|| format!("{host} is not IP:PORT"))
}

async fn drain(pipe: impl AsyncRead + Unpin, log: Arc<Mutex<LogSummary>>) {
    let mut lines = BufReader::new(pipe).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        note_line(&log, &line);
    }
}

fn note_line(log: &Mutex<LogSummary>, line: &str) {
    let (warn, error) = (line.contains("WARN"), line.contains("ERROR"));
    if !(warn || error) {
        return;
    }
    let mut log = log.lock().expect("log lock");
    log.warnings += warn as u64;
    log.errors += error as u64;
    if log.first.len() < KEPT_LOG_LINES {
        log.first.push(strip_ansi(line));
    }
}

/// `line` without terminal colour codes (`ESC [ ... m`), which tracing adds even into a pipe.
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            chars.by_ref().find(|&c| c == 'm');
        } else {
            out.push(c);
        }
    }
    out
}

/// 32 random bytes in hex, from the kernel: secrets for a started server.
fn random_hex() -> String {
    use std::io::Read;
    let mut buf = [0u8; 32];
    std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut buf)).expect("/dev/urandom is readable");
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ws_urls() {
        assert_eq!(parse_ws_url("ws://127.0.0.1:8080").unwrap().port(), 8080);
        assert_eq!(parse_ws_url("ws://127.0.0.1:9/v1/ws?ws=a").unwrap().port(), 9);
        assert!(parse_ws_url("http://127.0.0.1:9").is_err());
        assert!(parse_ws_url("ws://localhost:9").is_err());
    }

    #[test]
    fn colours_are_stripped() {
        assert_eq!(strip_ansi("\u{1b}[33m WARN\u{1b}[0m hub: gap"), " WARN hub: gap");
    }

    #[test]
    fn secrets_differ() {
        let (a, b) = (random_hex(), random_hex());
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
    }
}
