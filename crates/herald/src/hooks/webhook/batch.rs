//! Cutting a round of undelivered events into the webhook's batches, and
//! the JSON the receiver gets. Not here: sending (`webhook.rs`), `offline`
//! (asked when a batch is sent).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use herald_protocol::{Event, EventType};
use serde::Serialize;

use super::{BATCH_BYTES, BATCH_EVENTS};
use crate::model::{ChatKey, encoded_len};
use crate::store::{Undelivered, WebhookAck};

/// What the receiver's JSON adds to an event's own encoding: the `workspace` and `chat` keys, their
/// quotes and commas, and `offline`'s key.
const EVENT_OVERHEAD: usize = 48;

/// Cuts a round's events into batches of at most [`BATCH_EVENTS`] events
/// and about [`BATCH_BYTES`], in order: chat by chat, each chat's events in
/// seq order. Events of types not in `types` are left out but still move
/// their chat's position; so does a chat whose undelivered events are gone
/// from the log (erased): it is passed up to its head.
pub(super) fn batches(pending: Vec<Undelivered>, types: Option<&HashSet<EventType>>) -> Vec<Batch> {
    let mut out = vec![Batch::default()];
    for u in pending {
        if u.events.is_empty() {
            // Head and events are written in one transaction: nothing to wait for here.
            let ack = WebhookAck { chat_id: u.chat_id, seq: u.head, since_ms: u.since_ms };
            out.last_mut().expect("one batch at least").ack(ack);
            continue;
        }
        let chat = Arc::new(Chat {
            key: u.key,
            member_bytes: u.members.as_ref().map_or(0, |m| m.iter().map(|n| n.len() + 3).sum()),
            members: u.members,
        });
        for event in u.events {
            let ack = WebhookAck { chat_id: u.chat_id, seq: event.seq, since_ms: event.ts };
            if types.is_some_and(|t| !t.contains(&event.kind)) {
                out.last_mut().expect("one batch at least").ack(ack);
                continue;
            }
            // The event as the receiver gets it, every field counted (reactions, mentions and files
            // included), so a batch stays near its size whatever the event carries.
            let mut size = EVENT_OVERHEAD + chat.key.ws.len() + chat.key.chat.len() + encoded_len(&event);
            if event.kind == EventType::Message {
                size += chat.member_bytes;
            }
            let last = out.last().expect("one batch at least");
            if !last.items.is_empty() && (last.items.len() >= BATCH_EVENTS || last.bytes + size > BATCH_BYTES) {
                out.push(Batch::default());
            }
            let batch = out.last_mut().expect("one batch at least");
            batch.bytes += size;
            batch.items.push((chat.clone(), event));
            batch.ack(ack);
        }
    }
    out.retain(|b| !b.acks.is_empty());
    out
}

/// A chat of a round, shared by its events in batches.
pub(super) struct Chat {
    pub key: ChatKey,
    /// Its members, when it has at most `--webhook-offline-max`.
    pub members: Option<Vec<String>>,
    /// What its members add to a message's JSON (as an `offline` list at most).
    member_bytes: usize,
}

/// One POST's events and the positions it acknowledges.
#[derive(Default)]
pub(super) struct Batch {
    pub items: Vec<(Arc<Chat>, Event)>,
    bytes: usize,
    /// Per chat (its row id), the last seq this batch covers.
    pub acks: HashMap<i64, WebhookAck>,
}

impl Batch {
    fn ack(&mut self, ack: WebhookAck) {
        self.acks.insert(ack.chat_id, ack);
    }
}

#[derive(Serialize)]
pub(super) struct OutBody<'a> {
    pub events: Vec<OutEvent<'a>>,
}

/// An event as the receiver gets it: the protocol's [`Event`], as `fetch` shows it (one shape,
/// so a field the protocol gains reaches the receiver too), with where it happened and, on a
/// message of a small chat, who was offline.
#[derive(Serialize)]
pub(super) struct OutEvent<'a> {
    pub workspace: &'a str,
    pub chat: &'a str,
    #[serde(flatten)]
    pub event: &'a Event,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offline: Option<Vec<&'a str>>,
}

#[cfg(test)]
mod tests {
    use serde_json::value::RawValue;

    use super::*;

    fn event(seq: u64, kind: EventType, body: &str) -> Event {
        Event::new(seq, kind, Some("alice".into()), 1000 + seq as i64, RawValue::from_string(body.into()).unwrap())
    }

