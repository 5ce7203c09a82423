//! Wiring: builds store, broker, hub, chats, gateway and the HTTP app from a
//! [`Config`], serves a listener until `shutdown` resolves, then drains
//! connections and flushes the store. The binary is a thin shell over [`run`];
//! tests run several nodes of one cell in a process with [`run_in_cell`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::api::{self, AppState};
use crate::auth::Tokens;
use crate::broker::Broker;
use crate::broker::bus::Bus;
use crate::broker::memory::MemoryBroker;
use crate::broker::nats::NatsBroker;
use crate::chat::{ChatLimits, Chats};
use crate::cluster::{Cells, Cluster};
use crate::config::Config;
use crate::front::Front;
use crate::gateway::{Gateway, GatewayConfig};
use crate::hooks::send::SendHook;
use crate::hooks::webhook::Webhook;
use crate::hooks::webhook::online::Online;
use crate::hub::Hub;
use crate::revoke::Revocations;
use crate::store::postgres::{PgShard, ShardCheckError};
use crate::store::shard_identity::Claims;
use crate::store::sharded::Sharded;
use crate::store::sqlite::SqliteStore;
use crate::store::{ShardSpec, Store};

/// Delay between hearing of a new node and moving clients to it.
const REBALANCE_SETTLE: Duration = Duration::from_secs(2);
/// Time allowed, beyond the drain window, for connections to close at shutdown.
/// Public for the check that a service manager's stop timeout outlasts it.
pub const CLOSE_GRACE: Duration = Duration::from_secs(5);
/// The most a node that is alone in its cell (or has none) spreads its
/// clients' return over when it stops: they come back within about a second
/// of the restarted process listening, still not in one burst.
pub const ALONE_DRAIN_WINDOW: Duration = Duration::from_secs(1);

/// How long a node waits at start for its shards' check; a shard that has
/// not answered by then is checked when it first does.
const SHARD_CHECK_WAIT: Duration = Duration::from_secs(5);

/// The embedded store, or PostgreSQL shards when `--store` entries are given.
/// Every shard is checked at once: the node refuses to start when a shard
/// records another name than this node gives it, when two entries reach one
/// database, or when a shard's TLS certificate is not trusted. A shard that
/// does not answer does not stop the start (its chats fail until it does).
async fn open_store(config: &Config) -> anyhow::Result<Arc<dyn Store>> {
    if config.store.stores.is_empty() {
        return Ok(Arc::new(SqliteStore::open(&config.store.data)?));
    }
    let specs = ShardSpec::parse_all(&config.store.stores)?;
    let claims = Claims::default();
    let shards = specs.iter().map(|spec| PgShard::open(spec, &claims)).collect::<anyhow::Result<Vec<_>>>()?;
    let checks = shards.iter().map(|s| tokio::time::timeout(SHARD_CHECK_WAIT, s.check()));
    for (shard, check) in shards.iter().zip(futures_util::future::join_all(checks).await) {
        match check {
            Ok(Ok(())) => {}
            Ok(Err(ShardCheckError::Refused(why))) => anyhow::bail!("refusing to start: {why}"),
            Ok(Err(ShardCheckError::Unreachable(why))) => {
                tracing::warn!(shard = %shard.name(), error = %why, "storage shard not reachable: checked when it answers");
            }
            Err(_) => tracing::warn!(shard = %shard.name(), "storage shard too slow at start: checked when it answers"),
        }
    }
    tracing::info!(shards = shards.len(), "using PostgreSQL shards");
    let shards = shards.into_iter().map(|s| (s.name().clone(), Box::new(s) as Box<dyn Store>)).collect();
    Ok(Arc::new(Sharded::new(shards)))
}

/// The parts of a node that serve connections, wired together.
pub(crate) struct Core {
    pub chats: Arc<Chats>,
    pub tokens: Arc<Tokens>,
    pub cells: Arc<Cells>,
    pub gateway: Arc<Gateway>,
    pub revocations: Arc<Revocations>,
    /// The store as this node reads it (file URLs signed).
    pub store: Arc<dyn Store>,
    /// The node's fan-out, for joining it to a cell.
    pub hub: Arc<Hub>,
}

