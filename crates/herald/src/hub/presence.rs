//! Presence bookkeeping of one chat on one node: who is present here, what
//! the other nodes say is present there, and the union of both. Pure data:
//! no locks, no I/O, no pushes. The hub ([`super::live`]) holds one of these
//! per watched chat under the chat's lock, sends what it returns to the other
//! nodes and turns its changes into pushes.
//!
//! Every operation costs O(log n) in the chat's present users, except those
//! that replace or drop a whole node's set (a state answer, a dead node),
//! which cost that set's size: a chat of 5,000 present users joining and
//! leaving does no work per change proportional to all of them.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::model::Signal;

/// How long a node's set stays after the cell stopped hearing of that node,
/// and how long an unanswered ask waits before it is asked again.
pub const REMOTE_TTL: Duration = Duration::from_secs(3);
const ASK_AGAIN: Duration = Duration::from_secs(1);
/// How often a node with present users in a chat repeats its latest delta
/// number there (a beat), so that any disagreement is found within it.
pub const FULL_CHECK_EVERY: Duration = Duration::from_secs(10);
/// A node this node holds present users of, but has not heard of in the
/// chat for this long (it would have beaten if it still had them), is asked
/// by name for its set.
pub const QUIET_ASK: Duration = Duration::from_secs(12);
/// A departure another node tells of is held this long before it counts:
/// a user who moves from that node to a third one (a reconnect, a drain)
/// is told of by two nodes, and nothing orders their two signals here. The
/// arrival heard within the grace cancels the departure, so watchers see no
/// absent-then-present flap. This node's own departures count at once.
pub const LEAVE_GRACE: Duration = Duration::from_secs(1);
/// Users per `State` part: keeps a part far below NATS's 1 MB payload limit
/// even with 128-byte ids.
pub const STATE_PART_USERS: usize = 2_000;

/// A user's presence changed in the union: `(user, present)`.
pub type Change = (Arc<str>, bool);

/// One chat's presence on this node.
#[derive(Default)]
pub struct Presence {
    /// This node's watching connections per present user.
    local: HashMap<Arc<str>, u32>,
    /// Deltas this node sent for the chat since this entry began.
    sent: u64,
    /// What each other node (incarnation) said.
    remote: HashMap<Arc<str>, Remote>,
    /// Each present user, with how many sources (this node, other nodes) hold
    /// it; 0 while a departure is held ([`LEAVE_GRACE`]): still present.
    union: BTreeMap<Arc<str>, u32>,
    /// Held departures, in the order they end: (when, user). An entry whose
    /// user is back (or held again, later) no longer matches `held`.
    leaving: VecDeque<(Instant, Arc<str>)>,
    /// Each user whose departure is held, and when it ends.
    held: HashMap<Arc<str>, Instant>,
}

struct Remote {
    /// The sender's entry, whose deltas `n` counts.
    epoch: u64,
    n: u64,
    users: HashSet<Arc<str>>,
    heard: Instant,
    /// Set while this node waits for the sender's whole set: when it first
    /// asked, and when it last did.
    asked: Option<(Instant, Instant)>,
    /// Parts of a state answer being put together: (epoch, n, next part, users).
    pending: Option<(u64, u64, u32, Vec<Arc<str>>)>,
    /// When it was asked by name because every node of the chat fell silent
    /// at once; cleared by anything it says. Unlike `asked`, its deltas
    /// still apply meanwhile.
    probed: Option<Instant>,
}

/// What a received signal asks of the hub.
#[derive(Debug, Default, PartialEq)]
pub struct Outcome {
    /// Users whose presence in the union changed.
    pub changes: Vec<Change>,
    /// Ask this incarnation for its whole set.
    pub ask: Option<String>,
}

impl Presence {
    /// Present users, all nodes together.
    pub fn count(&self) -> usize {
        self.union.len()
    }

    /// The first `limit` present users, sorted.
    pub fn users(&self, limit: usize) -> Vec<String> {
        self.union.keys().take(limit).map(|u| u.to_string()).collect()
    }

