//! A connection's outbound queue: the only thing of a connection the hub and
//! the chat layer ever touch. Bounded in bytes; a push that would pass the
//! bound empties the queue and marks the connection for close 4008, so a slow
//! or dead reader costs at most the bound and never makes a sender wait.
//!
//! Owns queueing and the close request; not the socket (the gateway writes).

use std::collections::VecDeque;
use std::sync::Mutex;

use axum::extract::ws::Utf8Bytes;
use herald_protocol::CloseCode;
use tokio::sync::Notify;

/// An encoded text frame, shared between every queue it is pushed to.
pub type Frame = Utf8Bytes;

/// Identifies a connection within this node.
pub type ConnId = u64;

/// Queue capacity kept once the queue drains: none, so an idle connection
/// holds no queue at all (a deque allocates again on its next push).
const IDLE_CAPACITY: usize = 0;

/// A connection's bounded outbound queue.
#[derive(Debug)]
pub struct Outbox {
    id: ConnId,
    limit: usize,
    state: Mutex<State>,
    wake: Notify,
}

#[derive(Debug, Default)]
struct State {
    frames: VecDeque<Frame>,
    bytes: usize,
    close: Option<(CloseCode, &'static str)>,
}

impl Outbox {
    /// A queue for connection `id` holding at most `limit` bytes of frames.
    pub fn new(id: ConnId, limit: usize) -> Self {
        Outbox { id, limit, state: Mutex::new(State::default()), wake: Notify::new() }
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
        if s.bytes + len > self.limit {
            s.frames = VecDeque::new();
            s.bytes = 0;
            s.close = Some((CloseCode::SLOW_CONSUMER, "slow consumer"));
            drop(s);
            metrics::counter!("herald_slow_consumer_closes_total").increment(1);
            tracing::info!(conn = self.id, limit = self.limit, "outbound queue overflowed; closing with 4008");
            self.wake.notify_one();
            return false;
        }
        s.bytes += len;
        s.frames.push_back(frame);
        let was_empty = s.frames.len() == 1;
        drop(s);
        if was_empty {
            self.wake.notify_one();
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
        self.wake.notify_one();
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

    /// Waits until something was pushed or a close requested since the last wait.
    pub async fn changed(&self) {
        self.wake.notified().await
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
