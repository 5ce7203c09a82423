//! `herald serve`'s settings. Every setting is a flag; each flag has an env
//! variable (`HERALD_` + its name) and a key of the same name in the TOML file
//! given by `--config`. Flags win over env, env over the file, the file over
//! the defaults below.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use herald_protocol::limits;
use serde::Deserialize;

use crate::auth::{DEFAULT_LEEWAY_MS, TokenKeys, Tokens};
use crate::gateway::admission::{Limits, normalize_origin};
use crate::hooks::{
    DEFAULT_SEND_HOOK_TIMEOUT_MS, DEFAULT_WEBHOOK_OFFLINE_MAX, FailMode, HookSettings, MIN_HOOK_SECRET_BYTES,
    SendHookSettings, WEBHOOK_RETRY_FIRST, WEBHOOK_RETRY_MAX, WEBHOOK_TIMEOUT, WebhookSettings,
};

/// The settings as given: everything optional, merged from flags, env and file.
#[derive(Debug, Default, Clone, Args, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct ServeArgs {
    /// A TOML file whose keys are these flags' names.
    #[arg(long, env = "HERALD_CONFIG")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Address to listen on.
    #[arg(long, env = "HERALD_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Directory of the embedded store.
    #[arg(long, env = "HERALD_DATA")]
    pub data: Option<PathBuf>,
    /// A PostgreSQL shard, `[NAME=]postgres://user@host:port/db`, once per
    /// shard. Chats are routed by NAME (1-64 of A-Z a-z 0-9 _ . -), or by
    /// `host:port/db` without one; every node must name a shard alike.
    /// `?sslmode=require&sslrootcert=PATH`: TLS, certificate verified.
    /// With none, the embedded SQLite store in `--data` is used.
    #[arg(long = "store", env = "HERALD_STORE", value_delimiter = ',')]
    pub store: Option<Vec<String>>,
    /// NATS servers of this cell's cluster (`nats://host:port`), comma-separated
    /// or repeated. With none, fan-out stays in this process (one node).
    #[arg(long = "broker", env = "HERALD_BROKER", value_delimiter = ',')]
    pub broker: Option<Vec<String>>,
    /// This node's cell: its NATS subjects and node list are the cell's own.
    #[arg(long, env = "HERALD_CELL")]
    pub cell: Option<String>,
    /// Every cell of the deployment, as `name` or `name=ws://entry`, comma-separated.
    /// Workspaces map to cells by consistent hash; a node serves only its own
    /// cell's. Empty: no cells (one cell serving everything).
    #[arg(long, env = "HERALD_CELLS", value_delimiter = ',')]
    pub cells: Option<Vec<String>>,
    /// Milliseconds a chat's NATS subscription outlives its last local watcher.
    #[arg(long, env = "HERALD_BROKER_LINGER_MS")]
    pub broker_linger_ms: Option<u64>,
    /// When a node joins the cell, move this node's clients whose workspace now
    /// routes to it (spread over the drain window). On by default; with nginx's
    /// own hashing in front, turn it off (`--rebalance false`).
    #[arg(long, env = "HERALD_REBALANCE")]
    pub rebalance: Option<bool>,
    /// The base WebSocket URL clients reach this node at (for `/v1/gateway`), e.g. `ws://10.0.0.5:8080`.
    #[arg(long, env = "HERALD_PUBLIC_URL")]
    pub public_url: Option<String>,
    /// Secret that client JWTs are signed with (HS256), at least 32 bytes.
    #[arg(long, env = "HERALD_JWT_SECRET", hide_env_values = true)]
    pub jwt_secret: Option<String>,
    /// A PEM public key that client JWTs may be signed with instead: RS256
    /// for an RSA key (2048 bits or more), EdDSA for an Ed25519 key.
    #[arg(long, env = "HERALD_JWT_PUBLIC_KEY")]
    pub jwt_public_key: Option<PathBuf>,
    /// Clock skew allowed on a token's `exp` and `nbf`, in milliseconds.
    #[arg(long, env = "HERALD_JWT_LEEWAY_MS")]
    pub jwt_leeway_ms: Option<u64>,
    /// Key that server-to-server calls present as `Authorization: Bearer`, at least 32 bytes.
    #[arg(long, env = "HERALD_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// When set, client tokens must carry this `aud`.
    #[arg(long, env = "HERALD_JWT_AUDIENCE")]
    pub jwt_audience: Option<String>,
    /// Web origins (`scheme://host[:port]`) whose pages may open a WebSocket
    /// here, comma-separated; an upgrade with another `Origin` gets 403.
    /// Unset: every origin.
    #[arg(long, env = "HERALD_ALLOWED_ORIGINS", value_delimiter = ',')]
    pub allowed_origins: Option<Vec<String>>,
    /// Open connections per node; past it, upgrades get 503.
    #[arg(long, env = "HERALD_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// Connections per node that have not said `hello` yet; past it, upgrades get 503.
    #[arg(long, env = "HERALD_MAX_PENDING_HELLOS")]
    pub max_pending_hellos: Option<usize>,
    /// WebSocket upgrades per second from one address (bursts of four times
    /// that); past it, 429. 0: no limit (behind a load balancer every client
    /// is one address).
    #[arg(long, env = "HERALD_IP_CONNECT_RATE")]
    pub ip_connect_rate: Option<u32>,
    /// Chats one connection may watch at once; past it, `watch` gets `throttled`.
    #[arg(long, env = "HERALD_MAX_WATCHES")]
    pub max_watches: Option<usize>,
    /// This node's name, as `hello` reports it.
    #[arg(long, env = "HERALD_NODE")]
    pub node: Option<String>,
    /// Largest WebSocket frame accepted, in bytes.
    #[arg(long, env = "HERALD_FRAME_LIMIT")]
    pub frame_limit: Option<usize>,
    /// Largest serialized event body, in bytes.
    #[arg(long, env = "HERALD_BODY_LIMIT")]
    pub body_limit: Option<usize>,
    /// Milliseconds from upgrade to `hello`.
    #[arg(long, env = "HERALD_HELLO_TIMEOUT_MS")]
    pub hello_timeout_ms: Option<u64>,
    /// Milliseconds between server pings.
    #[arg(long, env = "HERALD_HEARTBEAT_MS")]
    pub heartbeat_ms: Option<u64>,
    /// Milliseconds without anything from a client before it is closed.
    #[arg(long, env = "HERALD_IDLE_TIMEOUT_MS")]
    pub idle_timeout_ms: Option<u64>,
    /// Requests per second per connection.
    #[arg(long, env = "HERALD_RATE")]
    pub rate: Option<u32>,
    /// Requests per connection allowed at once above the rate.
    #[arg(long, env = "HERALD_BURST")]
    pub burst: Option<u32>,
    /// Joins per second into one chat that this node admits from clients
    /// (0: no cap); the rest are told `throttled` with a time to retry.
    #[arg(long, env = "HERALD_CHAT_JOIN_RATE")]
    pub chat_join_rate: Option<u32>,
    /// Deliveries per second into one chat's watchers on this node (events
    /// times watchers) at which the chat turns hot: its watchers then get a
    /// `notify` with the latest seq every 250 ms instead of each event, and
    /// fetch (default 250000; 0: never).
    #[arg(long, env = "HERALD_HOT_CHAT_DELIVERIES")]
    pub hot_chat_deliveries: Option<u64>,
    /// Bytes of recent events this node keeps over all its watched chats,
    /// to answer `fetch` and watch replays without reading the store; a chat
    /// over it drops its oldest first.
    #[arg(long, env = "HERALD_RECENT_EVENTS_BYTES")]
    pub recent_events_bytes: Option<usize>,
    /// Bytes of recent events kept for one chat (at most the node's).
    #[arg(long, env = "HERALD_RECENT_EVENTS_CHAT_BYTES")]
    pub recent_events_chat_bytes: Option<usize>,
    /// Bytes a connection's outbound queue may hold before it is closed with 4008.
    #[arg(long, env = "HERALD_OUTBOX_LIMIT")]
    pub outbox_limit: Option<usize>,
    /// Bytes read from a WebSocket at once, into a buffer each worker thread
    /// shares among its connections (no connection keeps one while idle).
    #[arg(long, env = "HERALD_WS_READ_BUFFER")]
    pub ws_read_buffer: Option<usize>,
    /// Milliseconds over which a drain spreads its clients' reconnects.
    #[arg(long, env = "HERALD_DRAIN_WINDOW_MS")]
    pub drain_window_ms: Option<u64>,
    /// Signs the webhook's and the send hook's requests (`Herald-Signature`);
    /// required with either, at least 32 bytes.
    #[arg(long, env = "HERALD_HOOK_SECRET", hide_env_values = true)]
    pub hook_secret: Option<String>,
    /// Where stored events are POSTed, batched and signed, at least once.
    #[arg(long, env = "HERALD_WEBHOOK_URL")]
    pub webhook_url: Option<String>,
    /// Event types the webhook delivers, comma-separated (default: all).
    #[arg(long, env = "HERALD_WEBHOOK_EVENTS", value_delimiter = ',')]
    pub webhook_events: Option<Vec<String>>,
    /// Chats with more members get no `offline` list in webhook events.
    #[arg(long, env = "HERALD_WEBHOOK_OFFLINE_MAX")]
    pub webhook_offline_max: Option<u64>,
    /// Tests only: ms the webhook waits for an answer (default 10000).
    #[arg(long, env = "HERALD_WEBHOOK_TIMEOUT_MS", hide = true)]
    pub webhook_timeout_ms: Option<u64>,
    /// Tests only: the webhook's first wait before a retry, in ms (default 500).
    #[arg(long, env = "HERALD_WEBHOOK_RETRY_MS", hide = true)]
    pub webhook_retry_ms: Option<u64>,
    /// Tests only: the webhook's longest wait before a retry, in ms (default 60000).
    #[arg(long, env = "HERALD_WEBHOOK_RETRY_MAX_MS", hide = true)]
    pub webhook_retry_max_ms: Option<u64>,
    /// Asked before a client's `send` or `edit` is stored: accept, reject or replace.
    #[arg(long, env = "HERALD_SEND_HOOK_URL")]
    pub send_hook_url: Option<String>,
    /// Milliseconds the send hook has to answer.
    #[arg(long, env = "HERALD_SEND_HOOK_TIMEOUT_MS")]
    pub send_hook_timeout_ms: Option<u64>,
    /// Without a valid answer in time: `closed` (the client gets `unavailable`) or `open` (stored as sent).
    #[arg(long, env = "HERALD_SEND_HOOK_FAIL")]
    pub send_hook_fail: Option<String>,
    /// Serve the WebSocket echo route `/diag/echo` (for conformance tests only).
    #[arg(long, env = "HERALD_DIAG_ECHO")]
    pub diag_echo: bool,
    /// Log filter, as RUST_LOG takes it.
    #[arg(long, env = "HERALD_LOG")]
    pub log: Option<String>,
}

