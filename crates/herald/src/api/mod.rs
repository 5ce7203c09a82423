//! The HTTP side: the server API (api key), tokens, `/v1/gateway`, health,
//! metrics, the admin page and its routes (`admin`), and in development mode
//! the demo page and dev tokens; for any other path or method, the JSON
//! error every route answers (404, 405).
//! [`router`] builds the whole app so tests can drive it without a socket.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{delete, get, patch, post, put};
use herald_protocol::ids::{invalid_id, invalid_user_id, is_valid_id, is_valid_user_id};
use herald_protocol::limits::size_in_words;
use serde::Deserialize;

use crate::auth::{DEFAULT_TTL_S, MAX_TTL_S, Tokens};
use crate::chat::Chats;
use crate::cluster::{Cells, Cluster};
use crate::error::Error;
use crate::gateway::{self, Gateway};

/// Everything the routes share.
#[derive(Clone)]
pub struct AppState {
    pub chats: Arc<Chats>,
    pub tokens: Arc<Tokens>,
    pub gateway: Arc<Gateway>,
    pub api_key: Arc<str>,
    pub dev_mode: bool,
    pub cluster: Arc<Cluster>,
    pub cells: Arc<Cells>,
    /// Window over which an admin drain spreads reconnects.
    pub drain_window: std::time::Duration,
    /// `--public-url` as given: what `/v1/gateway` hands out on one node too
    /// (behind a TLS proxy, `wss://...`, which the `Host` header cannot tell).
    pub public_url: Option<Arc<str>>,
    /// Revoked tokens: the users routes revoke through it.
    pub revocations: Arc<crate::revoke::Revocations>,
    /// The webhook, when `--webhook-url` is set: for the admin status.
    pub webhook: Option<Arc<crate::hooks::webhook::Webhook>>,
}

/// The demo page and its script (the SDK and the page's code, bundled by
/// `web/`'s build and committed, so running herald needs no Node).
const DEMO_PAGE: &str = include_str!("../../../../web/demo.html");
const DEMO_JS: &str = include_str!("../../../../web/dist/demo.js");

mod admin;
mod chats;
mod conversations;
mod export;
mod files;
mod moderation;
pub mod openapi;
mod params;
mod search;
mod users;

/// The least a request body may be on the server API; raised with
/// `--body-limit` so a request that carries an event body of the largest
/// size, escaped, still fits.
const API_BODY_LIMIT: usize = 1024 * 1024;

/// The largest request body the server API reads, for a node whose events
/// are at most `body_limit` bytes.
fn api_body_limit(body_limit: usize) -> usize {
    API_BODY_LIMIT.max(body_limit.saturating_mul(2).saturating_add(64 * 1024))
}

/// A request's body, at most [`api_body_limit`] bytes: past it, 413 with
/// the JSON error every refusal has (the socket then reads and discards
/// what is still sent for a moment, so the client reads this answer
/// instead of a reset: see `front::socket`).
pub(super) struct Body(pub Bytes);

impl<S: Send + Sync> axum::extract::FromRequest<S> for Body {
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, ApiError> {
        let limit = req.extensions().get::<BodyLimit>().map_or(API_BODY_LIMIT, |l| l.0);
        match Bytes::from_request(req, state).await {
            Ok(body) => Ok(Body(body)),
            Err(r) if r.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                Err(ApiError(Error::TooLarge(format!("the request body is over {}", size_in_words(limit as u64)))))
            }
            Err(r) => Err(bad(r.body_text())),
        }
    }
}

/// The body limit the router was built with, for [`Body`]'s message.
#[derive(Clone, Copy)]
struct BodyLimit(usize);

