//! Presence bookkeeping of one chat: a user present while any connection on
//! any node watches, repaired after lost signals, a dead or silent node
//! dropped, and a departure another node tells of held for the grace.

use std::sync::Arc;
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::book::{ASK_AGAIN, LEAVE_GRACE, Outcome, Presence, QUIET_ASK, REMOTE_TTL, STATE_PART_USERS};
use crate::model::Signal;

fn u(s: &str) -> Arc<str> {
    Arc::from(s)
}

fn delta(from: &str, epoch: u64, n: u64, user: &str, present: bool) -> Signal {
    Signal::Delta { from: from.into(), epoch, n, user: user.into(), present }
}

#[test]
fn a_user_is_present_while_any_connection_on_any_node_watches() {
    let mut p = Presence::default();
    let now = Instant::now();
    assert_eq!(p.add_local(&u("bob")), Some((1, Some((u("bob"), true)))));
    assert_eq!(p.add_local(&u("bob")), None, "a second connection is no change");
    let o = p.receive(&delta("b@1", 7, 1, "bob", true), now);
    assert_eq!(o, Outcome::default(), "already present here");
    assert_eq!(p.remove_local(&u("bob")), None);
    assert_eq!(p.remove_local(&u("bob")), Some((2, None)), "still present on the other node");
    assert_eq!(p.count(), 1);
    let o = p.receive(&delta("b@1", 7, 2, "bob", false), now);
    assert_eq!(o.changes, vec![], "held for the grace");
    assert_eq!((p.count(), p.next_settle()), (1, Some(now + LEAVE_GRACE)));
    assert_eq!(p.settle(now + LEAVE_GRACE - Duration::from_millis(1)), vec![]);
    assert_eq!(p.settle(now + LEAVE_GRACE), vec![(u("bob"), false)]);
    assert_eq!((p.count(), p.next_settle()), (0, None));
}

#[test]
fn a_user_moving_between_two_other_nodes_is_not_flapped_whichever_signal_comes_first() {
    let now = Instant::now();
    for departure_first in [true, false] {
        let mut p = Presence::default();
        p.receive(&delta("b@1", 1, 1, "bob", true), now);
        let gone = delta("b@1", 1, 2, "bob", false);
        let came = delta("c@1", 1, 1, "bob", true);
        let (first, second) = if departure_first { (&gone, &came) } else { (&came, &gone) };
        assert_eq!(p.receive(first, now).changes, vec![]);
        assert_eq!(p.receive(second, now).changes, vec![]);
        assert_eq!(p.settle(now + LEAVE_GRACE), vec![], "present all along");
        assert_eq!(p.users(10), vec!["bob"]);
    }
    // Gone, back, gone again: the first hold no longer counts, the second does, once.
    let mut p = Presence::default();
    p.receive(&delta("b@1", 1, 1, "bob", true), now);
    p.receive(&delta("b@1", 1, 2, "bob", false), now);
    let later = now + Duration::from_millis(500);
    p.receive(&delta("c@1", 1, 1, "bob", true), later);
    p.receive(&delta("c@1", 1, 2, "bob", false), later);
    assert_eq!(p.settle(now + LEAVE_GRACE), vec![], "the later departure is not due yet");
    assert_eq!(p.settle(later + LEAVE_GRACE), vec![(u("bob"), false)]);
    assert_eq!(p.settle(later + LEAVE_GRACE * 2), vec![]);
    // A node's own departures count at once.
    assert_eq!(p.add_local(&u("ann")), Some((1, Some((u("ann"), true)))));
    assert_eq!(p.remove_local(&u("ann")), Some((2, Some((u("ann"), false)))));
}

#[test]
fn a_missed_delta_asks_for_the_whole_set_and_the_answer_repairs_it() {
    let mut p = Presence::default();
    let now = Instant::now();
    p.receive(&delta("b@1", 1, 1, "ann", true), now);
    // Delta 2 (carol arrives) is lost; 3 shows the gap.
    let o = p.receive(&delta("b@1", 1, 3, "dan", true), now);
    assert_eq!(o, Outcome { changes: vec![], ask: Some("b@1".into()) });
    let o = p.receive(&delta("b@1", 1, 4, "eve", true), now);
    assert_eq!(o.ask, None, "asked once while the answer is on its way");
    let state = Signal::State {
        from: "b@1".into(),
        epoch: 1,
        n: 4,
        part: 0,
        parts: 1,
        users: vec!["ann".into(), "carol".into(), "dan".into(), "eve".into()],
    };
    let o = p.receive(&state, now);
    assert_eq!(o.changes.len(), 3);
    assert_eq!(p.users(100), vec!["ann", "carol", "dan", "eve"]);
    p.receive(&delta("b@1", 1, 5, "ann", false), now);
    assert_eq!(p.settle(now + LEAVE_GRACE), vec![(u("ann"), false)]);
    // A lost last delta: the beat after it shows it.
    let o = p.receive(&Signal::Beat { from: "b@1".into(), epoch: 1, n: 6 }, now);
    assert_eq!(o.ask.as_deref(), Some("b@1"));
}

