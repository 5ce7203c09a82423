//! Keeping one connection's sends to a chat in the order they were written.
//!
//! A client pipelines its sends: it writes the next one before the reply to
//! the last comes back. When herald refuses one with an error the client is
//! meant to retry (`throttled`, `unavailable`, `internal`), the sends written
//! after it are already on their way; served, they would be stored before
//! the retry and the chat would show the sender's messages out of order. So
//! a refused send that carries a `client_id` fences its chat on that
//! connection: later sends to the chat are refused the same way (`throttled`
//! behind a throttled send, `unavailable` otherwise), stored nowhere, until
//! the refused one comes again (same `client_id`), which lifts the fence and
//! is served.
//!
//! The fence only has to catch the sends written before the client heard of
//! the refusal, which arrive within about a round trip of it; a client that
//! heard and retries writes the refused one first. So a fence lapses
//! [`HOLD`] after the refusal: a client that gives up on a send and goes on
//! with new ones is held back that long, not for good.
//!
//! Owns: the fences of one connection. Does not own: deciding what is
//! refused (the request bucket, the chat layer) nor the replies.

use std::time::{Duration, Instant};

/// How long after a refusal its fence holds the chat's later sends. Sends
/// written before the client heard of the refusal arrive within about a
/// round trip of it; this covers slow links many times over.
const HOLD: Duration = Duration::from_secs(2);

/// Fenced chats per connection; past it, the oldest fence goes.
const MAX_FENCES: usize = 16;

/// The shortest wait a held-back send is told.
const MIN_WAIT_MS: u64 = 10;

/// How a held-back send is refused: like the send that fenced its chat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    /// The connection's request rate.
    Throttled,
    /// Storage or a hook could not take the send now.
    Unavailable,
}

/// A connection's fenced chats: none for nearly every connection, so the
/// set lives behind an `Option<Box>` and costs a pointer when empty.
#[derive(Default)]
pub(super) struct Fences(Vec<Fence>);

struct Fence {
    chat: Box<str>,
    /// The `client_id` of the refused send.
    head: Box<str>,
    refusal: Refusal,
    /// When the refused send was told to retry.
    retry_at: Instant,
    /// When the fence stops holding the chat's sends.
    lapses_at: Instant,
}

impl Fences {
    /// Whether a send of `client_id` to `chat` may be served now. `Err` is how
    /// to refuse a send written behind a refused one, and the wait in ms to
    /// tell it. The refused one itself passes and lifts the fence.
    pub(super) fn check(
        slot: &mut Option<Box<Fences>>,
        chat: &str,
        client_id: Option<&str>,
        now: Instant,
    ) -> Result<(), (Refusal, u64)> {
        let Some(set) = slot.as_mut() else { return Ok(()) };
        set.0.retain(|f| now < f.lapses_at);
        let verdict = match set.0.iter().position(|f| *f.chat == *chat) {
            None => Ok(()),
            Some(i) if client_id == Some(&*set.0[i].head) => {
                set.0.swap_remove(i);
                Ok(())
            }
            Some(i) => {
                let f = &set.0[i];
                let wait = f.retry_at.saturating_duration_since(now).as_millis() as u64;
                Err((f.refusal, wait.max(MIN_WAIT_MS)))
            }
        };
        if set.0.is_empty() {
            *slot = None;
        }
        verdict
    }

    /// A send of `client_id` to `chat` was refused, to be retried after
    /// `retry_after_ms`: the chat's later sends wait for it. A chat already
    /// fenced keeps the send it waits for.
    pub(super) fn raise(
        slot: &mut Option<Box<Fences>>,
        chat: &str,
        client_id: &str,
        refusal: Refusal,
        retry_after_ms: u64,
        now: Instant,
    ) {
        let set = slot.get_or_insert_with(Box::default);
        set.0.retain(|f| now < f.lapses_at);
        if set.0.iter().any(|f| *f.chat == *chat) {
            return;
        }
        if set.0.len() >= MAX_FENCES {
            let oldest = (0..set.0.len()).min_by_key(|&i| set.0[i].lapses_at).expect("full");
            set.0.swap_remove(oldest);
        }
        metrics::counter!("herald_send_fences_total").increment(1);
        set.0.push(Fence {
            chat: chat.into(),
            head: client_id.into(),
            refusal,
            retry_at: now + Duration::from_millis(retry_after_ms),
            lapses_at: now + HOLD,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Refusal = Refusal::Throttled;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn later_sends_wait_for_the_refused_one_which_lifts_the_fence() {
        let t0 = Instant::now();
        let mut slot = None;
        assert_eq!(Fences::check(&mut slot, "c", Some("m1"), t0), Ok(()));
        Fences::raise(&mut slot, "c", "m1", T, 100, t0);
        // Written before the client heard: refused, told to wait for m1's time.
        assert_eq!(Fences::check(&mut slot, "c", Some("m2"), t0 + ms(30)), Err((T, 70)));
        assert_eq!(Fences::check(&mut slot, "c", None, t0 + ms(30)), Err((T, 70)));
        // A refused later send does not take the head's place.
        Fences::raise(&mut slot, "c", "m2", Refusal::Unavailable, 100, t0 + ms(30));
        // Another chat is not held.
        assert_eq!(Fences::check(&mut slot, "d", Some("x"), t0), Ok(()));
        // Past m1's retry time but m1 not back yet: still held, briefly.
        assert_eq!(Fences::check(&mut slot, "c", Some("m2"), t0 + ms(500)), Err((T, MIN_WAIT_MS)));
        // m1 comes back: it passes, and so does what follows.
        assert_eq!(Fences::check(&mut slot, "c", Some("m1"), t0 + ms(600)), Ok(()));
        assert!(slot.is_none(), "an empty set is dropped");
        assert_eq!(Fences::check(&mut slot, "c", Some("m2"), t0 + ms(600)), Ok(()));
    }

    #[test]
    fn a_held_back_send_is_refused_like_the_send_it_waits_for() {
        let t0 = Instant::now();
        let mut slot = None;
        Fences::raise(&mut slot, "c", "m1", Refusal::Unavailable, 1_000, t0);
        assert_eq!(Fences::check(&mut slot, "c", Some("m2"), t0 + ms(1)), Err((Refusal::Unavailable, 999)));
    }

    #[test]
    fn a_fence_whose_send_never_comes_back_lapses() {
        let t0 = Instant::now();
        let mut slot = None;
        Fences::raise(&mut slot, "c", "m1", T, 5_000, t0);
        assert!(Fences::check(&mut slot, "c", Some("m2"), t0 + HOLD - ms(1)).is_err());
        assert_eq!(Fences::check(&mut slot, "c", Some("m2"), t0 + HOLD), Ok(()));
        assert!(slot.is_none());
    }

    #[test]
    fn a_connection_holds_a_bounded_number_of_fences() {
        let t0 = Instant::now();
        let mut slot = None;
        for i in 0..(MAX_FENCES as u64 + 5) {
            Fences::raise(&mut slot, &format!("c{i}"), "m", T, 10, t0 + ms(i));
        }
        let set = slot.as_ref().expect("fences");
        assert_eq!(set.0.len(), MAX_FENCES);
        // The oldest went.
        assert!(set.0.iter().all(|f| f.lapses_at >= t0 + ms(5) + HOLD));
    }
}
