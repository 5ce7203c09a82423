//! The sweep: once a second, the users of nodes the cell no longer hears of are dropped from
//! every chat, and a node that finds it was paused asks the cell instead of expiring anyone.
//! Runs only on a node of a cell (a node alone has nobody else's users); ends with the hub.

use std::sync::Weak;
use std::time::{Duration, Instant};

use super::book::FULL_CHECK_EVERY;
use super::digest;
use super::live::{PAUSED_AFTER, SWEEP_EVERY};
use crate::hub::Hub;

/// Starts the sweep for dead nodes' users; it ends with the hub.
pub(in crate::hub) fn spawn(hub: Weak<Hub>) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(SWEEP_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        let (mut last, mut last_resync) = (Instant::now(), None);
        loop {
            tick.tick().await;
            let Some(hub) = hub.upgrade() else { return };
            // The monotonic clock runs on while a process is stopped.
            let now = Instant::now();
            if sweep(&hub, now.duration_since(last), last_resync) {
                last_resync = Some(now);
            }
            last = now;
        }
    });
}

/// Drops the users of nodes the cell no longer hears of, from every
/// chat; `gap`: how long since the last sweep. A gap of [`PAUSED_AFTER`]
/// or more means this node was paused (SIGSTOP, a VM stopped) or starved:
/// what it heard before is stale, and the other nodes' silence is its
/// own, so it expires nobody. Instead (at most once per
/// [`FULL_CHECK_EVERY`], so a node that keeps stalling under load does
/// not add a storm of asks to it) it asks the cell for every chat's whole
/// presence and checks every chat against the log. Answers whether it did.
fn sweep(hub: &Hub, gap: Duration, last_resync: Option<Instant>) -> bool {
    if !hub.live.in_cell() {
        return false;
    }
    let now = Instant::now();
    if gap >= PAUSED_AFTER {
        metrics::counter!("herald_node_pauses_total").increment(1);
        if last_resync.is_some_and(|at| now.duration_since(at) < FULL_CHECK_EVERY) {
            tracing::warn!(paused_ms = gap.as_millis() as u64, "this node stalled again: no expiry this round");
            return false;
        }
        tracing::warn!(
            paused_ms = gap.as_millis() as u64,
            chats = hub.chats(),
            "this node was paused: asking the cell for presence instead of expiring the other nodes"
        );
        hub.repair.check_now();
        for entry in hub.entries() {
            entry.presence_after_pause(&hub.live, now);
        }
        return true;
    }
    let mut beats = Vec::new();
    for entry in hub.entries() {
        entry.sweep(hub, now, &mut beats);
    }
    if let Some(bus) = hub.live.digest_bus().filter(|_| !beats.is_empty()) {
        digest::post(bus.clone(), hub.live.me(), beats);
    }
    false
}