#[test]
fn a_state_in_parts_applies_once_complete_and_a_dead_node_expires() {
    let mut p = Presence::default();
    let mut local = Presence::default();
    for i in 0..(STATE_PART_USERS + 5) {
        local.add_local(&Arc::from(format!("u{i:05}")));
    }
    let parts = local.state("a@1", 9);
    assert_eq!(parts.len(), 2);
    let now = Instant::now();
    assert!(p.receive(&parts[0], now).changes.is_empty());
    assert_eq!(p.receive(&parts[1], now).changes.len(), STATE_PART_USERS + 5);
    assert_eq!(p.count(), STATE_PART_USERS + 5);
    assert!(p.expire(|_| false, now + Duration::from_secs(1)).0.is_empty(), "heard of recently");
    assert!(p.expire(|_| true, now + REMOTE_TTL).0.is_empty(), "the cell still hears of it");
    assert_eq!(p.expire(|_| false, now + REMOTE_TTL).0.len(), STATE_PART_USERS + 5);
    assert_eq!(p.count(), 0);
}

#[test]
fn an_ask_is_repeated_and_a_silent_node_that_never_answers_is_dropped() {
    let mut p = Presence::default();
    let now = Instant::now();
    p.receive(&delta("b@1", 1, 1, "ann", true), now);
    // Its removal of ann was lost; the beat shows it; the ask is lost too.
    let o = p.receive(&Signal::Beat { from: "b@1".into(), epoch: 1, n: 2 }, now);
    assert_eq!(o.ask.as_deref(), Some("b@1"));
    let (changes, again) = p.expire(|_| true, now + ASK_AGAIN);
    assert_eq!((changes, again), (vec![], vec!["b@1".to_string()]), "asked again");
    let (changes, _) = p.expire(|_| true, now + REMOTE_TTL);
    assert_eq!(changes, vec![(u("ann"), false)], "alive, but with nothing here to answer about");
}

#[test]
fn after_a_pause_every_node_is_asked_not_expired_and_only_the_silent_one_goes() {
    let mut p = Presence::default();
    let t0 = Instant::now();
    p.receive(&delta("a@1", 1, 1, "ann", true), t0);
    p.receive(&delta("b@1", 1, 1, "bob", true), t0);
    // Thirty seconds frozen: the cell's announcements are as stale as the deltas.
    let woke = t0 + Duration::from_secs(30);
    let mut asked = p.distrust(woke);
    asked.sort();
    assert_eq!(asked, vec!["a@1", "b@1"]);
    let (changes, _) = p.expire(|_| false, woke);
    assert!(changes.is_empty(), "nobody is expired on waking: {changes:?}");
    // a@1 answers (ann still there); b@1 died meanwhile and never does.
    let state = Signal::State { from: "a@1".into(), epoch: 1, n: 1, part: 0, parts: 1, users: vec!["ann".into()] };
    assert!(p.receive(&state, woke + Duration::from_millis(5)).changes.is_empty());
    let (changes, _) = p.expire(|_| false, woke + REMOTE_TTL);
    assert_eq!(changes, vec![(u("bob"), false)]);
    assert_eq!(p.users(10), vec!["ann"]);
}

#[test]
fn every_node_of_a_chat_silent_at_once_is_asked_before_it_is_dropped() {
    let mut p = Presence::default();
    let t0 = Instant::now();
    p.receive(&delta("a@1", 1, 1, "ann", true), t0);
    p.receive(&delta("b@1", 1, 1, "bob", true), t0);
    // The cell stops hearing of both at once: asked, not dropped.
    let (changes, mut again) = p.expire(|_| false, t0 + REMOTE_TTL);
    again.sort();
    assert_eq!((changes, again), (vec![], vec!["a@1".to_string(), "b@1".to_string()]));
    // Neither answers: both go.
    let (changes, _) = p.expire(|_| false, t0 + REMOTE_TTL * 2);
    assert_eq!(changes.len(), 2);
    // One node of two gone alone is dropped at once.
    let mut p = Presence::default();
    p.receive(&delta("a@1", 1, 1, "ann", true), t0);
    p.receive(&delta("b@1", 1, 1, "bob", true), t0 + REMOTE_TTL);
    let (changes, _) = p.expire(|from| from == "b@1", t0 + REMOTE_TTL);
    assert_eq!(changes, vec![(u("ann"), false)]);
}

