//! The operator's side of the HTTP API: the admin page (`/admin`, served by
//! every node, whatever its mode), and the api-key routes it reads and acts
//! through: this node's status, the cell's nodes, and a drain.
//!
//! Not here: what a drain does (the gateway's, the same as on SIGTERM) or the
//! figures themselves (the gateway, the hub, the store's shards, the metrics
//! recorder own them; this module only gathers them).

use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::{Html, IntoResponse};
use serde::Deserialize;

use super::{ApiResult, AppState, Body, authorize, params, parse_json};
use crate::hooks::webhook::WebhookStatus;

/// The admin page and its script (bundled from `web/admin/` by `web/`'s
/// build and committed, like the demo page, so running herald needs no Node).
const ADMIN_PAGE: &str = include_str!("../../../../web/admin/admin.html");
const ADMIN_JS: &str = include_str!("../../../../web/dist/admin.js");

/// `GET /admin`: the page. Not secret in itself: every figure on it comes
/// from routes that need the api key, which the page asks for.
pub(super) async fn page() -> impl IntoResponse {
    Html(ADMIN_PAGE)
}

/// `GET /admin.js`: the page's script.
pub(super) async fn script() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], ADMIN_JS)
}

/// `POST /v1/admin/drain`'s body (optional).
#[derive(Deserialize, Default, utoipa::ToSchema)]
pub(super) struct DrainBody {
    /// Spread the reconnects over this many ms instead of `--drain-window-ms`.
    window_ms: Option<u64>,
}

/// What a drain started.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub(super) struct DrainOk {
    /// Connections asked to reconnect.
    draining: usize,
    window_ms: u64,
}

/// Takes this node out of routing and moves its clients away, spread over
/// the drain window, as SIGTERM does; the node keeps running (new WebSockets
/// get 503, the HTTP API keeps answering) until it is stopped.
#[utoipa::path(post, path = "/v1/admin/drain", tag = "admin", request_body(content = Option<DrainBody>),
    responses((status = 200, body = DrainOk), params::Refusals), security(("api_key" = [])))]
pub(super) async fn admin_drain(State(s): State<AppState>, headers: HeaderMap, Body(body): Body) -> ApiResult<DrainOk> {
    authorize(&s, &headers)?;
    let req: DrainBody = if body.is_empty() { DrainBody::default() } else { parse_json(&body)? };
    let window = req.window_ms.map(std::time::Duration::from_millis).unwrap_or(s.drain_window);
    let connections = s.gateway.connections();
    s.cluster.leave().await;
    s.gateway.drain(window, "drain");
    Ok(axum::Json(DrainOk { draining: connections, window_ms: window.as_millis() as u64 }))
}

/// One node of the cell.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub(super) struct NodeView {
    node: String,
    url: String,
    /// Its open connections, as it last announced them.
    load: u64,
}

/// The cell's live nodes.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub(super) struct NodesOk {
    nodes: Vec<NodeView>,
}

/// The live nodes of this cell as this node sees them.
#[utoipa::path(get, path = "/v1/admin/nodes", tag = "admin",
    responses((status = 200, body = NodesOk), params::Refusals), security(("api_key" = [])))]
pub(super) async fn admin_nodes(State(s): State<AppState>, headers: HeaderMap) -> ApiResult<NodesOk> {
    authorize(&s, &headers)?;
    let nodes = s.cluster.nodes().into_iter().map(|n| NodeView { node: n.name, url: n.url, load: n.load }).collect();
    Ok(axum::Json(NodesOk { nodes }))
}

/// A node of the cell, for the admin page.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub(super) struct StatusNode {
    node: String,
    /// The base URL of its WebSocket.
    url: String,
    /// Open connections: this node's now, another's as it last announced
    /// them (every second).
    connections: u64,
    /// Whether this is the node that answered.
    this: bool,
}

