//! `GET /v1/openapi.json`: the OpenAPI 3 document of the HTTP API, made
//! from the route handlers' own annotations and the types they read and
//! answer, so it cannot drift from the code. The WebSocket protocol is not in
//! it (docs/protocol.md describes it).

use herald_protocol::frame::ErrorBody;
use herald_protocol::reply::{
    ChatView, ChatsOk, EmptyOk, FetchOk, InboxEntry, InboxOk, MemberEntry, MembersOk, PinEntry, PinsOk, PresenceOk,
    Profile, SearchHit, SearchOk, SeqOk, UploadOk,
};
use herald_protocol::{ErrorCode, Event, EventType, FileRef, Replies, StreamState};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::chats::{PostEventBody, PostedType, PutChatBody};
use super::moderation::{EditBody, MuteBody};
use super::params::ErrorEnvelope;

/// The `api_key` security scheme: `Authorization: Bearer <api key>`.
struct ApiKey;

impl Modify for ApiKey {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme("api_key", SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)));
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "herald HTTP API",
        description = "The server API of herald, a real-time chat server. Routes marked with the api_key \
                       scheme need `Authorization: Bearer <api key>`. Clients speak the WebSocket protocol \
                       at `GET /v1/ws?ws={workspace}` (see docs/protocol.md), which is not described here."
    ),
    paths(
        super::chats::put_chat,
        super::chats::get_chat,
        super::chats::add_member,
        super::chats::remove_member,
        super::chats::post_event,
        super::chats::get_events,
        super::chats::get_presence,
        super::conversations::chat_list,
        super::conversations::member_list,
        super::conversations::pin_list,
        super::conversations::append,
        super::files::upload,
        super::moderation::edit_event,
        super::moderation::delete_event,
        super::moderation::ban,
        super::moderation::unban,
        super::moderation::mute,
        super::moderation::unmute,
        super::moderation::inbox,
        super::users::revoke,
        super::users::erase,
        super::export::export,
        super::search::search,
        super::issue_token,
        super::gateway_for,
        super::admin::admin_status,
        super::admin::admin_drain,
        super::admin::admin_nodes,
        super::healthz,
        super::ready,
        super::metrics,
        openapi_json,
    ),
    components(schemas(
        ChatView, SeqOk, FetchOk, PresenceOk, Event, EventType, ErrorBody, ErrorCode, ErrorEnvelope, PutChatBody,
        PostEventBody, PostedType, super::TokenBody, super::TokenOk, super::GatewayOk, super::admin::DrainBody,
        super::admin::DrainOk, super::admin::NodesOk, super::admin::NodeView, super::admin::AdminStatus,
        super::admin::StatusNode, super::admin::StatusShard, super::Ready, EditBody, MuteBody, EmptyOk, InboxOk,
        InboxEntry, super::users::ErasedOk, crate::hooks::webhook::WebhookStatus, ChatsOk, MembersOk,
        MemberEntry, PinsOk, PinEntry, Profile, Replies, StreamState, super::conversations::AppendBody, super::files::UploadBody, UploadOk, FileRef,
        super::export::ExportLine, super::export::ExportKind,
        SearchOk, SearchHit,
    )),
    modifiers(&ApiKey),
)]
struct ApiDoc;

/// The document, as JSON.
pub fn document() -> String {
    let mut doc = ApiDoc::openapi();
    doc.info.version = env!("CARGO_PKG_VERSION").into();
    doc.to_json().expect("the OpenAPI document serializes")
}

/// This document.
#[utoipa::path(get, path = "/v1/openapi.json", tag = "server",
    responses((status = 200, description = "The OpenAPI 3 document of this API", content_type = "application/json")))]
pub async fn openapi_json() -> impl axum::response::IntoResponse {
    static DOC: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let doc = DOC.get_or_init(document).clone();
    ([(axum::http::header::CONTENT_TYPE, "application/json")], doc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_names_every_route_and_its_security() {
        let doc: serde_json::Value = serde_json::from_str(&document()).unwrap();
        let paths = doc["paths"].as_object().unwrap();
        for (path, methods) in [
            ("/v1/workspaces/{ws}/chats/{chat}", &["put", "get"][..]),
            ("/v1/workspaces/{ws}/chats/{chat}/members/{user}", &["put", "delete"]),
            ("/v1/workspaces/{ws}/chats/{chat}/events", &["post", "get"]),
            ("/v1/workspaces/{ws}/chats/{chat}/presence", &["get"]),
            ("/v1/workspaces/{ws}/chats", &["get"]),
            ("/v1/workspaces/{ws}/chats/{chat}/members", &["get"]),
            ("/v1/workspaces/{ws}/chats/{chat}/pins", &["get"]),
            ("/v1/workspaces/{ws}/chats/{chat}/events/{seq}/append", &["post"]),
            ("/v1/workspaces/{ws}/chats/{chat}/events/{seq}", &["patch", "delete"]),
            ("/v1/workspaces/{ws}/chats/{chat}/bans/{user}", &["put", "delete"]),
            ("/v1/workspaces/{ws}/chats/{chat}/mutes/{user}", &["put", "delete"]),
            ("/v1/workspaces/{ws}/users/{user}/inbox", &["get"]),
            ("/v1/workspaces/{ws}/users/{user}/revoke", &["post"]),
            ("/v1/workspaces/{ws}/users/{user}", &["delete"]),
            ("/v1/tokens", &["post"]),
            ("/v1/gateway", &["get"]),
            ("/v1/admin/status", &["get"]),
            ("/v1/admin/drain", &["post"]),
            ("/v1/admin/nodes", &["get"]),
            ("/healthz", &["get"]),
            ("/readyz", &["get"]),
            ("/metrics", &["get"]),
            ("/v1/openapi.json", &["get"]),
        ] {
            for m in methods {
                assert!(paths[path][m].is_object(), "{m} {path} missing");
            }
        }
        assert_eq!(doc["components"]["securitySchemes"]["api_key"]["scheme"], "bearer");
        for (path, m) in [("/v1/tokens", "post"), ("/v1/admin/status", "get"), ("/v1/admin/drain", "post")] {
            assert!(paths[path][m]["security"].is_array(), "{m} {path} needs the api key");
        }
        let status = &doc["components"]["schemas"]["AdminStatus"]["properties"];
        for field in
            ["connections", "watched_chats", "broker_subscriptions", "nodes", "shards", "requests_total", "webhook"]
        {
            assert!(status[field].is_object(), "AdminStatus lacks {field}");
        }
        let webhook = &doc["components"]["schemas"]["WebhookStatus"]["properties"];
        for field in ["host", "lag_seconds", "last_success_ms", "last_error", "pending_estimate", "owned_shards"] {
            assert!(webhook[field].is_object(), "WebhookStatus lacks {field}");
        }
        assert!(paths["/v1/gateway"]["get"]["security"].is_null(), "the gateway needs no key");
        let id_pattern = r"^[A-Za-z0-9_.:-]{1,128}$";
        assert_eq!(id_pattern, doc["paths"]["/v1/gateway"]["get"]["parameters"][0]["schema"]["pattern"]);
    }
}
