//! The live inbox feed: after `inbox` with `live: true`, a connection gets
//! `{"ev": "inbox", ...}` whenever one of its user's chats changes: a new
//! event (a message, this user's `read` on any device, an edit, a delete,
//! a join, a leave), at most one push per chat every [`INBOX_PUSH_EVERY`].
//!
//! Every change of a chat is an event in its log, so the feed needs only
//! each followed chat's events, and those already reach this node the way a
//! watch's do: the node subscribes each followed chat at the broker (one
//! interest per chat per node, shared with its watchers: [`super::interest`]),
//! and the hub's [`crate::broker::Sink`] hands each delivery to the feed as
//! well as to the chat's entry: the feed is a second consumer of deliveries,
//! with its own state, and knows nothing of watches. The event only says that
//! a chat changed; what is pushed (seq, ts, this user's unread count) is
//! read from the store ([`crate::store::Membership::inbox_entry`], a few index lookups), once
//! per chat per connection per [`INBOX_PUSH_EVERY`] at most, however busy
//! the chat: a burst of 100 messages costs each follower one read. A push
//! goes out only when the chat's latest seq moved past what the connection
//! was last told (its `inbox` reply, or its previous push), so a read that
//! finds nothing new stays silent.
//!
//! A chat the user joins later is not subscribed yet: its `join` event
//! reaches this node through a cell-wide notice ([`crate::broker::Sink::joined`])
//! and the feed starts following it. A `leave` of the user is an event of a
//! followed chat; the read after it finds no membership, and the push
//! carries `"left": true` and ends the following.
//!
//! Lost broker hints (NATS): the hub's tail check (`repair.rs`) hands the
//! feed the heads of the chats that moved, one check after it read them, and
//! the feed treats those that moved unannounced as changed, so a lost hint
//! delays a push, never loses it. Where the store cannot say which chats
//! moved, the feed asks the log for the latest seq of every followed chat,
//! every [`INBOX_TAIL_EVERY`].
//!
//! Lock order: a listener's state, then a shard of the feed's chat map, then the node's
//! interest map (and the broker). The feed's maps are never held while a
//! listener's state is taken.

mod counts;

pub use counts::Counts;
use counts::push_frame;

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use herald_protocol::EventType;
use herald_protocol::frame::inbox_push;
use tokio::time::Instant;

use super::interest::Interest;
use crate::model::{ChatKey, Published};
use crate::outbox::{ConnId, Frame, Outbox};
use crate::store::Store;

/// The least time between two pushes of one chat to one connection.
pub const INBOX_PUSH_EVERY: Duration = Duration::from_millis(250);
/// Chats one live inbox follows at most: its user's most recently active
/// ones when it starts, and those the user joins afterwards.
pub const INBOX_FOLLOW_MAX: u32 = 1000;
/// How often every followed chat is checked against the log, where the store cannot say which moved.
pub const INBOX_TAIL_EVERY: Duration = Duration::from_secs(5);
/// Chats whose latest seq one store read asks for.
const TAIL_BATCH: usize = 500;
/// Store reads of the feed at once, across the node.
const READS_AT_ONCE: usize = 16;
/// Shards of the followed-chat map.
const SHARDS: usize = 64;
/// The wait before a chat whose read failed is tried again.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// The node's live inboxes.
pub struct Feed {
    /// Itself, for the flushes it starts.
    me: Weak<Feed>,
    store: Arc<dyn Store>,
    interest: Arc<Interest>,
    /// Followed chats: their followers, and the latest seq the feed knows
    /// of; sharded (every delivered event looks here).
    chats: Box<[Mutex<HashMap<ChatKey, Followers>>]>,
    /// Process-local map: a per-process hash seed is fine here (never for routing).
    hasher: std::hash::RandomState,
    /// Live inboxes by user, to follow the chats a user joins.
    users: Mutex<HashMap<UserKey, HashMap<ConnId, Arc<Listener>>>>,
    /// Live inboxes by connection.
    conns: Mutex<HashMap<ConnId, Arc<Listener>>>,
    /// How many live inboxes there are: the delivery path skips the feed when none.
    listeners: AtomicUsize,
    reads: tokio::sync::Semaphore,
}

