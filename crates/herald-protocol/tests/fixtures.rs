//! The golden fixtures of `fixtures/*.json`, read by the Rust wire types: every request parses into the
//! op it spells and nothing is lost or added on the way back; every reply, push and event the server
//! encodes is exactly the fixture's JSON. The TypeScript SDK's `test/unit/fixtures.test.ts` reads the
//! same files against its own types, so a field renamed on either side fails one of the two.
//!
//! Protocol 1.2's conversation frames live in `fixtures/*-1.2.json` beside them, read here the same way;
//! the SDK's test reads them once the SDK speaks 1.2.
//!
//! Owns: the Rust half of that agreement, and the rule that every op, event type and push kind of
//! protocol 1.2's conversations and before has a fixture. Does not own: the fixtures' meaning
//! (docs/protocol.md) or the SDK's half.

use std::collections::BTreeSet;
use std::path::PathBuf;

use herald_protocol::event::{Event, EventType};
use herald_protocol::frame::{self, ErrorBody, EventPush, InboxPush};
use herald_protocol::reply::{
    EmptyOk, FetchOk, HelloOk, InboxOk, JoinOk, MembersOk, PinsOk, PresenceOk, ReactionsOk, SeqOk, ThreadsOk, UploadOk,
    WatchOk,
};
use herald_protocol::request::{Op, Patch, parse_frame};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

/// Every op of protocol 1.1 and of 1.2's conversations; each needs a request fixture and a reply fixture.
const OPS: [&str; 23] = [
    "hello",
    "join",
    "leave",
    "watch",
    "unwatch",
    "send",
    "react",
    "read",
    "fetch",
    "ping",
    "typing",
    "presence",
    "edit",
    "delete",
    "inbox",
    "profile",
    "members",
    "threads",
    "pin",
    "pins",
    "reactions",
    "append",
    "upload",
];

/// One fixture: its name (for failures) and the JSON object under `key`.
struct Fixture {
    name: String,
    op: Option<String>,
    value: Value,
}

/// The fixtures of `kind` (`"requests"`, ...): protocol 1.1's file, then 1.2's.
fn load(kind: &str, key: &str) -> Vec<Fixture> {
    let mut all = load_file(&format!("{kind}.json"), key);
    all.extend(load_file(&format!("{kind}-1.2.json"), key));
    all
}

fn load_file(file: &str, key: &str) -> Vec<Fixture> {
    let path: PathBuf = [env!("CARGO_MANIFEST_DIR"), "fixtures", file].iter().collect();
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let list: Vec<Value> = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
    list.into_iter()
        .map(|entry| {
            let name = entry["name"].as_str().unwrap_or_else(|| panic!("{file}: an entry without a name")).to_owned();
            let value = entry.get(key).cloned().unwrap_or_else(|| panic!("{file} {name:?}: no {key:?}"));
            assert!(value.is_object(), "{file} {name:?}: {key:?} is not an object");
            Fixture { name, op: entry["op"].as_str().map(str::to_owned), value }
        })
        .collect()
}

/// Parses `value` as `T` (through text, as the wire does, so raw bodies work) and encodes it again.
fn round_trip<T: DeserializeOwned + Serialize>(name: &str, value: &Value) -> Value {
    let parsed: T = serde_json::from_str(&value.to_string()).unwrap_or_else(|e| panic!("{name}: {e}"));
    serde_json::to_value(&parsed).expect("wire types serialize")
}

fn text(v: &Value, field: &str, name: &str) -> String {
    v[field].as_str().unwrap_or_else(|| panic!("{name}: no string {field:?}")).to_owned()
}

fn number(v: &Value, field: &str, name: &str) -> u64 {
    v[field].as_u64().unwrap_or_else(|| panic!("{name}: no number {field:?}"))
}

fn encoded(text: String) -> Value {
    serde_json::from_str(&text).expect("the server's frames are JSON")
}

/// An event type's index in declaration order; exhaustive, so a new type fails to compile here until it
/// has a place (and a fixture).
fn type_index(kind: EventType) -> usize {
    match kind {
        EventType::Message => 0,
        EventType::Reaction => 1,
        EventType::Read => 2,
        EventType::Join => 3,
        EventType::Leave => 4,
        EventType::System => 5,
        EventType::Edit => 6,
        EventType::Delete => 7,
        EventType::Profile => 8,
        EventType::Pin => 9,
    }
}
const EVENT_TYPES: usize = 10;

#[test]
fn every_stored_event_reads_and_writes_back_exactly() {
    let mut seen = [false; EVENT_TYPES];
    for f in load("events", "event") {
        assert_eq!(round_trip::<Event>(&f.name, &f.value), f.value, "{}", f.name);
        let ev: Event = serde_json::from_str(&f.value.to_string()).expect("read above");
        seen[type_index(ev.kind)] = true;
    }
    assert!(seen.iter().all(|s| *s), "the events need one of every type: {seen:?}");
}

