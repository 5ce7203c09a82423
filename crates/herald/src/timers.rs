//! The deadlines of a node's connections (`hello`, heartbeat, idle), kept in
//! one table instead of a tokio timer per connection: a connection waiting
//! for its deadline is an entry of 24 bytes (its id and its task's waker)
//! where a timer is 112 bytes, allocated for the connection's whole life.
//!
//! Deadlines are rounded up to [`GRANULARITY`], so connections share slots;
//! one task per node sleeps until the earliest slot, takes every entry due,
//! and wakes those connections, which check their own clock and wait again
//! if their deadline moved on meanwhile. Owns the waiting, not the deadlines
//! (each connection computes its own, see `conn`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Once, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::outbox::ConnId;

/// How late a deadline may fire: the deadlines are seconds long (10 s for
/// `hello`, 25 s between pings, 60 s of silence), and rounding them lets a
/// node wake its connections in batches.
pub(crate) const GRANULARITY: Duration = Duration::from_millis(20);

/// A slot number: [`GRANULARITY`]s since the table was made (a `u32`, so a
/// connection keeps it in 4 bytes; it lasts 2.7 years).
pub(crate) type Tick = u32;

/// The node's table of connection deadlines.
pub(crate) struct Timers {
    epoch: Instant,
    slots: Mutex<BTreeMap<Tick, Vec<(ConnId, Waker)>>>,
    /// Every slot up to this one was taken by the task.
    done: AtomicU32,
    /// Wakes the task for a slot earlier than the one it sleeps to, and when the table goes.
    earlier: Arc<Notify>,
    task: Once,
}

impl Timers {
    pub(crate) fn new() -> Arc<Timers> {
        Arc::new(Timers {
            epoch: Instant::now(),
            slots: Mutex::new(BTreeMap::new()),
            done: AtomicU32::new(0),
            earlier: Arc::new(Notify::new()),
            task: Once::new(),
        })
    }

    /// The slot `at` falls in, rounded up (slot 0 is never used: it means "none").
    fn tick_of(&self, at: Instant) -> Tick {
        let since = at.saturating_duration_since(self.epoch);
        let tick = since.as_nanos().div_ceil(GRANULARITY.as_nanos()) + 1;
        Tick::try_from(tick).unwrap_or(Tick::MAX)
    }

    fn instant_of(&self, tick: Tick) -> Instant {
        self.epoch + GRANULARITY * tick.saturating_sub(1)
    }

    /// Ready once `deadline` has passed. Otherwise makes sure connection
    /// `id`'s task is woken at it (or up to [`GRANULARITY`] later): `armed`
    /// is the connection's entry in the table (0: none), kept by the
    /// connection and given back to [`Timers::cancel`] when it ends.
    pub(crate) fn poll_at(
        self: &Arc<Self>,
        id: ConnId,
        deadline: Instant,
        armed: &mut Tick,
        cx: &mut Context<'_>,
    ) -> Poll<()> {
        if Instant::now() >= deadline {
            return Poll::Ready(());
        }
        let tick = self.tick_of(deadline);
        let live = *armed > self.done.load(Ordering::Acquire);
        if live && *armed <= tick {
            // Woken at or before the deadline; it is checked again then.
            return Poll::Pending;
        }
        self.task.call_once(|| spawn_task(Arc::downgrade(self), self.earlier.clone()));
        let mut slots = self.slots.lock().expect("timers lock");
        if live {
            remove(&mut slots, *armed, id);
        }
        let earliest = slots.first_key_value().map(|(t, _)| *t);
        slots.entry(tick).or_default().push((id, cx.waker().clone()));
        drop(slots);
        *armed = tick;
        if earliest.is_none_or(|e| tick < e) {
            self.earlier.notify_one();
        }
        Poll::Pending
    }

    /// Forgets connection `id`'s entry, if it has one (`armed`, see [`Timers::poll_at`]).
    pub(crate) fn cancel(&self, id: ConnId, armed: Tick) {
        if armed > self.done.load(Ordering::Acquire) {
            remove(&mut self.slots.lock().expect("timers lock"), armed, id);
        }
    }

