//! Protocol v1 over a real server: every op, error and close code.

mod common;

use std::time::Duration;

use common::*;
use serde_json::json;

#[tokio::test]
async fn hello_then_every_op() {
    let s = TestServer::start().await;
    let token = s.token("acme", "alice").await;
    let mut a = Client::connect(&s.ws_url("acme")).await;
    let hello = a.ok(json!({"op": "hello", "token": token})).await;
    assert_eq!(hello["user"], "alice");
    assert_eq!(hello["workspace"], "acme");
    assert!(hello["node"].as_str().is_some_and(|n| !n.is_empty()));
    assert!(hello["session"].as_str().is_some_and(|n| !n.is_empty()));
    assert_eq!(hello["heartbeat_ms"], 25000);
    assert_eq!(a.ok(json!({"op": "ping"})).await, json!({}));

    let join = a.ok(json!({"op": "join", "chat": "general"})).await;
    assert_eq!(join, json!({"chat": "general", "seq": 1, "members": 1}));
    // Joining twice is a no-op without a new event.
    assert_eq!(
        a.ok(json!({"op": "join", "chat": "general"})).await,
        json!({"chat": "general", "seq": 1, "members": 1})
    );

    let mut b = s.client("acme", "bob").await;
    assert_eq!(b.ok(json!({"op": "join", "chat": "general"})).await["members"], 2);
    let w = b.ok(json!({"op": "watch", "chat": "general"})).await;
    assert_eq!(w, json!({"chat": "general", "seq": 2}));

    let sent = a.ok(json!({"op": "send", "chat": "general", "body": {"text": "hi"}, "client_id": "m-1"})).await;
    assert_eq!(sent, json!({"seq": 3}));
    let ev = b.push().await;
    assert_eq!(ev["ev"], "event");
    assert_eq!(ev["chat"], "general");
    assert_eq!(ev["seq"], 3);
    assert_eq!(ev["type"], "message");
    assert_eq!(ev["user"], "alice");
    assert_eq!(ev["body"], json!({"text": "hi"}));
    assert_eq!(ev["client_id"], "m-1");
    assert!(ev["ts"].as_i64().unwrap() > 1_700_000_000_000);

    // Same client_id again: the first seq, nothing new stored or pushed.
    assert_eq!(
        a.ok(json!({"op": "send", "chat": "general", "body": {"text": "hi"}, "client_id": "m-1"})).await,
        json!({"seq": 3})
    );

    let r = a.ok(json!({"op": "react", "chat": "general", "target": 3, "emoji": "+1"})).await;
    assert_eq!(r, json!({"seq": 4}));
    let ev = b.push().await;
    assert_eq!((ev["seq"].clone(), ev["type"].clone()), (json!(4), json!("reaction")));
    assert_eq!(ev["body"], json!({"target": 3, "emoji": "+1", "on": true}));
    a.ok(json!({"op": "react", "chat": "general", "target": 3, "emoji": "+1", "on": false})).await;
    assert_eq!(b.push().await["body"]["on"], false);

    // Read position: forward stores a read event; backward stores nothing and answers the stored position.
    assert_eq!(a.ok(json!({"op": "read", "chat": "general", "seq": 4})).await, json!({"seq": 4}));
    let ev = b.push().await;
    assert_eq!(
        (ev["type"].clone(), ev["body"].clone(), ev["seq"].clone()),
        (json!("read"), json!({"seq": 4}), json!(6))
    );
    assert_eq!(a.ok(json!({"op": "read", "chat": "general", "seq": 2})).await, json!({"seq": 4}));

    let f = a.ok(json!({"op": "fetch", "chat": "general", "after": 0})).await;
    let seqs: Vec<u64> = f["events"].as_array().unwrap().iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, vec![1, 2, 3, 4, 5, 6]);
    assert_eq!(f["seq"], 6);
    assert_eq!(f["more"], false);
    assert_eq!(f["events"][0]["type"], "join");
    assert_eq!(f["events"][0]["body"], json!({}));
    let f = a.ok(json!({"op": "fetch", "chat": "general", "after": 2, "limit": 2})).await;
    assert_eq!(f["events"].as_array().unwrap().len(), 2);
    assert_eq!(f["more"], true);

    assert_eq!(b.ok(json!({"op": "unwatch", "chat": "general"})).await, json!({}));
    a.ok(json!({"op": "send", "chat": "general", "body": "after unwatch"})).await;
    assert!(b.push_within(Duration::from_millis(300)).await.is_none(), "no pushes after unwatch");

    // Leave: a leave event, the count goes down, and the member's watches end.
    b.ok(json!({"op": "watch", "chat": "general"})).await;
    assert_eq!(a.ok(json!({"op": "leave", "chat": "general"})).await, json!({}));
    let ev = b.push().await;
    assert_eq!((ev["type"].clone(), ev["user"].clone()), (json!("leave"), json!("alice")));
    a.err(json!({"op": "send", "chat": "general", "body": 1}), "forbidden").await;
    a.err(json!({"op": "fetch", "chat": "general", "after": 0}), "forbidden").await;
    assert_eq!(b.ok(json!({"op": "join", "chat": "general"})).await["members"], 1);
}