impl Feed {
    /// No live inbox yet; reads from `store`, follows chats through
    /// `interest`. The hub's tail check (`repair.rs`) tells it of chats that
    /// moved unannounced, where the broker can lose hints.
    pub(super) fn new(store: Arc<dyn Store>, interest: Arc<Interest>) -> Arc<Feed> {
        Arc::new_cyclic(|me| Feed {
            me: me.clone(),
            store,
            interest,
            chats: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: std::hash::RandomState::new(),
            users: Mutex::default(),
            conns: Mutex::default(),
            listeners: AtomicUsize::new(0),
            reads: tokio::sync::Semaphore::new(READS_AT_ONCE),
        })
    }
}

/// (workspace, user).
type UserKey = (Arc<str>, Arc<str>);

#[derive(Default)]
struct Followers {
    conns: HashMap<ConnId, Arc<Listener>>,
    /// The latest seq of the chat the feed has heard of.
    head: u64,
}

/// One connection's live inbox.
pub struct Listener {
    conn: ConnId,
    outbox: Arc<Outbox>,
    ws: Arc<str>,
    user: Arc<str>,
    state: Mutex<ListenerState>,
}

#[derive(Default)]
struct ListenerState {
    /// Its `inbox` reply is queued: pushes may follow.
    started: bool,
    /// The connection ended: nothing more is followed or pushed.
    ended: bool,
    /// A flush task runs for it.
    flushing: bool,
    chats: HashMap<Arc<str>, Follow>,
}

#[derive(Default)]
struct Follow {
    /// The chat's latest seq this connection was told of; only later ones are pushed.
    told: u64,
    /// The entry as known exactly without the store: (latest seq, its counts),
    /// kept up by the events that follow it one by one (see [`Follow::apply`]).
    exact: Option<(u64, Counts)>,
    /// The chat's latest event the feed saw (seq, ts): what a `left` push carries.
    latest: (u64, i64),
    /// When its last push (or failed read) was.
    pushed_at: Option<Instant>,
    /// A change waits to be pushed.
    due: bool,
}

impl Follow {
    /// Takes `event` into the exact entry when it is the very next event and
    /// its effect on `user`'s counts is known from the event alone: a message
    /// of someone else outside threads, mentioning nobody, counts one more
    /// unread, and most other events change nothing. Anything else (a gap, an
    /// event out of order, `user`'s own `read`, `join` or `leave`, a `delete`,
    /// whose target's sender the event does not say, v1.2's thread replies and
    /// mentions, whose effect depends on who follows and who is named) forgets
    /// it: the next push reads the store.
    fn apply(&mut self, event: &Published, user: &str) {
        let Some((seq, counts)) = self.exact else { return };
        let own = event.user.as_deref() == Some(user);
        let frame = event.frame.as_str();
        let threaded = frame.contains("\"thread\":") || frame.contains("\"mentions\":");
        let more = match event.kind {
            EventType::Message if !threaded => Some(u64::from(!own)),
            EventType::Edit if !threaded => Some(0),
            EventType::Reaction | EventType::System | EventType::Pin | EventType::Profile => Some(0),
            EventType::Read | EventType::Join | EventType::Leave => (!own).then_some(0),
            _ => None,
        };
        self.exact = match more {
            Some(more) if event.seq == seq + 1 => Some((event.seq, Counts { unread: counts.unread + more, ..counts })),
            _ if event.seq <= seq => self.exact,
            _ => None,
        };
    }
}

impl Listener {
    /// Marks `chat` changed by `event` (or by something unknown); returns
    /// whether a flush must be started (false, too, when `chat` is not followed).
    fn mark(&self, chat: &str, event: Option<&Published>) -> bool {
        let mut st = self.state.lock().expect("inbox listener lock");
        let Some(f) = st.chats.get_mut(chat) else { return false };
        f.due = true;
        match event {
            Some(event) => {
                if event.seq > f.latest.0 {
                    f.latest = (event.seq, event.ts);
                }
                f.apply(event, &self.user);
            }
            None => f.exact = None,
        }
        st.started && !st.ended && !std::mem::replace(&mut st.flushing, true)
    }
}