impl Core {
    /// Builds hub, chats and gateway over `store` and `broker`; the embedded files backend's URLs
    /// start with `files_base` (`http://host:port`). `clustered`: the node is one of a cell.
    pub(crate) fn new(
        config: &Config,
        store: Arc<dyn Store>,
        broker: Arc<dyn Broker>,
        files_base: &str,
        clustered: bool,
    ) -> anyhow::Result<Core> {
        // A watch's start fits the outbound queue: its replay in half of it
        // (the chat layer's bound), the live events meanwhile in a quarter
        // (the hub's), so it never closes with 4008.
        let outbox_limit = config.gateway.outbox_limit;
        let files = open_files(config, &store, files_base, clustered)?;
        // From here on the node reads the store through the one owner of file URLs: every event
        // it hands out carries its files' URLs, whichever path reads it.
        let store = match &files {
            Some(f) => crate::files::signed::SignedStore::wrap(store, f.urls.clone()),
            None => store,
        };
        let hub = Hub::with_settings(broker.clone(), store.clone(), config.hub.for_outbox(outbox_limit));
        let limits = ChatLimits::new(config.chat.clone(), outbox_limit);
        let send_hook = match (&config.hooks.send_hook, &config.hooks.secret) {
            (Some(settings), Some(secret)) => Some(Arc::new(SendHook::new(settings, secret, config.chat.body_limit))),
            _ => None,
        };
        let revocations = Revocations::new(store.clone());
        let chats = Arc::new(
            Chats::new(store.clone(), broker, hub.clone(), limits).with_send_hook(send_hook).with_files(files),
        );
        chats.spawn_stream_timeouts();
        let cells = Arc::new(Cells::new(&config.server.cell, &config.server.cells)?);
        let tokens = Arc::new(Tokens::new(&config.tokens)?);
        let gateway = Gateway::new(
            chats.clone(),
            tokens.clone(),
            GatewayConfig {
                node: config.server.node.clone(),
                settings: config.gateway.clone(),
                cells: cells.clone(),
                revocations: revocations.clone(),
            },
        );
        Ok(Core { chats, tokens, cells, gateway, revocations, store, hub })
    }
}

/// The node's files: in `--files-s3`'s bucket, or beside the embedded store in `--data`, served by
/// this node at `base`; and their sweeper. A node of a cell (`--broker`) without a bucket keeps no
/// files: one node's folder cannot serve the others' clients, so uploads are refused with the reason.
fn open_files(
    config: &Config,
    store: &Arc<dyn Store>,
    base: &str,
    clustered: bool,
) -> anyhow::Result<Option<Arc<crate::chat::FileService>>> {
    use crate::files::{Blobs, FileUrls, local::LocalBlobs, serve::Served};
    let s = &config.files;
    let (blobs, served): (Arc<dyn Blobs>, Option<Served>) = match &s.files_s3 {
        Some(url) => (Arc::new(crate::files::s3::S3Blobs::from_url(url)?), None),
        None if clustered => {
            tracing::warn!(
                "this node is part of a cell (--broker) without --files-s3: it keeps no files, and `upload` \
                 is refused; give every node of the cell the same --files-s3 bucket to keep files"
            );
            return Ok(None);
        }
        None => {
            let local = Arc::new(LocalBlobs::open(&config.store.data.join("files"), base)?);
            let origins: Arc<[String]> = config.gateway.limits.allowed_origins.clone().into();
            let writing = Arc::new(tokio::sync::Semaphore::new(crate::files::serve::UPLOADS_AT_ONCE));
            (local.clone(), Some(Served { store: store.clone(), blobs: local, origins, writing }))
        }
    };
    tracing::info!(backend = blobs.kind(), max_file_bytes = s.max_file_bytes, "files");
    crate::files::sweep::spawn(Arc::downgrade(store), blobs.clone(), Duration::from_millis(s.files_orphan_ms));
    let urls = Arc::new(FileUrls::new(blobs));
    Ok(Some(Arc::new(crate::chat::FileService { urls, max_bytes: s.max_file_bytes, served })))
}

/// The base of URLs this node serves itself: `--public-url` as http(s), else its listening address.
fn files_base(config: &Config, listener: &TcpListener) -> String {
    match config.server.public_url.as_deref() {
        Some(url) => {
            let (scheme, rest) = match url.strip_prefix("wss://") {
                Some(rest) => ("https", rest),
                None => ("http", url.strip_prefix("ws://").unwrap_or(url)),
            };
            format!("{scheme}://{}", rest.split('/').next().unwrap_or_default())
        }
        None => format!("http://{}", listener.local_addr().map(|a| a.to_string()).unwrap_or_default()),
    }
}