#[tokio::test]
async fn a_watcher_leaving_stops_its_pushes() {
    let s = TestServer::start().await;
    let mut a = s.client("w", "alice").await;
    let mut b = s.client("w", "bob").await;
    a.ok(json!({"op": "join", "chat": "c"})).await;
    b.ok(json!({"op": "join", "chat": "c"})).await;
    a.ok(json!({"op": "watch", "chat": "c"})).await;
    a.ok(json!({"op": "leave", "chat": "c"})).await;
    // The leaver sees its own leave event, then nothing more of the chat.
    let own = a.push().await;
    assert_eq!((own["type"].clone(), own["user"].clone()), (json!("leave"), json!("alice")));
    b.ok(json!({"op": "send", "chat": "c", "body": "x"})).await;
    assert!(a.push_within(Duration::from_millis(300)).await.is_none());
}

#[tokio::test]
async fn members_only_ops_are_forbidden_to_others_and_missing_chats_are_not_found() {
    let s = TestServer::start().await;
    let mut a = s.client("w", "alice").await;
    let mut eve = s.client("w", "eve").await;
    a.ok(json!({"op": "join", "chat": "c"})).await;
    for op in [
        json!({"op": "watch", "chat": "c"}),
        json!({"op": "send", "chat": "c", "body": 1}),
        json!({"op": "react", "chat": "c", "target": 1, "emoji": "x"}),
        json!({"op": "read", "chat": "c", "seq": 1}),
        json!({"op": "fetch", "chat": "c", "after": 0}),
    ] {
        eve.err(op, "forbidden").await;
    }
    a.err(json!({"op": "fetch", "chat": "nope", "after": 0}), "not_found").await;
    a.err(json!({"op": "watch", "chat": "nope"}), "not_found").await;
    a.err(json!({"op": "send", "chat": "nope", "body": 1}), "not_found").await;
    a.err(json!({"op": "react", "chat": "c", "target": 99, "emoji": "x"}), "not_found").await;
    a.err(json!({"op": "read", "chat": "c", "seq": 99}), "bad_request").await;
}

#[tokio::test]
async fn closed_chats_need_the_http_api() {
    let s = TestServer::start().await;
    let (st, v) = s.http("PUT", "/v1/workspaces/w/chats/staff", Some(json!({"open": false}))).await;
    assert_eq!(st, 200);
    assert_eq!(v, json!({"chat": "staff", "seq": 0, "members": 0, "open": false}));
    let mut a = s.client("w", "alice").await;
    a.err(json!({"op": "join", "chat": "staff"}), "forbidden").await;
    let (st, v) = s.http("PUT", "/v1/workspaces/w/chats/staff/members/alice", None).await;
    assert_eq!((st, v), (200, json!({"seq": 1})));
    assert_eq!(a.ok(json!({"op": "join", "chat": "staff"})).await, json!({"chat": "staff", "seq": 1, "members": 1}));
}