#[test]
fn a_live_node_quiet_for_a_full_check_is_asked_and_its_answer_is_the_truth() {
    let mut p = Presence::default();
    let t0 = Instant::now();
    p.receive(&delta("a@1", 1, 1, "ann", true), t0);
    // Its removal of ann and the beat after it were both lost.
    let (changes, again) = p.expire(|_| true, t0 + QUIET_ASK - Duration::from_millis(1));
    assert!(changes.is_empty() && again.is_empty(), "not yet: it may still beat");
    let (changes, again) = p.expire(|_| true, t0 + QUIET_ASK);
    assert_eq!((changes, again), (vec![], vec!["a@1".to_string()]));
    let empty = Signal::State { from: "a@1".into(), epoch: 1, n: 2, part: 0, parts: 1, users: vec![] };
    assert_eq!(p.receive(&empty, t0 + QUIET_ASK).changes, vec![(u("ann"), false)]);
    // A node holding nobody here is not asked, however quiet.
    let (_, again) = p.expire(|_| true, t0 + QUIET_ASK * 5);
    assert!(again.is_empty());
}

#[test]
fn a_restarted_entry_starts_over_from_empty() {
    let mut p = Presence::default();
    let now = Instant::now();
    p.receive(&delta("b@1", 1, 1, "ann", true), now);
    p.receive(&delta("b@1", 1, 2, "bob", true), now);
    // The sender's entry ended (its removals lost) and began again.
    let o = p.receive(&delta("b@1", 2, 1, "cat", true), now);
    assert_eq!(o.ask, None);
    assert_eq!(p.users(100), vec!["cat"]);
}

#[derive(Debug, Clone)]
enum Step {
    /// Connection `conn` of node `node` starts or ends watching as `user`.
    Watch {
        node: usize,
        user: usize,
    },
    Unwatch {
        node: usize,
        user: usize,
    },
    /// Node `node`'s next signal to node 0 is lost.
    Lose {
        node: usize,
    },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0..3usize, 0..6usize).prop_map(|(node, user)| Step::Watch { node, user }),
        (0..3usize, 0..6usize).prop_map(|(node, user)| Step::Unwatch { node, user }),
        (1..3usize).prop_map(|node| Step::Lose { node }),
    ]
}

proptest! {
    /// Node 0's union view equals the users with a watching connection on
    /// any node, once every ask was answered, whatever was lost on the way.
    #[test]
    fn the_union_is_the_set_of_users_with_a_watching_connection(steps in proptest::collection::vec(step(), 1..80)) {
        let now = Instant::now();
        let mut nodes: Vec<Presence> = (0..3).map(|_| Presence::default()).collect();
        let mut conns = [[0u32; 6]; 3];
        let mut lose = [false; 3];
        let names = ["a@1", "b@1", "c@1"];
        let mut asks = Vec::new();
        for s in steps {
            let (node, user, add) = match s {
                Step::Lose { node } => { lose[node] = true; continue }
                Step::Watch { node, user } => (node, user, true),
                Step::Unwatch { node, user } => {
                    if conns[node][user] == 0 { continue }
                    (node, user, false)
                }
            };
            let name: Arc<str> = Arc::from(format!("user{user}"));
            let sent = if add {
                conns[node][user] += 1;
                nodes[node].add_local(&name)
            } else {
                conns[node][user] -= 1;
                nodes[node].remove_local(&name)
            };
            if let (Some((n, _)), true) = (sent, node != 0) {
                if std::mem::take(&mut lose[node]) { continue }
                let signal = delta(names[node], 1, n, &name, add);
                asks.extend(nodes[0].receive(&signal, now).ask);
            }
        }
        // The beats after the bursts, then the answers to every ask.
        for node in 1..3 {
            let beat = Signal::Beat { from: names[node].into(), epoch: 1, n: nodes[node].sent() };
            asks.extend(nodes[0].receive(&beat, now + Duration::from_secs(2)).ask);
        }
        for from in asks {
            let i = names.iter().position(|n| *n == from).unwrap();
            for part in nodes[i].state(names[i], 1) {
                nodes[0].receive(&part, now + Duration::from_secs(2));
            }
        }
        let want: Vec<String> = (0..6).filter(|&u| (0..3).any(|n| conns[n][u] > 0)).map(|u| format!("user{u}")).collect();
        // Departures held, then due.
        nodes[0].settle(now + Duration::from_secs(2) + LEAVE_GRACE);
        prop_assert_eq!(nodes[0].users(100), want.clone());
        prop_assert_eq!(nodes[0].count(), want.len());
    }
}
