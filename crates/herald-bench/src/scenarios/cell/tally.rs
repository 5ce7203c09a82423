//! What one load worker counted, and how the parent adds the workers up: the
//! live form (`Tally`, shared by a worker's sessions) and the line a worker
//! prints (`Counted`, histograms as value-count pairs). The figures derived
//! from the sum (expected deliveries, percentiles) are `report`'s.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use super::timeline::{Coarse, Losses, Timeline};
use crate::latency::Latencies;

/// A worker's counts while it runs, shared by its sessions.
#[derive(Default)]
pub struct Tally {
    /// Acked sends per chat (index).
    pub acked: HashMap<u32, u64>,
    /// Sends given up per chat (refused after every retry): maybe stored, maybe not.
    pub abandoned: HashMap<u32, u64>,
    /// Message events of the open chat received (once each), in all and per chat.
    pub delivered: u64,
    pub delivered_by_chat: HashMap<u32, u64>,
    /// Sends written and not answered yet, per chat: at the count, maybe stored, maybe not.
    pub in_flight: HashMap<u32, u64>,
    /// Other events of the open chat (joins, reads, reactions).
    pub other_events: u64,
    /// Event pushes of a chat the session does not watch (should be none).
    pub foreign_events: u64,
    /// Pushes at or below a seq already seen.
    pub duplicates: u64,
    /// Places where a push skipped seqs, and how many it skipped.
    pub gaps: u64,
    pub skipped: u64,
    /// Skipped seqs not fetched yet (goes back down as fetches fill them).
    pub missing: i64,
    /// Skipped seqs filled by a fetch.
    pub fetched: u64,
    /// Skipped seqs past what a session keeps to fetch.
    pub unrepaired: u64,
    pub notifies: u64,
    pub inbox_pushes: u64,
    pub typing_pushes: u64,
    pub presence_pushes: u64,
    pub other_pushes: u64,
    pub bad_frames: u64,
    /// Requests that succeeded, by kind (sends are in `acked`).
    pub typings: u64,
    pub reads: u64,
    pub reactions: u64,
    /// Requests that failed, by op, and the first error.
    pub failed: BTreeMap<String, u64>,
    pub first_error: Option<String>,
    /// Requests asked again after a refusal that said when (a busy shard, a throttle).
    pub retries: u64,
    /// Sessions that ended before the worker stopped them.
    pub dropped: u64,
    /// Send to delivery, sender and receiver on the same node or not.
    pub same_node: Latencies,
    pub cross_node: Latencies,
    /// Send to ack.
    pub ack: Latencies,
    /// Each step of the opening, request to reply: watch, presence, inbox.
    pub opening: [Latencies; 3],
    /// Message events delivered by the replay (or a fetch of it) after a reconnect, and their
    /// send-to-delivery time (apart from the live figures).
    pub replayed: u64,
    pub replay: Latencies,
    /// Connections got back after a loss (hello answered on another node, or the same).
    pub reconnects: u64,
    /// Sends whose reply the loss took, sent again with the same `client_id`.
    pub resends: u64,
    /// Requests with no answer in the liveness bound: their connection was taken as lost.
    pub stalls: u64,
    /// Sessions between a loss and their resume now.
    pub resuming: i64,
    /// `reconnect` pushes (a drain or a rebalance sending the session away).
    pub reconnect_pushes: u64,
    /// Live latency per second and losses per node.
    pub timeline: Timeline,
}

impl Tally {
    /// Starts the load's counts afresh, keeping the opening's times.
    pub fn restart(&mut self) {
        let opening = std::mem::take(&mut self.opening);
        *self = Tally { opening, ..Tally::default() };
    }
}

/// A worker's counts as it prints them.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Counted {
    /// (chat, acked sends), chats with any.
    pub acked: Vec<(u32, u64)>,
    /// (chat, sends given up), chats with any.
    #[serde(default)]
    pub abandoned: Vec<(u32, u64)>,
    /// (chat, watchers of this worker), chats with any.
    pub watchers: Vec<(u32, u64)>,
    /// (chat, message deliveries), chats with any.
    #[serde(default)]
    pub delivered_by_chat: Vec<(u32, u64)>,
    /// (chat, sends unanswered when the worker counted), chats with any.
    #[serde(default)]
    pub in_flight: Vec<(u32, u64)>,
    pub delivered: u64,
    pub other_events: u64,
    pub foreign_events: u64,
    pub duplicates: u64,
    pub gaps: u64,
    pub skipped: u64,
    pub missing: i64,
    pub fetched: u64,
    pub unrepaired: u64,
    pub notifies: u64,
    pub inbox_pushes: u64,
    pub typing_pushes: u64,
    pub presence_pushes: u64,
    pub other_pushes: u64,
    pub bad_frames: u64,
    pub typings: u64,
    pub reads: u64,
    pub reactions: u64,
    pub failed: BTreeMap<String, u64>,
    pub first_error: Option<String>,
    pub retries: u64,
    pub dropped: u64,
    /// Commands not given because the user's session was still busy.
    pub busy: u64,
    pub same_node: Vec<(u64, u64)>,
    pub cross_node: Vec<(u64, u64)>,
    pub ack: Vec<(u64, u64)>,
    /// The opening's steps: watch, presence, inbox.
    pub opening: [Vec<(u64, u64)>; 3],
    #[serde(default)]
    pub replayed: u64,
    #[serde(default)]
    pub replay: Vec<(u64, u64)>,
    #[serde(default)]
    pub reconnects: u64,
    #[serde(default)]
    pub resends: u64,
    #[serde(default)]
    pub stalls: u64,
    #[serde(default)]
    pub reconnect_pushes: u64,
    /// Sessions still resuming when the worker counted.
    #[serde(default)]
    pub resuming: i64,
    /// Live deliveries' latency per clock second.
    #[serde(default)]
    pub live_per_s: Vec<(u64, Coarse)>,
    /// Per node lost: its sessions' losses.
    #[serde(default)]
    pub losses: Vec<(u32, Losses)>,
}

