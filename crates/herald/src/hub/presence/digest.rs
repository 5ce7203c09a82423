//! The full check's beats, node-wide: once a second a node posts, on the
//! cell's `presence` topic, one digest of the chats whose full check is due
//! (a tenth of its chats with present users, each every
//! [`FULL_CHECK_EVERY`](super::book::FULL_CHECK_EVERY)), each as
//! `[workspace, chat, epoch, n]`: what a `Beat` on the chat's own subject
//! says. A node that receives it treats each entry of a chat it has an entry
//! for as that chat's beat, and skips the rest.
//!
//! Why: a beat per chat was one broker message per chat with present users
//! per node every 10 s, most of a large cell's traffic between nodes (at
//! 114,000 users on 6 nodes, about 1,550 messages a second per node while
//! users sent 10). A digest carries a second's worth of them in a message or
//! a few ([`DIGEST_PART`] entries each). Its cost moves from messages to
//! entries: every node reads every other node's entries, a hash lookup each.
//!
//! The burst beat after a change stays on the chat's subject, in order with
//! its deltas; a chat whose burst beat is pending is left out of the digest
//! (it is about to beat anyway), so an entry never overtakes a delta still in
//! flight on the chat's subject. A lost digest is what a lost beat was: the
//! holders of that node's users ask it by name after
//! [`QUIET_ASK`](super::book::QUIET_ASK). A node of an older version does
//! not follow the topic and so hears no full-check beat from newer nodes: it
//! asks them by name every `QUIET_ASK` per chat instead, until it is upgraded.

use std::sync::{Arc, Weak};

use serde::{Deserialize, Serialize};

use crate::broker::bus::{Bus, Topic};
use crate::hub::Hub;
use crate::model::{ChatKey, Signal};

/// Entries per digest message: about 60 bytes each, far below NATS's 1 MB.
pub const DIGEST_PART: usize = 1_000;

/// One chat's full-check beat: its workspace, chat, this node's epoch of it
/// and the number of its latest delta.
pub(in crate::hub) type DigestBeat = (Arc<str>, Arc<str>, u64, u64);

/// What a node posts.
#[derive(Debug, Serialize, Deserialize)]
struct Digest {
    /// The sender's incarnation, as in its signals.
    from: String,
    beats: Vec<(String, String, u64, u64)>,
}

/// Posts `beats` as digests of at most [`DIGEST_PART`] entries, off the
/// caller's path. A post that fails is logged and counted; the full check
/// it carried comes again in 10 s, and the quiet asks cover it meanwhile.
pub(in crate::hub) fn post(bus: Arc<dyn Bus>, from: &str, beats: Vec<DigestBeat>) {
    let parts: Vec<Vec<u8>> = beats
        .chunks(DIGEST_PART)
        .map(|part| {
            let digest = DigestRef { from, beats: part };
            serde_json::to_vec(&digest).expect("digests serialize")
        })
        .collect();
    metrics::counter!("herald_presence_digest_beats_total", "way" => "sent").increment(beats.len() as u64);
    tokio::spawn(async move {
        for payload in parts {
            metrics::counter!("herald_signals_sent_total", "kind" => "digest").increment(1);
            if let Err(e) = bus.post(Topic::Presence, payload.into()).await {
                metrics::counter!("herald_presence_digest_errors_total").increment(1);
                tracing::warn!(error = %e, "cannot post a presence digest");
            }
        }
    });
}

/// The serialized form of [`Digest`], borrowing what it sends.
#[derive(Serialize)]
struct DigestRef<'a> {
    from: &'a str,
    beats: &'a [DigestBeat],
}

/// Follows the other nodes' digests for `hub` until the hub or the bus is gone.
pub(in crate::hub) fn follow(hub: Weak<Hub>, bus: Arc<dyn Bus>) {
    tokio::spawn(async move {
        let mut notes = bus.follow(Topic::Presence).await;
        while let Some(note) = notes.next().await {
            let Some(hub) = hub.upgrade() else { return };
            match serde_json::from_slice::<Digest>(&note.payload) {
                Ok(digest) => receive(&hub, digest),
                Err(e) => {
                    metrics::counter!("herald_presence_digest_errors_total").increment(1);
                    tracing::warn!(error = %e, "bad presence digest");
                }
            }
        }
    });
}

/// Each entry of a chat with an entry here is that chat's beat.
fn receive(hub: &Hub, digest: Digest) {
    if digest.from == hub.live().me() {
        return;
    }
    metrics::counter!("herald_signals_received_total", "kind" => "digest").increment(1);
    metrics::counter!("herald_presence_digest_beats_total", "way" => "received").increment(digest.beats.len() as u64);
    for (ws, chat, epoch, n) in digest.beats {
        let Some(entry) = hub.entry(&ChatKey::new(&ws, &chat)) else { continue };
        entry.receive(hub, &Signal::Beat { from: digest.from.clone(), epoch, n });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_digest_reads_back_what_was_sent() {
        let beats: Vec<DigestBeat> = vec![("w".into(), "c1".into(), 3, 9), ("w".into(), "c\"2".into(), 1, 0)];
        let bytes = serde_json::to_vec(&DigestRef { from: "n@1", beats: &beats }).unwrap();
        let back: Digest = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(back.from, "n@1");
        assert_eq!(back.beats, vec![("w".into(), "c1".into(), 3, 9), ("w".into(), "c\"2".into(), 1, 0)]);
    }
}
