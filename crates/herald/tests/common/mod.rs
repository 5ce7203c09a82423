//! Test harness: a real herald on 127.0.0.1:0 (in process through `run`, or
//! the binary), a small HTTP client, and a WebSocket client that keeps
//! replies and pushes apart.
#![allow(dead_code)]

pub mod cell;
pub mod chaos;
pub mod nats;
pub mod nginx;
pub mod pg;
pub mod pg_pair;
pub mod s3;
pub mod stories;
pub mod tls;

use std::net::SocketAddr;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

pub const SECRET: &str = "test-secret-0123456789abcdef0123456789abcdef";
pub const API_KEY: &str = "test-api-key-0123456789abcdef0123456789abcdef";
/// Longest any single expectation waits.
pub const WAIT: Duration = Duration::from_secs(10);

/// A server started in this process.
pub struct TestServer {
    pub addr: SocketAddr,
    pub data: tempfile::TempDir,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl TestServer {
    pub async fn start() -> TestServer {
        Self::start_with(|_| {}).await
    }

    /// Starts a server with test secrets; `tweak` may change its config.
    pub async fn start_with(tweak: impl FnOnce(&mut herald::Config)) -> TestServer {
        let data = tempfile::tempdir().expect("tempdir");
        let mut config = herald::Config::for_tests(data.path().to_path_buf(), SECRET, API_KEY);
        config.server.drain_window_ms = 200;
        config.store.stores = test_stores().await;
        tweak(&mut config);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(herald::run(listener, config, async move {
            let _ = rx.await;
        }));
        TestServer { addr, data, stop: Some(tx), task: Some(task) }
    }

    /// Sends the shutdown signal and waits for `run` to return.
    pub async fn stop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(20), task).await.expect("server stops").unwrap().unwrap();
        }
    }

    pub fn ws_url(&self, ws: &str) -> String {
        format!("ws://{}/v1/ws?ws={ws}", self.addr)
    }

    pub async fn token(&self, ws: &str, user: &str) -> String {
        token_at(self.addr, ws, user).await
    }

    /// A connected client that said hello as `user` of `ws`.
    pub async fn client(&self, ws: &str, user: &str) -> Client {
        let token = self.token(ws, user).await;
        let mut c = Client::connect(&self.ws_url(ws)).await;
        let r = c.request(json!({"op": "hello", "token": token})).await;
        assert!(r.get("ok").is_some(), "hello failed: {r}");
        c
    }

    pub async fn http(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        http(self.addr, method, path, Some(API_KEY), body).await
    }
}

pub async fn token_at(addr: SocketAddr, ws: &str, user: &str) -> String {
    let (status, body) =
        http(addr, "POST", "/v1/tokens", Some(API_KEY), Some(json!({"workspace": ws, "user": user}))).await;
    assert_eq!(status, 200, "{body}");
    body["token"].as_str().unwrap().to_string()
}

/// One HTTP/1.1 request with `Connection: close`; returns status and JSON body (or the text as a string).
pub async fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    api_key: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    let (status, text) = http_raw(addr, method, path, api_key, body.map(|b| b.to_string())).await;
    let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, value)
}

pub async fn http_raw(
    addr: SocketAddr,
    method: &str,
    path: &str,
    api_key: Option<&str>,
    body: Option<String>,
) -> (u16, String) {
    try_http_raw(addr, method, path, api_key, body, WAIT).await.unwrap_or_else(|e| panic!("{e}"))
}

/// [`http`] for servers that may be down: `None` when it cannot connect or
/// has no whole answer within `within`.
pub async fn try_http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<Value>,
    within: Duration,
) -> Option<(u16, Value)> {
    let (status, text) =
        try_http_raw(addr, method, path, Some(API_KEY), body.map(|b| b.to_string()), within).await.ok()?;
    let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    Some((status, value))
}

/// [`http_raw`] that says what went wrong instead of panicking.
pub async fn try_http_raw(
    addr: SocketAddr,
    method: &str,
    path: &str,
    api_key: Option<&str>,
    body: Option<String>,
    within: Duration,
) -> Result<(u16, String), String> {
    let mut s = match tokio::time::timeout(within, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(format!("connect: {e}")),
        Err(_) => return Err("connect: timed out".into()),
    };
    let body = body.unwrap_or_default();
    let auth = api_key.map(|k| format!("Authorization: Bearer {k}\r\n")).unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.map_err(|e| format!("write: {e}"))?;
    let mut buf = Vec::new();
    match tokio::time::timeout(within, s.read_to_end(&mut buf)).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => return Err(format!("read: {e}")),
        Err(_) => return Err("http answer in time".into()),
    }
    let text = String::from_utf8_lossy(&buf).to_string();
    let status: u16 = text.split(' ').nth(1).and_then(|s| s.parse().ok()).ok_or("status line")?;
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let body =
        if head.to_ascii_lowercase().contains("transfer-encoding: chunked") { dechunk(body) } else { body.to_string() };
    Ok((status, body))
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        s = &rest[n + 2..];
    }
    out
}

