//! A live inbox entry's counts (`unread`, and v1.2's `threads` and `mentions`) and the `inbox`
//! push that carries them. Plain data.

use herald_protocol::frame::InboxPush;

use crate::outbox::Frame;

/// An inbox entry's counts (v1.2: `threads` and `mentions` beside `unread`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub unread: u64,
    pub threads: u64,
    pub mentions: u64,
}

impl Counts {
    /// An entry's counts.
    pub fn of(entry: &herald_protocol::reply::InboxEntry) -> Counts {
        Counts { unread: entry.unread, threads: entry.threads.unwrap_or(0), mentions: entry.mentions.unwrap_or(0) }
    }
}

/// The `inbox` push of a chat with these counts.
pub(super) fn push_frame(chat: &str, seq: u64, ts: i64, c: Counts) -> Frame {
    let push = InboxPush {
        ev: "inbox",
        chat,
        seq,
        ts,
        unread: c.unread,
        threads: Some(c.threads),
        mentions: Some(c.mentions),
        left: false,
    };
    Frame::from(push.encode())
}
