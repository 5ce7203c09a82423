//! Fuzzes `herald_protocol::request::parse_frame` on arbitrary text.
//!
//! Properties checked, each from the code's or docs/protocol.md's own words:
//! - `BadFrame::NotRequest` is "not a JSON object with an integer `id`": a
//!   frame that is one never gets it, and a `BadRequest` always carries the
//!   frame's `id` (judged by an independent JSON grammar, `herald_fuzz::json`).
//! - `Ok(Request)` comes only from "a JSON object with an integer `id` and a
//!   string `op`": the request's `id` and op name are the frame's.
//! - Arguments are checked: chat ids are valid ids, `token`, `client_id` and
//!   `emoji` are within their documented lengths, `fetch`'s `limit` is not 0.
//! - Re-encoding a parsed request and parsing it again gives the same request.
//! - The `bad_request` reply the server would send is JSON echoing that id.

#![no_main]

use herald_fuzz::json::{self, Token};
use herald_protocol::args::Patch;
use herald_protocol::frame::{ErrorBody, err_reply};
use herald_protocol::ids::is_valid_id;
use herald_protocol::request::{MAX_CLIENT_ID_LEN, MAX_EMOJI_LEN, MAX_TOKEN_LEN, parse_frame};
use herald_protocol::{BadFrame, ErrorCode, Op, Request};
use libfuzzer_sys::fuzz_target;
use serde_json::value::RawValue;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    check(&text);
});

fn check(text: &str) {
    let parsed = parse_frame(text);
    let members = json::top_level(text);
    let ids: Vec<&Token> = members.as_deref().map(|m| json::get(m, "id")).unwrap_or_default();
    let unique_id = members.as_deref().and_then(json::integer_id);

    match &parsed {
        Err(BadFrame::NotRequest(_)) => {
            assert!(unique_id.is_none(), "NotRequest for a JSON object with the integer id {unique_id:?}: {text:?}");
        }
        Err(BadFrame::BadRequest { id, .. }) => {
            assert!(members.is_some(), "BadRequest for a frame that is not a JSON object: {text:?}");
            assert!(
                ids.iter().any(|t| t.as_i64() == Some(*id)),
                "BadRequest with id {id} that is not the frame's integer id ({ids:?}): {text:?}"
            );
            if let Some(u) = unique_id {
                assert_eq!(*id, u, "BadRequest id is not the frame's: {text:?}");
            }
            // The reply the server sends: JSON, echoing the id.
            let body = ErrorBody { code: ErrorCode::BadRequest, message: "m".into(), retry_after_ms: None };
            let reply: serde_json::Value = serde_json::from_str(&err_reply(Some(*id), &body)).expect("reply is JSON");
            assert_eq!(reply["id"].as_i64(), Some(*id));
        }
        Ok(req) => {
            let Some(m) = members.as_deref() else {
                panic!("a request parsed from a frame that is not a JSON object: {text:?} -> {req:?}");
            };
            assert_eq!(unique_id, Some(req.id), "request id is not the frame's integer id: {text:?}");
            assert_eq!(
                json::get(m, "op"),
                vec![&Token::Str(req.op.name().into())],
                "request op is not the frame's \"op\": {text:?}"
            );
            check_arguments(req, text);
            let again = encode(req);
            match parse_frame(&again) {
                Ok(r) => assert_eq!(Norm::of(&r), Norm::of(req), "re-encoded {again:?} from {text:?}"),
                Err(e) => panic!("re-encoded request {again:?} (from {text:?}) does not parse: {e:?}"),
            }
        }
    }
}

fn check_arguments(req: &Request, text: &str) {
    if let Some(chat) = req.op.chat() {
        assert!(is_valid_id(chat), "invalid chat id {chat:?} accepted: {text:?}");
    }
    match &req.op {
        Op::Hello { token } => assert!(token.len() <= MAX_TOKEN_LEN, "token over the limit: {text:?}"),
        Op::Send { client_id: Some(c), body, .. } => {
            assert!(!c.is_empty() && c.len() <= MAX_CLIENT_ID_LEN, "client_id {c:?} accepted: {text:?}");
            assert!(json::is_json(body.get()), "body is not one JSON value: {text:?}");
        }
        Op::Send { body, .. } => assert!(json::is_json(body.get()), "body is not one JSON value: {text:?}"),
        Op::React { emoji, .. } => {
            assert!(!emoji.is_empty() && emoji.len() <= MAX_EMOJI_LEN, "emoji {emoji:?} accepted: {text:?}")
        }
        Op::Fetch { limit, .. } => assert_ne!(*limit, Some(0), "fetch limit 0 accepted: {text:?}"),
        Op::Inbox { limit, cursor, .. } => {
            assert_ne!(*limit, Some(0), "inbox limit 0 accepted: {text:?}");
            assert_ne!(cursor.as_deref(), Some(""), "empty inbox cursor accepted: {text:?}");
        }
        _ => {}
    }
}