/// A WebSocket client that sorts server frames into replies and pushes.
pub struct Client {
    pub ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    next_id: i64,
    pushes: std::collections::VecDeque<Value>,
    replies: std::collections::HashMap<i64, Value>,
    /// Set once the server closed: (code, reason).
    pub closed: Option<(u16, String)>,
}

impl Client {
    pub async fn connect(url: &str) -> Client {
        let (ws, _) = tokio_tungstenite::connect_async(url).await.expect("websocket connect");
        Client::over(ws)
    }

    /// A client over a WebSocket opened some other way (through TLS, say).
    pub fn over(ws: WebSocketStream<MaybeTlsStream<TcpStream>>) -> Client {
        Client { ws, next_id: 1, pushes: Default::default(), replies: Default::default(), closed: None }
    }

    pub async fn send_text(&mut self, text: &str) {
        self.ws.send(Message::Text(text.into())).await.expect("send");
    }

    /// Sends `req` with a fresh id; returns that id.
    pub async fn send(&mut self, mut req: Value) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        req["id"] = json!(id);
        self.send_text(&req.to_string()).await;
        id
    }

    /// Sends `req` and waits for its reply.
    pub async fn request(&mut self, req: Value) -> Value {
        let id = self.send(req).await;
        self.reply(id).await
    }

    /// Sends `req`, expects `ok`, returns it.
    pub async fn ok(&mut self, req: Value) -> Value {
        let r = self.request(req.clone()).await;
        r.get("ok").cloned().unwrap_or_else(|| panic!("{req} failed: {r}"))
    }

    /// Sends `req`, expects `err` with `code`, returns the err object.
    pub async fn err(&mut self, req: Value, code: &str) -> Value {
        let r = self.request(req.clone()).await;
        let err = r.get("err").cloned().unwrap_or_else(|| panic!("{req} did not fail: {r}"));
        assert_eq!(err["code"], code, "{req}: {r}");
        err
    }

    pub async fn reply(&mut self, id: i64) -> Value {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if let Some(r) = self.replies.remove(&id) {
                return r;
            }
            assert!(self.read_one(deadline).await, "no reply to request {id}; closed: {:?}", self.closed);
        }
    }

    /// The next push, waiting at most `WAIT`.
    pub async fn push(&mut self) -> Value {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if let Some(p) = self.pushes.pop_front() {
                return p;
            }
            assert!(self.read_one(deadline).await, "no push; closed: {:?}", self.closed);
        }
    }

    /// Pushes read (while waiting for replies) and not taken yet.
    pub fn queued_pushes(&self) -> usize {
        self.pushes.len()
    }

    /// The next push if one comes within `wait`.
    pub async fn push_within(&mut self, wait: Duration) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(p) = self.pushes.pop_front() {
                return Some(p);
            }
            if !self.read_one(deadline).await {
                return None;
            }
        }
    }

    /// The next `n` event pushes of `chat` (other pushes are kept aside).
    pub async fn events(&mut self, chat: &str, n: usize) -> Vec<Value> {
        let mut out = Vec::new();
        let mut other = Vec::new();
        while out.len() < n {
            let p = self.push().await;
            if p["ev"] == "event" && p["chat"] == chat { out.push(p) } else { other.push(p) }
        }
        for p in other.into_iter().rev() {
            self.pushes.push_front(p);
        }
        out
    }

    /// Waits for the server's close; returns its code.
    pub async fn closed_with(&mut self) -> u16 {
        let deadline = tokio::time::Instant::now() + WAIT;
        while self.closed.is_none() {
            assert!(self.read_one(deadline).await || self.closed.is_some(), "server did not close");
        }
        self.closed.as_ref().unwrap().0
    }

    /// Reads one frame. False on timeout or end of stream.
    async fn read_one(&mut self, deadline: tokio::time::Instant) -> bool {
        if self.closed.is_some() {
            return false;
        }
        let msg = match tokio::time::timeout_at(deadline, self.ws.next()).await {
            Err(_) => return false,
            Ok(None) => {
                self.closed = Some((1006, "eof".into()));
                return false;
            }
            Ok(Some(Err(e))) => {
                self.closed = Some((1006, e.to_string()));
                return false;
            }
            Ok(Some(Ok(m))) => m,
        };
        match msg {
            Message::Text(t) => {
                let v: Value = serde_json::from_str(t.as_str()).expect("server frames are JSON");
                match v.get("id").and_then(Value::as_i64) {
                    Some(id) if v.get("ev").is_none() => {
                        self.replies.insert(id, v);
                    }
                    _ if v.get("id").is_some() => {
                        // An error reply with id null.
                        self.replies.insert(0, v);
                    }
                    _ => self.pushes.push_back(v),
                }
            }
            Message::Close(frame) => {
                let (code, reason) =
                    frame.map(|f| (u16::from(f.code), f.reason.to_string())).unwrap_or((1005, String::new()));
                self.closed = Some((code, reason));
            }
            _ => {}
        }
        true
    }
}

