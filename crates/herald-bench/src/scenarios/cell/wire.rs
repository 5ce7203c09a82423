//! The frames a cell session writes and reads, as far as it reads them: the
//! requests it makes (`Op`), a server frame (a reply or a push, with the
//! bench's message body), and a refusal with when it may be asked again.
//! What the session does with them is `session`'s.

use std::time::Duration;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::follow::Body;

/// The wait before a retry when the refusal names none.
pub const DEFAULT_RETRY: Duration = Duration::from_millis(500);

/// A request a session makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Watch,
    Presence,
    Inbox,
    Typing,
    Send,
    Read,
    React,
    /// Fill a gap that pushes skipped.
    Fetch,
}

impl Op {
    /// The op's wire name.
    pub fn name(self) -> &'static str {
        match self {
            Op::Watch => "watch",
            Op::Presence => "presence",
            Op::Inbox => "inbox",
            Op::Typing => "typing",
            Op::Send => "send",
            Op::Read => "read",
            Op::React => "react",
            Op::Fetch => "fetch",
        }
    }
}

/// A server frame as the session reads it: a reply or a push, with the
/// message body's send time and sender's node when it is one of the bench's.
#[derive(Deserialize)]
pub struct Frame {
    pub id: Option<i64>,
    pub ok: Option<Box<RawValue>>,
    pub err: Option<serde_json::Value>,
    pub ev: Option<String>,
    pub chat: Option<String>,
    pub seq: Option<u64>,
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub body: Option<Body>,
    /// A `reconnect` push's wait.
    pub after_ms: Option<u64>,
}

#[derive(Deserialize)]
struct ErrReply {
    code: Option<String>,
    retry_after_ms: Option<u64>,
}

/// A failed request: why, and when to ask again if it may be.
pub struct Refusal {
    pub error: String,
    pub retry_after: Option<Duration>,
}

impl Refusal {
    /// `op`'s refusal `err`: asked again after its `retry_after_ms`, or after [`DEFAULT_RETRY`]
    /// when `unavailable` names none; never when `forbidden`.
    pub fn of(op: Op, err: &serde_json::Value) -> Refusal {
        let reply = serde_json::from_value::<ErrReply>(err.clone()).ok();
        let retry_after = reply.filter(|r| r.code.as_deref() != Some("forbidden")).and_then(|r| {
            r.retry_after_ms
                .map(Duration::from_millis)
                .or((r.code.as_deref() == Some("unavailable")).then_some(DEFAULT_RETRY))
        });
        Refusal { error: format!("{}: {err}", op.name()), retry_after }
    }
}

/// A reply that carries a `seq` (watch, send, read).
#[derive(Deserialize)]
pub struct SeqReply {
    pub seq: Option<u64>,
}