/// When a node joins, moves this node's clients whose workspace it now owns
/// (rendezvous alone: a decision on a second-old load figure would move
/// workspaces that stay), spread over `window`: the newcomer takes its share
/// without a storm.
fn spawn_rebalancer(cluster: Arc<Cluster>, gateway: Arc<Gateway>, window: Duration) {
    let mut joins = cluster.joins();
    tokio::spawn(async move {
        while joins.changed().await.is_ok() {
            let Some(newcomer) = joins.borrow_and_update().clone() else { continue };
            // Wait a moment: nodes that join together are rebalanced once.
            tokio::time::sleep(REBALANCE_SETTLE).await;
            let moved = gateway.rebalance(window, |ws| cluster.owner(ws).is_some_and(|n| n == newcomer));
            tracing::info!(node = %newcomer, moved, "rebalanced toward a new node");
        }
    });
}

/// What joins a node to the rest of its cell: its store, its broker and,
/// unless it is alone, the cell's bus (the broker's own connection).
struct Links {
    store: Arc<dyn Store>,
    broker: Arc<dyn Broker>,
    bus: Option<Arc<dyn Bus>>,
    /// Whether this node closes the store when it stops (not a store shared in process).
    closes_store: bool,
}

/// The links `config` names: its stores, and NATS when `--broker` is given.
async fn connect(config: &Config) -> anyhow::Result<Links> {
    let store = open_store(config).await?;
    if config.broker.brokers.is_empty() {
        return Ok(Links { store, broker: Arc::new(MemoryBroker::new()), bus: None, closes_store: true });
    }
    let nats = NatsBroker::connect(&config.broker.brokers, &config.server.cell, config.broker.linger()).await?;
    Ok(Links { store, broker: nats.clone(), bus: Some(nats), closes_store: true })
}

/// Serves `listener` with `config` until `shutdown` resolves; then pushes
/// `reconnect` to every client, closes them with 4012, and flushes the store.
pub async fn run(
    listener: TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    // The recorder first: what opening the store sets (each shard's breaker
    // gauge) must reach /metrics.
    crate::metrics::spawn_upkeep();
    let links = connect(&config).await?;
    serve(listener, config, links, shutdown).await
}

/// [`run`] for a node of a cell whose nodes share this process (tests):
/// `seat`, its place on a [`MemoryCell`](crate::broker::memory::MemoryCell),
/// is its broker and bus, and `store` the store the cell's nodes share
/// (`config.broker` and `config.store` are not read). The store outlives
/// the node: whoever made it closes it.
pub async fn run_in_cell(
    listener: TcpListener,
    config: Config,
    seat: Arc<MemoryBroker>,
    store: Arc<dyn Store>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    crate::metrics::spawn_upkeep();
    let links = Links { store, broker: seat.clone(), bus: Some(seat), closes_store: false };
    serve(listener, config, links, shutdown).await
}