impl Tally {
    /// The printed form, with the worker's watchers per chat and its busy count.
    pub fn counted(&self, watchers: &HashMap<u32, u64>, busy: u64) -> Counted {
        let sorted = |m: &HashMap<u32, u64>| {
            let mut v: Vec<(u32, u64)> = m.iter().map(|(k, v)| (*k, *v)).collect();
            v.sort_unstable();
            v
        };
        Counted {
            acked: sorted(&self.acked),
            abandoned: sorted(&self.abandoned),
            watchers: sorted(watchers),
            delivered_by_chat: sorted(&self.delivered_by_chat),
            in_flight: sorted(&self.in_flight),
            delivered: self.delivered,
            other_events: self.other_events,
            foreign_events: self.foreign_events,
            duplicates: self.duplicates,
            gaps: self.gaps,
            skipped: self.skipped,
            missing: self.missing,
            fetched: self.fetched,
            unrepaired: self.unrepaired,
            notifies: self.notifies,
            inbox_pushes: self.inbox_pushes,
            typing_pushes: self.typing_pushes,
            presence_pushes: self.presence_pushes,
            other_pushes: self.other_pushes,
            bad_frames: self.bad_frames,
            typings: self.typings,
            reads: self.reads,
            reactions: self.reactions,
            failed: self.failed.clone(),
            first_error: self.first_error.clone(),
            retries: self.retries,
            dropped: self.dropped,
            busy,
            same_node: self.same_node.to_counts(),
            cross_node: self.cross_node.to_counts(),
            ack: self.ack.to_counts(),
            opening: [0, 1, 2].map(|i| self.opening[i].to_counts()),
            replayed: self.replayed,
            replay: self.replay.to_counts(),
            reconnects: self.reconnects,
            resends: self.resends,
            stalls: self.stalls,
            reconnect_pushes: self.reconnect_pushes,
            resuming: self.resuming,
            live_per_s: self.timeline.live.iter().map(|(s, c)| (*s, c.clone())).collect(),
            losses: self.timeline.losses(),
        }
    }
}

/// Every worker's counts added up.
#[derive(Default)]
pub struct Sum {
    pub acked: HashMap<u32, u64>,
    pub abandoned: HashMap<u32, u64>,
    pub watchers: HashMap<u32, u64>,
    pub delivered_by_chat: HashMap<u32, u64>,
    pub in_flight: HashMap<u32, u64>,
    pub counted: Counted,
    pub same_node: Latencies,
    pub cross_node: Latencies,
    pub ack: Latencies,
    pub opening: [Latencies; 3],
    pub replay: Latencies,
    /// Live latency per clock second, all workers.
    pub live: BTreeMap<u64, Coarse>,
    /// Per node lost, all workers.
    pub losses: BTreeMap<u32, Losses>,
}

