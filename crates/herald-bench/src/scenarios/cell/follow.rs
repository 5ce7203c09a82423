//! One watched chat followed as the protocol's "Keeping every event" says:
//! the last seq seen, the seqs a push skipped (to fetch), and each event
//! counted once whether it came by push or by fetch, a message with its
//! send-to-delivery time. After a reconnect, the events up to the re-watch's
//! reply (the replay of what the session missed, and what a fetch fills of
//! it) are counted as delivered with their latency kept apart from the live
//! figures. What asks the fetch is `session`'s.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Deserialize;

use super::tally::Tally;

/// Seqs kept to fetch at most: past it a gap is counted as unrepaired instead.
const MAX_MISSING: usize = 10_000;

/// A message body of the bench's: when it was sent and from which node.
#[derive(Debug, Deserialize)]
pub struct Body {
    /// When the sender sent it, microseconds since the epoch.
    pub t: Option<u64>,
    /// The sender's node.
    pub n: Option<u32>,
}

/// An event of a `fetch` reply, as far as the bench reads it.
#[derive(Debug, Deserialize)]
pub struct Fetched {
    pub seq: u64,
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub body: Option<Body>,
}

/// A `fetch` reply.
#[derive(Debug, Deserialize)]
pub struct FetchReply {
    pub events: Vec<Fetched>,
}

/// Microseconds since the epoch: every process of the bench reads the same clock.
pub fn now_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(0)
}

/// The state of one followed chat.
#[derive(Debug, Default)]
pub struct Follow {
    /// The chat's index (its deliveries are counted per chat).
    pub chat: u32,
    /// The last seq seen (from the watch's reply, then pushes).
    pub last: u64,
    /// Seqs below `last` not seen yet.
    missing: BTreeSet<u64>,
    /// A re-watch is on its way: what arrives meanwhile is its replay.
    awaiting: bool,
    /// Events up to this seq came by replay or fetch after a reconnect (the re-watch's reply).
    replay_upto: u64,
}

impl Follow {
    /// Chat `chat`, nothing seen yet.
    pub fn of(chat: u32) -> Follow {
        Follow { chat, ..Follow::default() }
    }

    /// The connection was lost: the next events come by the re-watch's replay.
    pub fn resuming(&mut self) {
        self.awaiting = true;
    }

    /// The re-watch answered `seq`, the chat's latest: the replay of what was missed runs up to it
    /// (pushed after the reply; `last` moves as it arrives).
    pub fn rewatched(&mut self, seq: u64) {
        self.awaiting = false;
        self.replay_upto = self.replay_upto.max(seq);
    }

    /// Whether an event of `seq` arriving now is a replay rather than live.
    fn replayed(&self, seq: u64) -> bool {
        self.awaiting || seq <= self.replay_upto
    }

    /// A `notify` of the chat at `seq`: the pushes skipped up to it, to fetch; true when it opened a gap.
    pub fn notify(&mut self, seq: u64, t: &mut Tally) -> bool {
        if seq <= self.last {
            return false;
        }
        let skipped = seq - self.last;
        t.gaps += 1;
        t.skipped += skipped;
        if self.missing.len() + skipped as usize <= MAX_MISSING {
            self.missing.extend(self.last + 1..=seq);
            t.missing += skipped as i64;
        } else {
            t.unrepaired += skipped;
        }
        self.last = seq;
        true
    }

    /// Counts an event push of the chat (its `seq`, `type` and body); true when it opened a gap.
    pub fn push(&mut self, seq: u64, kind: Option<&str>, body: Option<&Body>, node: u32, t: &mut Tally) -> bool {
        if seq <= self.last {
            if self.missing.remove(&seq) {
                t.missing -= 1;
                deliver(self.chat, kind, body, node, self.replayed(seq), t);
            } else {
                t.duplicates += 1;
            }
            return false;
        }
        let gap = seq > self.last + 1;
        if gap {
            t.gaps += 1;
            let skipped = seq - self.last - 1;
            t.skipped += skipped;
            if self.missing.len() + skipped as usize <= MAX_MISSING {
                self.missing.extend(self.last + 1..seq);
                t.missing += skipped as i64;
            } else {
                t.unrepaired += skipped;
            }
        }
        self.last = seq;
        deliver(self.chat, kind, body, node, self.replayed(seq), t);
        gap
    }

