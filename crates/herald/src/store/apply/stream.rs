//! v1.2's streamed messages in a write batch: an `append` adds text to an open stream's body
//! (durable when answered, no event), and its end stores one `edit` event with the final body.
//!
//! The body is changed in place, as text: every field the sender gave keeps its place and its
//! exact JSON; only `text`'s value grows. Not here: the coalescing of `append` pushes (the chat
//! layer) or the timeout that ends forgotten streams (its caller writes an `Actor::Admin` end).

use herald_protocol::frame::utf16_len;
use herald_protocol::{EventType, StreamState};
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use super::{Batch, ChatRow, Extras, Outcome, Tx, edit_body};
use crate::model::ChatKey;
use crate::store::{Actor, StoreError, Written};

/// What a `StreamText` write asks.
pub(super) struct Ask<'a> {
    pub user: Option<&'a str>,
    pub actor: Actor,
    pub target: u64,
    pub text: &'a str,
    pub done: bool,
}

impl Batch {
    pub(super) async fn stream_text<T: Tx>(
        &mut self,
        tx: &mut T,
        key: &ChatKey,
        row: ChatRow,
        ask: Ask<'_>,
        limit: usize,
    ) -> Result<Outcome, T::Error> {
        let target = ask.target;
        let found = if target == 0 || target > row.seq { None } else { tx.load_message(row.id, target).await? };
        let Some(mut m) = found else {
            return Ok(Err(StoreError::NotFound(format!("no message {target} in {}", key.chat))));
        };
        if ask.actor == Actor::Client && m.user.as_deref() != ask.user {
            return Ok(Err(StoreError::Forbidden(format!("message {target} is another user's stream"))));
        }
        if m.stream != Some(StreamState::Open) || m.deleted {
            if ask.actor == Actor::Admin && ask.done && ask.text.is_empty() {
                // The server's end of a stream that ended meanwhile: nothing to do.
                return Ok(Ok(Written { event: None, seq: 0, info: row.info(), at: None }));
            }
            return Ok(Err(StoreError::BadRequest(format!("message {target} is not an open stream"))));
        }
        let Some(body) = tx.load_body(row.id, target).await? else {
            return Ok(Err(StoreError::NotFound(format!("no message {target} in {}", key.chat))));
        };
        let Some((grown, at)) = extend(&body, ask.text) else {
            return Ok(Err(StoreError::BadRequest(format!("message {target}'s body has no \"text\" to append to"))));
        };
        if grown.get().len() > limit {
            let limit = herald_protocol::limits::size_in_words(limit as u64);
            return Ok(Err(StoreError::TooLarge(format!("the streamed body would be over {limit}"))));
        }
        if !ask.text.is_empty() {
            tx.set_body(row.id, target, &grown).await?;
        }
        m.stream_ms = self.now_ms;
        let appended = (!ask.text.is_empty()).then_some(at);
        if !ask.done {
            tx.save_message(row.id, target, &m).await?;
            return Ok(Ok(Written { event: None, seq: 0, info: row.info(), at: appended }));
        }
        // The end: one `edit` event with the final body, by the stream's sender.
        m.stream = Some(StreamState::Done);
        let sender = m.user.clone();
        let x = Extras { target: Some(target), ..Extras::default() };
        let event = self.append(tx, key, EventType::Edit, sender.as_deref(), edit_body(target, &grown), x).await?;
        tx.edit_message(row.id, target, &grown, event.seq).await?;
        tx.save_message(row.id, target, &m).await?;
        let mut written = self.done(key, event);
        if let Ok(w) = &mut written {
            w.at = appended;
        }
        Ok(written)
    }
}

/// `body` (an object whose `text` is a string) with `more` added to the end of its text, and the
/// text's length before, in UTF-16 code units. `None` if the body is not such an object.
pub(crate) fn extend(body: &RawValue, more: &str) -> Option<(Box<RawValue>, u64)> {
    let fields = fields(body.get())?;
    let mut out = String::with_capacity(body.get().len() + more.len() + 8);
    let mut at = None;
    out.push('{');
    for (i, (name, value)) in fields.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&serde_json::to_string(name).ok()?);
        out.push(':');
        if name == "text" && at.is_none() {
            let text: String = serde_json::from_str(value.get()).ok()?;
            at = Some(utf16_len(&text));
            out.push_str(&serde_json::to_string(&(text + more)).ok()?);
        } else {
            out.push_str(value.get());
        }
    }
    out.push('}');
    Some((RawValue::from_string(out).ok()?, at?))
}

/// An object's fields in the order written, each value as raw JSON.
fn fields(json: &str) -> Option<Vec<(String, Box<RawValue>)>> {
    struct Fields;
    impl<'de> Visitor<'de> for Fields {
        type Value = Vec<(String, Box<RawValue>)>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(entry) = map.next_entry::<String, Box<RawValue>>()? {
                out.push(entry);
            }
            Ok(out)
        }
    }
    let mut de = serde_json::Deserializer::from_str(json);
    let fields = (&mut de).deserialize_map(Fields).ok()?;
    de.end().ok()?;
    Some(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.into()).unwrap()
    }

    #[test]
    fn text_grows_in_place_and_at_counts_utf16() {
        let (grown, at) = extend(&raw(r#"{"kind":"ai","text":"héllo 😀","meta":{"a":[1,2]}}"#), " wor").unwrap();
        assert_eq!(grown.get(), r#"{"kind":"ai","text":"héllo 😀 wor","meta":{"a":[1,2]}}"#);
        assert_eq!(at, 8, "h é l l o space and a surrogate pair");
        let (again, at) = extend(&grown, "ld\n\"q\"").unwrap();
        assert_eq!(at, 12);
        let text: serde_json::Value = serde_json::from_str(again.get()).unwrap();
        assert_eq!(text["text"], "héllo 😀 world\n\"q\"");
    }

    #[test]
    fn a_body_without_text_is_refused() {
        assert!(extend(&raw(r#"{"t":"x"}"#), "a").is_none());
        assert!(extend(&raw(r#"{"text":5}"#), "a").is_none());
        assert!(extend(&raw(r#"["text"]"#), "a").is_none());
        assert!(extend(&raw(r#""text""#), "a").is_none());
    }
}