#[tokio::test]
async fn workspaces_never_see_each_other() {
    let s = TestServer::start().await;
    let mut a = s.client("acme", "alice").await;
    a.ok(json!({"op": "join", "chat": "general"})).await;
    a.ok(json!({"op": "send", "chat": "general", "body": "secret"})).await;
    let mut m = s.client("globex", "alice").await;
    // Same chat name, same user name, other workspace: a different, empty chat.
    m.err(json!({"op": "fetch", "chat": "general", "after": 0}), "not_found").await;
    assert_eq!(
        m.ok(json!({"op": "join", "chat": "general"})).await,
        json!({"chat": "general", "seq": 1, "members": 1})
    );
    let f = m.ok(json!({"op": "fetch", "chat": "general", "after": 0})).await;
    assert_eq!(f["events"].as_array().unwrap().len(), 1);
    // The HTTP API is scoped the same way.
    let (_, v) = s.http("GET", "/v1/workspaces/acme/chats/general", None).await;
    assert_eq!(v["seq"], 2);
    let (_, v) = s.http("GET", "/v1/workspaces/globex/chats/general", None).await;
    assert_eq!(v["seq"], 1);
    // A token of one workspace cannot enter through another's ?ws=.
    let token = s.token("acme", "alice").await;
    let mut c = Client::connect(&s.ws_url("globex")).await;
    c.err(json!({"op": "hello", "token": token}), "unauthenticated").await;
    assert_eq!(c.closed_with().await, 4001);
}

#[tokio::test]
async fn watch_after_replays_every_missed_event_once_in_order() {
    let s = TestServer::start_with(|c| c.gateway.rate = 10_000).await;
    let mut a = s.client("w", "alice").await;
    let mut b = s.client("w", "bob").await;
    a.ok(json!({"op": "join", "chat": "c"})).await;
    let last = b.ok(json!({"op": "join", "chat": "c"})).await["seq"].as_u64().unwrap();
    for i in 0..300 {
        a.ok(json!({"op": "send", "chat": "c", "body": {"n": i}})).await;
    }
    let w = b.ok(json!({"op": "watch", "chat": "c", "after": last})).await;
    assert_eq!(w["seq"], last + 300);
    // Live events keep coming after the replay.
    a.ok(json!({"op": "send", "chat": "c", "body": {"n": 300}})).await;
    let evs = b.events("c", 301).await;
    for (i, e) in evs.iter().enumerate() {
        assert_eq!(e["seq"].as_u64().unwrap(), last + 1 + i as u64);
        assert_eq!(e["body"]["n"], i);
    }
    assert!(b.push_within(Duration::from_millis(200)).await.is_none(), "nothing twice");
}

#[tokio::test]
async fn concurrent_senders_get_distinct_gapless_seqs_and_watchers_see_them_in_order() {
    let s = TestServer::start_with(|c| c.gateway.rate = 10_000).await;
    let mut w = s.client("w", "watcher").await;
    w.ok(json!({"op": "join", "chat": "c"})).await;
    let start = w.ok(json!({"op": "watch", "chat": "c"})).await["seq"].as_u64().unwrap();
    let mut tasks = Vec::new();
    for u in 0..8 {
        let mut c = s.client("w", &format!("u{u}")).await;
        tasks.push(tokio::spawn(async move {
            c.ok(json!({"op": "join", "chat": "c"})).await;
            let mut seqs = Vec::new();
            for i in 0..50 {
                seqs.push(c.ok(json!({"op": "send", "chat": "c", "body": i})).await["seq"].as_u64().unwrap());
            }
            seqs
        }));
    }
    let mut all: Vec<u64> = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 400);
    let evs = w.events("c", 408).await;
    let got: Vec<u64> = evs.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    let want: Vec<u64> = (start + 1..=start + 408).collect();
    assert_eq!(got, want, "every event, in order, once");
}

#[tokio::test]
async fn bad_requests_get_bad_request_and_garbage_gets_4000() {
    let s = TestServer::start().await;
    let mut a = s.client("w", "alice").await;
    a.err(json!({"op": "nope"}), "bad_request").await;
    a.err(json!({"op": "join"}), "bad_request").await;
    a.err(json!({"op": "join", "chat": "bad chat!"}), "bad_request").await;
    a.err(json!({"op": "fetch", "chat": "c", "after": -1}), "bad_request").await;
    a.err(json!({"op": "send", "chat": "c"}), "bad_request").await;
    a.err(json!({"op": "hello", "token": "x"}), "bad_request").await;
    // Still open after all that.
    a.ok(json!({"op": "ping"})).await;
    a.send_text("this is not json").await;
    assert_eq!(a.closed_with().await, 4000);

    let mut b = s.client("w", "bob").await;
    b.ws.send(tokio_tungstenite::tungstenite::Message::Binary(vec![1, 2, 3].into())).await.unwrap();
    assert_eq!(b.closed_with().await, 4000);
    let mut c = s.client("w", "carol").await;
    c.send_text("[1,2,3]").await;
    assert_eq!(c.closed_with().await, 4000);
}

