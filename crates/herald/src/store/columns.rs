//! How both backends spell v1.2's stored-view columns: a list of user ids and a map of reaction
//! counts as JSON text, a stream's state as a small integer, a root's replies as two integers.
//! Plain functions, no SQL: each backend's statements call them on the values they read and write.

use std::collections::BTreeMap;

use herald_protocol::reply::Profile;
use herald_protocol::{Replies, StreamState};

/// The event columns every fetch-shaped read selects, in this order (a table alias is prefixed
/// by the caller where a query joins): the event, then its stored view.
pub(crate) const EVENT_COLUMNS: [&str; 17] = [
    "seq",
    "type",
    "user",
    "ts",
    "body",
    "client_id",
    "edited",
    "deleted",
    "thread",
    "quote",
    "mentions",
    "replies",
    "last_reply",
    "pinned",
    "reactions",
    "stream",
    "files",
];

/// [`EVENT_COLUMNS`] as a select list, each prefixed by `alias` (`""` for none) and `user`
/// quoted with `quote` (PostgreSQL quotes it; SQLite need not).
pub(crate) fn event_columns(alias: &str, quote_user: bool) -> String {
    EVENT_COLUMNS
        .iter()
        .map(|c| match (*c, quote_user) {
            ("user", true) => format!("{alias}\"user\""),
            (c, _) => format!("{alias}{c}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A list of user ids as stored.
pub(crate) fn json_list(users: &[String]) -> String {
    serde_json::to_string(users).expect("strings serialize")
}

/// The inverse of [`json_list`]; a column that does not parse reads as no list.
pub(crate) fn parse_list(text: Option<String>) -> Option<Vec<String>> {
    text.and_then(|t| serde_json::from_str(&t).ok())
}

/// A message's (or an edit's) files as stored: their refs without URLs, `None` when none given.
pub(crate) fn json_files(files: Option<&[herald_protocol::FileRef]>) -> Option<String> {
    files.map(|f| serde_json::to_string(f).expect("file refs serialize"))
}

/// The inverse of [`json_files`]; a column that does not parse reads as no files.
pub(crate) fn parse_files(text: Option<String>) -> Option<Vec<herald_protocol::FileRef>> {
    text.and_then(|t| serde_json::from_str(&t).ok())
}

/// Reaction counts as stored: `None` when there are none.
pub(crate) fn reaction_counts(counts: &BTreeMap<String, u64>) -> Option<String> {
    (!counts.is_empty()).then(|| serde_json::to_string(counts).expect("counts serialize"))
}

/// The inverse of [`reaction_counts`].
pub(crate) fn parse_counts(text: Option<String>) -> BTreeMap<String, u64> {
    text.and_then(|t| serde_json::from_str(&t).ok()).unwrap_or_default()
}

/// A stream's state as stored.
pub(crate) fn stream_code(s: StreamState) -> i64 {
    match s {
        StreamState::Open => 1,
        StreamState::Done => 2,
    }
}

/// The inverse of [`stream_code`].
pub(crate) fn stream_state(code: Option<i64>) -> Option<StreamState> {
    match code {
        Some(1) => Some(StreamState::Open),
        Some(2) => Some(StreamState::Done),
        _ => None,
    }
}

/// A root's `replies` in the stored view: absent while none.
pub(crate) fn replies(count: i64, last: i64) -> Option<Replies> {
    (count > 0).then_some(Replies { count: count as u64, last: last as u64 })
}

/// How a backend spells what [`thread_unread_sql`] needs.
pub(crate) struct Dialect {
    /// The scalar maximum: `max` (SQLite), `GREATEST` (PostgreSQL).
    pub greatest: &'static str,
    /// The `user` column, quoted as the backend needs.
    pub user: &'static str,
    /// A deleted row, as the backend's partial index of deleted messages is written.
    pub deleted: &'static str,
}

pub(crate) const SQLITE: Dialect = Dialect { greatest: "max", user: "user", deleted: "e.deleted = 1" };
pub(crate) const POSTGRES: Dialect = Dialect { greatest: "GREATEST", user: "\"user\"", deleted: "e.deleted" };

/// The unread count of a followed thread, as an SQL expression over `t` (a `thread_reads` row)
/// and `r` (its root's `events` row): [`crate::store::unread`]'s formula over the thread's counts
/// (`replies_total`, `tord`, `tuser_ord` and deleted replies above the read position), each one
/// index lookup, so a thread of 50,000 replies costs what one of 5 does.
pub(crate) fn thread_unread_sql(d: &Dialect) -> String {
    let (g, u, deleted) = (d.greatest, d.user, d.deleted);
    let replies = "e.chat_id = t.chat_id AND e.thread = t.root";
    format!(
        "{g}(0, {g}(0, r.replies_total
              - coalesce((SELECT e.tord FROM events e WHERE {replies} AND e.seq <= t.read_seq
                          ORDER BY e.seq DESC LIMIT 1), 0))
          - {g}(0, coalesce((SELECT e.tuser_ord FROM events e WHERE {replies} AND e.{u} = t.{u}
                             ORDER BY e.seq DESC LIMIT 1), 0)
                 - coalesce((SELECT e.tuser_ord FROM events e WHERE {replies} AND e.{u} = t.{u}
                             AND e.seq <= t.read_seq ORDER BY e.seq DESC LIMIT 1), 0))
          - (SELECT count(*) FROM events e WHERE e.chat_id = t.chat_id AND {deleted} AND e.seq > t.read_seq
                AND e.thread = t.root AND e.{u} IS DISTINCT FROM t.{u}))"
    )
}

/// Page cursors of v1.2's lists (members, chats, threads): opaque hex of the last entry's key, so
/// nobody mistakes one for something to build. `None` for anything these did not make.
pub(crate) fn cursor_encode(parts: &[&str]) -> String {
    parts.join("\n").bytes().map(|b| format!("{b:02x}")).collect()
}

/// The inverse of [`cursor_encode`], with the number of parts it must have.
pub(crate) fn cursor_decode(s: &str, parts: usize) -> Option<Vec<String>> {
    if !s.len().is_multiple_of(2) || s.len() > 2 * 1024 {
        return None;
    }
    let bytes: Option<Vec<u8>> =
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect();
    let plain = String::from_utf8(bytes?).ok()?;
    let out: Vec<String> = plain.split('\n').map(str::to_owned).collect();
    (out.len() == parts).then_some(out)
}

/// A chat's profile as stored; nothing (or something unreadable) reads as the empty profile.
pub(crate) fn parse_profile(stored: Option<&str>) -> Profile {
    stored.and_then(|s| serde_json::from_str(s).ok()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_round_trip() {
        let users = vec!["a@b.c".to_string(), "d+e".to_string()];
        assert_eq!(parse_list(Some(json_list(&users))), Some(users));
        let mut counts = BTreeMap::new();
        assert_eq!(reaction_counts(&counts), None);
        counts.insert("+1".to_string(), 2);
        assert_eq!(parse_counts(reaction_counts(&counts)), counts);
        for s in [StreamState::Open, StreamState::Done] {
            assert_eq!(stream_state(Some(stream_code(s))), Some(s));
        }
        assert_eq!(replies(0, 9), None);
        assert_eq!(event_columns("e.", true).split(", ").nth(2), Some("e.\"user\""));
    }
}
