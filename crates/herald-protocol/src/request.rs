//! Client requests: `{"id": <integer>, "op": "<name>", ...arguments}`.

use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use crate::args;
pub use crate::args::{Patch, ProfilePatch};
use crate::ids::is_valid_id;
use crate::scan;

/// The longest `client_id`, in bytes.
pub const MAX_CLIENT_ID_LEN: usize = 128;
/// The longest reaction `emoji`, in bytes: room for a multi-codepoint emoji or a short name.
pub const MAX_EMOJI_LEN: usize = 64;
/// The longest token a server reads; real JWTs are far shorter.
pub const MAX_TOKEN_LEN: usize = 8 * 1024;

/// A well-formed request.
#[derive(Debug)]
pub struct Request {
    pub id: i64,
    pub op: Op,
}

/// An operation with its checked arguments.
#[derive(Debug)]
pub enum Op {
    Hello {
        token: String,
    },
    Join {
        chat: String,
    },
    Leave {
        chat: String,
    },
    Watch {
        chat: String,
        after: Option<u64>,
    },
    Unwatch {
        chat: String,
    },
    /// v1.2 adds `thread`, `quote`, `mentions` and `stream`.
    Send {
        chat: String,
        body: Box<RawValue>,
        client_id: Option<String>,
        thread: Option<u64>,
        quote: Option<u64>,
        mentions: Option<Vec<String>>,
        stream: bool,
        /// v1.2: the files attached, ids from `upload`.
        files: Option<Vec<String>>,
    },
    React {
        chat: String,
        target: u64,
        emoji: String,
        on: bool,
    },
    /// v1.2 adds `thread`: the read position in that thread.
    Read {
        chat: String,
        seq: u64,
        thread: Option<u64>,
    },
    /// v1.2 adds `thread`: only that thread's replies.
    Fetch {
        chat: String,
        after: u64,
        limit: Option<u32>,
        thread: Option<u64>,
    },
    Ping,
    // v1.1 live ops: typing and presence.
    Typing {
        chat: String,
    },
    Presence {
        chat: String,
    },
    // v1.1: the message lifecycle and the inbox.
    /// v1.2 adds `mentions`: `None` keeps the message's, `Some([])` clears them.
    Edit {
        chat: String,
        target: u64,
        body: Box<RawValue>,
        mentions: Option<Vec<String>>,
        /// v1.2: the message's files from now on (`None` keeps them, `Some([])` removes them).
        files: Option<Vec<String>>,
    },
    Delete {
        chat: String,
        target: u64,
    },
    Inbox {
        limit: Option<u32>,
        cursor: Option<String>,
        live: bool,
    },
    // v1.2: conversations.
    /// Sets the chat's profile fields given.
    Profile {
        chat: String,
        patch: ProfilePatch,
    },
    /// A page of the chat's members.
    Members {
        chat: String,
        limit: Option<u32>,
        cursor: Option<String>,
    },
    /// The threads this user follows, in one chat or in all of theirs.
    Threads {
        chat: Option<String>,
        limit: Option<u32>,
        cursor: Option<String>,
    },
    /// Pins (`on`, the default) or unpins a message.
    Pin {
        chat: String,
        target: u64,
        on: bool,
    },
    /// The chat's pinned messages.
    Pins {
        chat: String,
    },
    /// Who reacted to a message, by emoji.
    Reactions {
        chat: String,
        target: u64,
    },
    /// Adds `text` to an open stream; `done` ends it.
    Append {
        chat: String,
        target: u64,
        text: String,
        done: bool,
    },
    // v1.2: files.
    /// Asks where to upload a file for the chat.
    Upload {
        chat: String,
        file: crate::args::FileDeclared,
    },
}

/// The longest `inbox` cursor a server reads; its own are far shorter.
pub const MAX_CURSOR_LEN: usize = 512;