/// The canonical frame of a request: every argument it has, nothing else.
fn encode(req: &Request) -> String {
    use serde_json::json;
    let mut v = json!({ "id": req.id, "op": req.op.name() });
    let o = v.as_object_mut().expect("object");
    let mut put = |k: &str, val: serde_json::Value| {
        o.insert(k.to_string(), val);
    };
    match &req.op {
        Op::Hello { token } => put("token", json!(token)),
        Op::Join { chat } | Op::Leave { chat } | Op::Unwatch { chat } => put("chat", json!(chat)),
        Op::Watch { chat, after } => {
            put("chat", json!(chat));
            if let Some(a) = after {
                put("after", json!(a));
            }
        }
        Op::Send { chat, client_id, thread, quote, mentions, stream, files, .. } => {
            put("chat", json!(chat));
            if let Some(f) = files {
                put("files", json!(f));
            }
            if let Some(c) = client_id {
                put("client_id", json!(c));
            }
            if let Some(t) = thread {
                put("thread", json!(t));
            }
            if let Some(q) = quote {
                put("quote", json!(q));
            }
            if let Some(m) = mentions {
                put("mentions", json!(m));
            }
            if *stream {
                put("stream", json!(true));
            }
        }
        Op::React { chat, target, emoji, on } => {
            put("chat", json!(chat));
            put("target", json!(target));
            put("emoji", json!(emoji));
            put("on", json!(on));
        }
        Op::Read { chat, seq, thread } => {
            put("chat", json!(chat));
            put("seq", json!(seq));
            if let Some(t) = thread {
                put("thread", json!(t));
            }
        }
        Op::Fetch { chat, after, limit, thread } => {
            put("chat", json!(chat));
            put("after", json!(after));
            if let Some(l) = limit {
                put("limit", json!(l));
            }
            if let Some(t) = thread {
                put("thread", json!(t));
            }
        }
        Op::Typing { chat } | Op::Presence { chat } => put("chat", json!(chat)),
        Op::Edit { chat, target, mentions, files, .. } => {
            put("chat", json!(chat));
            put("target", json!(target));
            if let Some(f) = files {
                put("files", json!(f));
            }
            if let Some(m) = mentions {
                put("mentions", json!(m));
            }
        }
        Op::Delete { chat, target } | Op::Reactions { chat, target } => {
            put("chat", json!(chat));
            put("target", json!(target));
        }
        Op::Profile { chat, patch } => {
            put("chat", json!(chat));
            let mut field = |k: &str, p: Option<serde_json::Value>| {
                if let Some(v) = p {
                    put(k, v);
                }
            };
            field("name", patched(&patch.name, |t| json!(t)));
            field("image", patched(&patch.image, |t| json!(t)));
            field("data", patched(&patch.data, |raw| serde_json::from_str(raw.get()).expect("raw JSON")));
        }
        Op::Members { chat, limit, cursor } => {
            put("chat", json!(chat));
            if let Some(l) = limit {
                put("limit", json!(l));
            }
            if let Some(c) = cursor {
                put("cursor", json!(c));
            }
        }
        Op::Threads { chat, limit, cursor } => {
            if let Some(c) = chat {
                put("chat", json!(c));
            }
            if let Some(l) = limit {
                put("limit", json!(l));
            }
            if let Some(c) = cursor {
                put("cursor", json!(c));
            }
        }
        Op::Pin { chat, target, on } => {
            put("chat", json!(chat));
            put("target", json!(target));
            put("on", json!(on));
        }
        Op::Pins { chat } => put("chat", json!(chat)),
        Op::Upload { chat, file } => {
            put("chat", json!(chat));
            put("name", json!(file.name));
            put("type", json!(file.mime));
            put("size", json!(file.size));
        }
        Op::Search { query, chat, limit, cursor } => {
            put("query", json!(query));
            if let Some(c) = chat {
                put("chat", json!(c));
            }
            if let Some(l) = limit {
                put("limit", json!(l));
            }
            if let Some(c) = cursor {
                put("cursor", json!(c));
            }
        }
        Op::Append { chat, target, text, done } => {
            put("chat", json!(chat));
            put("target", json!(target));
            put("text", json!(text));
            put("done", json!(done));
        }
        Op::Inbox { limit, cursor, live } => {
            if let Some(l) = limit {
                put("limit", json!(l));
            }
            if let Some(c) = cursor {
                put("cursor", json!(c));
            }
            put("live", json!(live));
        }
        Op::Ping => {}
    }
    let mut text = serde_json::to_string(&v).expect("serializes");
    if let Op::Send { body, .. } | Op::Edit { body, .. } = &req.op {
        // The body goes back verbatim, as the raw value it was parsed as.
        #[derive(serde::Serialize)]
        struct B<'a> {
            body: &'a RawValue,
        }
        let b = serde_json::to_string(&B { body }).expect("serializes");
        text.pop(); // the closing brace
        text.push(',');
        text.push_str(&b[1..]);
    }
    text
}