#[tokio::test]
async fn oversized_bodies_and_frames() {
    let s = TestServer::start().await;
    let mut a = s.client("w", "alice").await;
    a.ok(json!({"op": "join", "chat": "c"})).await;
    let big = "x".repeat(17 * 1024);
    a.err(json!({"op": "send", "chat": "c", "body": big}), "too_large").await;
    let fits = "x".repeat(16 * 1024 - 2);
    a.ok(json!({"op": "send", "chat": "c", "body": fits})).await;
    let huge = "y".repeat(70 * 1024);
    a.send(json!({"op": "send", "chat": "c", "body": huge})).await;
    assert_eq!(a.closed_with().await, 1009);
}

#[tokio::test]
async fn requests_over_the_rate_are_throttled_then_cut_with_4029() {
    let s = TestServer::start_with(|c| {
        c.gateway.rate = 1;
        c.gateway.burst = 5;
    })
    .await;
    let mut a = s.client("w", "alice").await;
    for _ in 0..5 {
        a.ok(json!({"op": "ping"})).await;
    }
    let err = a.err(json!({"op": "ping"}), "throttled").await;
    assert!(err["retry_after_ms"].as_u64().unwrap() > 0);
    for _ in 0..250 {
        a.send(json!({"op": "ping"})).await;
    }
    assert_eq!(a.closed_with().await, 4029);
}

/// A client that pipelines its sends and has one refused for now (here by
/// the request rate) keeps its order: every send to that chat written after
/// the refused one is refused too, none is stored ahead of it, and once the
/// client sends them again, refused one first, the chat holds them all in
/// the order they were written. Another chat is not held meanwhile.
#[tokio::test]
async fn a_send_refused_for_now_holds_back_the_sends_behind_it() {
    const N: usize = 60;
    let s = TestServer::start_with(|c| {
        // A token every 10 ms, sends written every 2 ms: the bucket runs dry
        // whatever the store's speed, and refills while later sends arrive,
        // which it would let through if nothing held them back.
        c.gateway.rate = 100;
        c.gateway.burst = 4;
    })
    .await;
    let mut a = s.client("w", "alice").await;
    a.ok(json!({"op": "join", "chat": "c"})).await;
    a.ok(json!({"op": "join", "chat": "d"})).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut ids = Vec::new();
    for i in 0..N {
        ids.push(a.send(json!({"op": "send", "chat": "c", "body": i, "client_id": format!("m{i}")})).await);
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let mut first_refused = None;
    for (i, id) in ids.iter().enumerate() {
        let r = a.reply(*id).await;
        match (&first_refused, r.get("err")) {
            (None, None) => {}
            (None, Some(err)) => {
                assert_eq!(err["code"], "throttled", "{r}");
                first_refused = Some(i);
            }
            (Some(first), err) => {
                let err = err.unwrap_or_else(|| panic!("m{i} was served after m{first} was refused: {r}"));
                assert_eq!(err["code"], "throttled", "{r}");
            }
        }
    }
    let first = first_refused.expect("the bucket refused one of 60 pipelined sends");
    // The other chat is not fenced.
    tokio::time::sleep(Duration::from_millis(20)).await;
    a.ok(json!({"op": "send", "chat": "d", "body": "elsewhere", "client_id": "d1"})).await;
    // The client sends the refused ones again, in order, at the rate.
    for i in first..N {
        loop {
            let r = a.request(json!({"op": "send", "chat": "c", "body": i, "client_id": format!("m{i}")})).await;
            match r.get("err") {
                None => break,
                Some(err) => {
                    assert_eq!(err["code"], "throttled", "{r}");
                    let wait = err["retry_after_ms"].as_u64().expect("retry_after_ms");
                    tokio::time::sleep(Duration::from_millis(wait)).await;
                }
            }
        }
    }
    let (_, page) = s.http("GET", "/v1/workspaces/w/chats/c/events?after=0&limit=200", None).await;
    let bodies: Vec<i64> = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "message")
        .map(|e| e["body"].as_i64().unwrap())
        .collect();
    assert_eq!(bodies, (0..N as i64).collect::<Vec<_>>());
    let (_, text) = http_raw(s.addr, "GET", "/metrics", None, None).await;
    assert!(metric(&text, "herald_sends_fenced_total") >= 1.0, "{text}");
}