/// What [`run`] and [`run_in_cell`] share: builds the node over `links` and serves.
async fn serve(
    listener: TcpListener,
    config: Config,
    links: Links,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let Links { store, broker, bus, closes_store } = links;
    if let Some(url) = &config.files.files_s3 {
        // A bucket that is missing or refuses the keys stops the node now, with the reason.
        crate::files::s3::S3Blobs::from_url(url)?.check().await.map_err(|e| anyhow::anyhow!("--files-s3: {e}"))?;
    }
    let base = files_base(&config, &listener);
    let clustered = bus.is_some();
    let Core { chats, tokens, cells, gateway, revocations, store: signed, hub } =
        Core::new(&config, store.clone(), broker, &base, clustered)?;
    revocations.follow(bus.clone()).await;
    let public_url = config
        .server
        .public_url
        .clone()
        .unwrap_or_else(|| format!("ws://{}", listener.local_addr().map(|a| a.to_string()).unwrap_or_default()));
    let cluster = match &bus {
        Some(bus) => {
            let gw = gateway.clone();
            let cluster = Cluster::join(bus.clone(), &config.server.node, &public_url, move || gw.connections() as u64);
            // Weak: a node that stopped stops announcing itself, even while its hub's tasks linger.
            let peers = Arc::downgrade(&cluster);
            hub.set_cell(
                cluster.incarnation(),
                Arc::new(move |inc: &str| peers.upgrade().is_some_and(|c| c.live(inc))),
                bus.clone(),
            );
            cluster
        }
        None => Cluster::single(&config.server.node, &public_url),
    };
    if config.server.rebalance {
        spawn_rebalancer(cluster.clone(), gateway.clone(), config.server.drain_window());
    }
    // Every node of a cell answers "who is online" questions, webhook or not: the
    // node delivering a batch asks them all.
    let online = Online::new(gateway.clone(), cluster.clone(), bus.clone());
    let webhook = match (&config.hooks.webhook, &config.hooks.secret) {
        (Some(settings), Some(secret)) => {
            Some(Webhook::start(settings.clone(), secret, signed, cluster.clone(), online, bus.is_some()))
        }
        _ => None,
    };
    let state = AppState {
        cells,
        cluster: cluster.clone(),
        drain_window: config.server.drain_window(),
        chats,
        tokens,
        gateway: gateway.clone(),
        api_key: config.api_key.as_str().into(),
        dev_mode: config.dev_mode,
        public_url: config.server.public_url.as_deref().map(Arc::from),
        revocations,
        webhook: webhook.clone(),
    };
    let app = api::router(state, config.server.diag_echo);
    let addr = listener.local_addr()?;
    tracing::info!(%addr, node = %config.server.node, data = %config.store.data.display(), dev_mode = config.dev_mode, "herald serving");

    let drain_window = config.server.drain_window();
    let gw = gateway.clone();
    let signal = async move {
        shutdown.await;
        // A node with no other node to send its clients to is most likely
        // being restarted in place: its clients can only come back to it,
        // so spreading them over the whole window would keep them away for
        // seconds after the new process listens.
        let alone = cluster.nodes().iter().all(|n| n.name == config.server.node);
        let window = if alone { drain_window.min(ALONE_DRAIN_WINDOW) } else { drain_window };
        tracing::info!(alone, window_ms = window.as_millis() as u64, "shutting down: draining connections");
        cluster.leave().await;
        gw.drain(window, "drain");
    };
    let front = Front::new(config.front.clone(), gateway.timers());
    front.serve(listener, app, signal).await;
    if !gateway.wait_closed(CLOSE_GRACE).await {
        tracing::warn!(left = gateway.connections(), "connections still open after the grace period");
    }
    if let Some(webhook) = &webhook {
        webhook.stop();
    }
    if closes_store {
        store.close().await;
    }
    tracing::info!("herald stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use axum::Router;
    use axum::body::Body;
    use axum::extract::connect_info::MockConnectInfo;
    use axum::http::{Request, StatusCode, header};
    use tower::ServiceExt;

    use super::*;
    use crate::config::ServeArgs;
    use crate::store::sqlite::SqliteStore;

    /// The router of a development-mode node, as `run` builds it.
    fn dev_app(dir: &std::path::Path) -> Router {
        let data = dir.to_str().unwrap();
        let config = ServeArgs::parse_from(["serve", "--data", data]).and_then(ServeArgs::resolve).unwrap();
        assert!(config.dev_mode);
        let store: Arc<dyn crate::store::Store> = Arc::new(SqliteStore::open(dir).unwrap());
        let core = Core::new(&config, store, Arc::new(MemoryBroker::new()), "http://127.0.0.1:1", false).unwrap();
        let state = AppState {
            chats: core.chats,
            tokens: core.tokens,
            gateway: core.gateway,
            api_key: config.api_key.as_str().into(),
            dev_mode: true,
            cluster: Cluster::single(&config.server.node, "ws://127.0.0.1:1"),
            cells: core.cells,
            drain_window: config.server.drain_window(),
            public_url: None,
            revocations: core.revocations,
            webhook: None,
        };
        api::router(state, false)
    }

    #[tokio::test]
    async fn dev_tokens_are_for_loopback_peers_only() {
        let dir = tempfile::tempdir().unwrap();
        let app = dev_app(dir.path());
        for (peer, status) in [
            ("10.1.2.3:5000", StatusCode::FORBIDDEN),
            ("192.168.0.10:5000", StatusCode::FORBIDDEN),
            ("[2001:db8::1]:5000", StatusCode::FORBIDDEN),
            ("[::ffff:10.0.0.1]:5000", StatusCode::FORBIDDEN),
            ("127.0.0.1:5000", StatusCode::OK),
            ("127.8.9.10:5000", StatusCode::OK),
            ("[::1]:5000", StatusCode::OK),
            ("[::ffff:127.0.0.1]:5000", StatusCode::OK),
        ] {
            let peer: SocketAddr = peer.parse().unwrap();
            let req = Request::post("/v1/dev/token")
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(r#"{"workspace":"w","user":"u"}"#))
                .unwrap();
            let res = app.clone().layer(MockConnectInfo(peer)).oneshot(req).await.unwrap();
            assert_eq!(res.status(), status, "peer {peer}");
        }
    }
}