impl Op {
    /// The op's wire name, also its metrics label.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Hello { .. } => "hello",
            Op::Join { .. } => "join",
            Op::Leave { .. } => "leave",
            Op::Watch { .. } => "watch",
            Op::Unwatch { .. } => "unwatch",
            Op::Send { .. } => "send",
            Op::React { .. } => "react",
            Op::Read { .. } => "read",
            Op::Fetch { .. } => "fetch",
            Op::Ping => "ping",
            Op::Typing { .. } => "typing",
            Op::Presence { .. } => "presence",
            Op::Edit { .. } => "edit",
            Op::Delete { .. } => "delete",
            Op::Inbox { .. } => "inbox",
            Op::Profile { .. } => "profile",
            Op::Members { .. } => "members",
            Op::Threads { .. } => "threads",
            Op::Pin { .. } => "pin",
            Op::Pins { .. } => "pins",
            Op::Reactions { .. } => "reactions",
            Op::Append { .. } => "append",
            Op::Upload { .. } => "upload",
        }
    }

    /// The chat this op is about, if any.
    pub fn chat(&self) -> Option<&str> {
        match self {
            Op::Hello { .. } | Op::Ping | Op::Inbox { .. } => None,
            Op::Join { chat }
            | Op::Leave { chat }
            | Op::Watch { chat, .. }
            | Op::Unwatch { chat }
            | Op::Send { chat, .. }
            | Op::React { chat, .. }
            | Op::Read { chat, .. }
            | Op::Fetch { chat, .. }
            | Op::Edit { chat, .. }
            | Op::Delete { chat, .. } => Some(chat),
            Op::Typing { chat } | Op::Presence { chat } => Some(chat),
            Op::Profile { chat, .. }
            | Op::Members { chat, .. }
            | Op::Pin { chat, .. }
            | Op::Pins { chat }
            | Op::Reactions { chat, .. }
            | Op::Append { chat, .. }
            | Op::Upload { chat, .. } => Some(chat),
            Op::Threads { chat, .. } => chat.as_deref(),
        }
    }
}

/// Why a frame is not a usable request.
#[derive(Debug, PartialEq)]
pub enum BadFrame {
    /// Not a JSON object with an integer `id`: nothing to reply to. Answered
    /// with `bad_request` (id `null`) and close 4000.
    NotRequest(String),
    /// A request whose op or arguments are wrong: answered with `bad_request`.
    BadRequest { id: i64, op: Option<&'static str>, message: String },
}

/// Every field any op takes. One pass over the frame; `body` stays raw, and
/// so does `id`, read as JSON writes integers ([`scan::integer`]: `-0` is 0).
#[derive(Deserialize)]
struct Wire<'a> {
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    op: Option<String>,
    token: Option<String>,
    chat: Option<String>,
    after: Option<u64>,
    body: Option<Box<RawValue>>,
    client_id: Option<String>,
    target: Option<u64>,
    emoji: Option<String>,
    on: Option<bool>,
    seq: Option<u64>,
    limit: Option<u32>,
    cursor: Option<String>,
    live: Option<bool>,
    // v1.2's arguments, raw: read by the ops that take them (`args` says why).
    #[serde(default, borrow, deserialize_with = "present")]
    thread: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    quote: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    mentions: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    stream: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    text: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    done: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    name: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    image: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    data: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    files: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present", rename = "type")]
    mime: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    size: Option<&'a RawValue>,
}

/// A raw argument that is present, `null` included (an `Option` alone reads `null` as absent, and a
/// profile field given as `null` is cleared).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