/// The per-chat join cap: a flood of joins into one chat is capped per
/// second on the node; the rest hear `throttled` with a time to retry, and
/// get in when they do. Another chat is not slowed meanwhile.
#[tokio::test]
async fn a_join_flood_into_one_chat_is_throttled_and_the_refused_get_in_on_retry() {
    const CAP: u32 = 40;
    const USERS: usize = 160;
    let s = TestServer::start_with(|c| c.chat.chat_join_rate = CAP).await;
    let mut clients = Vec::new();
    for i in 0..USERS {
        clients.push(s.client("w", &format!("u{i}")).await);
    }
    // Every user asks at once, well inside two one-second windows.
    let started = std::time::Instant::now();
    let mut ids = Vec::new();
    for c in &mut clients {
        ids.push(c.send(json!({"op": "join", "chat": "hot"})).await);
    }
    let (mut refused, mut refusals) = (Vec::new(), 0u32);
    for (i, (c, id)) in clients.iter_mut().zip(ids).enumerate() {
        let r = c.reply(id).await;
        if let Some(err) = r.get("err") {
            assert_eq!(err["code"], "throttled", "{r}");
            assert_eq!(err["message"], "joins to this chat are throttled");
            let wait = err["retry_after_ms"].as_u64().unwrap();
            assert!((1..=2000).contains(&wait), "retry_after_ms {wait}");
            refused.push((i, wait));
            refusals += 1;
        } else {
            assert!(r["ok"]["members"].as_u64().unwrap() <= 2 * CAP as u64, "{r}");
        }
    }
    let admitted = USERS - refused.len();
    assert!(started.elapsed() < Duration::from_secs(1), "the flood took too long to say anything");
    assert!((CAP as usize..=2 * CAP as usize).contains(&admitted), "{admitted} of {USERS} admitted at {CAP}/s");
    let (_, chat) = s.http("GET", "/v1/workspaces/w/chats/hot", None).await;
    assert_eq!(chat["members"], admitted as u64, "a refused join stored nothing");
    // Another chat joins at once meanwhile.
    let mut other = s.client("w", "quiet").await;
    other.ok(json!({"op": "join", "chat": "quiet"})).await;
    // The refused come back when told (retries spread over the next window,
    // not all at its first millisecond), and get in.
    let waits: Vec<u64> = refused.iter().map(|r| r.1).collect();
    let spread = waits.iter().max().unwrap() - waits.iter().min().unwrap();
    assert!(spread >= 500, "retries spread over the next window: {spread} ms");
    let told = tokio::time::Instant::now();
    let mut due: Vec<(tokio::time::Instant, usize)> =
        refused.iter().map(|&(i, wait)| (told + Duration::from_millis(wait), i)).collect();
    let deadline = told + Duration::from_secs(15);
    while !due.is_empty() {
        due.sort();
        let (at, i) = due.remove(0);
        assert!(at < deadline, "{} never got in", due.len() + 1);
        tokio::time::sleep_until(at).await;
        let r = clients[i].request(json!({"op": "join", "chat": "hot"})).await;
        match r.get("err") {
            Some(err) => {
                assert_eq!(err["code"], "throttled", "{r}");
                refusals += 1;
                due.push((
                    tokio::time::Instant::now() + Duration::from_millis(err["retry_after_ms"].as_u64().unwrap()),
                    i,
                ));
            }
            None => assert!(r["ok"]["seq"].as_u64().unwrap() > 0),
        }
    }
    let (_, chat) = s.http("GET", "/v1/workspaces/w/chats/hot", None).await;
    assert_eq!(chat["members"], USERS as u64, "everyone got in, once");
    let (_, text) = http_raw(s.addr, "GET", "/metrics", None, None).await;
    // The recorder is the test process's: other tests may add, never take away.
    let counted = metric(&text, "herald_joins_throttled_total");
    assert!(counted >= f64::from(refusals), "{refusals} refusals, {counted} counted in /metrics");
}