/// Resolved settings.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub data: PathBuf,
    /// PostgreSQL shard URLs; empty means the embedded store.
    pub stores: Vec<String>,
    /// NATS URLs; empty means one node with the in-process broker.
    pub brokers: Vec<String>,
    pub cell: String,
    /// Every cell, `name` or `name=url`; empty means no cell mapping.
    pub cells: Vec<String>,
    pub broker_linger: Duration,
    /// Base WebSocket URL of this node; `None` means "as the client reached it".
    pub public_url: Option<String>,
    /// Move clients to nodes that join.
    pub rebalance: bool,
    /// What verifies client tokens (and the secret that issues them).
    pub tokens: TokenKeys,
    pub api_key: String,
    /// No secret or key was given: random secrets, a demo page and dev tokens.
    pub dev_mode: bool,
    /// Upgrade-time limits: origins, per-address rate, connection caps.
    pub limits: Limits,
    pub max_watches: usize,
    pub node: String,
    pub frame_limit: usize,
    pub body_limit: usize,
    pub hello_timeout: Duration,
    pub heartbeat: Duration,
    pub idle_timeout: Duration,
    pub rate: u32,
    pub burst: u32,
    /// Client joins per second per chat on this node; 0 means no cap.
    pub chat_join_rate: u32,
    /// Deliveries per second at which a chat turns hot; 0 means never.
    pub hot_chat_deliveries: u64,
    /// Bytes of recent events cached over every watched chat of the node.
    pub recent_events_bytes: usize,
    /// Bytes of recent events cached for one chat.
    pub recent_events_chat_bytes: usize,
    pub outbox_limit: usize,
    pub ws_read_buffer: usize,
    pub drain_window: Duration,
    pub diag_echo: bool,
    /// The webhook and the send hook, if configured.
    pub hooks: HookSettings,
    pub log: String,
}