    fn chat(id: i64, events: Vec<Event>, members: Option<Vec<String>>) -> Undelivered {
        let head = events.last().map_or(9, |e| e.seq);
        Undelivered {
            chat_id: id,
            key: ChatKey::new("w", &format!("c{id}")),
            delivered: events.first().map_or(0, |e| e.seq - 1),
            head,
            since_ms: 1,
            events,
            members,
        }
    }

    fn seqs(b: &Batch) -> Vec<(String, u64)> {
        b.items.iter().map(|(c, e)| (c.key.chat.to_string(), e.seq)).collect()
    }

    #[test]
    fn batches_hold_at_most_500_events_and_keep_each_chats_order() {
        let a = chat(1, (1..=700).map(|s| event(s, EventType::Message, "1")).collect(), None);
        let b = chat(2, (1..=100).map(|s| event(s, EventType::Message, "1")).collect(), None);
        let out = batches(vec![a, b], None);
        assert_eq!(out.iter().map(|b| b.items.len()).collect::<Vec<_>>(), vec![500, 300]);
        let all: Vec<(String, u64)> = out.iter().flat_map(seqs).collect();
        let mut expected: Vec<(String, u64)> = (1..=700).map(|s| ("c1".to_string(), s)).collect();
        expected.extend((1..=100).map(|s| ("c2".to_string(), s)));
        assert_eq!(all, expected, "chat by chat, in seq order");
        // Each batch acknowledges the last seq of each chat it carries.
        assert_eq!(out[0].acks[&1].seq, 500);
        assert_eq!((out[1].acks[&1].seq, out[1].acks[&2].seq), (700, 100));
    }

    #[test]
    fn batches_stay_near_256_kib_and_a_large_event_goes_alone() {
        let big = format!("\"{}\"", "x".repeat(100 * 1024));
        let huge = format!("\"{}\"", "y".repeat(300 * 1024));
        let events = vec![
            event(1, EventType::Message, &big),
            event(2, EventType::Message, &big),
            event(3, EventType::Message, &big),
            event(4, EventType::Message, &huge),
            event(5, EventType::Message, "1"),
        ];
        let out = batches(vec![chat(1, events, None)], None);
        let cut: Vec<Vec<u64>> = out.iter().map(|b| b.items.iter().map(|(_, e)| e.seq).collect()).collect();
        assert_eq!(cut, vec![vec![1, 2], vec![3], vec![4], vec![5]]);
        // Each member of a small chat counts against the size (the offline list it may carry).
        let members: Vec<String> = (0..10_000).map(|i| format!("member-{i:05}")).collect();
        let events = (1..=4).map(|s| event(s, EventType::Message, "1")).collect();
        let out = batches(vec![chat(1, events, Some(members))], None);
        assert_eq!(out.len(), 4, "10,000 members of 15 bytes: about 150 KB per message, one message a batch");
    }

    #[test]
    fn what_an_event_carries_besides_its_body_counts_against_the_batch() {
        // Tiny bodies, large reaction counts: each event is about 100 KiB as the receiver gets it.
        let reactions: std::collections::BTreeMap<String, u64> =
            (0..4_000).map(|i| (format!("emoji-{i:05}-xxxxxx"), i)).collect();
        let events = (1..=4)
            .map(|s| Event { reactions: Some(reactions.clone()), ..event(s, EventType::Message, "1") })
            .collect();
        let out = batches(vec![chat(1, events, None)], None);
        let sizes: Vec<usize> = out.iter().map(|b| b.items.len()).collect();
        assert_eq!(sizes, vec![2, 2], "about 100 KiB each: two to a batch of about 256 KiB");
    }

    #[test]
    fn filtered_types_move_the_position_without_being_sent() {
        let events = vec![
            event(1, EventType::Join, "{}"),
            event(2, EventType::Message, "1"),
            event(3, EventType::Reaction, "{}"),
        ];
        let only_messages: HashSet<EventType> = [EventType::Message].into();
        let out = batches(vec![chat(1, events, None)], Some(&only_messages));
        assert_eq!(out.len(), 1);
        assert_eq!(seqs(&out[0]), vec![("c1".to_string(), 2)]);
        assert_eq!(out[0].acks[&1].seq, 3, "the reaction after the message is passed too");
        // Nothing but filtered events: a batch with nothing to send, only a position to store.
        let out = batches(vec![chat(2, vec![event(7, EventType::Join, "{}")], None)], Some(&only_messages));
        assert_eq!((out.len(), out[0].items.len(), out[0].acks[&2].seq), (1, 0, 7));
        // A chat whose undelivered events are gone is passed up to its head.
        let out = batches(vec![chat(3, Vec::new(), None)], None);
        assert_eq!((out[0].items.len(), out[0].acks[&3].seq), (0, 9));
    }
}
