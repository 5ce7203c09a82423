//! The window of recent events: exact after edits and deletes, bounded in
//! bytes, and used by `fetch` only where it is exact.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use herald_protocol::frame::ok_reply;
use herald_protocol::reply::FetchOk;
use herald_protocol::{Event, EventType};
use serde_json::value::RawValue;

use super::recent::{Budget, Recent};
use super::tests::{Log, hub_over};
use super::{Hub, Replay};
use crate::broker::Sink;
use crate::chat::{Caller, ChatLimits, Chats};
use crate::model::{ChatKey, Published};
use crate::outbox::{Frame, Outbox};

fn ev(seq: u64, kind: EventType, body: &str) -> Event {
    Event::new(seq, kind, Some("u".into()), 1000 + seq as i64, RawValue::from_string(body.into()).unwrap())
}

fn msg(seq: u64) -> Event {
    ev(seq, EventType::Message, &format!(r#"{{"text":"m{seq}"}}"#))
}

fn key() -> ChatKey {
    ChatKey::new("w", "room \"one\"")
}

fn push_all(recent: &mut Recent, budget: &Arc<Budget>, events: &[Event]) {
    for e in events {
        recent.push(budget, &key().chat, &Published::new(key(), e));
    }
}

/// What the store's fetch reply would be for these events (its view) and head.
fn store_reply(events: Vec<Event>, head: u64, more: bool) -> String {
    ok_reply(7, &FetchOk { events, seq: head, more })
}

#[test]
fn the_window_shows_edits_and_deletes_as_the_store_does() {
    let budget = Arc::new(Budget::new(1 << 20, 1 << 20));
    let mut recent = Recent::default();
    let live = vec![
        msg(1),
        msg(2),
        msg(3),
        msg(4),
        msg(5),
        ev(6, EventType::Edit, r#"{"target":2,"body":{"text":"new"}}"#),
        ev(7, EventType::Delete, r#"{"target":3}"#),
        ev(8, EventType::Edit, r#"{"target":4,"body":{"text":"four"}}"#),
        ev(9, EventType::Reaction, r#"{"target":4,"emoji":"x","on":true}"#),
        ev(10, EventType::Delete, r#"{"target":4}"#),
    ];
    push_all(&mut recent, &budget, &live);

    let mut view = live.clone();
    view[1].body = RawValue::from_string(r#"{"text":"new"}"#.into()).unwrap();
    view[1].edited = Some(6);
    view[2].body = RawValue::from_string("null".into()).unwrap();
    view[2].deleted = true;
    view[3].body = RawValue::from_string("null".into()).unwrap();
    view[3].edited = Some(8);
    view[3].deleted = true;
    view[7].body = RawValue::from_string(r#"{"target":4,"body":null}"#.into()).unwrap();

    let page = recent.page(0, 100, 1 << 20).expect("the window holds 1..=10");
    assert_eq!(page.encode_reply(7), store_reply(view.clone(), 10, false));
    // Pages of it, by limit and by bytes, cut as the store's fetch is.
    let page = recent.page(3, 4, 1 << 20).unwrap();
    assert_eq!(page.encode_reply(7), store_reply(view[3..7].to_vec(), 10, true));
    let one = serde_json::to_string(&view[4]).unwrap().len();
    let page = recent.page(4, 100, one + 1).unwrap();
    assert_eq!(page.encode_reply(7), store_reply(view[4..5].to_vec(), 10, true));
    let page = recent.page(4, 100, 1).unwrap();
    assert_eq!(page.encode_reply(7), store_reply(view[4..5].to_vec(), 10, true), "always one event");
    let page = recent.page(10, 100, 1 << 20).unwrap();
    assert_eq!(page.encode_reply(7), store_reply(vec![], 10, false), "up to date: nothing, exactly");
    assert!(recent.page(11, 100, 1 << 20).is_none(), "beyond the head: the store decides");

    // Replays get the push frames of the same view.
    let frames = recent.frames(1, 3).unwrap();
    let expected: Vec<(u64, String)> =
        view[1..3].iter().map(|e| (e.seq, Published::new(key(), e).frame.to_string())).collect();
    let got: Vec<(u64, String)> = frames.into_iter().map(|(s, f)| (s, f.to_string())).collect();
    assert_eq!(got, expected);
    assert!(recent.frames(1, 11).is_none());
}

#[test]
fn a_view_read_later_from_the_log_is_not_rolled_back_by_an_older_edit() {
    // A catch-up from the log hands the sequencer message 1 as stored now:
    // already edited by seq 3. The edit at seq 2 then changes nothing.
    let budget = Arc::new(Budget::new(1 << 20, 1 << 20));
    let mut recent = Recent::default();
    let mut later = msg(1);
    later.body = RawValue::from_string(r#""third""#.into()).unwrap();
    later.edited = Some(3);
    let events = [
        later.clone(),
        ev(2, EventType::Edit, r#"{"target":1,"body":"second"}"#),
        ev(3, EventType::Edit, r#"{"target":1,"body":"third"}"#),
    ];
    push_all(&mut recent, &budget, &events);
    let page = recent.page(0, 10, 1 << 20).unwrap();
    assert_eq!(page.encode_reply(7), store_reply(vec![later, events[1].clone(), events[2].clone()], 3, false));
}

#[test]
fn windows_drop_their_oldest_events_beyond_the_chat_cap_and_the_node_budget() {
    let one = Published::new(key(), &msg(1)).frame.len();
    // A chat holds at most 10 events; the node at most 15.
    let budget = Arc::new(Budget::new(15 * one + one / 2, 10 * one + one / 2));
    let mut a = Recent::default();
    push_all(&mut a, &budget, &(1..=30).map(msg).collect::<Vec<_>>());
    assert_eq!(a.span(), 21..31, "the newest 10");
    assert!(a.page(19, 10, 1 << 20).is_none(), "below the window");
    assert!(a.page(20, 10, 1 << 20).is_some());
    let mut b = Recent::default();
    push_all(&mut b, &budget, &(1..=8).map(msg).collect::<Vec<_>>());
    // b grew past the node's budget: it gave up its own oldest.
    assert_eq!(b.span(), 4..9);
    assert_eq!(budget.used(), a.bytes() + b.bytes());
    assert!(budget.used() <= 15 * one + one / 2);
    drop(a);
    assert_eq!(budget.used(), b.bytes(), "a window's bytes go with it");
    // A seq that does not follow (a gap skipped) starts the window over.
    push_all(&mut b, &budget, &[msg(12)]);
    assert_eq!(b.span(), 12..13);
    assert_eq!(budget.used(), b.bytes());
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
        hub.deliver(Published::new(key(), &super::tests::stored(seq)));
    }
    (log, hub, chats, outbox)
}

/// The reply to fetch request 3 as the store answers it.
async fn store_view(chats: &Chats, u: &Caller, after: u64, limit: Option<u32>) -> String {
    ok_reply(3, &chats.fetch(u, &key().chat, after, limit).await.unwrap())
}

#[tokio::test(start_paused = true)]
async fn a_watcher_fetches_from_the_window_and_anything_else_from_the_store() {
    let (log, _hub, chats, outbox) = watched_chat(10, 40);
    let reads = || log.reads.load(Ordering::SeqCst);
    let u = Caller { ws: "w".into(), user: "u".into() };
    let chat = &*key().chat;

    // Inside the window (20..=40: hot from the 10th event), for the live watcher: no store read, the store's bytes.
    let before = reads();
    let cached = chats.fetch_reply(&u, outbox.id(), 3, chat, 20, Some(5)).await.unwrap();
    assert_eq!(reads(), before, "served from the window");
    assert_eq!(cached, store_view(&chats, &u, 20, Some(5)).await);
    let cached = chats.fetch_reply(&u, outbox.id(), 3, chat, 10, None).await.unwrap();
    assert_eq!(cached, store_view(&chats, &u, 10, None).await);

    // Below the window: the store.
    let before = reads();
    let reply = chats.fetch_reply(&u, outbox.id(), 3, chat, 5, Some(10)).await.unwrap();
    assert_eq!(reads(), before + 1, "below the window: read from the store");
    assert_eq!(reply, store_view(&chats, &u, 5, Some(10)).await);

    // Another connection of the same user that does not watch the chat: the store decides membership.
    let before = reads();
    chats.fetch_reply(&u, 99, 3, chat, 20, Some(5)).await.unwrap();
    assert_eq!(reads(), before + 1, "a non-watcher's fetch reads the store");
    // The watcher's connection asking as another user (never happens, but the window must not answer it).
    let before = reads();
    let other = Caller { ws: "w".into(), user: "v".into() };
    chats.fetch_reply(&other, outbox.id(), 3, chat, 20, Some(5)).await.unwrap();
    assert_eq!(reads(), before + 1);
}

#[tokio::test(start_paused = true)]
async fn a_watch_replay_is_read_from_the_window_when_it_holds_it() {
    let (log, hub, chats, _first) = watched_chat(10, 40);
    let u = Caller { ws: "w".into(), user: "u".into() };
    let second = Arc::new(Outbox::new(2, 1 << 24));
    let before = log.reads.load(Ordering::SeqCst);
    chats
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
    assert_eq!(frames[1], Published::new(key(), &super::tests::stored(26)).frame);
    drop(hub);
}

#[test]
fn events_read_back_from_the_log_stay_until_a_count_of_theirs_would_move() {
    let budget = Arc::new(Budget::new(1 << 20, 1 << 20));
    let mut recent = Recent::default();
    push_all(&mut recent, &budget, &[msg(1), msg(2)]);
    // A catch-up reads 3 and 4 back from the log: the window keeps them, as it did before v1.2.
    for e in [msg(3), msg(4)] {
        recent.push(&budget, &key().chat, &Published::from_log(key(), &e));
    }
    push_all(&mut recent, &budget, &[msg(5), ev(6, EventType::Reaction, r#"{"target":2,"emoji":"x","on":true}"#)]);
    assert_eq!(recent.span(), 1..7, "a live message's count moves in place");
    let page = recent.page(0, 100, 1 << 20).expect("held");
    assert!(page.encode_reply(1).contains(r#""reactions":{"x":1}"#));
    // A reaction to 3, whose view came from the log (it may already count this one): start over after it.
    push_all(&mut recent, &budget, &[ev(7, EventType::Reaction, r#"{"target":3,"emoji":"x","on":true}"#)]);
    assert_eq!(recent.span(), 8..8, "restarted after the reaction");
    assert!(recent.page(5, 100, 1 << 20).is_none(), "the store answers what the window no longer holds");
    push_all(&mut recent, &budget, &[msg(8)]);
    assert_eq!(recent.span(), 8..9);
}

/// A message carrying `files` (with URLs as a node signs them) stored at `ts`.
fn with_file(seq: u64, ts: i64, id: &str) -> Event {
    let file = herald_protocol::FileRef {
        id: id.into(),
        name: "a.png".into(),
        mime: "image/png".into(),
        size: 3,
        url: format!("http://h/{id}"),
    };
    Event { ts, files: Some(vec![file]), ..msg(seq) }
}

#[test]
fn the_window_serves_file_urls_only_within_the_hour_they_were_signed() {
    let budget = Arc::new(Budget::new(1 << 20, 1 << 20));
    let now = crate::store::now_ms();
    let mut fresh = Recent::default();
    push_all(&mut fresh, &budget, &[msg(1), with_file(2, now, "fa"), msg(3)]);
    assert!(fresh.page(0, 10, 1 << 20).is_some(), "URLs signed this hour are served from the window");
    let mut old = Recent::default();
    push_all(&mut old, &budget, &[msg(1), with_file(2, now - 2 * 3_600_000, "fa"), msg(3)]);
    assert!(old.page(0, 10, 1 << 20).is_none(), "URLs signed hours ago are signed afresh by the store's read");
    assert!(old.frames(0, 3).is_none());
    assert!(old.page(2, 10, 1 << 20).is_some(), "events after it are still served from the window");
}

#[test]
fn an_edit_or_delete_changes_a_messages_files_in_the_window_as_in_the_store() {
    let budget = Arc::new(Budget::new(1 << 20, 1 << 20));
    let now = crate::store::now_ms();
    let mut recent = Recent::default();
    let edit = |seq: u64, files: &str| Event {
        ts: now,
        files: serde_json::from_str(files).unwrap(),
        ..ev(seq, EventType::Edit, r#"{"target":1,"body":{"text":"e"}}"#)
    };
    push_all(&mut recent, &budget, &[with_file(1, now, "fa"), edit(2, "null")]);
    let page = recent.page(0, 10, 1 << 20).unwrap().encode_reply(1);
    assert!(page.contains("\"fa\""), "an edit without files keeps them: {page}");
    push_all(&mut recent, &budget, &[edit(3, r#"[{"id":"fb","name":"b","type":"image/png","size":1,"url":"u"}]"#)]);
    let page = recent.page(0, 1, 1 << 20).unwrap().encode_reply(1);
    assert!(page.contains("\"fb\"") && !page.contains("\"fa\""), "{page}");
    push_all(&mut recent, &budget, &[edit(4, "[]")]);
    let page = recent.page(0, 1, 1 << 20).unwrap().encode_reply(1);
    assert!(!page.contains("files"), "files: [] removes them: {page}");
    push_all(&mut recent, &budget, &[with_file(5, now, "fc"), ev(6, EventType::Delete, r#"{"target":5}"#)]);
    let page = recent.page(4, 1, 1 << 20).unwrap().encode_reply(1);
    assert!(!page.contains("fc"), "a deleted message shows no files: {page}");
}