/// Default outbound queue: room for a full replay and a few fetch replies,
/// small enough that a thousand stalled readers cost at most a gigabyte.
pub const DEFAULT_OUTBOX_LIMIT: usize = 1024 * 1024;
/// Default read size: one buffer of it per worker thread, not per
/// connection, so it can hold a whole burst (a socket's receive queue is
/// rarely larger) and a connection reads it in one call.
pub const DEFAULT_WS_READ_BUFFER: usize = 64 * 1024;
/// Default cap on client joins into one chat per second on one node: a
/// flood of 2,000 joins/s into one chat (a large public chat whose invite
/// link spreads) passes at full speed on one node, a flood many times that
/// is told to come back, and the shard behind the chat (about 5,000 durable
/// joins/s into one chat on PostgreSQL here) keeps room for everything else.
pub const DEFAULT_CHAT_JOIN_RATE: u32 = 2_000;
/// Default heat at which a chat switches to coalesced `notify` pushes:
/// 250,000 deliveries/s (1,000 watchers at 250 events/s, 5,000 at 50).
/// Measured with the watchers fetching from the node's window of recent
/// events (docs/benchmarks.md, "Hot chats"): notify + fetch costs the server
/// less than pushing from about 25 events/s (2.83 against 9.23 us per
/// delivered event at 1,000 watchers and 50 events/s), but it adds about
/// 200 ms at the median (a notify every 250 ms). Below a quarter of what one
/// node pushes on the 2-core machine (about 1,000,000 deliveries/s), pushes
/// keep deliveries within milliseconds with CPU to spare, so a busy small
/// chat (100 watchers at 1,000-2,000 events/s) keeps them. Chats under 10
/// events/s are never hot (`hub::HOT_MIN_EVENTS`).
pub const DEFAULT_HOT_CHAT_DELIVERIES: u64 = 250_000;
/// Default cap on open connections per node: what a node of the size we
/// test (docs/memory.md) holds with room to spare; raise it with the box.
pub const DEFAULT_MAX_CONNECTIONS: usize = 100_000;
/// Default cap on connections that have not said `hello`: a client says it
/// within milliseconds, so even a reconnect storm of the whole node stays
/// far below this; what is above it is someone holding sockets open.
pub const DEFAULT_MAX_PENDING_HELLOS: usize = 10_000;
/// Default cap on chats watched by one connection: more than a chat app's
/// sidebar; a client that follows more chats uses the inbox feed.
pub const DEFAULT_MAX_WATCHES: usize = 1_000;
/// The shortest secret or api key accepted outside development mode, in bytes.
pub const MIN_SECRET_BYTES: usize = 32;

