//! A connection's outbound queue: the only thing of a connection the hub and
//! the chat layer ever touch. Bounded in bytes; a push that would pass the
//! bound empties the queue and marks the connection for close 4008, so a slow
//! or dead reader costs at most the bound and never makes a sender wait.
//!
//! Owns queueing and the close request; not the socket (the gateway writes).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use axum::extract::ws::Utf8Bytes;
use futures_util::task::AtomicWaker;
use herald_protocol::CloseCode;

/// An encoded text frame, shared between every queue it is pushed to.
pub type Frame = Utf8Bytes;

/// Identifies a connection within this node.
pub type ConnId = u64;

/// Queue capacity kept once the queue drains: none, so an idle connection
/// holds no queue at all (a deque allocates again on its next push).
const IDLE_CAPACITY: usize = 0;

/// A connection's bounded outbound queue. One per connection, so kept at
/// 128 bytes with its counts (an allocator size class): a `u32` limit, and
/// the one task that waits on it (the connection's) woken through an
/// [`AtomicWaker`] rather than a `Notify` with its list of waiters.
#[derive(Debug)]
pub struct Outbox {
    id: ConnId,
    limit: u32,
    /// Something was pushed or a close requested since the connection last looked.
    changed: AtomicBool,
    state: Mutex<State>,
    wake: AtomicWaker,
}

#[derive(Debug, Default)]
struct State {
    frames: VecDeque<Frame>,
    bytes: usize,
    close: Option<(CloseCode, &'static str)>,
}

impl Outbox {
    /// A queue for connection `id` holding at most `limit` bytes of frames
    /// (at most 4 GiB: a larger limit is that).
    pub fn new(id: ConnId, limit: usize) -> Self {
        let limit = u32::try_from(limit).unwrap_or(u32::MAX);
        Outbox {
            id,
            limit,
            changed: AtomicBool::new(false),
            state: Mutex::new(State::default()),
            wake: AtomicWaker::new(),
        }
    }

    /// Wakes the connection's task.
    fn signal(&self) {
        self.changed.store(true, Ordering::Release);
        self.wake.wake();
    }

    pub fn id(&self) -> ConnId {
        self.id
    }

    /// Queues `frame`. Returns false when the connection is closing, or when
    /// this frame overflowed the queue (which starts the close with 4008).
    pub fn push(&self, frame: Frame) -> bool {
        let mut s = self.state.lock().expect("outbox lock");
        if s.close.is_some() {
            return false;
        }
        let len = frame.as_str().len();
        if s.bytes + len > self.limit as usize {
            s.frames = VecDeque::new();
            s.bytes = 0;
            s.close = Some((CloseCode::SLOW_CONSUMER, "slow consumer"));
            drop(s);
            metrics::counter!("herald_slow_consumer_closes_total").increment(1);
            tracing::info!(conn = self.id, limit = self.limit, "outbound queue overflowed; closing with 4008");
            self.signal();
            return false;
        }
        s.bytes += len;
        s.frames.push_back(frame);
        let was_empty = s.frames.len() == 1;
        drop(s);
        if was_empty {
            self.signal();
        }
        true
    }

    /// Asks the connection to close with `code` once the frames already queued are written.
    pub fn close(&self, code: CloseCode, reason: &'static str) {
        let mut s = self.state.lock().expect("outbox lock");
        if s.close.is_none() {
            s.close = Some((code, reason));
        }
        drop(s);
        self.signal();
    }

    /// Whether a close was requested.
    pub fn closing(&self) -> bool {
        self.state.lock().expect("outbox lock").close.is_some()
    }

    /// Whether the queue overflowed: the peer is not keeping up, so a write
    /// blocked on it should be abandoned rather than finished.
    pub fn overflowed(&self) -> bool {
        matches!(self.state.lock().expect("outbox lock").close, Some((CloseCode::SLOW_CONSUMER, _)))
    }

    /// Moves up to `max_frames` queued frames into `out`. Returns the close
    /// request once no frames are left ahead of it.
    pub fn drain(&self, max_frames: usize, out: &mut Vec<Frame>) -> Option<(CloseCode, &'static str)> {
        let mut guard = self.state.lock().expect("outbox lock");
        let s = &mut *guard;
        let n = s.frames.len().min(max_frames);
        for f in s.frames.drain(..n) {
            s.bytes -= f.as_str().len();
            out.push(f);
        }
        if s.frames.is_empty() && s.frames.capacity() > IDLE_CAPACITY {
            s.frames = VecDeque::new();
        }
        if s.frames.is_empty() { s.close } else { None }
    }

    /// Waits until something was pushed or a close requested since the
    /// last wait. One task waits on a queue: its connection's.
    pub async fn changed(&self) {
        std::future::poll_fn(|cx| self.poll_changed(cx)).await
    }

    /// [`Outbox::changed`] as a poll: ready (once) if something was pushed
    /// or a close requested since it was last ready.
    pub fn poll_changed(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.changed.swap(false, Ordering::AcqRel) {
            return Poll::Ready(());
        }
        self.wake.register(cx.waker());
        // A push between the check and the registration woke no one: look again.
        if self.changed.swap(false, Ordering::AcqRel) { Poll::Ready(()) } else { Poll::Pending }
    }

    /// Bytes queued now.
    pub fn queued_bytes(&self) -> usize {
        self.state.lock().expect("outbox lock").bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_is_128_bytes() {
        // The allocator's class for it with the `Arc`'s counts: one per connection.
        assert_eq!(std::mem::size_of::<Outbox>() + 16, 128);
    }

    #[tokio::test]
    async fn a_push_before_the_wait_is_not_lost() {
        let o = Outbox::new(1, 100);
        o.push(Frame::from("a"));
        tokio::time::timeout(std::time::Duration::from_secs(5), o.changed()).await.expect("woken by the earlier push");
        let waiting = tokio::spawn(async move {
            o.changed().await;
            o
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
    }

    #[test]
    fn overflow_empties_and_closes() {
        let o = Outbox::new(1, 10);
        assert!(o.push(Frame::from("12345")));
        assert!(o.push(Frame::from("12345")));
        assert!(!o.push(Frame::from("1")));
        let mut out = Vec::new();
        assert_eq!(o.drain(16, &mut out), Some((CloseCode::SLOW_CONSUMER, "slow consumer")));
        assert!(out.is_empty());
        assert!(!o.push(Frame::from("1")));
    }

    #[test]
    fn close_waits_for_queued_frames() {
        let o = Outbox::new(1, 100);
        o.push(Frame::from("a"));
        o.push(Frame::from("b"));
        o.close(CloseCode::GOING_AWAY_RECONNECT, "drain");
        let mut out = Vec::new();
        assert_eq!(o.drain(1, &mut out), None);
        assert_eq!(o.drain(16, &mut out), Some((CloseCode::GOING_AWAY_RECONNECT, "drain")));
        assert_eq!(out.len(), 2);
        assert_eq!(o.queued_bytes(), 0);
    }
}
