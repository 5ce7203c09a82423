//! Property tests of the hub's plain-data parts, driven directly: no hub,
//! no runtime, no timers. The whole-hub properties (props.rs) check the
//! guarantee end to end; these pin each part's own promise, so a change
//! that breaks one shows there first and small.

use std::sync::Arc;

use herald_protocol::{Event, EventType};
use proptest::prelude::*;
use serde_json::value::RawValue;

use super::Replay;
use super::heat::{HOT_MIN_EVENTS, Heat};
use super::sequencer::{AfterRepair, Offered, Sequencer};
use super::watchers::{Finished, Watchers};
use crate::model::{ChatKey, Published};
use crate::outbox::{Frame, Outbox};

fn key() -> ChatKey {
    ChatKey::new("w", "c")
}

fn event(seq: u64, kind: EventType, user: &str) -> Arc<Published> {
    let e =
        Event::new(seq, kind, Some(user.into()), 0, RawValue::from_string(format!("{{\"n\":{seq}}}")).expect("JSON"));
    Published::new(key(), &e)
}

fn message(seq: u64) -> Arc<Published> {
    event(seq, EventType::Message, "author")
}

/// Offers `event` and returns the seqs it releases, in release order.
fn offer(seq: &mut Sequencer, event: Arc<Published>) -> Vec<u64> {
    let mut out = Vec::new();
    let mut next = match seq.offer(event) {
        Offered::Ready(e) => Some(e),
        Offered::Old | Offered::Held { .. } => None,
        Offered::Skipped => seq.pop_ready(),
    };
    while let Some(e) = next {
        out.push(e.seq);
        next = seq.pop_ready();
    }
    out
}

fn drain(seq: &mut Sequencer) -> Vec<u64> {
    std::iter::from_fn(|| seq.pop_ready()).map(|e| e.seq).collect()
}

/// Seqs 1..=n shuffled, with some repeated.
fn arrivals() -> impl Strategy<Value = (u64, Vec<u64>)> {
    (1u64..120).prop_flat_map(|n| {
        let all: Vec<u64> = (1..=n).collect();
        (Just(n), Just(all).prop_shuffle(), proptest::collection::vec(1..=n, 0..20), any::<proptest::sample::Index>())
            .prop_map(|(n, mut order, again, at)| {
                let i = at.index(order.len() + 1);
                order.splice(i..i, again);
                (n, order)
            })
    })
}

/// The seqs a client holds after `frames` of one watch: what its reply
/// says, then pushes and the fetches a `notify` or a gap prescribes.
/// Panics on a push at or below what it holds (a duplicate or a step back).
fn client_holds(frames: &[Frame]) -> u64 {
    let mut last = None;
    for f in frames {
        let v: serde_json::Value = serde_json::from_str(f.as_str()).expect("JSON");
        if let Some(latest) = v.get("latest") {
            last = Some(latest.as_u64().expect("latest"));
            continue;
        }
        let seq = v["seq"].as_u64().expect("seq");
        let held = last.expect("the reply comes first");
        match v["ev"].as_str() {
            Some("event") => assert!(seq > held, "pushed {seq} while holding up to {held}"),
            Some("notify") => assert!(seq >= held, "told to fetch up to {seq} while holding up to {held}"),
            other => panic!("unexpected frame {other:?}"),
        }
        last = Some(held.max(seq));
    }
    last.unwrap_or(0)
}