/// Default linger of a chat's broker subscription: longer than a reconnect
/// storm's return, so the storm causes no subject churn.
pub const DEFAULT_BROKER_LINGER_MS: u64 = 5_000;
/// Default drain window: a node's clients come back over ten seconds.
pub const DEFAULT_DRAIN_WINDOW_MS: u64 = 10_000;

impl ServeArgs {
    /// Fills what the flags and env left unset from the `--config` file.
    pub fn merge_file(self) -> anyhow::Result<ServeArgs> {
        let Some(path) = self.config.clone() else {
            return Ok(self);
        };
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let file: ServeArgs = toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        macro_rules! pick {
            ($($f:ident),*) => { ServeArgs { config: self.config, diag_echo: self.diag_echo || file.diag_echo, $($f: self.$f.or(file.$f)),* } };
        }
        Ok(pick!(
            listen,
            data,
            store,
            broker,
            cell,
            cells,
            broker_linger_ms,
            public_url,
            rebalance,
            jwt_secret,
            jwt_public_key,
            jwt_leeway_ms,
            api_key,
            jwt_audience,
            allowed_origins,
            max_connections,
            max_pending_hellos,
            ip_connect_rate,
            max_watches,
            node,
            frame_limit,
            body_limit,
            hello_timeout_ms,
            heartbeat_ms,
            idle_timeout_ms,
            rate,
            burst,
            chat_join_rate,
            hot_chat_deliveries,
            recent_events_bytes,
            recent_events_chat_bytes,
            outbox_limit,
            ws_read_buffer,
            drain_window_ms,
            hook_secret,
            webhook_url,
            webhook_events,
            webhook_offline_max,
            webhook_timeout_ms,
            webhook_retry_ms,
            webhook_retry_max_ms,
            send_hook_url,
            send_hook_timeout_ms,
            send_hook_fail,
            log
        ))
    }