    /// Whether any user is present on this node.
    pub fn has_local(&self) -> bool {
        !self.local.is_empty()
    }

    /// The number of the latest delta this node sent.
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// Another connection of `user` here watches the chat. Returns the delta
    /// for the other nodes (its number), when the user was not present here
    /// before, and whether that made them present in the union.
    pub fn add_local(&mut self, user: &Arc<str>) -> Option<(u64, Option<Change>)> {
        let n = self.local.entry(user.clone()).or_insert(0);
        *n += 1;
        if *n > 1 {
            return None;
        }
        self.sent += 1;
        Some((self.sent, self.union_add(user)))
    }

    /// A connection of `user` here stopped watching. Like [`Presence::add_local`].
    pub fn remove_local(&mut self, user: &Arc<str>) -> Option<(u64, Option<Change>)> {
        let n = self.local.get_mut(user)?;
        *n -= 1;
        if *n > 0 {
            return None;
        }
        self.local.remove(user);
        self.sent += 1;
        Some((self.sent, self.union_remove(user)))
    }

    /// This node's present users, as `State` parts for an answer.
    pub fn state(&self, from: &str, epoch: u64) -> Vec<Signal> {
        let mut users: Vec<String> = self.local.keys().map(|u| u.to_string()).collect();
        users.sort_unstable();
        let parts = users.len().div_ceil(STATE_PART_USERS).max(1);
        let mut chunks: Vec<Vec<String>> = users.chunks(STATE_PART_USERS).map(<[String]>::to_vec).collect();
        chunks.resize(parts, Vec::new());
        chunks
            .into_iter()
            .enumerate()
            .map(|(i, users)| Signal::State {
                from: from.into(),
                epoch,
                n: self.sent,
                part: i as u32,
                parts: parts as u32,
                users,
            })
            .collect()
    }

    /// Takes in a signal of another node. `Typing` and `Ask` are not presence
    /// bookkeeping and change nothing here.
    pub fn receive(&mut self, signal: &Signal, now: Instant) -> Outcome {
        match signal {
            Signal::Delta { from, epoch, n, user, present } => self.delta(from, *epoch, *n, user, *present, now),
            Signal::Beat { from, epoch, n } => {
                let r = self.remote_of(from, now);
                let behind = r.epoch != *epoch || r.n != *n;
                Outcome { changes: Vec::new(), ask: self.ask_if(from, behind, now) }
            }
            Signal::State { from, epoch, n, part, parts, users } => {
                self.state_part(from, *epoch, *n, *part, *parts, users, now)
            }
            Signal::Typing { .. } | Signal::Ask { .. } | Signal::Append { .. } => Outcome::default(),
        }
    }

    fn delta(&mut self, from: &str, epoch: u64, n: u64, user: &str, present: bool, now: Instant) -> Outcome {
        let r = self.remote_of(from, now);
        let mut changes = Vec::new();
        if n == 1 && (r.epoch != epoch || r.n != 0 || r.asked.is_some()) {
            // The sender's entry starts from empty: whatever it said before is over.
            changes = self.replace(from, epoch, 0, Vec::new());
        }
        let r = self.remote.get_mut(from).expect("made above");
        if r.epoch != epoch || r.asked.is_some() || n != r.n + 1 {
            let fresh = r.epoch == epoch && r.asked.is_none() && n <= r.n;
            // An old or repeated delta changes nothing; a missing one needs the whole set.
            let ask = self.ask_if(from, !fresh, now);
            return Outcome { changes, ask };
        }
        r.n = n;
        let user: Arc<str> = user.into();
        let changed = if present {
            if r.users.insert(user.clone()) { self.union_add(&user) } else { None }
        } else if r.users.remove(&user) {
            self.union_hold(&user, now)
        } else {
            None
        };
        changes.extend(changed);
        Outcome { changes, ask: None }
    }