/// A parsed request written back as JSON: every argument the server read, under the name it read it by.
fn encode_request(id: i64, op: &Op) -> Value {
    let raw = |b: &serde_json::value::RawValue| -> Value { serde_json::from_str(b.get()).expect("bodies are JSON") };
    let mut args = match op {
        Op::Hello { token } => json!({ "token": token }),
        Op::Join { chat } | Op::Leave { chat } | Op::Unwatch { chat } => json!({ "chat": chat }),
        Op::Typing { chat } | Op::Presence { chat } => json!({ "chat": chat }),
        Op::Watch { chat, after } => json!({ "chat": chat, "after": after }),
        // `stream` (and `append`'s `done`) false unless given, and written only when true.
        Op::Send { chat, body, client_id, thread, quote, mentions, stream, files } => json!({
            "chat": chat, "body": raw(body), "client_id": client_id, "thread": thread, "quote": quote,
            "mentions": mentions, "stream": stream.then_some(true), "files": files,
        }),
        Op::React { chat, target, emoji, on } => json!({ "chat": chat, "target": target, "emoji": emoji, "on": on }),
        Op::Read { chat, seq, thread } => json!({ "chat": chat, "seq": seq, "thread": thread }),
        Op::Fetch { chat, after, limit, thread } => {
            json!({ "chat": chat, "after": after, "limit": limit, "thread": thread })
        }
        Op::Ping => json!({}),
        Op::Edit { chat, target, body, mentions, files } => {
            json!({ "chat": chat, "target": target, "body": raw(body), "mentions": mentions, "files": files })
        }
        Op::Delete { chat, target } => json!({ "chat": chat, "target": target }),
        // `live` is false unless given, and written only when true, as the SDK writes it.
        Op::Inbox { limit, cursor, live } => json!({ "limit": limit, "cursor": cursor, "live": live.then_some(true) }),
        Op::Profile { chat, .. } | Op::Pins { chat } => json!({ "chat": chat }),
        Op::Members { chat, limit, cursor } => json!({ "chat": chat, "limit": limit, "cursor": cursor }),
        Op::Threads { chat, limit, cursor } => json!({ "chat": chat, "limit": limit, "cursor": cursor }),
        Op::Pin { chat, target, on } => json!({ "chat": chat, "target": target, "on": on }),
        Op::Reactions { chat, target } => json!({ "chat": chat, "target": target }),
        Op::Append { chat, target, text, done } => {
            json!({ "chat": chat, "target": target, "text": text, "done": done.then_some(true) })
        }
        Op::Upload { chat, file } => {
            json!({ "chat": chat, "name": file.name, "type": file.mime, "size": file.size })
        }
    };
    let map: &mut Map<String, Value> = args.as_object_mut().expect("objects above");
    // An optional argument the frame left out reads as `None`; it is not written back. (A `body` is any
    // JSON value, `null` too, and never optional.)
    map.retain(|k, v| k == "body" || !v.is_null());
    // A profile field is left out (kept), `null` (cleared) or set.
    if let Op::Profile { patch, .. } = op {
        let mut put = |key: &str, field: Option<Value>| {
            if let Some(v) = field {
                map.insert(key.into(), v);
            }
        };
        let text = |p: &Patch<String>| match p {
            Patch::Keep => None,
            Patch::Clear => Some(Value::Null),
            Patch::Set(s) => Some(json!(s)),
        };
        put("name", text(&patch.name));
        put("image", text(&patch.image));
        put(
            "data",
            match &patch.data {
                Patch::Keep => None,
                Patch::Clear => Some(Value::Null),
                Patch::Set(d) => Some(raw(d)),
            },
        );
    }
    map.insert("id".into(), json!(id));
    map.insert("op".into(), json!(op.name()));
    args
}

#[test]
fn every_request_parses_into_the_op_it_spells() {
    let mut ops = BTreeSet::new();
    for f in load("requests", "frame") {
        let request = parse_frame(&f.value.to_string()).unwrap_or_else(|e| panic!("{}: {e:?}", f.name));
        assert_eq!(encode_request(request.id, &request.op), f.value, "{}", f.name);
        ops.insert(request.op.name());
    }
    assert_eq!(ops, OPS.into_iter().collect(), "the requests need one of every op");
}