/// Parses one text frame.
pub fn parse_frame(text: &str) -> Result<Request, BadFrame> {
    // serde would also read the struct from an array of its fields in order.
    if !text.trim_start_matches([' ', '\t', '\n', '\r']).starts_with('{') {
        return Err(BadFrame::NotRequest(NOT_OBJECT.into()));
    }
    let wire: Wire = match serde_json::from_str(text) {
        Ok(w) => w,
        Err(e) => return Err(classify_unparsable(text, e)),
    };
    let Some(id) = wire.id.and_then(|raw| scan::integer(raw.get())) else {
        return Err(BadFrame::NotRequest(NO_ID.into()));
    };
    let bad = |op: Option<&'static str>, message: String| BadFrame::BadRequest { id, op, message };
    let Some(op_name) = wire.op.as_deref() else {
        return Err(bad(None, "a request needs a string \"op\"".into()));
    };
    let op_static = op_static_name(op_name);
    let chat = || -> Result<String, BadFrame> {
        match &wire.chat {
            None => Err(bad(op_static, "missing \"chat\"".into())),
            Some(c) if !is_valid_id(c) => {
                Err(bad(op_static, "\"chat\" must be 1 to 128 characters of A-Z a-z 0-9 _ . : -".into()))
            }
            Some(c) => Ok(c.clone()),
        }
    };
    let refuse = |message: String| bad(op_static, message);
    let op = match op_name {
        "hello" => match wire.token {
            Some(token) if token.len() <= MAX_TOKEN_LEN => Op::Hello { token },
            Some(_) => return Err(bad(op_static, "\"token\" is too long".into())),
            None => return Err(bad(op_static, "missing \"token\"".into())),
        },
        "join" => Op::Join { chat: chat()? },
        "leave" => Op::Leave { chat: chat()? },
        "watch" => Op::Watch { chat: chat()?, after: wire.after },
        "unwatch" => Op::Unwatch { chat: chat()? },
        "send" => {
            let chat = chat()?;
            let Some(body) = wire.body else {
                return Err(bad(op_static, "missing \"body\"".into()));
            };
            if wire.client_id.as_ref().is_some_and(|c| c.is_empty() || c.len() > MAX_CLIENT_ID_LEN) {
                return Err(bad(op_static, "\"client_id\" must be 1 to 128 bytes".into()));
            }
            let stream = args::flag(wire.stream, "stream").map_err(refuse)?;
            if stream {
                args::check_stream_body(&body).map_err(refuse)?;
            }
            Op::Send {
                chat,
                body,
                client_id: wire.client_id,
                thread: args::seq(wire.thread, "thread").map_err(refuse)?,
                quote: args::seq(wire.quote, "quote").map_err(refuse)?,
                mentions: args::mentions(wire.mentions).map_err(refuse)?,
                stream,
                files: args::files(wire.files).map_err(refuse)?,
            }
        }
        "react" => {
            let chat = chat()?;
            let Some(target) = wire.target else {
                return Err(bad(op_static, "missing \"target\" (the seq of the event reacted to)".into()));
            };
            let emoji = match wire.emoji {
                Some(e) if !e.is_empty() && e.len() <= MAX_EMOJI_LEN => e,
                Some(_) => return Err(bad(op_static, "\"emoji\" must be 1 to 64 bytes".into())),
                None => return Err(bad(op_static, "missing \"emoji\"".into())),
            };
            Op::React { chat, target, emoji, on: wire.on.unwrap_or(true) }
        }
        "read" => {
            let chat = chat()?;
            let Some(seq) = wire.seq else {
                return Err(bad(op_static, "missing \"seq\"".into()));
            };
            Op::Read { chat, seq, thread: args::seq(wire.thread, "thread").map_err(refuse)? }
        }
        "fetch" => {
            let chat = chat()?;
            let Some(after) = wire.after else {
                return Err(bad(op_static, "missing \"after\"".into()));
            };
            if wire.limit == Some(0) {
                return Err(bad(op_static, "\"limit\" must be at least 1".into()));
            }
            Op::Fetch { chat, after, limit: wire.limit, thread: args::seq(wire.thread, "thread").map_err(refuse)? }
        }
        "ping" => Op::Ping,
        "typing" => Op::Typing { chat: chat()? },
        "presence" => Op::Presence { chat: chat()? },
        "edit" => {
            let chat = chat()?;
            let Some(target) = wire.target else {
                return Err(bad(op_static, "missing \"target\" (the seq of a message)".into()));
            };
            let Some(body) = wire.body else {
                return Err(bad(op_static, "missing \"body\"".into()));
            };
            Op::Edit {
                chat,
                target,
                body,
                mentions: args::mentions(wire.mentions).map_err(refuse)?,
                files: args::files(wire.files).map_err(refuse)?,
            }
        }
        "delete" => {
            let chat = chat()?;
            let Some(target) = wire.target else {
                return Err(bad(op_static, "missing \"target\" (the seq of a message)".into()));
            };
            Op::Delete { chat, target }
        }
        "inbox" => {
            if wire.limit == Some(0) {
                return Err(bad(op_static, "\"limit\" must be at least 1".into()));
            }
            if wire.cursor.as_ref().is_some_and(|c| c.is_empty() || c.len() > MAX_CURSOR_LEN) {
                return Err(bad(op_static, "\"cursor\" must be a cursor from an earlier inbox reply".into()));
            }
            Op::Inbox { limit: wire.limit, cursor: wire.cursor, live: wire.live.unwrap_or(false) }
        }
        "profile" => {
            let chat = chat()?;
            Op::Profile { chat, patch: ProfilePatch::read(wire.name, wire.image, wire.data).map_err(refuse)? }
        }
        "members" | "threads" => {
            // `threads` reads its optional chat before its page arguments, as `members` does.
            let chat = if op_name == "members" || wire.chat.is_some() { Some(chat()?) } else { None };
            if wire.limit == Some(0) {
                return Err(bad(op_static, "\"limit\" must be at least 1".into()));
            }
            if wire.cursor.as_ref().is_some_and(|c| c.is_empty() || c.len() > MAX_CURSOR_LEN) {
                let message = format!("\"cursor\" must be a cursor from an earlier {op_name} reply");
                return Err(bad(op_static, message));
            }
            match chat {
                Some(chat) if op_name == "members" => Op::Members { chat, limit: wire.limit, cursor: wire.cursor },
                chat => Op::Threads { chat, limit: wire.limit, cursor: wire.cursor },
            }
        }
        "pin" => {
            let chat = chat()?;
            let Some(target) = wire.target else {
                return Err(bad(op_static, "missing \"target\" (the seq of a message)".into()));
            };
            Op::Pin { chat, target, on: wire.on.unwrap_or(true) }
        }
        "pins" => Op::Pins { chat: chat()? },
        "reactions" => {
            let chat = chat()?;
            let Some(target) = wire.target else {
                return Err(bad(op_static, "missing \"target\" (the seq of a message)".into()));
            };
            Op::Reactions { chat, target }
        }
        "append" => {
            let chat = chat()?;
            let Some(target) = wire.target else {
                return Err(bad(op_static, "missing \"target\" (the seq of an open stream)".into()));
            };
            let done = args::flag(wire.done, "done").map_err(refuse)?;
            Op::Append { chat, target, text: args::append_text(wire.text, done).map_err(refuse)?, done }
        }
        "upload" => {
            let chat = chat()?;
            Op::Upload { chat, file: args::FileDeclared::read(wire.name, wire.mime, wire.size).map_err(refuse)? }
        }
        other => {
            let shown: String = other.chars().take(32).collect();
            return Err(bad(None, format!("unknown op \"{shown}\"")));
        }
    };
    Ok(Request { id, op })
}