    /// Takes every entry due by now; the earliest slot left, if any.
    fn take_due(&self, due: &mut Vec<(ConnId, Waker)>) -> Option<Tick> {
        // The last slot whose time has come: slot T is due from `instant_of(T)`.
        let since = Instant::now().saturating_duration_since(self.epoch);
        let now = Tick::try_from(since.as_nanos() / GRANULARITY.as_nanos() + 1).unwrap_or(Tick::MAX);
        let mut slots = self.slots.lock().expect("timers lock");
        let later = slots.split_off(&(now + 1));
        for (_, entries) in std::mem::replace(&mut *slots, later) {
            due.extend(entries);
        }
        self.done.fetch_max(now, Ordering::AcqRel);
        slots.first_key_value().map(|(t, _)| *t)
    }

    /// Entries in the table (for tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.slots.lock().expect("timers lock").values().map(Vec::len).sum()
    }
}

impl Drop for Timers {
    fn drop(&mut self) {
        // The task sees the table gone and ends.
        self.earlier.notify_one();
    }
}

fn remove(slots: &mut BTreeMap<Tick, Vec<(ConnId, Waker)>>, tick: Tick, id: ConnId) {
    if let Some(entries) = slots.get_mut(&tick) {
        entries.retain(|(c, _)| *c != id);
        if entries.is_empty() {
            slots.remove(&tick);
        }
    }
}

/// The table's task: sleeps until the earliest slot, wakes what is due.
/// Holds the table weakly, so it ends with it.
fn spawn_task(timers: Weak<Timers>, earlier: Arc<Notify>) {
    tokio::spawn(async move {
        let mut due = Vec::new();
        loop {
            let next = {
                let Some(t) = timers.upgrade() else { return };
                let next = t.take_due(&mut due);
                next.map(|tick| t.instant_of(tick))
            };
            for (_, waker) in due.drain(..) {
                waker.wake();
            }
            match next {
                Some(at) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(at) => {}
                        () = earlier.notified() => {}
                    }
                }
                None => earlier.notified().await,
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Waits for `deadline` through the table, as a connection does.
    async fn wait(timers: &Arc<Timers>, id: ConnId, deadline: Instant, armed: &mut Tick) {
        std::future::poll_fn(|cx| timers.poll_at(id, deadline, armed, cx)).await
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_fires_at_its_time_rounded_up_to_the_granularity() {
        let timers = Timers::new();
        let start = Instant::now();
        let mut armed = 0;
        wait(&timers, 1, start + Duration::from_millis(1_005), &mut armed).await;
        let waited = start.elapsed();
        assert!(waited >= Duration::from_millis(1_005) && waited <= Duration::from_millis(1_005) + GRANULARITY);
        assert_eq!(timers.len(), 0, "a fired entry leaves the table");
    }

    #[tokio::test(start_paused = true)]
    async fn an_earlier_deadline_replaces_the_entry_and_wakes_first() {
        let timers = Timers::new();
        let start = Instant::now();
        let (mut a, mut b) = (0, 0);
        // One connection waits 60 s; another comes with 1 s and must not wait behind it.
        let far = tokio::spawn({
            let timers = timers.clone();
            async move { wait(&timers, 1, start + Duration::from_secs(60), &mut a).await }
        });
        tokio::task::yield_now().await;
        wait(&timers, 2, start + Duration::from_secs(1), &mut b).await;
        assert!(start.elapsed() < Duration::from_secs(2));
        assert!(!far.is_finished());
        // The same connection moving its deadline earlier keeps one entry.
        let mut c = 0;
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let now = Instant::now();
        assert!(timers.poll_at(3, now + Duration::from_secs(30), &mut c, &mut cx).is_pending());
        assert!(timers.poll_at(3, now + Duration::from_secs(10), &mut c, &mut cx).is_pending());
        assert!(timers.poll_at(3, now + Duration::from_secs(20), &mut c, &mut cx).is_pending());
        assert_eq!(timers.len(), 2, "connections 1 and 3, once each");
        timers.cancel(3, c);
        assert_eq!(timers.len(), 1);
        far.await.unwrap();
        assert!(start.elapsed() >= Duration::from_secs(60));
    }
}