impl Feed {
    /// Registers `outbox`'s connection as a live inbox of `user` of `ws`
    /// (or finds the one it has). Returns it, and whether it still has to be
    /// set up (new, or an earlier ask never finished): it follows nothing
    /// yet; [`Feed::follow`], then [`Feed::start`].
    pub fn listen(&self, ws: &Arc<str>, user: &Arc<str>, outbox: &Arc<Outbox>) -> (Arc<Listener>, bool) {
        let mut conns = self.conns.lock().expect("inbox conns lock");
        if let Some(l) = conns.get(&outbox.id()) {
            let started = l.state.lock().expect("inbox listener lock").started;
            return (l.clone(), !started);
        }
        let l = Arc::new(Listener {
            conn: outbox.id(),
            outbox: outbox.clone(),
            ws: ws.clone(),
            user: user.clone(),
            state: Mutex::default(),
        });
        conns.insert(l.conn, l.clone());
        self.users
            .lock()
            .expect("inbox users lock")
            .entry((ws.clone(), user.clone()))
            .or_default()
            .insert(l.conn, l.clone());
        self.listeners.fetch_add(1, Ordering::Relaxed);
        metrics::gauge!("herald_inbox_listeners").increment(1.0);
        (l, true)
    }

    /// Follows `chats` (with their latest seq, which the connection counts as
    /// told) for `l`. Chats already followed keep their state.
    pub fn follow(&self, l: &Arc<Listener>, chats: &[(ChatKey, u64)]) {
        let mut st = l.state.lock().expect("inbox listener lock");
        if st.ended {
            return;
        }
        for (key, head) in chats {
            if st.chats.contains_key(&*key.chat) {
                continue;
            }
            st.chats.insert(key.chat.clone(), Follow { told: *head, latest: (*head, 0), ..Follow::default() });
            let mut feeds = self.followed(key);
            let followers = feeds.entry(key.clone()).or_insert_with(|| {
                self.interest.want(key);
                metrics::gauge!("herald_inbox_chats").increment(1.0);
                Followers { conns: HashMap::new(), head: *head }
            });
            followers.head = followers.head.max(*head);
            followers.conns.insert(l.conn, l.clone());
        }
    }

    /// Raises what `l` counts as told of each of `chats` to the seq given
    /// (their latest seq read after following them, or its `inbox` reply's
    /// entries), and what the feed knows of their latest seq with it.
    /// With counts (a reply's entry: exact then), pushes of the following
    /// events may need no store read.
    pub fn told(&self, l: &Listener, chats: &[(ChatKey, u64, Option<Counts>)]) {
        let mut st = l.state.lock().expect("inbox listener lock");
        for (key, seq, counts) in chats {
            if let Some(f) = st.chats.get_mut(&*key.chat) {
                f.told = f.told.max(*seq);
                f.latest.0 = f.latest.0.max(*seq);
                if let Some(counts) = counts
                    && f.exact.is_none_or(|(s, _)| s < *seq)
                {
                    f.exact = Some((*seq, *counts));
                }
            }
            if let Some(followers) = self.followed(key).get_mut(key) {
                followers.head = followers.head.max(*seq);
            }
        }
    }

    /// `l`'s `inbox` reply is queued: pushes may go out from now on,
    /// starting with the changes seen meanwhile.
    pub fn start(&self, l: &Arc<Listener>) {
        let flush = {
            let mut st = l.state.lock().expect("inbox listener lock");
            st.started = true;
            let any_due = st.chats.values().any(|f| f.due);
            any_due && !st.ended && !std::mem::replace(&mut st.flushing, true)
        };
        if flush {
            self.spawn_flush(l.clone());
        }
    }

    /// Ends the live inbox of connection `conn`, if it has one.
    pub fn unlisten(&self, conn: ConnId) {
        let Some(l) = self.conns.lock().expect("inbox conns lock").remove(&conn) else { return };
        {
            let mut users = self.users.lock().expect("inbox users lock");
            let key = (l.ws.clone(), l.user.clone());
            if let Some(of_user) = users.get_mut(&key) {
                of_user.remove(&conn);
                if of_user.is_empty() {
                    users.remove(&key);
                }
            }
        }
        let mut st = l.state.lock().expect("inbox listener lock");
        st.ended = true;
        for (chat, _) in st.chats.drain() {
            self.unfollow(&ChatKey { ws: l.ws.clone(), chat }, conn);
        }
        drop(st);
        self.listeners.fetch_sub(1, Ordering::Relaxed);
        metrics::gauge!("herald_inbox_listeners").decrement(1.0);
    }

