//! Finding chats by the start of their id (the server API's `GET .../chats?prefix=`, for the admin
//! page's support view): a page of the workspace's chats whose id starts with a prefix, sorted by
//! id, as the chat list pages them.
//!
//! Chat ids sort in byte order, so the chats with a prefix are one range of the workspace's chat
//! list: from the prefix up to the first id that does not start with it. The range is read
//! through the chat list itself ([`crate::store::Conversations::chat_list`], an index range on
//! every backend, merged across shards), starting after [`below_prefix`]; no store of its own.
//!
//! Not here: the unfiltered chat list (`conv.rs`), or the route (`api/conversations.rs`).

use herald_protocol::reply::ChatsOk;

use super::Chats;
use crate::error::Error;
use crate::store::{id_cursor, id_from_cursor};

/// A page's default and most entries, as the chat list's.
const FIND_DEFAULT: u32 = 100;
const FIND_MAX: u32 = 1000;
/// The longest id: a chat id is at most this many characters.
const ID_MAX: usize = 128;

/// A string that sorts after every valid chat id below `prefix` and before every id starting
/// with it: `prefix` with its last character one lower, then `ID_MAX` DEL characters (above
/// every character an id may have, so no id that shares the lowered start reaches it). `prefix`
/// is a valid id (ASCII, from `-` up), so the lowered character is ASCII too.
fn below_prefix(prefix: &str) -> String {
    let mut out: Vec<u8> = prefix.as_bytes().to_vec();
    if let Some(last) = out.last_mut() {
        *last -= 1;
    }
    out.extend(std::iter::repeat_n(0x7f, ID_MAX));
    String::from_utf8(out).expect("ASCII")
}

impl Chats {
    /// The server API's page of the workspace's chats whose id starts with `prefix` (a valid
    /// chat id), sorted by id.
    pub async fn find_chats(
        &self,
        ws: &str,
        prefix: &str,
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<ChatsOk, Error> {
        let limit = limit.unwrap_or(FIND_DEFAULT).clamp(1, FIND_MAX);
        let after = match cursor {
            Some(c) => id_from_cursor(c)
                .ok_or_else(|| Error::BadRequest("\"cursor\" is not a cursor from an earlier chats reply".into()))?,
            None => below_prefix(prefix),
        };
        let after = after.max(below_prefix(prefix));
        let mut chats = self.store().chat_list(ws, Some(&after), limit).await?;
        chats.retain(|c| c.chat.starts_with(prefix));
        let more = chats.len() > limit as usize;
        chats.truncate(limit as usize);
        let cursor = chats.last().filter(|_| more).map(|v| id_cursor(&v.chat));
        Ok(ChatsOk { chats, more, cursor })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_sorts_between_the_ids_below_a_prefix_and_those_with_it() {
        let long = |s: &str| format!("{s}{}", "z".repeat(ID_MAX - s.len()));
        for prefix in ["ab", "a", "-", "a-", "Z9", "room:1"] {
            let bound = below_prefix(prefix);
            let mut lowered = prefix.to_string();
            let last = lowered.pop().unwrap();
            lowered.push(char::from(last as u8 - 1));
            let below = [lowered.clone(), long(&lowered), prefix[..prefix.len() - 1].to_string()];
            for id in below.iter().filter(|id| !id.is_empty()) {
                assert!(id.as_str() < bound.as_str(), "{id:?} below {prefix:?}");
            }
            for id in [prefix.to_string(), format!("{prefix}-"), long(prefix)] {
                assert!(id.as_str() > bound.as_str(), "{id:?} with {prefix:?}");
            }
        }
    }
}