    #[allow(clippy::too_many_arguments)]
    fn state_part(
        &mut self,
        from: &str,
        epoch: u64,
        n: u64,
        part: u32,
        parts: u32,
        users: &[String],
        now: Instant,
    ) -> Outcome {
        let r = self.remote_of(from, now);
        let mut pending = match r.pending.take() {
            Some(p) if part > 0 && p.0 == epoch && p.1 == n && p.2 == part => p,
            _ if part == 0 => (epoch, n, 0, Vec::new()),
            // A part out of order (one was lost): wait for the next full answer.
            _ => return Outcome::default(),
        };
        pending.3.extend(users.iter().map(|u| Arc::from(u.as_str())));
        pending.2 += 1;
        if pending.2 < parts {
            self.remote.get_mut(from).expect("made above").pending = Some(pending);
            return Outcome::default();
        }
        Outcome { changes: self.replace(from, epoch, n, pending.3), ask: None }
    }

    /// Sets `from`'s whole set; returns the union's changes.
    fn replace(&mut self, from: &str, epoch: u64, n: u64, users: Vec<Arc<str>>) -> Vec<Change> {
        let r = self.remote.get_mut(from).expect("known");
        let new: HashSet<Arc<str>> = users.into_iter().collect();
        let old = std::mem::replace(&mut r.users, new.clone());
        (r.epoch, r.n, r.asked, r.pending) = (epoch, n, None, None);
        let mut changes = Vec::new();
        for user in old.difference(&new) {
            changes.extend(self.union_remove(user));
        }
        for user in new.difference(&old) {
            changes.extend(self.union_add(user));
        }
        changes
    }

    /// Drops the sets of nodes that said nothing of this chat for
    /// [`REMOTE_TTL`] and that either the cell no longer hears of (`live`) or
    /// left an ask unanswered that long (a node with watchers answers in
    /// milliseconds; one without has nobody present). Returns the union's
    /// changes, and the nodes to ask again (an ask may have been lost).
    ///
    /// Two or more nodes, every one this chat knows of, going silent in the
    /// same sweep looks more like this node being cut off (or paused) than
    /// like all of them dying at once: they are asked by name first, and
    /// dropped only if they do not answer within [`REMOTE_TTL`].
    pub fn expire(&mut self, live: impl Fn(&str) -> bool, now: Instant) -> (Vec<Change>, Vec<String>) {
        let gone = |r: &Remote, from: &str| {
            now.duration_since(r.heard) >= REMOTE_TTL && r.asked.is_none() && r.probed.is_none() && !live(from)
        };
        if self.remote.len() >= 2 && self.remote.iter().all(|(from, r)| gone(r, from)) {
            // Asked, and dropped below if still silent REMOTE_TTL later.
            let mut ask = Vec::with_capacity(self.remote.len());
            for (from, r) in &mut self.remote {
                r.probed = Some(now);
                ask.push(from.to_string());
            }
            metrics::counter!("herald_presence_asks_total").increment(ask.len() as u64);
            return (Vec::new(), ask);
        }
        let mut dead: Vec<Arc<str>> = Vec::new();
        let mut again = Vec::new();
        for (from, r) in &mut self.remote {
            let quiet = now.duration_since(r.heard);
            let unanswered = r.asked.is_some_and(|(first, _)| now.duration_since(first) >= REMOTE_TTL)
                || r.probed.is_some_and(|at| now.duration_since(at) >= REMOTE_TTL);
            if quiet >= REMOTE_TTL && (unanswered || !live(from)) {
                dead.push(from.clone());
            } else if let Some((first, last)) = r.asked
                && now.duration_since(last) >= ASK_AGAIN
            {
                r.asked = Some((first, now));
                again.push(from.to_string());
            } else if r.asked.is_none() && !r.users.is_empty() && quiet >= QUIET_ASK {
                // Alive, yet no beat for a full check's time: its set here may be stale.
                r.asked = Some((now, now));
                metrics::counter!("herald_presence_asks_total").increment(1);
                again.push(from.to_string());
            }
        }
        let mut changes = Vec::new();
        for from in dead {
            let r = self.remote.remove(&from).expect("listed");
            for user in &r.users {
                changes.extend(self.union_remove(user));
            }
        }
        (changes, again)
    }