    /// Where a fetch should start (`after`), if a gap is open.
    pub fn fetch_after(&self) -> Option<u64> {
        self.missing.first().map(|s| s - 1)
    }

    /// Counts the events of a fetch reply that fill a gap; true while gaps remain.
    pub fn fetched(&mut self, events: &[Fetched], node: u32, t: &mut Tally) -> bool {
        let mut progressed = false;
        for e in events {
            if self.missing.remove(&e.seq) {
                t.missing -= 1;
                t.fetched += 1;
                progressed = true;
                deliver(self.chat, e.kind.as_deref(), e.body.as_ref(), node, self.replayed(e.seq), t);
            }
        }
        // A reply that filled nothing will not fill it by asking again the same way.
        progressed && !self.missing.is_empty()
    }
}

/// Counts one event of `chat` delivered to a watcher on `node`, live or by a replay after a reconnect.
fn deliver(chat: u32, kind: Option<&str>, body: Option<&Body>, node: u32, replayed: bool, t: &mut Tally) {
    if kind != Some("message") {
        t.other_events += 1;
        return;
    }
    t.delivered += 1;
    *t.delivered_by_chat.entry(chat).or_default() += 1;
    if replayed {
        t.replayed += 1;
    }
    if let Some(Body { t: Some(sent), n: Some(from) }) = body {
        let now = now_us();
        let d = Duration::from_micros(now.saturating_sub(*sent));
        if replayed {
            t.replay.record(d);
        } else {
            t.timeline.live(now, d);
            if *from == node { t.same_node.record(d) } else { t.cross_node.record(d) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(seq: u64) -> Fetched {
        Fetched { seq, kind: Some("message".into()), body: None }
    }

    #[test]
    fn a_gap_is_fetched_and_each_event_counted_once() {
        let mut t = Tally::default();
        let mut f = Follow { last: 10, ..Follow::default() };
        assert!(!f.push(11, Some("message"), None, 0, &mut t));
        assert!(f.push(14, Some("message"), None, 0, &mut t));
        assert_eq!((t.gaps, t.skipped, t.missing), (1, 2, 2));
        assert_eq!(f.fetch_after(), Some(11));
        // A late push of 12 fills part of the gap; the fetch brings 12 (again), 13 and 14.
        f.push(12, Some("message"), None, 0, &mut t);
        assert!(!f.fetched(&[message(12), message(13), message(14)], 0, &mut t));
        assert_eq!(f.fetch_after(), None);
        assert_eq!((t.delivered, t.fetched, t.missing, t.duplicates), (4, 1, 0, 0));
        f.push(14, Some("message"), None, 0, &mut t);
        assert_eq!(t.duplicates, 1);
    }

    #[test]
    fn a_replay_after_a_reconnect_is_counted_apart_and_a_notify_opens_a_gap() {
        let mut t = Tally::default();
        let mut f = Follow { last: 5, ..Follow::default() };
        f.resuming();
        f.rewatched(8);
        for seq in 6..=9 {
            assert!(!f.push(seq, Some("message"), None, 0, &mut t));
        }
        assert_eq!((t.delivered, t.replayed, t.duplicates), (4, 3, 0));
        assert!(f.notify(12, &mut t));
        assert_eq!(f.fetch_after(), Some(9));
        assert!(!f.fetched(&[message(10), message(11), message(12)], 0, &mut t));
        assert_eq!((t.delivered, t.missing, t.replayed), (7, 0, 3));
        assert!(!f.notify(12, &mut t));
    }
}
