//! The cluster's stories, told over any cell of nodes: `tests/cluster.rs`
//! tells them on nodes joined over a real NATS cluster and PostgreSQL,
//! `tests/cell.rs` on nodes of one process over the in-process bus. One
//! text for both, so the two cells are held to the same promises.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{Client, TestServer};

/// The next push of kind `ev` within `wait`, passing over others (events of joins and the like).
pub async fn push_of(c: &mut Client, ev: &str, wait: Duration) -> Option<Value> {
    let deadline = Instant::now() + wait;
    loop {
        let p = c.push_within(deadline.saturating_duration_since(Instant::now())).await?;
        if p["ev"] == ev {
            return Some(p);
        }
    }
}

/// Polls `node`'s presence route until `count` users are present; how long it took.
pub async fn presence_count_within(node: &TestServer, chat: &str, count: u64, within: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let (status, body) = node.http("GET", &format!("/v1/workspaces/w/chats/{chat}/presence"), None).await;
        assert_eq!(status, 200, "{body}");
        if body["count"] == count {
            return started.elapsed();
        }
        assert!(started.elapsed() < within, "{} still says {body}, not {count}", node.addr);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The next `inbox` push of `chat` within 3 s, passing over others.
pub async fn inbox_of(c: &mut Client, chat: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let p = push_of(c, "inbox", deadline.saturating_duration_since(Instant::now()))
            .await
            .unwrap_or_else(|| panic!("no inbox push of {chat}"));
        if p["chat"] == chat {
            return p;
        }
    }
}

/// Presence and typing cross nodes both ways; a user present on two nodes stays present until both
/// watches end. `nodes`: three nodes of one cell.
pub async fn presence_and_typing_reach_the_other_nodes(nodes: &[TestServer]) {
    let mut alice = nodes[0].client("w", "alice").await;
    alice.ok(json!({"op": "join", "chat": "g"})).await;
    alice.ok(json!({"op": "watch", "chat": "g"})).await;
    assert_eq!(alice.ok(json!({"op": "presence", "chat": "g"})).await["count"], 1);

    let mut bob = nodes[1].client("w", "bob").await;
    bob.ok(json!({"op": "join", "chat": "g"})).await;
    bob.ok(json!({"op": "watch", "chat": "g"})).await;
    let seen = push_of(&mut alice, "presence", Duration::from_secs(2)).await;
    assert_eq!(seen, Some(json!({"ev": "presence", "chat": "g", "user": "bob", "present": true})), "within 2 s");
    // bob's node asked the others for their sets when it started watching. The list and the pushes from
    // then on make both users; on a loaded machine the answer can still be on its way when bob asks.
    let mut both = json!({"count": 2, "users": ["alice", "bob"]});
    let list = bob.ok(json!({"op": "presence", "chat": "g"})).await;
    if list != both {
        assert_eq!(list, json!({"count": 1, "users": ["bob"]}));
        let filled = push_of(&mut bob, "presence", Duration::from_secs(2)).await;
        assert_eq!(filled, Some(json!({"ev": "presence", "chat": "g", "user": "alice", "present": true})));
    }
    // Every node agrees, node-2 (no watcher of the chat) by asking the others.
    for node in nodes {
        presence_count_within(node, "g", 2, Duration::from_secs(2)).await;
    }
    assert_eq!(nodes[2].http("GET", "/v1/workspaces/w/chats/g/presence", None).await.1, both);

    // Typing crosses nodes both ways, and never comes back to the typist.
    bob.ok(json!({"op": "typing", "chat": "g"})).await;
    let typing = push_of(&mut alice, "typing", Duration::from_secs(2)).await;
    assert_eq!(typing, Some(json!({"ev": "typing", "chat": "g", "user": "bob"})));
    alice.ok(json!({"op": "typing", "chat": "g"})).await;
    assert_eq!(push_of(&mut bob, "typing", Duration::from_secs(2)).await.unwrap()["user"], "alice");
    assert_eq!(push_of(&mut bob, "typing", Duration::from_millis(300)).await, None, "bob's own typing is not his");

    // bob on a second node: still present when he stops watching on the first.
    let mut bob_too = nodes[2].client("w", "bob").await;
    bob_too.ok(json!({"op": "watch", "chat": "g"})).await;
    bob.ok(json!({"op": "unwatch", "chat": "g"})).await;
    assert_eq!(push_of(&mut alice, "presence", Duration::from_millis(1500)).await, None, "bob watches on node-2");
    drop(bob_too);
    // Told by another node: held for the 1 s grace first (a user moving between nodes is not flapped).
    let gone = push_of(&mut alice, "presence", Duration::from_secs(3)).await;
    assert_eq!(gone, Some(json!({"ev": "presence", "chat": "g", "user": "bob", "present": false})));
    both = json!({"count": 1, "users": ["alice"]});
    for node in nodes {
        presence_count_within(node, "g", 1, Duration::from_secs(2)).await;
    }
    assert_eq!(nodes[1].http("GET", "/v1/workspaces/w/chats/g/presence", None).await.1, both);
}