    /// This node was paused (or starved) long enough that what it heard is
    /// stale, and its expiry would drop every other node at once. Instead,
    /// every node it knows of here counts as heard now and is asked by name
    /// for its whole set. Their deltas still apply meanwhile (an ask marked
    /// as pending would hold them back until the answer, and two nodes'
    /// answers crossing their deltas would flap a user who only moved from
    /// one node to another); a node that died meanwhile stays silent and is
    /// dropped by [`Presence::expire`] once the cell no longer hears of it.
    /// Answers the nodes to ask.
    pub fn distrust(&mut self, now: Instant) -> Vec<String> {
        let mut ask = Vec::with_capacity(self.remote.len());
        for (from, r) in &mut self.remote {
            r.heard = now;
            ask.push(from.to_string());
        }
        metrics::counter!("herald_presence_asks_total").increment(ask.len() as u64);
        ask
    }

    fn remote_of(&mut self, from: &str, now: Instant) -> &mut Remote {
        let r = self.remote.entry(from.into()).or_insert_with(|| Remote {
            epoch: 0,
            n: 0,
            users: HashSet::new(),
            heard: now,
            asked: None,
            pending: None,
            probed: None,
        });
        (r.heard, r.probed) = (now, None);
        r
    }

    /// When `behind`, marks `from` as waiting for its set and says to ask,
    /// unless an ask is already under way.
    fn ask_if(&mut self, from: &str, behind: bool, now: Instant) -> Option<String> {
        let r = self.remote.get_mut(from)?;
        if !behind {
            return None;
        }
        match r.asked {
            Some((_, last)) if now.duration_since(last) < ASK_AGAIN => return None,
            Some((first, _)) => r.asked = Some((first, now)),
            None => r.asked = Some((now, now)),
        }
        metrics::counter!("herald_presence_asks_total").increment(1);
        Some(from.to_string())
    }

    /// Departures held for [`LEAVE_GRACE`] that are now due, and the users
    /// not back meanwhile: they stop being present now.
    pub fn settle(&mut self, now: Instant) -> Vec<Change> {
        let mut changes = Vec::new();
        while let Some((at, _)) = self.leaving.front()
            && *at <= now
        {
            let (at, user) = self.leaving.pop_front().expect("looked at");
            // Not back since, and not held again later (a later entry settles that).
            if self.held.get(&user) == Some(&at) {
                self.held.remove(&user);
                self.union.remove(&user);
                changes.push((user, false));
            }
        }
        changes
    }

    /// When the next held departure is due.
    pub fn next_settle(&self) -> Option<Instant> {
        self.leaving.front().map(|(at, _)| *at)
    }

    fn union_add(&mut self, user: &Arc<str>) -> Option<Change> {
        let n = self.union.entry(user.clone()).or_insert(0);
        *n += 1;
        // Back while held: the departure is cancelled, present all along.
        (*n == 1 && self.held.remove(user).is_none()).then(|| (user.clone(), true))
    }

    /// Like [`Presence::union_remove`], but the user's last source going
    /// holds them present for [`LEAVE_GRACE`] (see [`Presence::settle`]).
    fn union_hold(&mut self, user: &Arc<str>, now: Instant) -> Option<Change> {
        let n = self.union.get_mut(user)?;
        *n -= 1;
        if *n == 0 {
            let at = now + LEAVE_GRACE;
            self.held.insert(user.clone(), at);
            self.leaving.push_back((at, user.clone()));
        }
        None
    }

    fn union_remove(&mut self, user: &Arc<str>) -> Option<Change> {
        let n = self.union.get_mut(user)?;
        *n -= 1;
        if *n > 0 {
            return None;
        }
        self.union.remove(user);
        Some((user.clone(), false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
}
