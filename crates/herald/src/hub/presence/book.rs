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
pub(in crate::hub) const ASK_AGAIN: Duration = Duration::from_secs(1);
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