/// The whole HTTP app.
pub fn router(state: AppState, diag_echo: bool) -> Router {
    let body_limit = api_body_limit(state.chats.body_limit());
    let mut app = Router::new()
        .route("/v1/workspaces/{ws}/chats/{chat}", put(chats::put_chat).get(chats::get_chat))
        .route("/v1/workspaces/{ws}/chats/{chat}/members/{user}", put(chats::add_member).delete(chats::remove_member))
        .route("/v1/workspaces/{ws}/chats/{chat}/events", post(chats::post_event).get(chats::get_events))
        .route("/v1/workspaces/{ws}/chats/{chat}/presence", get(chats::get_presence))
        .route("/v1/workspaces/{ws}/chats", get(conversations::chat_list))
        .route("/v1/workspaces/{ws}/chats/{chat}/members", get(conversations::member_list))
        .route("/v1/workspaces/{ws}/chats/{chat}/pins", get(conversations::pin_list))
        .route("/v1/workspaces/{ws}/chats/{chat}/files", post(files::upload))
        .route("/v1/workspaces/{ws}/chats/{chat}/events/{seq}/append", post(conversations::append))
        .route(
            "/v1/workspaces/{ws}/chats/{chat}/events/{seq}",
            patch(moderation::edit_event).delete(moderation::delete_event),
        )
        .route("/v1/workspaces/{ws}/chats/{chat}/bans/{user}", put(moderation::ban).delete(moderation::unban))
        .route("/v1/workspaces/{ws}/chats/{chat}/mutes/{user}", put(moderation::mute).delete(moderation::unmute))
        .route("/v1/workspaces/{ws}/users/{user}/inbox", get(moderation::inbox))
        .route("/v1/workspaces/{ws}/search", get(search::search))
        .route("/v1/workspaces/{ws}/users/{user}/revoke", post(users::revoke))
        .route("/v1/workspaces/{ws}/users/{user}", delete(users::erase))
        .route("/v1/workspaces/{ws}/users/{user}/export", get(export::export))
        .route("/v1/tokens", post(issue_token))
        .route("/v1/gateway", get(gateway_for))
        .route("/v1/admin/status", get(admin::admin_status))
        .route("/v1/admin/drain", post(admin::admin_drain))
        .route("/v1/admin/nodes", get(admin::admin_nodes))
        .route("/admin", get(admin::page))
        .route("/admin.js", get(admin::script))
        .route("/healthz", get(healthz))
        .route("/v1/openapi.json", get(openapi::openapi_json))
        .route("/readyz", get(ready))
        .route("/metrics", get(metrics));
    if state.dev_mode {
        app = app
            .route("/", get(|| async { Html(DEMO_PAGE) }))
            .route("/demo.js", get(|| async { ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], DEMO_JS) }))
            .route("/v1/dev/token", post(dev_token));
    } else {
        // Not "no route": say why, and how to have them.
        app = app.route("/", get(dev_only)).route("/demo.js", get(dev_only)).route("/v1/dev/token", post(dev_only));
    }
    let gw = Router::new().route("/v1/ws", get(gateway::ws_route));
    let gw = if diag_echo { gw.route("/diag/echo", get(gateway::echo_route)) } else { gw };
    let served = state.chats.local_files();
    let app = app.with_state(state.clone()).merge(gw.with_state(state.gateway));
    let app = match served {
        Some(served) => app.merge(crate::files::serve::routes(served)),
        None => app,
    };
    app.fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(axum::extract::DefaultBodyLimit::max(body_limit))
        .layer(axum::Extension(BodyLimit(body_limit)))
}

/// The longest part of a request's path an error message repeats.
const PATH_ECHO_MAX: usize = 200;

/// `method path` for an error message, the path cut at [`PATH_ECHO_MAX`] characters.
fn request_line(method: &Method, uri: &Uri) -> String {
    let path: String = uri.path().chars().take(PATH_ECHO_MAX).collect();
    format!("{method} {path}")
}

/// The development-mode routes of a server outside development mode: 404 with the reason.
async fn dev_only(uri: Uri) -> ApiError {
    ApiError(Error::NotFound(format!(
        "{} is served only in development mode, and this server has secrets set: start it with --dev \
         (HERALD_DEV=true) to keep your secrets and have the demo page and dev tokens, or issue tokens \
         with POST /v1/tokens and the api key",
        uri.path()
    )))
}

/// A path no route takes: 404 with the JSON error every route answers, not axum's empty body.
async fn no_route(method: Method, uri: Uri) -> ApiError {
    ApiError(Error::NotFound(format!("no route for {}", request_line(&method, &uri))))
}