    /// The settings with defaults applied, checked. Makes random secrets in
    /// development mode; outside it, a missing, empty or short secret stops
    /// the server with a message that names it.
    pub fn resolve(self) -> anyhow::Result<Config> {
        let dev_mode = self.jwt_secret.is_none() && self.api_key.is_none() && self.jwt_public_key.is_none();
        let (tokens, api_key) = if dev_mode {
            let secret = Some(random_secret());
            let leeway_ms = self.jwt_leeway_ms.unwrap_or(DEFAULT_LEEWAY_MS);
            (
                TokenKeys { secret, public_key_pem: None, audience: self.jwt_audience.clone(), leeway_ms },
                random_secret(),
            )
        } else {
            self.secrets()?
        };
        let hooks = self.hooks()?;
        let ms = Duration::from_millis;
        let limits = Limits {
            allowed_origins: self
                .allowed_origins
                .unwrap_or_default()
                .iter()
                .filter(|o| !o.trim().is_empty())
                .map(|o| normalize_origin(o).map_err(|e| anyhow::anyhow!("--allowed-origins: {e}")))
                .collect::<anyhow::Result<_>>()?,
            max_connections: self.max_connections.unwrap_or(DEFAULT_MAX_CONNECTIONS),
            max_pending_hellos: self.max_pending_hellos.unwrap_or(DEFAULT_MAX_PENDING_HELLOS),
            ip_connect_rate: self.ip_connect_rate.unwrap_or(0),
        };
        let cfg = Config {
            listen: self.listen.unwrap_or_else(|| "127.0.0.1:8080".parse().expect("valid address")),
            data: self.data.unwrap_or_else(|| PathBuf::from("./data")),
            stores: self.store.unwrap_or_default(),
            brokers: self.broker.unwrap_or_default(),
            cell: self.cell.unwrap_or_else(|| "default".into()),
            cells: self.cells.unwrap_or_default(),
            broker_linger: ms(self.broker_linger_ms.unwrap_or(DEFAULT_BROKER_LINGER_MS)),
            public_url: self.public_url,
            rebalance: self.rebalance.unwrap_or(true),
            tokens,
            api_key,
            dev_mode,
            limits,
            max_watches: self.max_watches.unwrap_or(DEFAULT_MAX_WATCHES),
            node: self.node.unwrap_or_else(|| format!("herald-{:06x}", rand::random::<u32>() & 0xff_ffff)),
            frame_limit: self.frame_limit.unwrap_or(limits::FRAME_LIMIT),
            body_limit: self.body_limit.unwrap_or(limits::BODY_LIMIT),
            hello_timeout: ms(self.hello_timeout_ms.unwrap_or(limits::HELLO_TIMEOUT_MS)),
            heartbeat: ms(self.heartbeat_ms.unwrap_or(limits::HEARTBEAT_MS)),
            idle_timeout: ms(self.idle_timeout_ms.unwrap_or(limits::IDLE_TIMEOUT_MS)),
            rate: self.rate.unwrap_or(limits::REQUEST_RATE),
            burst: self.burst.unwrap_or(limits::REQUEST_BURST),
            chat_join_rate: self.chat_join_rate.unwrap_or(DEFAULT_CHAT_JOIN_RATE),
            hot_chat_deliveries: self.hot_chat_deliveries.unwrap_or(DEFAULT_HOT_CHAT_DELIVERIES),
            recent_events_bytes: self.recent_events_bytes.unwrap_or(crate::hub::DEFAULT_RECENT_BYTES),
            recent_events_chat_bytes: self.recent_events_chat_bytes.unwrap_or(crate::hub::DEFAULT_RECENT_CHAT_BYTES),
            outbox_limit: self.outbox_limit.unwrap_or(DEFAULT_OUTBOX_LIMIT),
            ws_read_buffer: self.ws_read_buffer.unwrap_or(DEFAULT_WS_READ_BUFFER),
            drain_window: ms(self.drain_window_ms.unwrap_or(DEFAULT_DRAIN_WINDOW_MS)),
            diag_echo: self.diag_echo,
            hooks,
            log: self.log.unwrap_or_else(|| "herald=info,warn".into()),
        };
        anyhow::ensure!(cfg.frame_limit >= 1024, "frame-limit must be at least 1024 bytes");
        anyhow::ensure!(
            cfg.frame_limit >= cfg.body_limit + 1024,
            "frame-limit ({}) must be at least body-limit ({}) plus 1024 bytes: a send's frame carries its body",
            cfg.frame_limit,
            cfg.body_limit
        );
        anyhow::ensure!(cfg.body_limit >= 1, "body-limit must be at least 1 byte");
        anyhow::ensure!(!cfg.heartbeat.is_zero(), "heartbeat-ms must be above 0");
        anyhow::ensure!(!cfg.hello_timeout.is_zero(), "hello-timeout-ms must be above 0");
        anyhow::ensure!(cfg.limits.max_connections >= 1, "max-connections must be at least 1");
        anyhow::ensure!(cfg.limits.max_pending_hellos >= 1, "max-pending-hellos must be at least 1");
        anyhow::ensure!(cfg.max_watches >= 1, "max-watches must be at least 1");
        anyhow::ensure!(cfg.rate >= 1 && cfg.burst >= 1, "rate and burst must be at least 1");
        anyhow::ensure!(cfg.heartbeat < cfg.idle_timeout, "heartbeat-ms must be below idle-timeout-ms");
        anyhow::ensure!(cfg.outbox_limit >= 64 * 1024, "outbox-limit must be at least 64 KiB");
        anyhow::ensure!(cfg.ws_read_buffer >= 1024, "ws-read-buffer must be at least 1024 bytes");
        anyhow::ensure!(
            herald_protocol::ids::is_valid_id(&cfg.cell) && !cfg.cell.contains('.'),
            "cell must be an id without dots"
        );
        anyhow::ensure!(
            cfg.brokers.is_empty() || !cfg.stores.is_empty(),
            "nodes joined over --broker must share an event log: give --store postgres://... too"
        );
        if !cfg.brokers.is_empty() {
            check_public_url(cfg.public_url.as_deref(), cfg.listen)?;
        }
        // `[NAME=]postgres://...`, names unique; no I/O, and no password in its errors.
        crate::store::ShardSpec::parse_all(&cfg.stores).map_err(|e| anyhow::anyhow!("--store: {e}"))?;
        Ok(cfg)
    }
}

impl ServeArgs {
    /// The api key and token keys given, checked (outside development mode).
    fn secrets(&self) -> anyhow::Result<(TokenKeys, String)> {
        let api_key = self.api_key.clone().ok_or_else(|| {
            anyhow::anyhow!(
                "no api key: set --api-key (or HERALD_API_KEY) to at least {MIN_SECRET_BYTES} random bytes; \
                 it guards the server API"
            )
        })?;
        check_secret("--api-key (HERALD_API_KEY)", &api_key)?;
        if let Some(secret) = &self.jwt_secret {
            check_secret("--jwt-secret (HERALD_JWT_SECRET)", secret)?;
        }
        let public_key_pem = match &self.jwt_public_key {
            Some(path) => {
                let pem =
                    std::fs::read(path).with_context(|| format!("--jwt-public-key: reading {}", path.display()))?;
                anyhow::ensure!(
                    pem.len() >= MIN_SECRET_BYTES,
                    "--jwt-public-key: {} is {} bytes, no public key",
                    path.display(),
                    pem.len()
                );
                Some(pem)
            }
            None => None,
        };
        anyhow::ensure!(
            self.jwt_secret.is_some() || public_key_pem.is_some(),
            "no way to verify client tokens: set --jwt-secret (or HERALD_JWT_SECRET, at least {MIN_SECRET_BYTES} bytes) \
             and/or --jwt-public-key (a PEM public key)"
        );
        let keys = TokenKeys {
            secret: self.jwt_secret.clone(),
            public_key_pem,
            audience: self.jwt_audience.clone(),
            leeway_ms: self.jwt_leeway_ms.unwrap_or(DEFAULT_LEEWAY_MS),
        };
        // The key must parse as one this server can pin an algorithm to.
        Tokens::new(&keys).map_err(|e| match &self.jwt_public_key {
            Some(path) => anyhow::anyhow!("--jwt-public-key {}: {e}", path.display()),
            None => e,
        })?;
        Ok((keys, api_key))
    }
}

