//! Each watched chat's sequencer: the order in which its events are pushed
//! to local watchers, seq by seq, whatever order they arrive in.
//!
//! Events may reach the hub out of order (two sends of one chat finishing on
//! different tasks, a broker hint arriving late) or not at all (a hint lost).
//! An event ahead of the next expected seq is held until the gap fills, for
//! at most [`GAP_WAIT`]; then the gap is read from the log
//! ([`super::repair`]). A gap left after a successful read opened after it
//! and gets another round; only when the log cannot be read does the hub
//! move on, and watchers, seeing the gap, fetch it as the protocol tells
//! them to.
//!
//! Plain data: it decides what is next, what waits and when a repair is due;
//! the entry ([`super::entry`]) fans out what it releases and runs the
//! timers it asks for. It also keeps the chat's head at the previous tail
//! check, the one other thing compared with its position.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::model::Published;

/// How long an event ahead of a gap is held before the gap is read from the
/// log. Re-ordered publishes of one node fill a gap in microseconds; a lost
/// broker hint never does.
pub const GAP_WAIT: Duration = Duration::from_millis(250);
/// Events held per chat while waiting for a gap. Beyond it the hub moves on at once.
const MAX_HELD: usize = 1024;

/// One chat's order.
#[derive(Default)]
pub(super) struct Sequencer {
    /// The next seq expected; `None` until the first watch finishes.
    next: Option<u64>,
    /// Events ahead of `next`, waiting for the gap to fill.
    held: BTreeMap<u64, Arc<Published>>,
    /// Whether a gap timer is running.
    gap_timer: bool,
    /// The chat's latest seq in the log at the previous tail check.
    tail_seen: u64,
}

/// What became of an event offered to the sequencer.
pub(super) enum Offered {
    /// It is next: push it, then whatever [`Sequencer::pop_ready`] releases.
    Ready(Arc<Published>),
    /// Older than what was pushed already: dropped.
    Old,
    /// Held for a gap; `arm`: start the gap timer.
    Held { arm: bool },
    /// Too many held: the gap was given up; push what [`Sequencer::pop_ready`] releases.
    Skipped,
}

/// What a gap timer's repair leaves.
pub(super) enum AfterRepair {
    /// No gap left.
    Closed,
    /// The log was read and a gap remains (it opened after the read): `arm`
    /// the timer for another round.
    Again { arm: bool },
    /// The log could not be read: the `missing` seqs are given up; push what
    /// [`Sequencer::pop_ready`] releases, then [`Sequencer::arm_gap`].
    Skipped { missing: u64 },
}

impl Sequencer {
    /// The next seq expected, once the first watch started the sequencer.
    pub(super) fn next(&self) -> Option<u64> {
        self.next
    }

    /// Starts the sequencer after `latest`, the log's head as the chat's
    /// first finished watch read it. What this releases comes from
    /// [`Sequencer::pop_ready`].
    pub(super) fn start(&mut self, latest: u64) {
        self.next = Some(latest + 1);
        self.tail_seen = latest;
    }

    /// Takes `event` in: it is next, old, or ahead of a gap (held; the
    /// oldest held goes first when too many wait before the start, and the
    /// gap is given up when too many wait after it).
    pub(super) fn offer(&mut self, event: Arc<Published>) -> Offered {
        match self.next {
            Some(next) if event.seq == next => {
                self.next = Some(next + 1);
                Offered::Ready(event)
            }
            Some(next) if event.seq < next => Offered::Old,
            _ => {
                // Ahead of a gap, or before the first watch set the start: hold it.
                self.held.insert(event.seq, event);
                if self.held.len() > MAX_HELD && self.next.is_none() {
                    // Not started yet: the first watch's own read covers the oldest.
                    self.held.pop_first();
                    Offered::Held { arm: false }
                } else if self.held.len() > MAX_HELD {
                    let first = *self.held.keys().next().expect("not empty");
                    metrics::counter!("herald_hub_gaps_skipped_total").increment(1);
                    self.next = Some(first);
                    Offered::Skipped
                } else {
                    Offered::Held { arm: self.arm_gap() }
                }
            }
        }
    }

    /// The held event that is next now, if any (dropping older ones), and
    /// moves past it.
    pub(super) fn pop_ready(&mut self) -> Option<Arc<Published>> {
        let next = self.next?;
        while let Some(entry) = self.held.first_entry() {
            if *entry.key() < next {
                entry.remove();
                continue;
            }
            if *entry.key() > next {
                break;
            }
            self.next = Some(next + 1);
            return Some(entry.remove());
        }
        None
    }

    /// Whether the gap timer must start now: there is a gap and none runs.
    #[must_use]
    pub(super) fn arm_gap(&mut self) -> bool {
        if self.gap_timer || self.next.is_none() || self.held.is_empty() {
            return false;
        }
        self.gap_timer = true;
        true
    }

    /// The gap timer's repair is over; `caught_up`: the log was read.
    pub(super) fn repaired(&mut self, caught_up: bool) -> AfterRepair {
        self.gap_timer = false;
        let Some((&first, _)) = self.held.first_key_value() else { return AfterRepair::Closed };
        if caught_up {
            return AfterRepair::Again { arm: self.arm_gap() };
        }
        let missing = first - self.next.unwrap_or(first);
        metrics::counter!("herald_hub_gaps_skipped_total").increment(1);
        self.next = Some(first);
        AfterRepair::Skipped { missing }
    }

    /// A tail check read `head` as the chat's latest seq. Returns true when
    /// the head of the previous check has still not been reached: its hint
    /// was lost, and the chat is caught up from the log.
    pub(super) fn check_tail(&mut self, head: u64) -> bool {
        let Some(next) = self.next else { return false };
        let behind = next <= self.tail_seen;
        self.tail_seen = head;
        behind
    }
}
