//! Server frames: replies and pushes, encoded straight to JSON text.
//!
//! Encoding goes through small borrowed structs so that a push is serialized
//! once and the same bytes are shared by every watcher.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::value::RawValue;

use crate::codes::ErrorCode;
use crate::event::{Event, EventType, Replies, StreamState};

/// The `err` object of a reply, also the `error` object of an HTTP error body.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorBody {
    pub code: ErrorCode,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
}

#[derive(Serialize)]
struct OkReply<'a, T: Serialize> {
    id: Option<i64>,
    ok: &'a T,
}

#[derive(Serialize)]
struct ErrReply<'a> {
    id: Option<i64>,
    err: &'a ErrorBody,
}

/// `{"id": id, "ok": ok}`.
pub fn ok_reply<T: Serialize>(id: i64, ok: &T) -> String {
    serde_json::to_string(&OkReply { id: Some(id), ok }).expect("replies serialize")
}

/// `{"id": id, "err": {...}}`; `id` is `null` when the frame had none to echo.
pub fn err_reply(id: Option<i64>, err: &ErrorBody) -> String {
    serde_json::to_string(&ErrReply { id, err }).expect("replies serialize")
}

/// The fields of an `event` push, borrowed from wherever the event lives.
#[derive(Debug, Serialize)]
pub struct EventPush<'a> {
    pub ev: &'static str,
    pub chat: &'a str,
    pub seq: u64,
    #[serde(rename = "type")]
    pub kind: EventType,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<&'a str>,
    pub ts: i64,
    pub body: &'a RawValue,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub edited: Option<u64>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub deleted: bool,
    // v1.2: as `Event` writes them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quote: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mentions: Option<&'a [String]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replies: Option<Replies>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub pinned: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reactions: Option<&'a BTreeMap<String, u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<StreamState>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub files: Option<&'a [crate::FileRef]>,
}

impl<'a> EventPush<'a> {
    /// The push of `event` in `chat`.
    pub fn new(chat: &'a str, event: &'a Event) -> Self {
        EventPush {
            ev: "event",
            chat,
            seq: event.seq,
            kind: event.kind,
            user: event.user.as_deref(),
            ts: event.ts,
            body: &event.body,
            client_id: event.client_id.as_deref(),
            edited: event.edited,
            deleted: event.deleted,
            thread: event.thread,
            quote: event.quote,
            mentions: event.mentions.as_deref(),
            replies: event.replies,
            pinned: event.pinned,
            reactions: event.reactions.as_ref(),
            stream: event.stream,
            files: event.files.as_deref(),
        }
    }

    /// The JSON text of this push.
    pub fn encode(&self) -> String {
        serde_json::to_string(self).expect("events serialize")
    }
}

#[derive(Serialize)]
struct NotifyPush<'a> {
    ev: &'static str,
    chat: &'a str,
    seq: u64,
}

/// `{"ev": "notify", "chat": chat, "seq": seq}`: events up to `seq` exist; fetch what you lack.
pub fn notify_push(chat: &str, seq: u64) -> String {
    serde_json::to_string(&NotifyPush { ev: "notify", chat, seq }).expect("pushes serialize")
}

#[derive(Serialize)]
struct ReconnectPush<'a> {
    ev: &'static str,
    after_ms: u64,
    reason: &'a str,
}

/// `{"ev": "reconnect", "after_ms": n, "reason": reason}`.
pub fn reconnect_push(after_ms: u64, reason: &str) -> String {
    serde_json::to_string(&ReconnectPush { ev: "reconnect", after_ms, reason }).expect("pushes serialize")
}

#[derive(Serialize)]
struct TypingPush<'a> {
    ev: &'static str,
    chat: &'a str,
    user: &'a str,
}

/// `{"ev": "typing", "chat": chat, "user": user}`: `user` is typing in `chat`.
pub fn typing_push(chat: &str, user: &str) -> String {
    serde_json::to_string(&TypingPush { ev: "typing", chat, user }).expect("pushes serialize")
}

#[derive(Serialize)]
struct PresenceUserPush<'a> {
    ev: &'static str,
    chat: &'a str,
    user: &'a str,
    present: bool,
}

/// `{"ev": "presence", "chat": chat, "user": user, "present": present}`:
/// `user` became present in `chat`, or stopped being present.
pub fn presence_user_push(chat: &str, user: &str, present: bool) -> String {
    serde_json::to_string(&PresenceUserPush { ev: "presence", chat, user, present }).expect("pushes serialize")
}

/// The fields of an `inbox` push: one chat of a live inbox changed.
#[derive(Debug, Serialize)]
pub struct InboxPush<'a> {
    pub ev: &'static str,
    pub chat: &'a str,
    /// The chat's latest event.
    pub seq: u64,
    /// The timestamp of the chat's latest event.
    pub ts: i64,
    pub unread: u64,
    /// v1.2: the sum of `unread` over the threads this user follows in the chat.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threads: Option<u64>,
    /// v1.2: unread messages whose mentions name this user.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mentions: Option<u64>,
    /// True once the user left the chat.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub left: bool,
}