impl ServeArgs {
    /// The hooks' settings, checked: a hook needs `--hook-secret`, URLs must be http(s).
    fn hooks(&self) -> anyhow::Result<HookSettings> {
        let url = |name: &str, value: &Option<String>| -> anyhow::Result<Option<String>> {
            let Some(v) = value.as_deref().map(str::trim).filter(|v| !v.is_empty()) else { return Ok(None) };
            let parsed = reqwest::Url::parse(v).map_err(|e| anyhow::anyhow!("{name} {v:?}: {e}"))?;
            anyhow::ensure!(
                matches!(parsed.scheme(), "http" | "https") && parsed.host().is_some(),
                "{name} {v:?} must be an http:// or https:// URL"
            );
            Ok(Some(v.to_owned()))
        };
        let webhook = url("--webhook-url", &self.webhook_url)?;
        let send_hook = url("--send-hook-url", &self.send_hook_url)?;
        if webhook.is_none() && send_hook.is_none() {
            return Ok(HookSettings::default());
        }
        let secret = self.hook_secret.clone().ok_or_else(|| {
            anyhow::anyhow!(
                "a hook is configured but --hook-secret (HERALD_HOOK_SECRET) is not: hooks sign their requests \
                 with it; give at least {MIN_HOOK_SECRET_BYTES} random bytes"
            )
        })?;
        check_secret("--hook-secret (HERALD_HOOK_SECRET)", &secret)?;
        let webhook = match webhook {
            None => None,
            Some(url) => {
                let events = match &self.webhook_events {
                    None => None,
                    Some(list) => {
                        let list: Vec<String> =
                            list.iter().map(|t| t.trim().to_owned()).filter(|t| !t.is_empty()).collect();
                        for t in &list {
                            anyhow::ensure!(
                                herald_protocol::EventType::parse(t).is_some(),
                                "--webhook-events: {t:?} is not an event type"
                            );
                        }
                        Some(list).filter(|l| !l.is_empty())
                    }
                };
                let offline_max = self.webhook_offline_max.unwrap_or(DEFAULT_WEBHOOK_OFFLINE_MAX);
                let ms = |v: Option<u64>, default: Duration| v.map_or(default, Duration::from_millis);
                let timeout = ms(self.webhook_timeout_ms, WEBHOOK_TIMEOUT);
                let retry_max = ms(self.webhook_retry_max_ms, WEBHOOK_RETRY_MAX);
                let retry_first = ms(self.webhook_retry_ms, WEBHOOK_RETRY_FIRST).min(retry_max);
                anyhow::ensure!(
                    !timeout.is_zero() && !retry_first.is_zero(),
                    "--webhook-timeout-ms and --webhook-retry-ms must be above 0"
                );
                Some(WebhookSettings { url, events, offline_max, timeout, retry_first, retry_max })
            }
        };
        let send_hook = match send_hook {
            None => None,
            Some(url) => {
                let timeout_ms = self.send_hook_timeout_ms.unwrap_or(DEFAULT_SEND_HOOK_TIMEOUT_MS);
                anyhow::ensure!(
                    (1..=60_000).contains(&timeout_ms),
                    "--send-hook-timeout-ms must be between 1 and 60000"
                );
                let fail = match self.send_hook_fail.as_deref().map(str::trim) {
                    None | Some("closed") => FailMode::Closed,
                    Some("open") => FailMode::Open,
                    Some(other) => anyhow::bail!("--send-hook-fail {other:?}: give closed or open"),
                };
                Some(SendHookSettings { url, timeout: Duration::from_millis(timeout_ms), fail })
            }
        };
        Ok(HookSettings { secret: Some(secret), webhook, send_hook })
    }
}

/// Refuses an empty or short secret, naming the setting.
fn check_secret(name: &str, value: &str) -> anyhow::Result<()> {
    anyhow::ensure!(!value.is_empty(), "{name} is set but empty: give at least {MIN_SECRET_BYTES} random bytes");
    anyhow::ensure!(
        value.len() >= MIN_SECRET_BYTES,
        "{name} is {} bytes long: give at least {MIN_SECRET_BYTES} random bytes (e.g. `openssl rand -hex 32`)",
        value.len()
    );
    Ok(())
}