/// One PostgreSQL shard of the store.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub(super) struct StatusShard {
    /// The name given with `NAME=`, or `#n`, its place in the `--store` list.
    label: String,
    /// The shard's breaker: `closed` (serving), `open` (refusing at once) or
    /// `half_open` (letting a probe through).
    #[schema(pattern = "^(closed|open|half_open)$")]
    breaker: &'static str,
    /// Operations running on the shard now (its bulkhead lets 1,024 run).
    in_flight: u64,
    /// Operations waiting for the bulkhead (4,096 may wait, then it refuses).
    waiting: u64,
}

/// This node and its cell, as the admin page shows them.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub(super) struct AdminStatus {
    /// This node's name (`--node`).
    node: String,
    /// Its cell (`--cell`).
    cell: String,
    /// Whether it drains (SIGTERM or `POST /v1/admin/drain`): it refuses
    /// new WebSockets and is out of routing.
    draining: bool,
    /// When this answer was made, in ms since the Unix epoch: the clock to
    /// turn two answers' counters into rates.
    at_ms: u64,
    /// Open WebSocket connections on this node.
    connections: u64,
    /// Chats that this node's connections watch.
    watched_chats: u64,
    /// Live broker subscriptions (`herald_broker_subjects`): with NATS, the
    /// chat subjects this node follows, lingering ones included.
    broker_subscriptions: u64,
    /// Whether the broker can deliver now.
    broker_ready: bool,
    /// The cell's live nodes, this one always included, sorted by name.
    nodes: Vec<StatusNode>,
    /// The store's PostgreSQL shards, in `--store` order; empty with the
    /// embedded SQLite store.
    shards: Vec<StatusShard>,
    /// Requests answered since the process started (`herald_requests_total`,
    /// every op and outcome).
    requests_total: u64,
    /// Event frames queued to connections since the process started
    /// (`herald_pushes_total`).
    pushes_total: u64,
    /// The webhook as this node delivers it; absent without `--webhook-url`.
    #[serde(skip_serializing_if = "Option::is_none")]
    webhook: Option<WebhookStatus>,
}

/// This node's figures for the admin page: connections, watched chats,
/// broker subscriptions, each shard's breaker and bulkhead, the cell's
/// nodes, and the request and push counters the page turns into rates.
/// Counters and the broker's gauge are the process's, as `/metrics` shows.
#[utoipa::path(get, path = "/v1/admin/status", tag = "admin",
    responses((status = 200, body = AdminStatus), params::Refusals), security(("api_key" = [])))]
pub(super) async fn admin_status(State(s): State<AppState>, headers: HeaderMap) -> ApiResult<AdminStatus> {
    authorize(&s, &headers)?;
    let this = s.cluster.this_node();
    let connections = s.gateway.connections() as u64;
    let mut nodes: Vec<StatusNode> = s
        .cluster
        .nodes()
        .into_iter()
        .filter(|n| n.name != this.name)
        .map(|n| StatusNode { node: n.name, url: n.url, connections: n.load, this: false })
        .collect();
    nodes.push(StatusNode { node: this.name.clone(), url: this.url, connections, this: true });
    nodes.sort_by(|a, b| a.node.cmp(&b.node));
    let shards = s
        .chats
        .shards()
        .into_iter()
        .map(|sh| StatusShard {
            label: sh.label,
            breaker: sh.breaker,
            in_flight: sh.in_flight as u64,
            waiting: sh.waiting as u64,
        })
        .collect();
    let rendered = crate::metrics::handle().render();
    let count = |name| crate::metrics::sum(&rendered, name).max(0.0) as u64;
    let at_ms =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
    Ok(axum::Json(AdminStatus {
        node: this.name,
        cell: s.cells.name().to_string(),
        draining: s.gateway.draining(),
        at_ms,
        connections,
        watched_chats: s.chats.watched_chats() as u64,
        broker_subscriptions: count("herald_broker_subjects"),
        broker_ready: s.chats.broker_ready(),
        nodes,
        shards,
        requests_total: count("herald_requests_total"),
        pushes_total: count("herald_pushes_total"),
        webhook: s.webhook.as_ref().map(|w| w.status()),
    }))
}