impl InboxPush<'_> {
    /// The JSON text of this push.
    pub fn encode(&self) -> String {
        serde_json::to_string(self).expect("pushes serialize")
    }
}

/// `{"ev": "inbox", "chat": chat, "seq": seq, "ts": ts, "unread": unread}`,
/// with `"left": true` once the user left the chat: one chat of a live
/// inbox changed (v1.1's shape, without v1.2's `threads` and `mentions`).
pub fn inbox_push(chat: &str, seq: u64, ts: i64, unread: u64, left: bool) -> String {
    InboxPush { ev: "inbox", chat, seq, ts, unread, threads: None, mentions: None, left }.encode()
}

#[derive(Serialize)]
struct AppendPush<'a> {
    ev: &'static str,
    chat: &'a str,
    target: u64,
    text: &'a str,
    at: u64,
}

/// `{"ev": "append", "chat": chat, "target": target, "text": text, "at": at}` (v1.2): `text` was
/// added to the streamed message `target`, whose text was `at` UTF-16 code units long before it.
pub fn append_push(chat: &str, target: u64, text: &str, at: u64) -> String {
    serde_json::to_string(&AppendPush { ev: "append", chat, target, text, at }).expect("pushes serialize")
}

/// The length of `text` in UTF-16 code units, as a JavaScript string counts it: the unit of an
/// `append` push's `at`.
pub fn utf16_len(text: &str) -> u64 {
    text.chars().map(|c| c.len_utf16() as u64).sum()
}

#[derive(Serialize)]
struct PresenceCountPush<'a> {
    ev: &'static str,
    chat: &'a str,
    count: u64,
}

/// `{"ev": "presence", "chat": chat, "count": count}`: how many users are
/// present, for chats with more than 100 of them.
pub fn presence_count_push(chat: &str, count: u64) -> String {
    serde_json::to_string(&PresenceCountPush { ev: "presence", chat, count }).expect("pushes serialize")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_push_shape() {
        let ev = Event {
            client_id: Some("m-17".into()),
            ..Event::new(
                42,
                EventType::Message,
                Some("alice".into()),
                1732233600123,
                RawValue::from_string(r#"{"text":"hi"}"#.into()).unwrap(),
            )
        };
        assert_eq!(
            EventPush::new("general", &ev).encode(),
            r#"{"ev":"event","chat":"general","seq":42,"type":"message","user":"alice","ts":1732233600123,"body":{"text":"hi"},"client_id":"m-17"}"#
        );
        assert_eq!(
            serde_json::to_string(&ev).unwrap(),
            r#"{"seq":42,"type":"message","user":"alice","ts":1732233600123,"body":{"text":"hi"},"client_id":"m-17"}"#
        );
    }

    #[test]
    fn replies() {
        let e = ErrorBody { code: ErrorCode::Throttled, message: "slow down".into(), retry_after_ms: Some(800) };
        assert_eq!(
            err_reply(Some(7), &e),
            r#"{"id":7,"err":{"code":"throttled","message":"slow down","retry_after_ms":800}}"#
        );
        assert_eq!(ok_reply(7, &serde_json::json!({})), r#"{"id":7,"ok":{}}"#);
        assert_eq!(notify_push("g", 57), r#"{"ev":"notify","chat":"g","seq":57}"#);
        assert_eq!(reconnect_push(2300, "drain"), r#"{"ev":"reconnect","after_ms":2300,"reason":"drain"}"#);
    }

    #[test]
    fn live_pushes() {
        assert_eq!(typing_push("general", "alice"), r#"{"ev":"typing","chat":"general","user":"alice"}"#);
        assert_eq!(
            presence_user_push("general", "bob", true),
            r#"{"ev":"presence","chat":"general","user":"bob","present":true}"#
        );
        assert_eq!(presence_count_push("general", 5312), r#"{"ev":"presence","chat":"general","count":5312}"#);
        assert_eq!(
            inbox_push("general", 58, 1732233600456, 5, false),
            r#"{"ev":"inbox","chat":"general","seq":58,"ts":1732233600456,"unread":5}"#
        );
        assert_eq!(
            inbox_push("general", 59, 1732233600789, 0, true),
            r#"{"ev":"inbox","chat":"general","seq":59,"ts":1732233600789,"unread":0,"left":true}"#
        );
    }

    #[test]
    fn v1_2_pushes() {
        assert_eq!(
            append_push("general", 57, "lo wor", 3),
            r#"{"ev":"append","chat":"general","target":57,"text":"lo wor","at":3}"#
        );
        let push = InboxPush {
            ev: "inbox",
            chat: "general",
            seq: 58,
            ts: 1,
            unread: 5,
            threads: Some(2),
            mentions: Some(1),
            left: false,
        };
        assert_eq!(
            push.encode(),
            r#"{"ev":"inbox","chat":"general","seq":58,"ts":1,"unread":5,"threads":2,"mentions":1}"#
        );
    }

    #[test]
    fn at_counts_utf16_code_units_as_javascript_does() {
        assert_eq!(utf16_len("hello"), 5);
        assert_eq!(utf16_len("héllo"), 5);
        assert_eq!(utf16_len("😀"), 2);
        assert_eq!(utf16_len(""), 0);
    }
}