fn op_static_name(op: &str) -> Option<&'static str> {
    Some(match op {
        "hello" => "hello",
        "join" => "join",
        "leave" => "leave",
        "watch" => "watch",
        "unwatch" => "unwatch",
        "send" => "send",
        "react" => "react",
        "read" => "read",
        "fetch" => "fetch",
        "ping" => "ping",
        "typing" => "typing",
        "presence" => "presence",
        "edit" => "edit",
        "delete" => "delete",
        "inbox" => "inbox",
        "profile" => "profile",
        "members" => "members",
        "threads" => "threads",
        "pin" => "pin",
        "pins" => "pins",
        "reactions" => "reactions",
        "append" => "append",
        "upload" => "upload",
        _ => return None,
    })
}

/// A frame the typed pass refused: a request with a wrongly typed argument
/// still gets a reply with its id; anything else is not a request.
fn classify_unparsable(text: &str, err: serde_json::Error) -> BadFrame {
    // The scanner, not `serde_json::Value`, which refuses valid JSON the typed
    // pass skipped over (deep nesting, numbers beyond f64, lone surrogates).
    let Some(members) = scan::object_members(text) else {
        return BadFrame::NotRequest(NOT_OBJECT.into());
    };
    let last = |key: &str| members.iter().rev().find(|m| m.key == key).map(|m| m.value);
    let Some(id) = last("id").and_then(scan::integer) else {
        return BadFrame::NotRequest(NO_ID.into());
    };
    let op = last("op").and_then(|raw| serde_json::from_str::<&str>(raw).ok()).and_then(op_static_name);
    BadFrame::BadRequest { id, op, message: format!("bad arguments: {err}") }
}

