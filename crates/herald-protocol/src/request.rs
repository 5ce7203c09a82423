//! Client requests: `{"id": <integer>, "op": "<name>", ...arguments}`.

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::ids::is_valid_id;

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
    Hello { token: String },
    Join { chat: String },
    Leave { chat: String },
    Watch { chat: String, after: Option<u64> },
    Unwatch { chat: String },
    Send { chat: String, body: Box<RawValue>, client_id: Option<String> },
    React { chat: String, target: u64, emoji: String, on: bool },
    Read { chat: String, seq: u64 },
    Fetch { chat: String, after: u64, limit: Option<u32> },
    Ping,
}

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
        }
    }

    /// The chat this op is about, if any.
    pub fn chat(&self) -> Option<&str> {
        match self {
            Op::Hello { .. } | Op::Ping => None,
            Op::Join { chat }
            | Op::Leave { chat }
            | Op::Watch { chat, .. }
            | Op::Unwatch { chat }
            | Op::Send { chat, .. }
            | Op::React { chat, .. }
            | Op::Read { chat, .. }
            | Op::Fetch { chat, .. } => Some(chat),
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

/// Every field any op takes. One pass over the frame; `body` stays raw.
#[derive(Deserialize)]
struct Wire {
    id: Option<i64>,
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
}

/// Parses one text frame.
pub fn parse_frame(text: &str) -> Result<Request, BadFrame> {
    let wire: Wire = match serde_json::from_str(text) {
        Ok(w) => w,
        Err(e) => return Err(classify_unparsable(text, e)),
    };
    let Some(id) = wire.id else {
        return Err(BadFrame::NotRequest("a request needs an integer \"id\"".into()));
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
            Op::Send { chat, body, client_id: wire.client_id }
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
            Op::Read { chat, seq }
        }
        "fetch" => {
            let chat = chat()?;
            let Some(after) = wire.after else {
                return Err(bad(op_static, "missing \"after\"".into()));
            };
            if wire.limit == Some(0) {
                return Err(bad(op_static, "\"limit\" must be at least 1".into()));
            }
            Op::Fetch { chat, after, limit: wire.limit }
        }
        "ping" => Op::Ping,
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
        _ => return None,
    })
}

/// A frame the typed pass refused: a request with a wrongly typed argument
/// still gets a reply with its id; anything else is not a request.
fn classify_unparsable(text: &str, err: serde_json::Error) -> BadFrame {
    let Ok(serde_json::Value::Object(map)) = serde_json::from_str::<serde_json::Value>(text) else {
        return BadFrame::NotRequest("a frame must be one JSON object".into());
    };
    let Some(id) = map.get("id").and_then(serde_json::Value::as_i64) else {
        return BadFrame::NotRequest("a request needs an integer \"id\"".into());
    };
    let op = map.get("op").and_then(serde_json::Value::as_str).and_then(op_static_name);
    BadFrame::BadRequest { id, op, message: format!("bad arguments: {err}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_op() {
        let r = parse_frame(r#"{"id":1,"op":"send","chat":"g","body":{"text":"hi"},"client_id":"c1"}"#).unwrap();
        assert_eq!(r.id, 1);
        match r.op {
            Op::Send { chat, body, client_id } => {
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
}