/// The fallible side of [`Client`], for clients that outlive the nodes they
/// talk to (the chaos harness): a connection that cannot be made, a socket
/// that breaks or a reply that does not come is an answer, not a panic.
impl Client {
    /// Connects within `within`; says why not otherwise.
    pub async fn try_connect(url: &str, within: Duration) -> Result<Client, String> {
        match tokio::time::timeout(within, tokio_tungstenite::connect_async(url)).await {
            Ok(Ok((ws, _))) => Ok(Client::over(ws)),
            Ok(Err(e)) => Err(format!("connect: {e}")),
            Err(_) => Err("connect: timed out".into()),
        }
    }

    /// [`Client::send`] that says why the socket refused the frame.
    pub async fn try_send(&mut self, mut req: Value) -> Result<i64, String> {
        let id = self.next_id;
        self.next_id += 1;
        req["id"] = json!(id);
        self.ws.send(Message::Text(req.to_string().into())).await.map_err(|e| e.to_string())?;
        Ok(id)
    }

    /// The reply to request `id` if it comes before `deadline` (`None` if not);
    /// `Err` with the close (code, reason) once the connection ended, 1006 when it broke.
    pub async fn reply_before(
        &mut self,
        id: i64,
        deadline: tokio::time::Instant,
    ) -> Result<Option<Value>, (u16, String)> {
        loop {
            if let Some(r) = self.replies.remove(&id) {
                return Ok(Some(r));
            }
            if !self.read_before(deadline).await? {
                return Ok(None);
            }
        }
    }

    /// Reads one frame if one comes before `deadline` (false if none did);
    /// `Err` as in [`Client::reply_before`].
    pub async fn read_before(&mut self, deadline: tokio::time::Instant) -> Result<bool, (u16, String)> {
        if self.read_one(deadline).await {
            return Ok(true);
        }
        match &self.closed {
            Some(closed) => Err(closed.clone()),
            None => Ok(false),
        }
    }

    /// Takes every push read so far, oldest first.
    pub fn take_pushes(&mut self) -> std::collections::VecDeque<Value> {
        std::mem::take(&mut self.pushes)
    }
}

/// Starts the real binary; returns the child and its address.
pub struct BinServer {
    pub child: std::process::Child,
    pub addr: SocketAddr,
    /// Its standard output and error, shown when it does not become ready.
    log: std::path::PathBuf,
}

impl BinServer {
    /// Starts the binary on `data`, or on the PostgreSQL shards `stores` when given.
    pub fn start(data: &std::path::Path, stores: &[String], extra_env: &[(&str, &str)]) -> BinServer {
        BinServer::start_with_files(data, stores, extra_env, None)
    }

    /// [`BinServer::start`] with the process's open-file limit set to `nofile`, when given.
    pub fn start_with_files(
        data: &std::path::Path,
        stores: &[String],
        extra_env: &[(&str, &str)],
        nofile: Option<u64>,
    ) -> BinServer {
        let port = free_port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_herald"));
        cmd.args(["serve", "--listen", &addr.to_string(), "--data"])
            .arg(data)
            .env("HERALD_JWT_SECRET", SECRET)
            .env("HERALD_API_KEY", API_KEY)
            .stdout(std::process::Stdio::null());
        // Its log lines (standard output) and anything on standard error, in one file.
        let log = std::env::temp_dir().join(format!("herald-test-{}-{port}.log", std::process::id()));
        if let Ok(f) = std::fs::File::create(&log) {
            if let Ok(out) = f.try_clone() {
                cmd.stdout(out);
            }
            cmd.stderr(f);
        }
        for url in stores {
            cmd.arg("--store").arg(url);
        }
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        if let Some(n) = nofile {
            use std::os::unix::process::CommandExt;
            let limit = libc::rlimit { rlim_cur: n, rlim_max: n };
            // SAFETY: setrlimit is async-signal-safe; the closure touches nothing else.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
        }
        let child = cmd.spawn().expect("start herald");
        BinServer { child, addr, log }
    }