const NOT_OBJECT: &str = "a frame must be one JSON object";
const NO_ID: &str = "a request needs an integer \"id\"";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_op() {
        let r = parse_frame(r#"{"id":1,"op":"send","chat":"g","body":{"text":"hi"},"client_id":"c1"}"#).unwrap();
        assert_eq!(r.id, 1);
        match r.op {
            Op::Send { chat, body, client_id, .. } => {
                assert_eq!(chat, "g");
                assert_eq!(body.get(), r#"{"text":"hi"}"#);
                assert_eq!(client_id.as_deref(), Some("c1"));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(parse_frame(r#"{"id":2,"op":"ping"}"#).unwrap().op, Op::Ping));
        assert!(matches!(
            parse_frame(r#"{"id":3,"op":"react","chat":"g","target":4,"emoji":"+1"}"#).unwrap().op,
            Op::React { on: true, target: 4, .. }
        ));
        assert!(matches!(
            parse_frame(r#"{"id":3,"op":"watch","chat":"g"}"#).unwrap().op,
            Op::Watch { after: None, .. }
        ));
    }

    #[test]
    fn parses_the_live_ops() {
        assert!(
            matches!(parse_frame(r#"{"id":1,"op":"typing","chat":"g"}"#).unwrap().op, Op::Typing { chat } if chat == "g")
        );
        assert!(
            matches!(parse_frame(r#"{"id":2,"op":"presence","chat":"g"}"#).unwrap().op, Op::Presence { chat } if chat == "g")
        );
        assert!(matches!(
            parse_frame(r#"{"id":3,"op":"typing"}"#),
            Err(BadFrame::BadRequest { id: 3, op: Some("typing"), .. })
        ));
        assert!(matches!(
            parse_frame(r#"{"id":4,"op":"presence","chat":"no spaces"}"#),
            Err(BadFrame::BadRequest { id: 4, op: Some("presence"), .. })
        ));
    }

    #[test]
    fn parses_the_lifecycle_and_inbox_ops() {
        match parse_frame(r#"{"id":1,"op":"edit","chat":"g","target":4,"body":{"text":"x"}}"#).unwrap().op {
            Op::Edit { chat, target, body, .. } => {
                assert_eq!((chat.as_str(), target, body.get()), ("g", 4, r#"{"text":"x"}"#))
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse_frame(r#"{"id":2,"op":"delete","chat":"g","target":4}"#).unwrap().op,
            Op::Delete { target: 4, .. }
        ));
        assert!(matches!(
            parse_frame(r#"{"id":3,"op":"inbox"}"#).unwrap().op,
            Op::Inbox { limit: None, cursor: None, live: false }
        ));
        assert!(matches!(
            parse_frame(r#"{"id":3,"op":"inbox","limit":5,"cursor":"ab","live":true}"#).unwrap().op,
            Op::Inbox { limit: Some(5), live: true, .. }
        ));
        for bad in [
            r#"{"id":4,"op":"edit","chat":"g","body":1}"#,
            r#"{"id":4,"op":"edit","chat":"g","target":1}"#,
            r#"{"id":4,"op":"delete","chat":"g"}"#,
            r#"{"id":4,"op":"delete","target":1}"#,
            r#"{"id":4,"op":"inbox","limit":0}"#,
            r#"{"id":4,"op":"inbox","cursor":""}"#,
            r#"{"id":4,"op":"inbox","live":"yes"}"#,
        ] {
            assert!(matches!(parse_frame(bad), Err(BadFrame::BadRequest { id: 4, .. })), "{bad}");
        }
    }

    /// The `bad_request` message of `frame`, which must be refused with id 4 as `op`.
    fn refusal(frame: &str, op: &str) -> String {
        match parse_frame(frame) {
            Err(BadFrame::BadRequest { id: 4, op: Some(o), message }) if o == op => message,
            other => panic!("{frame}: {other:?}"),
        }
    }

    #[test]
    fn parses_the_conversation_ops() {
        let send =
            r#"{"id":1,"op":"send","chat":"g","body":{"text":"x"},"thread":41,"quote":44,"mentions":["b","b","c"]}"#;
        match parse_frame(send).unwrap().op {
            Op::Send { thread, quote, mentions, stream, .. } => {
                assert_eq!((thread, quote, stream), (Some(41), Some(44), false));
                assert_eq!(mentions, Some(vec!["b".to_string(), "c".to_string()]), "duplicates removed, order kept");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse_frame(r#"{"id":1,"op":"send","chat":"g","body":{"text":""},"stream":true}"#).unwrap().op,
            Op::Send { stream: true, thread: None, quote: None, mentions: None, .. }
        ));
        assert!(matches!(
            parse_frame(r#"{"id":1,"op":"edit","chat":"g","target":4,"body":1,"mentions":[]}"#).unwrap().op,
            Op::Edit { mentions: Some(m), .. } if m.is_empty()
        ));
        assert!(matches!(
            parse_frame(r#"{"id":1,"op":"read","chat":"g","seq":5,"thread":4}"#).unwrap().op,
            Op::Read { seq: 5, thread: Some(4), .. }
        ));
        assert!(matches!(
            parse_frame(r#"{"id":1,"op":"fetch","chat":"g","after":4,"thread":4}"#).unwrap().op,
            Op::Fetch { after: 4, thread: Some(4), limit: None, .. }
        ));
        match parse_frame(r#"{"id":1,"op":"profile","chat":"g","name":"G","image":null}"#).unwrap().op {
            Op::Profile { chat, patch } => {
                assert_eq!((chat.as_str(), &patch.name, &patch.image), ("g", &Patch::Set("G".into()), &Patch::Clear));
                assert!(matches!(patch.data, Patch::Keep));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse_frame(r#"{"id":1,"op":"members","chat":"g"}"#).unwrap().op,
            Op::Members { limit: None, cursor: None, .. }
        ));
        assert!(matches!(
            parse_frame(r#"{"id":1,"op":"threads"}"#).unwrap().op,
            Op::Threads { chat: None, limit: None, cursor: None }
        ));
        assert!(matches!(
            parse_frame(r#"{"id":1,"op":"threads","chat":"g","limit":5,"cursor":"c"}"#).unwrap().op,
            Op::Threads { chat: Some(_), limit: Some(5), cursor: Some(_) }
        ));
        assert!(matches!(
            parse_frame(r#"{"id":1,"op":"pin","chat":"g","target":4}"#).unwrap().op,
            Op::Pin { target: 4, on: true, .. }
        ));
        assert!(matches!(parse_frame(r#"{"id":1,"op":"pins","chat":"g"}"#).unwrap().op, Op::Pins { .. }));
        assert!(matches!(
            parse_frame(r#"{"id":1,"op":"reactions","chat":"g","target":4}"#).unwrap().op,
            Op::Reactions { target: 4, .. }
        ));
        assert!(matches!(
            parse_frame(r#"{"id":1,"op":"append","chat":"g","target":4,"text":"lo"}"#).unwrap().op,
            Op::Append { target: 4, done: false, .. }
        ));
        assert!(matches!(
            parse_frame(r#"{"id":1,"op":"append","chat":"g","target":4,"text":"","done":true}"#).unwrap().op,
            Op::Append { done: true, .. }
        ));
    }

    #[test]
    fn refuses_conversation_arguments_with_a_message_that_names_them() {
        for (frame, op, says) in [
            (r#"{"id":4,"op":"send","chat":"g","body":{},"thread":-1}"#, "send", "\"thread\""),
            (r#"{"id":4,"op":"send","chat":"g","body":{},"quote":"41"}"#, "send", "\"quote\""),
            (r#"{"id":4,"op":"send","chat":"g","body":{},"mentions":"bob"}"#, "send", "\"mentions\""),
            (r#"{"id":4,"op":"send","chat":"g","body":{},"mentions":["a b"]}"#, "send", "\"mentions\""),
            (r#"{"id":4,"op":"send","chat":"g","body":{"text":1},"stream":true}"#, "send", "\"stream\""),
            (r#"{"id":4,"op":"send","chat":"g","body":"hi","stream":true}"#, "send", "\"body\""),
            (r#"{"id":4,"op":"send","chat":"g","body":{},"stream":"yes"}"#, "send", "\"stream\""),
            (r#"{"id":4,"op":"edit","chat":"g","target":1,"body":{},"mentions":[1]}"#, "edit", "\"mentions\""),
            (r#"{"id":4,"op":"read","chat":"g","seq":1,"thread":1.5}"#, "read", "\"thread\""),
            (r#"{"id":4,"op":"fetch","chat":"g","after":1,"thread":true}"#, "fetch", "\"thread\""),
            (r#"{"id":4,"op":"profile","name":"x"}"#, "profile", "\"chat\""),
            (r#"{"id":4,"op":"profile","chat":"g","name":5}"#, "profile", "\"name\""),
            (r#"{"id":4,"op":"members","chat":"g","limit":0}"#, "members", "\"limit\""),
            (r#"{"id":4,"op":"members","chat":"g","cursor":""}"#, "members", "members reply"),
            (r#"{"id":4,"op":"members"}"#, "members", "\"chat\""),
            (r#"{"id":4,"op":"threads","chat":"a b"}"#, "threads", "chat"),
            (r#"{"id":4,"op":"threads","cursor":""}"#, "threads", "threads reply"),
            (r#"{"id":4,"op":"pin","chat":"g"}"#, "pin", "\"target\""),
            (r#"{"id":4,"op":"pins"}"#, "pins", "\"chat\""),
            (r#"{"id":4,"op":"reactions","chat":"g"}"#, "reactions", "\"target\""),
            (r#"{"id":4,"op":"append","chat":"g","text":"x"}"#, "append", "\"target\""),
            (r#"{"id":4,"op":"append","chat":"g","target":1}"#, "append", "\"text\""),
            (r#"{"id":4,"op":"append","chat":"g","target":1,"text":""}"#, "append", "\"done\""),
            (r#"{"id":4,"op":"append","chat":"g","target":1,"text":"x","done":1}"#, "append", "\"done\""),
        ] {
            let message = refusal(frame, op);
            assert!(message.contains(says), "{frame}: {message}");
        }
    }

    /// Before v1.2 these arguments were unknown, and ignored whatever their type, by every op; an op
    /// that does not take one still ignores it.
    #[test]
    fn ops_ignore_conversation_arguments_they_do_not_take() {
        for frame in [
            r#"{"id":1,"op":"join","chat":"g","thread":"x","text":5,"name":[],"done":"no","mentions":1}"#,
            r#"{"id":1,"op":"react","chat":"g","target":1,"emoji":"+1","stream":"x","data":1}"#,
            r#"{"id":1,"op":"ping","image":false,"quote":-3}"#,
        ] {
            assert!(parse_frame(frame).is_ok(), "{frame}");
        }
    }

    #[test]
    fn tells_bad_requests_from_non_requests() {
        assert!(matches!(parse_frame("hello"), Err(BadFrame::NotRequest(_))));
        assert!(matches!(parse_frame("[1,2]"), Err(BadFrame::NotRequest(_))));
        assert!(matches!(parse_frame(r#"{"op":"ping"}"#), Err(BadFrame::NotRequest(_))));
        assert!(matches!(parse_frame(r#"{"id":"x","op":"ping"}"#), Err(BadFrame::NotRequest(_))));
        assert!(matches!(parse_frame(r#"{"id":5,"op":"nope"}"#), Err(BadFrame::BadRequest { id: 5, .. })));
        assert!(matches!(parse_frame(r#"{"id":5}"#), Err(BadFrame::BadRequest { id: 5, .. })));
        assert!(matches!(
            parse_frame(r#"{"id":6,"op":"fetch","chat":"g","after":-1}"#),
            Err(BadFrame::BadRequest { id: 6, op: Some("fetch"), .. })
        ));
        assert!(matches!(
            parse_frame(r#"{"id":6,"op":"join","chat":"bad chat"}"#),
            Err(BadFrame::BadRequest { id: 6, .. })
        ));
        assert!(matches!(parse_frame(r#"{"id":7,"op":"send","chat":"g"}"#), Err(BadFrame::BadRequest { id: 7, .. })));
    }

    /// Cases the fuzz target found: each used to be called "not a request".
    #[test]
    fn a_request_is_known_by_its_id_however_odd_the_rest() {
        // serde reads a struct from an array of its fields; a frame is an object.
        assert!(matches!(
            parse_frame(r#"[1,"ping",null,null,null,null,null,null,null,null,null,null]"#),
            Err(BadFrame::NotRequest(_))
        ));
        // `-0` is an integer as JSON writes it.
        assert_eq!(parse_frame(r#"{"id":-0,"op":"ping"}"#).unwrap().id, 0);
        assert!(matches!(parse_frame(r#"{"id":-0.0,"op":"ping"}"#), Err(BadFrame::NotRequest(_))));
        // Valid JSON serde cannot build a value of, beside a bad argument: still answered with the id.
        let deep =
            format!(r#"{{"id":8,"op":"fetch","chat":"g","after":-1,"x":{}{}}}"#, "[".repeat(200), "]".repeat(200));
        for text in [
            r#"{"id":8,"op":"fetch","chat":"g","after":-1,"x":1e400}"#,
            r#"{"id":8,"op":"fetch","chat":"g","after":-1,"x":"\ud800"}"#,
            deep.as_str(),
        ] {
            match parse_frame(text) {
                Err(BadFrame::BadRequest { id: 8, .. }) => {}
                other => panic!("{text}: {other:?}"),
            }
        }
        // Duplicate members: serde refuses them, the reply still has an id.
        assert!(matches!(parse_frame(r#"{"id":9,"id":9,"op":"ping"}"#), Err(BadFrame::BadRequest { id: 9, .. })));
    }
}