proptest! {
    /// Every seq after the start is released once, in order, whatever the
    /// order and repetition of arrivals, and whether they come before or
    /// after the first watch starts the sequencer.
    #[test]
    fn the_sequencer_releases_each_event_once_in_seq_order((n, order) in arrivals(), latest in 0u64..40, started_after in 0usize..60) {
        let latest = latest.min(n);
        let mut seq = Sequencer::default();
        let mut released = Vec::new();
        for (i, s) in order.iter().enumerate() {
            if i == started_after {
                seq.start(latest);
                released.extend(drain(&mut seq));
            }
            released.extend(offer(&mut seq, message(*s)));
        }
        if seq.next().is_none() {
            seq.start(latest);
            released.extend(drain(&mut seq));
        }
        prop_assert_eq!(released, (latest + 1..=n).collect::<Vec<_>>());
        prop_assert_eq!(seq.next(), Some(n + 1));
    }

    /// With events lost and the log unreadable, gaps are given up: what is
    /// released still only goes up, once each, and nothing offered after
    /// the sequencer's position is lost.
    #[test]
    fn a_given_up_gap_never_releases_an_event_twice_or_out_of_order(
        (n, order) in arrivals(),
        lost in proptest::collection::hash_set(1u64..120, 0..30),
        give_up_every in 1usize..10,
    ) {
        let mut seq = Sequencer::default();
        seq.start(0);
        let mut released = Vec::new();
        for (i, s) in order.iter().filter(|s| !lost.contains(s)).enumerate() {
            released.extend(offer(&mut seq, message(*s)));
            if i % give_up_every == 0
                && let AfterRepair::Skipped { .. } = seq.repaired(false)
            {
                released.extend(drain(&mut seq));
            }
        }
        while let AfterRepair::Skipped { .. } = seq.repaired(false) {
            released.extend(drain(&mut seq));
        }
        prop_assert!(released.windows(2).all(|w| w[0] < w[1]), "{:?}", released);
        let kept: Vec<u64> = (1..=n).filter(|s| !lost.contains(s)).collect();
        let last_kept = kept.last().copied().unwrap_or(0);
        prop_assert!(released.last().copied().unwrap_or(0) == last_kept, "{:?} of {:?}", released, kept);
    }

    /// A chat under [`HOT_MIN_EVENTS`] events a second never turns hot, and
    /// a threshold of 0 never lets one.
    #[test]
    fn heat_needs_the_events_floor_and_a_threshold(per_second in 1u32..40, watchers in 1u64..10_000, threshold in 0u64..1000, seconds in 1u64..5) {
        let mut heat = Heat::default();
        let mut hot = false;
        for second in 0..seconds {
            for _ in 0..per_second {
                hot |= heat.count(&key(), second, watchers, threshold);
            }
        }
        if threshold == 0 || per_second < HOT_MIN_EVENTS {
            prop_assert!(!hot);
        }
        if threshold > 0 && per_second >= HOT_MIN_EVENTS && u64::from(per_second) * watchers >= threshold {
            prop_assert!(hot);
        }
    }

    /// A watch begun while events flow (live ones buffered while its replay
    /// is read, in a buffer that may overflow), finished, then live: its
    /// client holds every event up to the last, each pushed at most once,
    /// in order; a live watch of another user beside it gets every event.
    #[test]
    fn a_watch_started_while_events_flow_holds_every_event_once_in_order(
        before in 0u64..20,
        read_after in 0u64..10,
        during in 0u64..20,
        after in 0u64..20,
        sync_bytes in prop_oneof![Just(1usize << 20), 0usize..400],
    ) {
        let mut watchers = Watchers::default();
        let other = Arc::new(Outbox::new(1, 1 << 24));
        let starting = Arc::new(Outbox::new(2, 1 << 24));
        let (u1, u2): (Arc<str>, Arc<str>) = ("one".into(), "two".into());
        watchers.begin(&other, &u1);
        let live = |w: &mut Watchers, conn, latest| {
            let replay = Replay { reply: Frame::from(format!("{{\"latest\":{latest}}}")), latest, frames: vec![], truncated: false };
            w.finish(&key(), conn, replay, latest + 1, || 0)
        };
        prop_assert!(matches!(live(&mut watchers, 1, before), Finished::Live));
        watchers.begin(&starting, &u2);
        // Events after the begin; the read of the log sees `read_after` of them.
        let read_at = before + read_after.min(during);
        let mut next = before + 1;
        for _ in 0..during {
            prop_assert!(watchers.push(&message(next), sync_bytes).is_empty());
            next += 1;
        }
        let replay = Replay { reply: Frame::from(format!("{{\"latest\":{read_at}}}")), latest: read_at, frames: vec![], truncated: false };
        let finished = watchers.finish(&key(), 2, replay, next, || 0);
        prop_assert!(matches!(finished, Finished::Live));
        for _ in 0..after {
            prop_assert!(watchers.push(&message(next), sync_bytes).is_empty());
            next += 1;
        }
        let last = next - 1;
        let mut frames = Vec::new();
        starting.drain(usize::MAX, &mut frames);
        prop_assert_eq!(client_holds(&frames), last.max(read_at));
        let mut frames = Vec::new();
        other.drain(usize::MAX, &mut frames);
        let pushed = frames.len() as u64 - 1;
        prop_assert_eq!(pushed, last - before, "the live watcher got every event");
        prop_assert_eq!(client_holds(&frames), last);
    }

    /// A `leave` of a user ends that user's live watches it reaches, and only theirs.
    #[test]
    fn a_leave_ends_exactly_its_users_live_watches(users in proptest::collection::vec(0u8..3, 1..8), leaver in 0u8..3) {
        let mut watchers = Watchers::default();
        for (i, u) in users.iter().enumerate() {
            let outbox = Arc::new(Outbox::new(i as u64, 1 << 20));
            watchers.begin(&outbox, &Arc::from(format!("u{u}")));
            let replay = Replay { reply: Frame::from("{\"latest\":0}"), latest: 0, frames: vec![], truncated: false };
            prop_assert!(matches!(watchers.finish(&key(), i as u64, replay, 1, || 0), Finished::Live));
        }
        let gone = watchers.push(&event(1, EventType::Leave, &format!("u{leaver}")), 1 << 20);
        let mut ended: Vec<u64> = gone.iter().map(|g| g.conn).collect();
        ended.sort_unstable();
        let want: Vec<u64> = users.iter().enumerate().filter(|(_, u)| **u == leaver).map(|(i, _)| i as u64).collect();
        prop_assert_eq!(ended, want);
        prop_assert_eq!(watchers.len(), users.iter().filter(|u| **u != leaver).count());
    }
}