impl Sum {
    /// Adds one worker's counts.
    pub fn add(&mut self, c: Counted) {
        for (chat, n) in &c.acked {
            *self.acked.entry(*chat).or_default() += n;
        }
        for (chat, n) in &c.abandoned {
            *self.abandoned.entry(*chat).or_default() += n;
        }
        for (chat, n) in &c.watchers {
            *self.watchers.entry(*chat).or_default() += n;
        }
        for (chat, n) in &c.delivered_by_chat {
            *self.delivered_by_chat.entry(*chat).or_default() += n;
        }
        for (chat, n) in &c.in_flight {
            *self.in_flight.entry(*chat).or_default() += n;
        }
        self.same_node.merge(&Latencies::from_counts(&c.same_node));
        self.cross_node.merge(&Latencies::from_counts(&c.cross_node));
        self.ack.merge(&Latencies::from_counts(&c.ack));
        for (mine, theirs) in self.opening.iter_mut().zip(&c.opening) {
            mine.merge(&Latencies::from_counts(theirs));
        }
        self.replay.merge(&Latencies::from_counts(&c.replay));
        for (sec, h) in &c.live_per_s {
            self.live.entry(*sec).or_default().merge(h);
        }
        for (node, l) in c.losses {
            self.losses.entry(node).or_default().add(l);
        }
        let s = &mut self.counted;
        s.replayed += c.replayed;
        s.reconnects += c.reconnects;
        s.resends += c.resends;
        s.stalls += c.stalls;
        s.reconnect_pushes += c.reconnect_pushes;
        s.resuming += c.resuming;
        s.delivered += c.delivered;
        s.other_events += c.other_events;
        s.foreign_events += c.foreign_events;
        s.duplicates += c.duplicates;
        s.gaps += c.gaps;
        s.skipped += c.skipped;
        s.missing += c.missing;
        s.fetched += c.fetched;
        s.unrepaired += c.unrepaired;
        s.notifies += c.notifies;
        s.inbox_pushes += c.inbox_pushes;
        s.typing_pushes += c.typing_pushes;
        s.presence_pushes += c.presence_pushes;
        s.other_pushes += c.other_pushes;
        s.bad_frames += c.bad_frames;
        s.typings += c.typings;
        s.reads += c.reads;
        s.reactions += c.reactions;
        for (op, n) in c.failed {
            *s.failed.entry(op).or_default() += n;
        }
        if s.first_error.is_none() {
            s.first_error = c.first_error;
        }
        s.retries += c.retries;
        s.dropped += c.dropped;
        s.busy += c.busy;
    }

    /// Message deliveries owed: every acked message of a chat to each of its watchers (its sender's own
    /// connection included: it watches the chat it sends in).
    pub fn expected(&self) -> u64 {
        self.acked.iter().map(|(chat, n)| n * self.watchers.get(chat).copied().unwrap_or(0)).sum()
    }

    /// Message deliveries that may come on top: each send given up or unanswered at the count, if
    /// it was stored after all.
    pub fn maybe(&self) -> u64 {
        self.abandoned
            .iter()
            .chain(&self.in_flight)
            .map(|(chat, n)| n * self.watchers.get(chat).copied().unwrap_or(0))
            .sum()
    }

    fn owed(&self, chat: u32) -> (u64, u64) {
        let w = self.watchers.get(&chat).copied().unwrap_or(0);
        let of = |m: &HashMap<u32, u64>| m.get(&chat).copied().unwrap_or(0);
        (of(&self.acked) * w, (of(&self.abandoned) + of(&self.in_flight)) * w)
    }

    /// Deliveries owed and not received, chat by chat (one chat's surplus does not hide another's loss).
    pub fn lost(&self) -> u64 {
        self.acked
            .keys()
            .map(|&c| self.owed(c).0.saturating_sub(self.delivered_by_chat.get(&c).copied().unwrap_or(0)))
            .sum()
    }

    /// Deliveries received beyond what each chat could owe, sends given up and unanswered included.
    pub fn beyond(&self) -> u64 {
        self.delivered_by_chat
            .iter()
            .map(|(&c, &d)| {
                let (owed, maybe) = self.owed(c);
                d.saturating_sub(owed + maybe)
            })
            .sum()
    }

    /// Sends unanswered when the workers counted.
    pub fn unanswered(&self) -> u64 {
        self.in_flight.values().sum()
    }

    /// Acked sends in all.
    pub fn sent(&self) -> u64 {
        self.acked.values().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_add_up_to_what_each_chat_owes() {
        let mut sum = Sum::default();
        let a = Counted { acked: vec![(1, 3)], watchers: vec![(1, 2), (2, 1)], delivered: 6, ..Counted::default() };
        let b = Counted { acked: vec![(1, 1), (2, 5)], watchers: vec![(1, 2)], delivered: 9, ..Counted::default() };
        sum.add(a);
        sum.add(b);
        // Chat 1: 4 messages to 4 watchers; chat 2: 5 messages to 1.
        assert_eq!(sum.expected(), 4 * 4 + 5);
        assert_eq!(sum.sent(), 9);
        assert_eq!(sum.counted.delivered, 15);
        sum.add(Counted { abandoned: vec![(1, 2)], ..Counted::default() });
        assert_eq!(sum.maybe(), 2 * 4);
    }

    #[test]
    fn a_chat_short_of_its_deliveries_is_lost_even_when_another_has_more() {
        let mut sum = Sum::default();
        // Chat 1: 3 acked to 2 watchers, 5 received; chat 2: 2 acked to 1 watcher (and 1 unanswered), 3 received.
        sum.add(Counted {
            acked: vec![(1, 3), (2, 2)],
            watchers: vec![(1, 2), (2, 1)],
            delivered_by_chat: vec![(1, 5), (2, 3)],
            in_flight: vec![(2, 1)],
            ..Counted::default()
        });
        assert_eq!((sum.lost(), sum.beyond(), sum.unanswered()), (1, 0, 1));
        sum.add(Counted { delivered_by_chat: vec![(2, 1)], ..Counted::default() });
        assert_eq!(sum.beyond(), 1);
    }
}