/// A profile field as a request gives it: left out (`None`), `null`, or a value.
fn patched<T>(p: &Patch<T>, value: impl Fn(&T) -> serde_json::Value) -> Option<serde_json::Value> {
    match p {
        Patch::Keep => None,
        Patch::Clear => Some(serde_json::Value::Null),
        Patch::Set(t) => Some(value(t)),
    }
}

/// A comparable copy of a request (`Request` has no `PartialEq`).
#[derive(Debug, PartialEq)]
struct Norm {
    id: i64,
    op: &'static str,
    chat: Option<String>,
    token: Option<String>,
    after: Option<u64>,
    body: Option<String>,
    client_id: Option<String>,
    target: Option<u64>,
    emoji: Option<String>,
    on: Option<bool>,
    seq: Option<u64>,
    limit: Option<u32>,
    cursor: Option<String>,
    live: Option<bool>,
    thread: Option<u64>,
    quote: Option<u64>,
    mentions: Option<Vec<String>>,
    stream: Option<bool>,
    text: Option<String>,
    /// A profile's fields as given (left out, null, or the value), in JSON.
    profile: Option<serde_json::Value>,
    files: Option<Vec<String>>,
    upload: Option<(String, String, u64)>,
    query: Option<String>,
}

impl Norm {
    fn of(r: &Request) -> Norm {
        let mut n = Norm {
            id: r.id,
            op: r.op.name(),
            chat: r.op.chat().map(str::to_string),
            token: None,
            after: None,
            body: None,
            client_id: None,
            target: None,
            emoji: None,
            on: None,
            seq: None,
            limit: None,
            cursor: None,
            live: None,
            thread: None,
            quote: None,
            mentions: None,
            stream: None,
            text: None,
            profile: None,
            files: None,
            upload: None,
            query: None,
        };
        match &r.op {
            Op::Hello { token } => n.token = Some(token.clone()),
            Op::Watch { after, .. } => n.after = *after,
            Op::Send { body, client_id, thread, quote, mentions, stream, files, .. } => {
                n.files = files.clone();
                n.body = Some(body.get().to_string());
                n.client_id = client_id.clone();
                n.thread = *thread;
                n.quote = *quote;
                n.mentions = mentions.clone();
                n.stream = Some(*stream);
            }
            Op::React { target, emoji, on, .. } => {
                n.target = Some(*target);
                n.emoji = Some(emoji.clone());
                n.on = Some(*on);
            }
            Op::Read { seq, thread, .. } => {
                n.seq = Some(*seq);
                n.thread = *thread;
            }
            Op::Fetch { after, limit, thread, .. } => {
                n.after = Some(*after);
                n.limit = *limit;
                n.thread = *thread;
            }
            Op::Edit { target, body, mentions, files, .. } => {
                n.files = files.clone();
                n.target = Some(*target);
                n.body = Some(body.get().to_string());
                n.mentions = mentions.clone();
            }
            Op::Delete { target, .. } | Op::Reactions { target, .. } => n.target = Some(*target),
            Op::Profile { patch, .. } => {
                let data = |raw: &Box<RawValue>| serde_json::from_str(raw.get()).expect("raw JSON");
                n.profile = Some(serde_json::json!([
                    patched(&patch.name, |t| serde_json::json!(t)),
                    patched(&patch.image, |t| serde_json::json!(t)),
                    patched(&patch.data, data),
                ]));
            }
            Op::Members { limit, cursor, .. } | Op::Threads { limit, cursor, .. } => {
                n.limit = *limit;
                n.cursor = cursor.clone();
            }
            Op::Pin { target, on, .. } => {
                n.target = Some(*target);
                n.on = Some(*on);
            }
            Op::Append { target, text, done, .. } => {
                n.target = Some(*target);
                n.text = Some(text.clone());
                n.on = Some(*done);
            }
            Op::Pins { .. } => {}
            Op::Upload { file, .. } => n.upload = Some((file.name.clone(), file.mime.clone(), file.size)),
            Op::Search { query, limit, cursor, .. } => {
                n.query = Some(query.clone());
                n.limit = *limit;
                n.cursor = cursor.clone();
            }
            Op::Inbox { limit, cursor, live } => {
                n.limit = *limit;
                n.cursor = cursor.clone();
                n.live = Some(*live);
            }
            Op::Join { .. }
            | Op::Leave { .. }
            | Op::Unwatch { .. }
            | Op::Typing { .. }
            | Op::Presence { .. }
            | Op::Ping => {}
        }
        n
    }
}