/// A route's path with a method it does not take: 405 (axum adds the
/// `Allow` header), with the JSON error body. Its code is `bad_request`:
/// the protocol's codes have none for 405, and the wire protocol does not change.
async fn wrong_method(method: Method, uri: Uri) -> Response {
    let message = format!("{} is not a method of this route (see the Allow header)", request_line(&method, &uri));
    crate::error::http_refusal(StatusCode::METHOD_NOT_ALLOWED, message)
}

/// An error as the HTTP API answers it: `{"error": {...}}` with the code's status.
pub struct ApiError(Error);

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        ApiError(e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        self.0.into_response()
    }
}

type ApiResult<T> = Result<axum::Json<T>, ApiError>;

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError(Error::BadRequest(msg.into()))
}

/// Checks `Authorization: Bearer <api key>` in constant time.
fn authorize(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    let (given, want) = (given.as_bytes(), state.api_key.as_bytes());
    // Every byte of the key is compared whatever was given, so the time
    // depends on the key's length only, never on how much of it matched.
    let mut diff = given.len() ^ want.len();
    for (i, w) in want.iter().enumerate() {
        diff |= usize::from(given.get(i).copied().unwrap_or(0) ^ w);
    }
    if diff == 0 {
        return Ok(());
    }
    let no_header = headers.get(header::AUTHORIZATION).is_none();
    let message = if no_header {
        "a valid api key is required: send it as `Authorization: Bearer <api key>`"
    } else if given.starts_with(b"eyJ") && given.iter().filter(|&&b| b == b'.').count() == 2 {
        // A user token (a JWT) where the api key goes: the easy mistake of sending the client's
        // credential to the server API.
        "a valid api key is required: this is a user token (a JWT), which a client sends in its WebSocket \
         `hello`; the server API takes the api key (HERALD_API_KEY)"
    } else {
        "a valid api key is required: this one is not the server's (HERALD_API_KEY)"
    };
    Err(ApiError(Error::Unauthenticated(message.into())))
}

fn parse_json<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| bad(format!("bad JSON body: {e}")))
}

/// `POST /v1/tokens`'s body.
#[derive(Deserialize, utoipa::ToSchema)]
struct TokenBody {
    #[schema(pattern = r"^[A-Za-z0-9_.:-]{1,128}$")]
    workspace: String,
    #[schema(pattern = r"^[A-Za-z0-9_.:@+-]{1,128}$")]
    user: String,
    /// Lifetime in seconds (default 3600, at most 30 days).
    #[schema(minimum = 1, maximum = 2592000)]
    ttl_s: Option<u64>,
}

/// A signed token for `hello`.
#[derive(serde::Serialize, utoipa::ToSchema)]
struct TokenOk {
    token: String,
}

fn make_token(tokens: &Tokens, body: &[u8]) -> ApiResult<TokenOk> {
    let req: TokenBody = parse_json(body)?;
    if !is_valid_id(&req.workspace) {
        return Err(bad(invalid_id("workspace")));
    }
    if !is_valid_user_id(&req.user) {
        return Err(bad(invalid_user_id("user")));
    }
    let ttl = req.ttl_s.unwrap_or(DEFAULT_TTL_S);
    if ttl == 0 || ttl > MAX_TTL_S {
        return Err(bad(format!("ttl_s must be 1 to {MAX_TTL_S}")));
    }
    let Some(token) = tokens.issue(&req.workspace, &req.user, ttl) else {
        return Err(ApiError(Error::Forbidden(
            "this server verifies tokens with a public key only and issues none: give it --jwt-secret to issue tokens"
                .into(),
        )));
    };
    Ok(axum::Json(TokenOk { token }))
}

/// Issues a client token (HS256, signed with `--jwt-secret`).
#[utoipa::path(post, path = "/v1/tokens", tag = "server", request_body = TokenBody,
    responses((status = 200, body = TokenOk), params::Refusals), security(("api_key" = [])))]
async fn issue_token(State(s): State<AppState>, headers: HeaderMap, Body(body): Body) -> ApiResult<TokenOk> {
    authorize(&s, &headers)?;
    make_token(&s.tokens, &body)
}

