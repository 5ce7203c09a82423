//! Minimal cases the properties found, kept as plain tests of the same harness.

use super::*;

fn plain() -> Settings {
    Settings {
        hot: 0,
        sync_bytes: 1 << 20,
        replay_events: 100_000,
        replay_bytes: 1 << 20,
        store_delay: Duration::ZERO,
        swarm: Swarm(0),
    }
}

fn watch(conn: u8, read_in: u8, finish_in: u8) -> Op {
    Op::Watch { conn, after: None, read_in, finish_in }
}

/// The first watch of a chat reads the log; its user's `leave` is committed
/// and reaches the hub (held: the sequencer has no start yet) before
/// `finish_watch`, which starts the sequencer, releases the `leave`, which
/// ends the watch being finished; `finish_watch` then panics on it.
#[test]
fn a_leave_released_by_the_first_finish_watch_ends_that_watch_without_a_panic() {
    let ops = [watch(1, 0, 2), Op::Leave { conn: 1, unwatch: false }, Op::Deliver(0)];
    assert_eq!(run(plain(), &ops), Vec::<String>::new());
}

/// Two first watches of a chat: A reads the log (latest 0), event 1 is
/// committed, B reads (latest 1) and finishes first, starting the sequencer
/// at 2 (1's hint is dropped as old); A finishes with nothing telling it of 1.
#[test]
fn a_watch_that_read_the_log_before_another_finished_first_misses_nothing() {
    let ops = [watch(0, 0, 4), watch(1, 1, 0), Op::Commit, Op::Deliver(0), Op::Yield];
    assert_eq!(run(plain(), &ops), Vec::<String>::new());
}

/// As above, with the event between the two reads a `leave` of A's user: A
/// never sees it end its watch, and is pushed the chat's later events.
#[test]
fn a_leave_after_a_watch_read_the_log_ends_it_even_if_another_watch_finished_first() {
    let ops = [watch(2, 2, 0), watch(1, 0, 1), Op::Leave { conn: 1, unwatch: false }, Op::Commit];
    assert_eq!(run(plain(), &ops), Vec::<String>::new());
}

/// u1 leaves (seq 1) and joins again (seq 2); then conn 1 (u1) watches, live
/// from seq 3. The hub, behind on the log (hints lost), catches up 1..=3:
/// the old `leave` ends the new watch, which gets nothing more.
#[test]
fn a_leave_from_before_a_rejoin_does_not_end_a_later_watch() {
    let ops = [watch(0, 0, 0), Op::Leave { conn: 1, unwatch: false }, Op::Join(1), watch(1, 0, 0), Op::Commit];
    assert_eq!(run(plain(), &ops), Vec::<String>::new());
}

/// As above, the old `leave` arriving while the new watch starts: it is refused.
#[test]
fn a_leave_from_before_a_rejoin_does_not_refuse_a_later_watch() {
    let ops = [watch(0, 0, 0), Op::Leave { conn: 1, unwatch: false }, Op::Join(1), watch(1, 0, 1), Op::Deliver(0)];
    assert_eq!(run(plain(), &ops), Vec::<String>::new());
}