    /// Waits until `/readyz` answers 200. A connection refused or cut while
    /// herald starts is tried again; herald exiting, or not being ready in
    /// time, fails with what it wrote to standard error.
    pub async fn wait_ready(&self) {
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            let answer = try_http(self.addr, "GET", "/readyz", None, Duration::from_secs(2)).await;
            if answer.is_some_and(|(status, _)| status == 200) {
                return;
            }
            if self.exited() {
                panic!("herald on {} exited before it was ready; its stderr:\n{}", self.addr, self.stderr());
            }
            if std::time::Instant::now() >= deadline {
                panic!("herald on {} did not become ready; its stderr:\n{}", self.addr, self.stderr());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Whether the process has ended (gone, or a zombie nobody waited for).
    fn exited(&self) -> bool {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        stat.rsplit(')').next().and_then(|rest| rest.split_whitespace().next()).is_none_or(|state| state == "Z")
    }

    /// Everything herald has logged (standard output and error) so far.
    pub fn stderr_all(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last lines herald wrote.
    fn stderr(&self) -> String {
        let text = self.stderr_all();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for BinServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            // A failing test keeps the node's log, and shows its end.
            eprintln!(
                "herald on {} (log kept at {}), its last lines:\n{}",
                self.addr,
                self.log.display(),
                self.stderr()
            );
        } else {
            let _ = std::fs::remove_file(&self.log);
        }
    }
}

/// A loopback port for a server a test starts itself. Picked below Linux's
/// ephemeral range (32768 and up), so the source port of some other test's
/// outgoing connection cannot take it between the pick and the server's bind,
/// and never handed out twice in one test process.
pub fn free_port() -> u16 {
    use std::collections::HashSet;
    use std::sync::Mutex;
    static GIVEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
    let mut given = GIVEN.lock().unwrap();
    let given = given.get_or_insert_with(HashSet::new);
    // Test binaries run side by side in CI only one at a time, but a seed from
    // the process id and clock keeps two of them apart anyway.
    let mut x = std::process::id() as u64
        ^ std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    for _ in 0..10_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let port = 20_000 + (x % 12_000) as u16;
        if given.contains(&port) {
            continue;
        }
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.insert(port);
            return port;
        }
    }
    panic!("no free loopback port between 20000 and 32000")
}

/// The sum of metric `name`'s samples (all label sets) in `/metrics` text; 0 when absent.
pub fn metric(text: &str, name: &str) -> f64 {
    herald::metrics::sum(text, name)
}

/// A data directory that outlives server restarts within a test, removed when dropped.
pub fn data_dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

pub fn close_code(c: CloseCode) -> u16 {
    u16::from(c)
}

/// The stores a test server uses: none (the embedded SQLite) by default;
/// with `HERALD_TEST_STORE=postgres`, two fresh databases (two shards) on the
/// cluster at `HERALD_TEST_PG_URL`, which `scripts/test.sh` starts.
pub async fn test_stores() -> Vec<String> {
    if std::env::var("HERALD_TEST_STORE").as_deref() != Ok("postgres") {
        return Vec::new();
    }
    let admin = std::env::var("HERALD_TEST_PG_URL")
        .expect("HERALD_TEST_STORE=postgres needs HERALD_TEST_PG_URL (scripts/test.sh sets it)");
    vec![pg::create_database(&admin).await, pg::create_database(&admin).await]
}

/// Every file under `dir` (recursively) whose bytes contain `needle`: where
/// an erased body must no longer be.
pub fn files_containing(dir: &std::path::Path, needle: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(bytes) = std::fs::read(&path)
                && bytes.windows(needle.len()).any(|w| w == needle)
            {
                found.push(path.display().to_string());
            }
        }
    }
    found
}

/// `c`'s listener and data directory with no secrets: a development-mode node.
pub fn dev_mode(c: &herald::Config) -> herald::Config {
    let (listen, data) = (c.server.listen.to_string(), c.store.data.clone());
    let args = [std::ffi::OsString::from("serve"), "--listen".into(), listen.into(), "--data".into(), data.into()];
    herald::config::ServeArgs::parse_from(args).and_then(|a| a.resolve()).expect("development mode resolves")
}

/// A webhook receiver on a free loopback port that keeps the events of every request and answers
/// 200: its URL and what it got.
pub async fn webhook_receiver() -> (String, std::sync::Arc<std::sync::Mutex<Vec<Value>>>) {
    let got: std::sync::Arc<std::sync::Mutex<Vec<Value>>> = Default::default();
    let keep = got.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |body: axum::body::Bytes| async move {
            let v: Value = serde_json::from_slice(&body).unwrap_or_default();
            keep.lock().unwrap().extend(v["events"].as_array().cloned().unwrap_or_default());
            "ok"
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, got)
}