/// The `ok` of `op` parsed as the server's type for it and written back.
fn round_trip_ok(op: &str, name: &str, ok: &Value) -> Value {
    match op {
        "hello" => round_trip::<HelloOk>(name, ok),
        "join" => round_trip::<JoinOk>(name, ok),
        "watch" => round_trip::<WatchOk>(name, ok),
        "send" | "react" | "read" | "edit" | "delete" | "profile" | "pin" => round_trip::<SeqOk>(name, ok),
        "fetch" => round_trip::<FetchOk>(name, ok),
        "presence" => round_trip::<PresenceOk>(name, ok),
        "inbox" => round_trip::<InboxOk>(name, ok),
        "leave" | "unwatch" | "ping" | "typing" | "append" => round_trip::<EmptyOk>(name, ok),
        "members" => round_trip::<MembersOk>(name, ok),
        "threads" => round_trip::<ThreadsOk>(name, ok),
        "pins" => round_trip::<PinsOk>(name, ok),
        "reactions" => round_trip::<ReactionsOk>(name, ok),
        "upload" => round_trip::<UploadOk>(name, ok),
        other => panic!("{name}: no reply type for op {other:?}"),
    }
}

#[test]
fn every_reply_is_what_the_server_writes() {
    let mut ops = BTreeSet::new();
    let mut errors = 0;
    for f in load("replies", "frame") {
        let name = f.name.as_str();
        let op = f.op.unwrap_or_else(|| panic!("{name}: no op"));
        let id = f.value["id"].as_i64().unwrap_or_else(|| panic!("{name}: no integer id"));
        let written = if let Some(ok) = f.value.get("ok") {
            ops.insert(op.clone());
            let ok = round_trip_ok(&op, name, ok);
            frame::ok_reply(id, &ok)
        } else {
            errors += 1;
            let err: ErrorBody =
                serde_json::from_str(&f.value["err"].to_string()).unwrap_or_else(|e| panic!("{name}: {e}"));
            frame::err_reply(Some(id), &err)
        };
        assert_eq!(encoded(written), f.value, "{name}");
    }
    assert_eq!(ops, OPS.iter().map(|s| s.to_string()).collect(), "the replies need an ok reply of every op");
    assert!(errors >= 2, "replies.json needs err replies with and without retry_after_ms");
}

#[test]
fn every_push_is_what_the_server_writes() {
    let mut kinds = BTreeSet::new();
    for f in load("pushes", "frame") {
        let (name, v) = (f.name.as_str(), &f.value);
        let chat = || text(v, "chat", name);
        let ev = text(v, "ev", name);
        let written = match ev.as_str() {
            "event" => {
                let mut stored = v.clone();
                let map = stored.as_object_mut().expect("checked in load");
                map.remove("ev");
                map.remove("chat");
                let event: Event = serde_json::from_str(&stored.to_string()).unwrap_or_else(|e| panic!("{name}: {e}"));
                EventPush::new(&chat(), &event).encode()
            }
            "notify" => frame::notify_push(&chat(), number(v, "seq", name)),
            "reconnect" => frame::reconnect_push(number(v, "after_ms", name), &text(v, "reason", name)),
            "typing" => frame::typing_push(&chat(), &text(v, "user", name)),
            "presence" if v.get("count").is_some() => frame::presence_count_push(&chat(), number(v, "count", name)),
            "presence" => frame::presence_user_push(
                &chat(),
                &text(v, "user", name),
                v["present"].as_bool().unwrap_or_else(|| panic!("{name}: no boolean \"present\"")),
            ),
            "inbox" if v.get("threads").is_some() || v.get("mentions").is_some() => InboxPush {
                ev: "inbox",
                chat: &chat(),
                seq: number(v, "seq", name),
                ts: v["ts"].as_i64().unwrap_or_else(|| panic!("{name}: no number \"ts\"")),
                unread: number(v, "unread", name),
                threads: v["threads"].as_u64(),
                mentions: v["mentions"].as_u64(),
                left: v.get("left").and_then(Value::as_bool).unwrap_or(false),
            }
            .encode(),
            "inbox" => frame::inbox_push(
                &chat(),
                number(v, "seq", name),
                v["ts"].as_i64().unwrap_or_else(|| panic!("{name}: no number \"ts\"")),
                number(v, "unread", name),
                v.get("left")
                    .map(|l| l.as_bool().unwrap_or_else(|| panic!("{name}: \"left\" is not a boolean")))
                    .unwrap_or(false),
            ),
            "append" => {
                frame::append_push(&chat(), number(v, "target", name), &text(v, "text", name), number(v, "at", name))
            }
            other => panic!("{name}: no push {other:?} in protocol 1.2"),
        };
        assert_eq!(encoded(written), *v, "{name}");
        let variant = ["count", "left", "threads"].iter().find(|k| v.get(**k).is_some());
        kinds.insert(format!("{ev}{}", variant.map(|k| format!("+{k}")).unwrap_or_default()));
    }
    let want = [
        "event",
        "notify",
        "reconnect",
        "typing",
        "presence",
        "presence+count",
        "inbox",
        "inbox+left",
        "inbox+threads",
        "append",
    ];
    assert_eq!(kinds, want.iter().map(|s| s.to_string()).collect(), "the pushes need every push of protocol 1.2");
}