    /// The shard of the followed-chat map that holds `key`.
    fn followed(&self, key: &ChatKey) -> std::sync::MutexGuard<'_, HashMap<ChatKey, Followers>> {
        self.chats[(self.hasher.hash_one(key) as usize) % SHARDS].lock().expect("inbox chats lock")
    }

    /// Removes `conn` from `key`'s followers, and the node's interest in
    /// `key` with the last one. Called with the listener's state held.
    fn unfollow(&self, key: &ChatKey, conn: ConnId) {
        let mut feeds = self.followed(key);
        let Some(followers) = feeds.get_mut(key) else { return };
        followers.conns.remove(&conn);
        if followers.conns.is_empty() {
            feeds.remove(key);
            metrics::gauge!("herald_inbox_chats").decrement(1.0);
            self.interest.unwant(key);
        }
    }

    /// Live inboxes on this node now.
    pub fn listeners(&self) -> usize {
        self.listeners.load(Ordering::Relaxed)
    }

    /// An event of a chat reached this node: its followers' chat changed;
    /// a `join` makes the joiner's live inboxes follow the chat.
    pub(super) fn event(&self, event: &Published) {
        if self.listeners.load(Ordering::Relaxed) == 0 {
            return;
        }
        let followers: Vec<Arc<Listener>> = {
            match self.followed(&event.key).get_mut(&event.key) {
                Some(f) => {
                    f.head = f.head.max(event.seq);
                    f.conns.values().cloned().collect()
                }
                None => Vec::new(),
            }
        };
        for l in followers {
            if l.mark(&event.key.chat, Some(event)) {
                self.spawn_flush(l);
            }
        }
        if event.kind == EventType::Join {
            self.joined(event);
        }
    }

    /// A `join` (from this node or, through the cell-wide notice, another):
    /// the joiner's live inboxes here follow the chat and hear of it.
    pub(super) fn joined(&self, event: &Published) {
        let Some(user) = &event.user else { return };
        let joiners: Vec<Arc<Listener>> = {
            let users = self.users.lock().expect("inbox users lock");
            match users.get(&(event.key.ws.clone(), user.clone())) {
                Some(of_user) => of_user.values().cloned().collect(),
                None => return,
            }
        };
        for l in joiners {
            // Told nothing of it yet: its first read is pushed.
            self.follow(&l, &[(event.key.clone(), 0)]);
            if l.mark(&event.key.chat, Some(event)) {
                self.spawn_flush(l);
            }
        }
    }

    /// Marks the followers of `key` changed when its latest seq in the log
    /// (`head`) is past what the feed heard of: an event whose hint was lost.
    fn seen_head(&self, key: &ChatKey, head: u64) {
        let followers: Vec<Arc<Listener>> = {
            let mut feeds = self.followed(key);
            let Some(f) = feeds.get_mut(key) else { return };
            if head <= f.head {
                return;
            }
            f.head = head;
            f.conns.values().cloned().collect()
        };
        metrics::counter!("herald_inbox_tail_repairs_total").increment(1);
        for l in followers {
            if l.mark(&key.chat, None) {
                self.spawn_flush(l);
            }
        }
    }

    /// Heads the tail check read ([`Feed::seen_head`] for the followed ones).
    pub(super) fn seen_heads(&self, heads: &[(ChatKey, u64)]) {
        for (key, head) in heads {
            self.seen_head(key, *head);
        }
    }

    /// Checks `keys` against the log ([`Feed::seen_head`]).
    pub(super) async fn check(&self, keys: &[ChatKey]) {
        for batch in keys.chunks(TAIL_BATCH) {
            match self.store.heads(batch).await {
                Ok(heads) => {
                    for (key, head) in batch.iter().zip(heads) {
                        if let Some(head) = head {
                            self.seen_head(key, head);
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(chats = batch.len(), error = %e, "inbox tail check could not read the log; trying again next time");
                    metrics::counter!("herald_hub_tail_failures_total").increment(1);
                }
            }
        }
    }

    /// Whether a live inbox here follows `key`.
    pub(super) fn follows(&self, key: &ChatKey) -> bool {
        self.followed(key).contains_key(key)
    }

    /// Every followed chat, for the tail check.
    pub(super) fn followed_chats(&self) -> Vec<ChatKey> {
        self.chats
            .iter()
            .flat_map(|s| s.lock().expect("inbox chats lock").keys().cloned().collect::<Vec<_>>())
            .collect()
    }

    fn spawn_flush(&self, l: Arc<Listener>) {
        let feed = self.me.clone();
        tokio::spawn(async move {
            if let Some(feed) = feed.upgrade() {
                feed.flush(&l).await;
            } else {
                l.state.lock().expect("inbox listener lock").flushing = false;
            }
        });
    }

    /// Pushes `l`'s changed chats, each when its [`INBOX_PUSH_EVERY`] since
    /// the previous push has passed; returns once none is due.
    async fn flush(&self, l: &Arc<Listener>) {
        loop {
            let now = Instant::now();
            let (ready, wake) = {
                let mut st = l.state.lock().expect("inbox listener lock");
                if st.ended {
                    st.flushing = false;
                    return;
                }
                let mut ready = Vec::new();
                let mut wake: Option<Instant> = None;
                for (chat, f) in st.chats.iter_mut().filter(|(_, f)| f.due) {
                    let at = f.pushed_at.map_or(now, |t| t + INBOX_PUSH_EVERY);
                    if at <= now {
                        f.due = false;
                        ready.push(chat.clone());
                    } else {
                        wake = Some(wake.map_or(at, |w| w.min(at)));
                    }
                }
                if ready.is_empty() && wake.is_none() {
                    st.flushing = false;
                    return;
                }
                (ready, wake)
            };
            if ready.is_empty() {
                tokio::time::sleep_until(wake.expect("something is due")).await;
                continue;
            }
            let ready = self.push_exact(l, ready, now);
            futures_util::stream::iter(ready)
                .for_each_concurrent(4, |chat| async move { self.push_entry(l, chat).await })
                .await;
        }
    }

    /// Pushes, without reading the store, those of `ready` whose entry is
    /// known exactly; returns the others.
    fn push_exact(&self, l: &Listener, ready: Vec<Arc<str>>, now: Instant) -> Vec<Arc<str>> {
        let mut st = l.state.lock().expect("inbox listener lock");
        let mut unknown = Vec::new();
        let mut pushed = 0u64;
        for chat in ready {
            let Some(f) = st.chats.get_mut(&chat) else { continue };
            match f.exact {
                Some((seq, counts)) if seq == f.latest.0 => {
                    if seq > f.told {
                        f.told = seq;
                        f.pushed_at = Some(now);
                        l.outbox.push(push_frame(&chat, seq, f.latest.1, counts));
                        pushed += 1;
                    }
                }
                _ => unknown.push(chat),
            }
        }
        metrics::counter!("herald_inbox_pushes_total").increment(pushed);
        unknown
    }

    /// Reads `chat`'s entry for `l`'s user and pushes it if it is news.
    async fn push_entry(&self, l: &Arc<Listener>, chat: Arc<str>) {
        let key = ChatKey { ws: l.ws.clone(), chat };
        let read = {
            let _permit = self.reads.acquire().await.expect("never closed");
            self.store.inbox_entry(&key, &l.user).await
        };
        let now = Instant::now();
        let mut st = l.state.lock().expect("inbox listener lock");
        if st.ended {
            return;
        }
        let Some(f) = st.chats.get_mut(&*key.chat) else { return };
        match read {
            Ok(Some(entry)) => {
                metrics::counter!("herald_inbox_reads_total").increment(1);
                if f.latest.0 <= entry.seq {
                    f.exact = Some((entry.seq, Counts::of(&entry)));
                }
                if entry.seq > f.told {
                    f.told = entry.seq;
                    f.latest = f.latest.max((entry.seq, entry.ts));
                    f.pushed_at = Some(now);
                    l.outbox.push(push_frame(&key.chat, entry.seq, entry.ts, Counts::of(&entry)));
                    metrics::counter!("herald_inbox_pushes_total").increment(1);
                }
            }
            Ok(None) => {
                // Not a member any more: the last push of this chat.
                let (seq, ts) = f.latest;
                let ts = if ts == 0 { crate::store::now_ms() } else { ts };
                l.outbox.push(Frame::from(inbox_push(&key.chat, seq.max(f.told), ts, 0, true)));
                metrics::counter!("herald_inbox_pushes_total").increment(1);
                st.chats.remove(&*key.chat);
                self.unfollow(&key, l.conn);
            }
            Err(e) => {
                tracing::warn!(chat = %key, error = %e, "live inbox read failed; trying again");
                metrics::counter!("herald_inbox_read_failures_total").increment(1);
                f.due = true;
                f.pushed_at = Some(now + RETRY_AFTER - INBOX_PUSH_EVERY);
            }
        }
    }
}