/// A cluster node tells other nodes' clients where it is: that must not be a wildcard address.
fn check_public_url(public_url: Option<&str>, listen: SocketAddr) -> anyhow::Result<()> {
    let Some(url) = public_url else {
        anyhow::ensure!(
            !listen.ip().is_unspecified(),
            "a cluster node listening on {listen} needs --public-url (e.g. ws://10.0.0.5:{}): \
             other nodes send clients there, and {} is no address a client can reach",
            listen.port(),
            listen.ip()
        );
        return Ok(());
    };
    let rest = url
        .strip_prefix("ws://")
        .or_else(|| url.strip_prefix("wss://"))
        .ok_or_else(|| anyhow::anyhow!("--public-url {url:?} must start with ws:// or wss://"))?;
    let authority = rest.split('/').next().unwrap_or_default();
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    anyhow::ensure!(!host.is_empty(), "--public-url {url:?} has no host");
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        anyhow::ensure!(!ip.is_unspecified(), "--public-url {url:?} is a wildcard address, which no client can reach");
    }
    Ok(())
}

impl Config {
    /// Development settings for tests and embedding: loopback, random port, given data dir.
    pub fn for_tests(data: PathBuf, jwt_secret: &str, api_key: &str) -> Config {
        ServeArgs {
            listen: Some("127.0.0.1:0".parse().expect("valid address")),
            data: Some(data),
            jwt_secret: Some(jwt_secret.into()),
            api_key: Some(api_key.into()),
            ..ServeArgs::default()
        }
        .resolve()
        .expect("test defaults are valid")
    }
}