/// A live inbox on one node hears of sends, joins, reads and leaves made on another, including a
/// chat its node never heard of (the cell-wide join notice). `nodes`: two nodes of one cell; `settle`:
/// how long a new subscription takes to reach every broker server.
pub async fn a_live_inbox_hears_of_what_happens_on_the_other_nodes(nodes: &[TestServer], settle: Duration) {
    let mut alice = nodes[0].client("w", "alice").await;
    let mut phone = nodes[1].client("w", "alice").await;
    let mut bob = nodes[1].client("w", "bob").await;
    alice.ok(json!({"op": "join", "chat": "g"})).await;
    bob.ok(json!({"op": "join", "chat": "g"})).await;
    let page = alice.ok(json!({"op": "inbox", "live": true})).await;
    assert_eq!(page["chats"][0]["chat"], "g");
    // Let node-0's subscription of g reach every broker server (nothing to wait for in process).
    tokio::time::sleep(settle).await;

    let m = bob.ok(json!({"op": "send", "chat": "g", "body": "from node-1"})).await;
    let p = inbox_of(&mut alice, "g").await;
    assert_eq!((p["seq"].clone(), p["unread"].clone()), (m["seq"].clone(), json!(1)), "{p}");

    // Joined on node-1, a chat node-0 never heard of: the cell-wide join notice.
    phone.ok(json!({"op": "join", "chat": "h"})).await;
    assert_eq!(inbox_of(&mut alice, "h").await["seq"], 1);
    bob.ok(json!({"op": "join", "chat": "h"})).await;
    assert_eq!(inbox_of(&mut alice, "h").await["seq"], 2, "bob's join is news too");
    let m = bob.ok(json!({"op": "send", "chat": "h", "body": "hello"})).await;
    let p = inbox_of(&mut alice, "h").await;
    assert_eq!((p["seq"].clone(), p["unread"].clone()), (m["seq"].clone(), json!(1)), "{p}");
    phone.ok(json!({"op": "read", "chat": "h", "seq": m["seq"]})).await;
    assert_eq!(inbox_of(&mut alice, "h").await["unread"], 0);
    phone.ok(json!({"op": "leave", "chat": "g"})).await;
    assert_eq!(inbox_of(&mut alice, "g").await["left"], true);
}

/// v1.2 across nodes: a thread reply, a mention, a pin, reactions and a streamed text made on one
/// node are seen the same from another: pushed live (the stream's appends too, in order), counted
/// in the other user's inbox and threads, and in the stored view either node answers. `nodes`: two
/// nodes of one cell; `settle`: how long a new subscription takes to reach every broker server.
pub async fn conversations_look_the_same_from_every_node(nodes: &[TestServer], settle: Duration) {
    let mut alice = nodes[0].client("w", "alice").await;
    let mut bob = nodes[1].client("w", "bob").await;
    alice.ok(json!({"op": "join", "chat": "conv"})).await;
    bob.ok(json!({"op": "join", "chat": "conv"})).await;
    alice.ok(json!({"op": "watch", "chat": "conv"})).await;
    alice.ok(json!({"op": "inbox", "live": true})).await;
    tokio::time::sleep(settle).await;

    let root = alice.ok(json!({"op": "send", "chat": "conv", "body": "plan?"})).await["seq"].as_u64().unwrap();
    let reply = bob
        .ok(json!({"op": "send", "chat": "conv", "body": "@alice yes", "thread": root, "mentions": ["alice"]}))
        .await;
    let reply = reply["seq"].as_u64().unwrap();
    bob.ok(json!({"op": "react", "chat": "conv", "target": root, "emoji": "+1"})).await;
    bob.ok(json!({"op": "pin", "chat": "conv", "target": root})).await;
    let pushed = alice.events("conv", 4).await;
    assert_eq!((pushed[1]["seq"].as_u64(), pushed[1]["thread"].as_u64()), (Some(reply), Some(root)));
    // The live inbox on node-0 counts what node-1 stored.
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let p = inbox_of(&mut alice, "conv").await;
        if p["mentions"] == 1 && p["threads"] == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "the live inbox never counted bob's reply: {p}");
    }

    // A stream from node-1, watched on node-0: every append in order, then the final edit.
    let target = bob.ok(json!({"op": "send", "chat": "conv", "body": {"text": ""}, "stream": true})).await["seq"]
        .as_u64()
        .unwrap();
    let words: Vec<String> = (0..30).map(|i| format!("w{i} ")).collect();
    for w in &words {
        bob.ok(json!({"op": "append", "chat": "conv", "target": target, "text": w})).await;
    }
    let mut text = String::new();
    while text.len() < words.concat().len() {
        let p = push_of(&mut alice, "append", Duration::from_secs(3)).await.expect("the appends cross nodes");
        assert_eq!(p["at"].as_u64(), Some(text.encode_utf16().count() as u64), "{p}");
        text.push_str(p["text"].as_str().unwrap());
    }
    assert_eq!(text, words.concat());
    bob.ok(json!({"op": "append", "chat": "conv", "target": target, "text": "", "done": true})).await;

    // Both nodes answer the same stored view, and the same threads.
    let a = alice.ok(json!({"op": "fetch", "chat": "conv", "after": 0})).await;
    let b = bob.ok(json!({"op": "fetch", "chat": "conv", "after": 0})).await;
    assert_eq!(a["events"], b["events"]);
    let view = |seq: u64| a["events"].as_array().unwrap().iter().find(|e| e["seq"] == seq).cloned().unwrap();
    assert_eq!(view(root)["replies"], json!({"count": 1, "last": reply}));
    assert_eq!((view(root)["reactions"].clone(), view(root)["pinned"].clone()), (json!({"+1": 1}), json!(true)));
    assert_eq!((view(target)["body"]["text"].clone(), view(target)["stream"].clone()), (json!(text), json!("done")));
    let threads = alice.ok(json!({"op": "threads"})).await;
    assert_eq!(
        (threads["threads"][0]["unread"].clone(), threads["threads"][0]["last"]["seq"].as_u64()),
        (json!(1), Some(reply))
    );
}