/// `POST /v1/dev/token`: development mode only, loopback clients only, no api key.
async fn dev_token(
    State(s): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Body(body): Body,
) -> ApiResult<TokenOk> {
    // An IPv4 peer of a dual-stack socket shows as `::ffff:a.b.c.d`.
    if !peer.ip().to_canonical().is_loopback() {
        return Err(ApiError(Error::Forbidden("dev tokens are for loopback clients only".into())));
    }
    make_token(&s.tokens, &body)
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct GatewayQuery {
    /// The workspace whose clients ask.
    #[param(required = true, pattern = r"^[A-Za-z0-9_.:-]{1,128}$")]
    ws: Option<String>,
}

/// Where a workspace's clients connect.
#[derive(serde::Serialize, utoipa::ToSchema)]
struct GatewayOk {
    /// The WebSocket URL, `.../v1/ws?ws={workspace}`.
    url: String,
    /// The node (or `cell:<name>`) behind it.
    node: String,
}

/// The WebSocket URL this workspace's clients should use: on one node, this
/// node at its `--public-url`, or else at the address the client reached it by; in a cell, the node the
/// workspace routes to; for another cell's workspace, that cell's URL.
#[utoipa::path(get, path = "/v1/gateway", tag = "clients", params(GatewayQuery),
    responses((status = 200, body = GatewayOk), params::Refusals))]
async fn gateway_for(
    State(s): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<GatewayQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<GatewayOk> {
    let Query(q) = query.map_err(|e| bad(format!("bad query: {e}")))?;
    let Some(ws) = q.ws.filter(|w| is_valid_id(w)) else { return Err(bad(invalid_id("ws (the workspace)"))) };
    if let Some((cell, url)) = s.cells.elsewhere(&ws) {
        let Some(url) = url else {
            return Err(ApiError(Error::Forbidden(format!(
                "workspace {ws} is served by cell {cell}, whose URL this node does not know"
            ))));
        };
        return Ok(axum::Json(GatewayOk { url: format!("{url}/v1/ws?ws={ws}"), node: format!("cell:{cell}") }));
    }
    let (base, node) = match s.cluster.route(&ws) {
        Some(n) if s.cluster.nodes().len() > 1 => (n.url, n.name),
        _ => {
            let base = match &s.public_url {
                Some(url) => url.trim_end_matches('/').to_string(),
                None => {
                    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("127.0.0.1");
                    format!("ws://{host}")
                }
            };
            (base, s.gateway.config().node.clone())
        }
    };
    Ok(axum::Json(GatewayOk { url: format!("{base}/v1/ws?ws={ws}"), node }))
}

/// 200 while the process lives.
#[utoipa::path(get, path = "/healthz", tag = "server",
    responses((status = 200, description = "`ok`", body = String, content_type = "text/plain")))]
async fn healthz() -> &'static str {
    "ok"
}

/// Whether this node can serve: its store and broker answer.
#[derive(serde::Serialize, utoipa::ToSchema)]
struct Ready {
    /// `ok` or `unavailable`.
    store: &'static str,
    /// `ok` or `unavailable`.
    broker: &'static str,
    /// With PostgreSQL shards: each one's breaker, under its given name (or `#n`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>)]
    shards: Option<Vec<crate::store::ShardStatus>>,
}

/// 200 when storage and broker answer, 503 otherwise.
#[utoipa::path(get, path = "/readyz", tag = "server",
    responses((status = 200, body = Ready), (status = 503, description = "not ready", body = Ready)))]
async fn ready(State(s): State<AppState>) -> Response {
    let crate::chat::Readiness { store, broker, shards } = s.chats.readiness().await;
    let body = Ready {
        store: if store { "ok" } else { "unavailable" },
        broker: if broker { "ok" } else { "unavailable" },
        shards: (!shards.is_empty()).then_some(shards),
    };
    let status = if store && broker { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, axum::Json(body)).into_response()
}

/// Prometheus metrics (text format).
#[utoipa::path(get, path = "/metrics", tag = "server",
    responses((status = 200, description = "Prometheus text format", body = String, content_type = "text/plain")))]
async fn metrics() -> Response {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], crate::metrics::handle().render()).into_response()
}