/// A hot chat (events times watchers past the threshold within a second)
/// stops pushing each event and pushes a `notify` with the latest seq every
/// 250 ms; pushes plus a fetch still give every watcher every event, once,
/// in order. A quiet second later it pushes events again.
#[tokio::test]
async fn a_hot_chat_pushes_coalesced_notifies_and_fetch_fills_in_every_event() {
    const SENDS: u64 = 120;
    // Two watchers: hot at the 20th event of a second.
    let s = TestServer::start_with(|c| c.hub.hot_deliveries = 40).await;
    let mut sender = s.client("w", "sender").await;
    sender.ok(json!({"op": "join", "chat": "hot"})).await;
    let mut watchers = Vec::new();
    for u in ["a", "b"] {
        let mut c = s.client("w", u).await;
        c.ok(json!({"op": "join", "chat": "hot"})).await;
        let start = c.ok(json!({"op": "watch", "chat": "hot"})).await["seq"].as_u64().unwrap();
        watchers.push((c, start));
    }
    let mut last = 0;
    for i in 0..SENDS {
        last = sender.ok(json!({"op": "send", "chat": "hot", "body": {"n": i}})).await["seq"].as_u64().unwrap();
    }
    let mut notifies = 0u64;
    for (c, start) in &mut watchers {
        let (mut events, mut notified, mut have) = (0, 0u64, *start);
        let mut got: Vec<u64> = Vec::new();
        while have < last {
            let p = c.push().await;
            match p["ev"].as_str().unwrap() {
                "event" => {
                    let seq = p["seq"].as_u64().unwrap();
                    assert!(seq > have, "event pushes only go up: {seq} after {have}");
                    if seq > have + 1 {
                        // A gap: fetch it, as the protocol tells clients to.
                        got.extend(fetch_range(c, have, seq - 1).await);
                    }
                    got.push(seq);
                    have = seq;
                    events += 1;
                }
                "notify" => {
                    let seq = p["seq"].as_u64().unwrap();
                    notified += 1;
                    if seq > have {
                        got.extend(fetch_range(c, have, seq).await);
                        have = seq;
                    }
                }
                other => panic!("unexpected push {other}: {p}"),
            }
        }
        let want: Vec<u64> = (*start + 1..=last).collect();
        assert_eq!(got, want, "every event once, in order, by push or fetch");
        assert!(notified >= 1, "the hot chat sent a notify");
        notifies += notified;
        assert!(events < SENDS, "not every event was pushed: {events} of {SENDS}");
    }
    // Quiet for two seconds: cooled, and a new event is pushed as an event.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let seq = sender.ok(json!({"op": "send", "chat": "hot", "body": "calm"})).await["seq"].as_u64().unwrap();
    for (c, _) in &mut watchers {
        let p = c.push().await;
        assert_eq!((p["ev"].as_str().unwrap(), p["seq"].as_u64().unwrap()), ("event", seq), "{p}");
    }
    let (_, text) = http_raw(s.addr, "GET", "/metrics", None, None).await;
    let counted = metric(&text, "herald_hub_notifies_total");
    assert!(counted >= notifies as f64, "{notifies} notifies read, {counted} counted in /metrics");
}

/// Fetches the seqs in `(after, upto]`, page by page.
async fn fetch_range(c: &mut Client, mut after: u64, upto: u64) -> Vec<u64> {
    let mut seqs = Vec::new();
    while after < upto {
        let f = c.ok(json!({"op": "fetch", "chat": "hot", "after": after, "limit": 500})).await;
        for e in f["events"].as_array().unwrap() {
            let seq = e["seq"].as_u64().unwrap();
            if seq <= upto {
                seqs.push(seq);
            }
            after = after.max(seq);
        }
        if !f["more"].as_bool().unwrap() {
            break;
        }
    }
    seqs
}

use futures_util::SinkExt;
