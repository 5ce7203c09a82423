//! The property tests' programs: the settings one program runs under, the kinds of step it may
//! leave out (swarm testing), and the steps themselves with their strategies.

use std::time::Duration;

use proptest::prelude::*;

use super::{CONNS, USERS};

// ---- programs ------------------------------------------------------------------------------

/// The hub's and the chat layer's settings for one program.
#[derive(Debug, Clone)]
pub(super) struct Settings {
    /// `Hub::new`'s `hot_deliveries` (0: chats never turn hot).
    pub(super) hot: u64,
    /// `Hub::new`'s `sync_bytes`.
    pub(super) sync_bytes: usize,
    /// The chat layer's `replay_events` and `replay_bytes`.
    pub(super) replay_events: usize,
    pub(super) replay_bytes: usize,
    /// How long the hub's reads of the log take.
    pub(super) store_delay: Duration,
    /// The kinds of step this program leaves out.
    pub(super) swarm: Swarm,
}

/// Kinds of step a program leaves out (swarm testing: a program without,
/// say, deliveries or checkpoints explores what a mix of all rarely does).
#[derive(Clone, Copy)]
pub(super) struct Swarm(pub(super) u16);

impl Swarm {
    const KINDS: [&'static str; 10] =
        ["Deliver", "Redeliver", "Unwatch", "Leave", "Join", "Advance", "Yield", "Tail", "Backfill", "Checkpoint"];

    pub(super) fn kind(op: &Op) -> Option<usize> {
        Some(match op {
            Op::Deliver(_) => 0,
            Op::Redeliver(_) => 1,
            Op::Unwatch(_) => 2,
            Op::Leave { .. } => 3,
            Op::Join(_) => 4,
            Op::Advance(_) => 5,
            Op::Yield => 6,
            Op::Tail => 7,
            Op::Backfill => 8,
            Op::Checkpoint => 9,
            Op::Commit | Op::Watch { .. } => return None,
        })
    }

    pub(super) fn allows(self, op: &Op) -> bool {
        Swarm::kind(op).is_none_or(|k| self.0 & (1 << k) == 0)
    }
}

impl std::fmt::Debug for Swarm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let off: Vec<&str> =
            Swarm::KINDS.iter().enumerate().filter(|(k, _)| self.0 & (1 << k) != 0).map(|(_, n)| *n).collect();
        write!(f, "without {off:?}")
    }
}

pub(super) fn swarm() -> impl Strategy<Value = Swarm> {
    any::<u16>().prop_map(|m| Swarm(m & ((1 << Swarm::KINDS.len()) - 1)))
}

#[derive(Debug, Clone)]
pub(super) enum Op {
    /// Commits a message (its hint is delivered by `Deliver`, or never).
    Commit,
    /// Hands the hub the `n`th (mod how many) committed event not handed yet.
    Deliver(u8),
    /// Hands the hub a committed event again (mod the log's length).
    Redeliver(u8),
    /// A watch request of `conn`, with `after` the log's latest seq plus this
    /// offset (floored at 0): `begin_watch` now, the chat layer's read of the
    /// log after `read_in` more steps, `finish_watch` `finish_in` steps after that.
    Watch { conn: u8, after: Option<i8>, read_in: u8, finish_in: u8 },
    /// `conn` unwatches (whether its watch is live, still starting, or none).
    Unwatch(u8),
    /// `conn`'s user leaves (a committed `leave`, delivered like any event);
    /// with `unwatch`, from `conn` itself, whose watch the chat layer ends.
    Leave { conn: u8, unwatch: bool },
    /// User `n` joins again (a committed `join`).
    Join(u8),
    /// Time passes (ms).
    Advance(u16),
    /// The hub's spawned tasks get to run a step.
    Yield,
    /// One tail check (`hub.check_tails()`, as the broker's `may_lose` would schedule).
    Tail,
    /// The broker asks for a catch-up (its subscription confirmed).
    Backfill,
    /// Time passes until every repair is done; then every live watch must hold every event it is owed.
    Checkpoint,
}

pub(super) fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::Commit),
        4 => any::<u8>().prop_map(Op::Deliver),
        1 => any::<u8>().prop_map(Op::Redeliver),
        6 => (0..CONNS, proptest::option::of(-4i8..=2), 0u8..12, 0u8..12)
            .prop_map(|(conn, after, read_in, finish_in)| Op::Watch { conn, after, read_in, finish_in }),
        2 => (0..CONNS).prop_map(Op::Unwatch),
        1 => (0..CONNS, any::<bool>()).prop_map(|(conn, unwatch)| Op::Leave { conn, unwatch }),
        1 => (0..USERS).prop_map(Op::Join),
        1 => (0u16..1000).prop_map(Op::Advance),
        1 => Just(Op::Yield),
        1 => Just(Op::Tail),
        1 => Just(Op::Backfill),
        2 => Just(Op::Checkpoint),
    ]
}

pub(super) fn program() -> impl Strategy<Value = Vec<Op>> {
    // Mostly short programs (a quiet chat right after a race is where a
    // watcher left behind shows), some long ones.
    prop_oneof![2 => proptest::collection::vec(op(), 1..24), 1 => proptest::collection::vec(op(), 24..80)]
}

/// Hot chats off (the server's default), a sync buffer that never overflows,
/// replays of any length.
pub(super) fn plain_settings() -> impl Strategy<Value = Settings> {
    (prop_oneof![Just(100_000usize), 1usize..4], prop_oneof![Just(0u64), Just(1), Just(5)], swarm()).prop_map(
        |(replay_events, delay_ms, swarm)| Settings {
            hot: 0,
            sync_bytes: 1 << 20,
            replay_events,
            replay_bytes: 1 << 20,
            store_delay: Duration::from_millis(delay_ms),
            swarm,
        },
    )
}

/// Hot chats, a sync buffer that overflows, replays cut short by bytes.
pub(super) fn stressed_settings() -> impl Strategy<Value = Settings> {
    (
        prop_oneof![Just(0u64), 2u64..6],
        prop_oneof![Just(1usize << 20), 100usize..300],
        prop_oneof![Just(100_000usize), 1usize..4],
        prop_oneof![Just(1usize << 20), 100usize..300],
        prop_oneof![Just(0u64), Just(1), Just(5)],
        swarm(),
    )
        .prop_map(|(hot, sync_bytes, replay_events, replay_bytes, delay_ms, swarm)| Settings {
            hot,
            sync_bytes,
            replay_events,
            replay_bytes,
            store_delay: Duration::from_millis(delay_ms),
            swarm,
        })
}
