//! The chat layer reading from the hub's window of a hot chat: a watcher's `fetch` and a watch's
//! replay come from the window where it holds them, and anything else from the store.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use herald_protocol::frame::ok_reply;

use super::{Caller, ChatLimits, Chats};
use crate::broker::Sink;
use crate::hub::tests::{Log, hub_over, stored};
use crate::hub::{Hub, Replay};
use crate::model::{ChatKey, Published};
use crate::outbox::{Frame, Outbox};

fn key() -> ChatKey {
    ChatKey::new("w", "room \"one\"")
}

fn limits() -> ChatLimits {
    ChatLimits {
        settings: crate::chat::ChatSettings { body_limit: 1024, chat_join_rate: 0 },
        replay_events: 100,
        replay_bytes: 1 << 16,
    }
}

/// A hub whose chat `key` has watcher `conn` of user "u", live from seq
/// `latest` of a log, then events up to `to` delivered within one second
/// (paused time), so the chat is hot (a threshold of 1) from its
/// `HOT_MIN_EVENTS`th event on, and keeps a window from there.
fn watched_chat(latest: u64, to: u64) -> (Arc<Log>, Arc<Hub>, Chats, Arc<Outbox>) {
    let log = Log::new(to, vec![]);
    let hub = hub_over(&log, 1);
    let chats = Chats::new(log.clone(), Arc::new(crate::broker::memory::MemoryBroker::new()), hub.clone(), limits());
    let outbox = Arc::new(Outbox::new(1, 1 << 24));
    hub.begin_watch(&key(), &"u".into(), &outbox);
    let reply = Replay { reply: Frame::from("{}"), latest, frames: vec![], truncated: false };
    assert!(hub.finish_watch(&key(), outbox.id(), reply));
    for seq in latest + 1..=to {
        hub.deliver(Published::new(key(), &stored(seq)));
    }
    (log, hub, chats, outbox)
}

/// The reply to fetch request 3 as the store answers it.
async fn store_view(chats: &Chats, u: &Caller, after: u64, limit: Option<u32>) -> String {
    ok_reply(3, &chats.reads().fetch(u, &key().chat, after, limit).await.unwrap())
}

#[tokio::test(start_paused = true)]
async fn a_watcher_fetches_from_the_window_and_anything_else_from_the_store() {
    let (log, _hub, chats, outbox) = watched_chat(10, 40);
    let reads = || log.reads.load(Ordering::SeqCst);
    let u = Caller { ws: "w".into(), user: "u".into() };
    let chat = &*key().chat;

    // Inside the window (20..=40: hot from the 10th event), for the live watcher: no store read, the store's bytes.
    let before = reads();
    let cached = chats.reads().fetch_reply(&u, outbox.id(), 3, chat, 20, Some(5)).await.unwrap();
    assert_eq!(reads(), before, "served from the window");
    assert_eq!(cached, store_view(&chats, &u, 20, Some(5)).await);
    let cached = chats.reads().fetch_reply(&u, outbox.id(), 3, chat, 10, None).await.unwrap();
    assert_eq!(cached, store_view(&chats, &u, 10, None).await);

    // Below the window: the store.
    let before = reads();
    let reply = chats.reads().fetch_reply(&u, outbox.id(), 3, chat, 5, Some(10)).await.unwrap();
    assert_eq!(reads(), before + 1, "below the window: read from the store");
    assert_eq!(reply, store_view(&chats, &u, 5, Some(10)).await);

    // Another connection of the same user that does not watch the chat: the store decides membership.
    let before = reads();
    chats.reads().fetch_reply(&u, 99, 3, chat, 20, Some(5)).await.unwrap();
    assert_eq!(reads(), before + 1, "a non-watcher's fetch reads the store");
    // The watcher's connection asking as another user (never happens, but the window must not answer it).
    let before = reads();
    let other = Caller { ws: "w".into(), user: "v".into() };
    chats.reads().fetch_reply(&other, outbox.id(), 3, chat, 20, Some(5)).await.unwrap();
    assert_eq!(reads(), before + 1);
}

#[tokio::test(start_paused = true)]
async fn a_watch_replay_is_read_from_the_window_when_it_holds_it() {
    let (log, hub, chats, _first) = watched_chat(10, 40);
    let u = Caller { ws: "w".into(), user: "u".into() };
    let second = Arc::new(Outbox::new(2, 1 << 24));
    let before = log.reads.load(Ordering::SeqCst);
    chats
        .live()
        .watch(&u, &second, &key().chat, Some(25), |latest| Frame::from(format!("{{\"latest\":{latest}}}")))
        .await
        .unwrap();
    // One read: the membership check with the head; the events came from the window.
    assert_eq!(log.reads.load(Ordering::SeqCst), before + 1);
    let mut frames = Vec::new();
    second.drain(usize::MAX, &mut frames);
    assert_eq!(frames[0].as_str(), r#"{"latest":40}"#);
    let seqs: Vec<u64> = frames[1..]
        .iter()
        .map(|f| serde_json::from_str::<serde_json::Value>(f.as_str()).unwrap()["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (26..=40).collect::<Vec<_>>());
    assert_eq!(frames[1], Published::new(key(), &stored(26)).frame);
    drop(hub);
}
