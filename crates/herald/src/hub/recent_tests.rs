//! The window of recent events: exact after edits and deletes, bounded in
//! bytes, and used by `fetch` only where it is exact.

use std::sync::Arc;

use herald_protocol::frame::ok_reply;
use herald_protocol::reply::FetchOk;
use herald_protocol::{Event, EventType};
use serde_json::value::RawValue;

use super::recent::{Budget, Recent};
use crate::model::{ChatKey, Published};

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