fn random_secret() -> String {
    use rand::RngExt;
    let mut rng = rand::rng();
    (0..32).map(|_| format!("{:02x}", rng.random::<u8>())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "0123456789abcdef0123456789abcdef-secret";
    const KEY: &str = "0123456789abcdef0123456789abcdef-apikey";

    fn given() -> ServeArgs {
        ServeArgs { jwt_secret: Some(SECRET.into()), api_key: Some(KEY.into()), ..Default::default() }
    }

    fn refusal(args: ServeArgs) -> String {
        match args.resolve() {
            Ok(_) => panic!("accepted"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn flags_win_over_file() {
        let dir = std::env::temp_dir().join(format!("herald-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("herald.toml");
        std::fs::write(
            &file,
            format!("listen = \"127.0.0.1:9000\"\ndata = \"/tmp/x\"\nrate = 7\njwt-secret = \"{SECRET}\"\napi-key = \"{KEY}\"\n"),
        )
        .unwrap();
        let args = ServeArgs { config: Some(file), rate: Some(9), ..Default::default() };
        let cfg = args.merge_file().unwrap().resolve().unwrap();
        assert_eq!(cfg.listen.port(), 9000);
        assert_eq!(cfg.rate, 9);
        assert_eq!(cfg.tokens.secret.as_deref(), Some(SECRET));
        assert!(!cfg.dev_mode);
        let bad = dir.join("bad.toml");
        std::fs::write(&bad, "lisen = 1\n").unwrap();
        assert!(ServeArgs { config: Some(bad), ..Default::default() }.merge_file().is_err());
    }

    #[test]
    fn no_secrets_means_dev_mode() {
        let cfg = ServeArgs::default().resolve().unwrap();
        assert!(cfg.dev_mode);
        assert_eq!(cfg.tokens.secret.as_ref().unwrap().len(), 64);
        assert_ne!(cfg.tokens.secret.as_deref(), Some(cfg.api_key.as_str()));
    }

    #[test]
    fn missing_empty_or_short_secrets_stop_the_server_by_name() {
        let e = refusal(ServeArgs { api_key: Some(String::new()), ..Default::default() });
        assert!(e.contains("--api-key (HERALD_API_KEY) is set but empty"), "{e}");
        let e = refusal(ServeArgs { jwt_secret: Some(SECRET.into()), ..Default::default() });
        assert!(e.contains("no api key"), "{e}");
        let e = refusal(ServeArgs { api_key: Some(KEY.into()), ..Default::default() });
        assert!(e.contains("no way to verify client tokens"), "{e}");
        let e = refusal(ServeArgs { jwt_secret: Some("short".into()), ..given() });
        assert!(e.contains("--jwt-secret (HERALD_JWT_SECRET) is 5 bytes long"), "{e}");
        let e = refusal(ServeArgs { jwt_secret: Some(String::new()), ..given() });
        assert!(e.contains("--jwt-secret (HERALD_JWT_SECRET) is set but empty"), "{e}");
        let e = refusal(ServeArgs { api_key: Some("k".repeat(31)), ..given() });
        assert!(e.contains("--api-key (HERALD_API_KEY) is 31 bytes long"), "{e}");
        assert!(given().resolve().is_ok());
    }

    #[test]
    fn a_public_key_alone_verifies_tokens() {
        let keys = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/keys/");
        let with_key = |name: &str| ServeArgs {
            jwt_public_key: Some(PathBuf::from(format!("{keys}{name}"))),
            api_key: Some(KEY.into()),
            ..Default::default()
        };
        let cfg = with_key("ed25519-public.pem").resolve().unwrap();
        assert!(!cfg.dev_mode && cfg.tokens.secret.is_none() && cfg.tokens.public_key_pem.is_some());
        let e = refusal(with_key("rsa1024-public.pem"));
        assert!(e.contains("--jwt-public-key") && e.contains("1024 bits"), "{e}");
        let e = refusal(with_key("missing.pem"));
        assert!(e.contains("--jwt-public-key: reading"), "{e}");
    }

    #[test]
    fn hooks_need_a_secret_and_sound_settings() {
        let hook = || ServeArgs { webhook_url: Some("http://127.0.0.1:9/hook".into()), ..given() };
        let e = refusal(hook());
        assert!(e.contains("--hook-secret"), "{e}");
        let e = refusal(ServeArgs { hook_secret: Some("short".into()), ..hook() });
        assert!(e.contains("--hook-secret (HERALD_HOOK_SECRET) is 5 bytes"), "{e}");
        let secret = || Some("h".repeat(32));
        let e = refusal(ServeArgs { webhook_url: Some("ftp://x/y".into()), hook_secret: secret(), ..given() });
        assert!(e.contains("must be an http:// or https:// URL"), "{e}");
        let e = refusal(ServeArgs { webhook_events: Some(vec!["nope".into()]), hook_secret: secret(), ..hook() });
        assert!(e.contains("\"nope\" is not an event type"), "{e}");
        let send =
            || ServeArgs { send_hook_url: Some("https://app.example/hook".into()), hook_secret: secret(), ..given() };
        let e = refusal(ServeArgs { send_hook_fail: Some("ajar".into()), ..send() });
        assert!(e.contains("give closed or open"), "{e}");
        let e = refusal(ServeArgs { send_hook_timeout_ms: Some(0), ..send() });
        assert!(e.contains("--send-hook-timeout-ms"), "{e}");
        let cfg =
            ServeArgs { webhook_events: Some(vec!["message".into(), "join".into()]), ..send() }.resolve().unwrap();
        let sh = cfg.hooks.send_hook.expect("send hook");
        assert_eq!((sh.fail, sh.timeout), (crate::hooks::FailMode::Closed, Duration::from_secs(1)));
        assert!(cfg.hooks.webhook.is_none());
        let cfg = ServeArgs { webhook_events: Some(vec!["message".into()]), hook_secret: secret(), ..hook() }
            .resolve()
            .unwrap();
        let wh = cfg.hooks.webhook.expect("webhook");
        assert_eq!((wh.events, wh.offline_max), (Some(vec!["message".to_string()]), 1000));
        assert!(given().resolve().unwrap().hooks.secret.is_none(), "no hook, no secret needed");
    }

    #[test]
    fn nonsense_settings_stop_the_server() {
        let e = refusal(ServeArgs { heartbeat_ms: Some(0), ..given() });
        assert!(e.contains("heartbeat-ms must be above 0"), "{e}");
        let e = refusal(ServeArgs { frame_limit: Some(16 * 1024), body_limit: Some(16 * 1024), ..given() });
        assert!(e.contains("frame-limit (16384) must be at least body-limit (16384)"), "{e}");
        let e = refusal(ServeArgs { broker: Some(vec!["nats://127.0.0.1:4222".into()]), ..given() });
        assert!(e.contains("give --store"), "{e}");
        let cluster = || ServeArgs {
            broker: Some(vec!["nats://127.0.0.1:4222".into()]),
            store: Some(vec!["postgres://h/db".into()]),
            ..given()
        };
        let e = refusal(ServeArgs { listen: Some("0.0.0.0:8080".parse().unwrap()), ..cluster() });
        assert!(e.contains("needs --public-url"), "{e}");
        for url in ["ws://0.0.0.0:8080", "ws://[::]:8080/x", "http://10.0.0.5:8080"] {
            assert!(ServeArgs { public_url: Some(url.into()), ..cluster() }.resolve().is_err(), "{url}");
        }
        let ok = ServeArgs {
            listen: Some("0.0.0.0:8080".parse().unwrap()),
            public_url: Some("wss://chat.example.com".into()),
            ..cluster()
        };
        assert!(ok.resolve().is_ok());
        let e = refusal(ServeArgs { allowed_origins: Some(vec!["example.com".into()]), ..given() });
        assert!(e.contains("--allowed-origins"), "{e}");
        let e = refusal(ServeArgs { store: Some(vec!["mysql://h/db".into()]), ..given() });
        assert!(e.contains("--store"), "{e}");
        let named = vec!["a=postgres://h/db1".to_string(), "b=postgres://h/db2".into()];
        assert!(ServeArgs { store: Some(named), ..given() }.resolve().is_ok());
        let twice = vec!["a=postgres://u:hunter2@h/db1".to_string(), "a=postgres://h/db2".into()];
        let e = refusal(ServeArgs { store: Some(twice), ..given() });
        assert!(e.contains("\"a\" twice") && !e.contains("hunter2"), "{e}");
        let e = refusal(ServeArgs { max_watches: Some(0), ..given() });
        assert!(e.contains("max-watches"), "{e}");
    }
}
