//! Keeping one connection's sends to a chat in the order they were written.
//!
//! A client pipelines its sends: it writes the next one before the reply to
//! the last comes back. When herald refuses one with an error the client is
//! meant to retry (`throttled`, `unavailable`, `internal`), the sends written
//! after it are already on their way; served, they would be stored before
//! the retry and the chat would show the sender's messages out of order. So
//! a refused send that carries a `client_id` fences its chat on that
//! connection: later sends to the chat are refused `throttled` (not stored)
//! until the refused one comes again (same `client_id`), which lifts the
//! fence and is served. A client that retries in order loses nothing and
//! keeps its order; one that gives up on the refused send is slowed, not
//! stopped: the fence lapses [`GRACE`] after the refused send's own retry
//! time.
//!
//! Owns: the fences of one connection. Does not own: deciding what is
//! refused (the request bucket, the chat layer) nor the replies.

use std::time::{Duration, Instant};

/// How long past the refused send's retry time a fence waits for it. Sends
/// written before the client heard of the refusal arrive within about a
/// round trip of it; this covers slow links many times over.
const GRACE: Duration = Duration::from_secs(10);

/// Fenced chats per connection; past it, the fence that lapses first goes.
const MAX_FENCES: usize = 16;

/// The shortest wait a fenced send is told: the refused send is due, the
/// client has not sent it yet.
const MIN_WAIT_MS: u64 = 10;

/// A connection's fenced chats: none for nearly every connection, so the
/// set lives behind an `Option<Box>` and costs a pointer when empty.
#[derive(Default)]
pub(super) struct Fences(Vec<Fence>);

struct Fence {
    chat: Box<str>,
    /// The `client_id` of the first refused send.
    head: Box<str>,
    /// When the refused send was told to retry.
    retry_at: Instant,
}

impl Fences {
    /// Whether a send of `client_id` to `chat` may be served now. `Err` is the
    /// wait in ms to tell a send that must come after a refused one. The
    /// refused one itself passes and lifts the fence.
    pub(super) fn check(
        slot: &mut Option<Box<Fences>>,
        chat: &str,
        client_id: Option<&str>,
        now: Instant,
    ) -> Result<(), u64> {
        let Some(set) = slot.as_mut() else { return Ok(()) };
        set.0.retain(|f| now < f.retry_at + GRACE);
        let verdict = match set.0.iter().position(|f| *f.chat == *chat) {
            None => Ok(()),
            Some(i) if client_id == Some(&*set.0[i].head) => {
                set.0.swap_remove(i);
                Ok(())
            }
            Some(i) => {
                let wait = set.0[i].retry_at.saturating_duration_since(now).as_millis() as u64;
                Err(wait.max(MIN_WAIT_MS))
            }
        };
        if set.0.is_empty() {
            *slot = None;
        }
        verdict
    }

    /// A send of `client_id` to `chat` was refused, to be retried after
    /// `retry_after_ms`: later sends to the chat wait for it. A chat already
    /// fenced keeps its first refused send as the one to wait for.
    pub(super) fn raise(
        slot: &mut Option<Box<Fences>>,
        chat: &str,
        client_id: &str,
        retry_after_ms: u64,
        now: Instant,
    ) {
        let set = slot.get_or_insert_with(Box::default);
        if set.0.iter().any(|f| *f.chat == *chat) {
            return;
        }
        if set.0.len() >= MAX_FENCES {
            let first = (0..set.0.len()).min_by_key(|&i| set.0[i].retry_at).expect("full");
            set.0.swap_remove(first);
        }
        metrics::counter!("herald_send_fences_total").increment(1);
        set.0.push(Fence {
            chat: chat.into(),
            head: client_id.into(),
            retry_at: now + Duration::from_millis(retry_after_ms),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_sends_wait_for_the_refused_one_which_lifts_the_fence() {
        let t0 = Instant::now();
        let mut slot = None;
        assert_eq!(Fences::check(&mut slot, "c", Some("m1"), t0), Ok(()));
        Fences::raise(&mut slot, "c", "m1", 100, t0);
        // Written before the client heard: refused, told to wait for m1's time.
        assert_eq!(Fences::check(&mut slot, "c", Some("m2"), t0 + Duration::from_millis(30)), Err(70));
        assert_eq!(Fences::check(&mut slot, "c", None, t0 + Duration::from_millis(30)), Err(70));
        // A refused later send does not take the head's place.
        Fences::raise(&mut slot, "c", "m2", 100, t0 + Duration::from_millis(30));
        // Another chat is not held.
        assert_eq!(Fences::check(&mut slot, "d", Some("x"), t0), Ok(()));
        // Past m1's retry time but m1 not back yet: still held, briefly.
        assert_eq!(Fences::check(&mut slot, "c", Some("m2"), t0 + Duration::from_millis(500)), Err(MIN_WAIT_MS));
        // m1 comes back: it passes, and so does what follows.
        assert_eq!(Fences::check(&mut slot, "c", Some("m1"), t0 + Duration::from_millis(600)), Ok(()));
        assert!(slot.is_none(), "an empty set is dropped");
        assert_eq!(Fences::check(&mut slot, "c", Some("m2"), t0 + Duration::from_millis(600)), Ok(()));
    }

    #[test]
    fn a_fence_whose_send_never_comes_back_lapses() {
        let t0 = Instant::now();
        let mut slot = None;
        Fences::raise(&mut slot, "c", "m1", 1_000, t0);
        let late = t0 + Duration::from_millis(1_000) + GRACE;
        assert!(Fences::check(&mut slot, "c", Some("m2"), late - Duration::from_millis(1)).is_err());
        assert_eq!(Fences::check(&mut slot, "c", Some("m2"), late), Ok(()));
        assert!(slot.is_none());
    }

    #[test]
    fn a_connection_holds_a_bounded_number_of_fences() {
        let t0 = Instant::now();
        let mut slot = None;
        for i in 0..(MAX_FENCES as u64 + 5) {
            Fences::raise(&mut slot, &format!("c{i}"), "m", i, t0);
        }
        let set = slot.as_ref().expect("fences");
        assert_eq!(set.0.len(), MAX_FENCES);
        // The ones due first went.
        assert!(set.0.iter().all(|f| f.retry_at >= t0 + Duration::from_millis(5)));
    }
}
