//! The `inbox` scenario's store, as a plan: which chats there are, who is in
//! each, and each chat's log as the writes that make it, in order, with the
//! seq of the event each one stores. Everything is derived from the chat's
//! index, so the loader and the check agree without keeping the store in
//! memory. The plan knows what a log holds, not how herald stores it: the
//! loader hands each write to herald's store, and the check compares
//! herald's inbox with [`Plan::unread`], counted the slow way.
//!
//! With threads (the `threads` scenario), the first messages of each of
//! `me`'s chats are thread roots sent by `me`, and about half of the
//! messages after them are replies in those threads, some mentioning `me`:
//! [`Plan::expected`] and [`Plan::threads_of`] count what the inbox's
//! `threads` and `mentions` and each thread's `unread` must then say.

/// The user whose inbox is read.
pub const ME: &str = "me";
/// Members of each chat (`me` or another user first, then three more).
pub const MEMBERS: u64 = 4;
/// Every tenth event after the joins is a reaction (to the event before).
const REACTION_EVERY: u64 = 10;
/// About one message in this many is deleted by its author, as the next event.
const DELETED_ONE_IN: u64 = 50;
/// Spreads the order chats are loaded in (and so their latest activity, the
/// inbox's order) over the names: a prime, so a permutation of almost any count.
const SPREAD: u64 = 7919;

/// One write of a chat's log; each stores one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Member `user` (an index into [`Plan::members`]) joins.
    Join { user: usize },
    /// A message from `user`: in the thread under root `thread`, mentioning `me` when `mention`.
    Message { user: usize, thread: Option<u64>, mention: bool },
    /// `user` reacts to event `target`.
    React { user: usize, target: u64 },
    /// `user` deletes its own message `target`.
    Delete { user: usize, target: u64 },
    /// `me` (member 0) has read up to `seq`.
    Read { seq: u64 },
}

/// The store's shape.
pub struct Plan {
    pub chats: u64,
    /// Events in each chat's log.
    pub per_chat: u64,
    /// `me` is a member of every `stride`-th chat, `member_chats` of them.
    stride: u64,
    member_chats: u64,
    /// Thread roots in each of `me`'s chats (0: no threads anywhere).
    threads: u64,
}

/// What `me`'s inbox entry of a chat must say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Expected {
    /// Messages not in a thread, above the read position, by others, not deleted.
    pub unread: u64,
    /// The sum of `unread` over the threads `me` follows in the chat.
    pub threads: u64,
    /// Messages above the read position, by others, not deleted, mentioning `me`.
    pub mentions: u64,
}

impl Plan {
    /// `chats` chats of `events / chats` events each, `me` in `member_chats` of them.
    pub fn new(chats: u64, events: u64, member_chats: u64) -> Plan {
        Plan { chats, per_chat: events / chats, stride: (chats / member_chats.max(1)).max(1), member_chats, threads: 0 }
    }

    /// The same store with `threads` thread roots (sent by `me`) in each of `me`'s chats.
    pub fn with_threads(self, threads: u64) -> Plan {
        Plan { threads, ..self }
    }

    /// Chat `i`'s name.
    pub fn name(i: u64) -> String {
        format!("c{i:07}")
    }

    /// Whether `me` is a member of chat `i`.
    pub fn mine(&self, i: u64) -> bool {
        i.is_multiple_of(self.stride) && i / self.stride < self.member_chats
    }

    /// Chat `i`'s members, in the order they join.
    pub fn members(&self, i: u64) -> [String; MEMBERS as usize] {
        let first = if self.mine(i) { ME.to_string() } else { format!("o{i}") };
        [first, format!("a{}", i % 997), format!("b{}", i % 991), format!("c{}", i % 983)]
    }

    /// The chats in the order they are loaded: spread over the names, so the
    /// inbox's order (latest activity first) is not the names' order.
    pub fn load_order(&self) -> impl Iterator<Item = u64> + use<> {
        let chats = self.chats;
        let spread = if gcd(SPREAD, chats) == 1 { SPREAD } else { 1 };
        (0..chats).map(move |k| (k * spread) % chats)
    }

    /// `me`'s read position in chat `i`: nothing read, or anywhere from the
    /// joins to the log's end. Below `per_chat - 1`, so its `read` event fits
    /// in the log even a slot late (after a delete).
    pub fn read(&self, i: u64) -> u64 {
        if !self.mine(i) || self.per_chat < MEMBERS + 2 {
            return 0;
        }
        let r = (i / self.stride * 37) % (self.per_chat - 1);
        if r < MEMBERS { 0 } else { r }
    }

    /// Chat `i`'s log: `per_chat` writes, the first storing seq 1. The
    /// joins, then messages from the members in turn, every tenth event a
    /// reaction; about one message in 50 is deleted by its author as the next
    /// event; `me` reads (a `read` event) once the log passes its read position.
    /// With threads, in `me`'s chats: the first messages are the roots (by
    /// `me`, never deleted); after them every message at an odd seq replies
    /// in a root (in turn), and every third message by another user mentions `me`.
    pub fn log(&self, i: u64) -> impl Iterator<Item = Step> + use<> {
        let (read, per_chat) = (self.read(i), self.per_chat);
        let threads = if self.mine(i) { self.threads } else { 0 };
        let mut roots: Vec<u64> = Vec::new();
        let mut pending_delete: Option<(usize, u64)> = None;
        let mut read_done = read == 0;
        (1..=per_chat).map(move |seq| {
            if seq <= MEMBERS {
                return Step::Join { user: (seq - 1) as usize };
            }
            if let Some((user, target)) = pending_delete.take() {
                return Step::Delete { user, target };
            }
            if !read_done && read < seq {
                read_done = true;
                return Step::Read { seq: read };
            }
            let user = (seq % MEMBERS) as usize;
            if seq.is_multiple_of(REACTION_EVERY) {
                return Step::React { user, target: seq - 1 };
            }
            if (roots.len() as u64) < threads {
                roots.push(seq);
                return Step::Message { user: 0, thread: None, mention: false };
            }
            let thread = (threads > 0 && seq % 2 == 1).then(|| roots[((seq / 2) % threads) as usize]);
            let mention = threads > 0 && user != 0 && seq.is_multiple_of(3);
            if (seq * 31 + i).is_multiple_of(DELETED_ONE_IN) {
                pending_delete = Some((user, seq));
            }
            Step::Message { user, thread, mention }
        })
    }

    /// The threads `me` follows in chat `i` that `threads` lists (those with a reply not
    /// deleted): (root, unread) each, unread counting the replies by others, not deleted (`me`
    /// never reads a thread).
    pub fn threads_of(&self, i: u64) -> Vec<(u64, u64)> {
        let steps: Vec<Step> = self.log(i).collect();
        let deleted = deleted_targets(&steps);
        let replies = |root: u64| {
            (1u64..).zip(&steps).filter_map(move |(seq, s)| match s {
                Step::Message { user, thread: Some(r), .. } if *r == root => Some((seq, *user)),
                _ => None,
            })
        };
        let roots = (1u64..).zip(&steps).filter(|(seq, _)| replies(*seq).next().is_some()).map(|(seq, _)| seq);
        roots
            .filter(|root| replies(*root).any(|(seq, _)| !deleted.contains(&seq)))
            .map(|root| (root, replies(root).filter(|(seq, u)| *u != 0 && !deleted.contains(seq)).count() as u64))
            .collect()
    }

    /// What `me`'s inbox entry of chat `i` must say, counted the slow way.
    pub fn expected(&self, i: u64) -> Expected {
        let (read, members) = (self.read(i), self.members(i));
        let steps: Vec<Step> = self.log(i).collect();
        let deleted = deleted_targets(&steps);
        let by_others_unread = (1u64..).zip(&steps).filter_map(|(seq, s)| match s {
            Step::Message { user, thread, mention }
                if members[*user] != ME && seq > read && !deleted.contains(&seq) =>
            {
                Some((thread.is_some(), *mention))
            }
            _ => None,
        });
        let (mut unread, mut mentions) = (0, 0);
        for (in_thread, mention) in by_others_unread {
            unread += u64::from(!in_thread);
            mentions += u64::from(mention);
        }
        let threads = self.threads_of(i).iter().map(|(_, u)| u).sum();
        Expected { unread, threads, mentions }
    }

    /// `me`'s unread count in chat `i`: messages not in a thread, after its read position, by
    /// others, not deleted.
    #[cfg(test)]
    pub fn unread(&self, i: u64) -> u64 {
        self.expected(i).unread
    }
}

/// The messages a log deletes.
fn deleted_targets(steps: &[Step]) -> std::collections::HashSet<u64> {
    steps.iter().filter_map(|s| if let Step::Delete { target, .. } = s { Some(*target) } else { None }).collect()
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_has_its_joins_reactions_deletes_and_one_read() {
        let plan = Plan::new(10, 200, 3);
        assert_eq!(plan.per_chat, 20);
        let mine: Vec<u64> = (0..10).filter(|&i| plan.mine(i)).collect();
        assert_eq!(mine, [0, 3, 6]);
        for i in 0..10 {
            let log: Vec<Step> = plan.log(i).collect();
            assert_eq!(log.len(), 20, "chat {i}");
            assert_eq!(log.iter().filter(|s| matches!(s, Step::Join { .. })).count(), 4);
            let reads = log.iter().filter(|s| matches!(s, Step::Read { .. })).count();
            assert_eq!(reads, usize::from(plan.read(i) > 0), "chat {i}");
            for (seq, s) in (1u64..).zip(&log) {
                match s {
                    // A delete follows its message, by the same user.
                    Step::Delete { user, target } => {
                        assert_eq!(*target, seq - 1);
                        assert!(matches!(log[(seq - 2) as usize], Step::Message { user: u, .. } if u == *user));
                    }
                    Step::React { target, .. } => assert!(*target < seq),
                    Step::Read { seq: r } => assert!(*r < seq && *r >= MEMBERS),
                    _ => {}
                }
            }
        }
        // Deletes happen somewhere in a store of this size.
        assert!((0..10).flat_map(|i| plan.log(i)).any(|s| matches!(s, Step::Delete { .. })));
    }

    #[test]
    fn unread_counts_others_messages_after_the_read_position_not_deleted() {
        // Counted by hand from the rules above (20 events a chat, me in chats 0, 3 and 6).
        let plan = Plan::new(10, 200, 3);
        // Chat 0: nothing read; others' messages are seqs 5-7, 9, 11, 13-15, 17-19 (me: 8, 12, 16).
        assert_eq!((plan.read(0), plan.unread(0)), (0, 11));
        // Chat 3: read to 18 (its read event is 19, then a reaction): nothing after it.
        assert_eq!((plan.read(3), plan.unread(3)), (18, 0));
        // Chat 6: read to 17 (its read event is 18): seq 19 is c's message.
        assert_eq!((plan.read(6), plan.unread(6)), (17, 1));
    }

    #[test]
    fn threads_are_rooted_by_me_and_counted() {
        // 3 chats of 40 events, me in chats 0 and 1 (read: none, and 36), 2 roots each.
        let plan = Plan::new(3, 120, 2).with_threads(2);
        for i in 0..3 {
            let log: Vec<Step> = plan.log(i).collect();
            let roots: Vec<u64> = (1u64..)
                .zip(&log)
                .filter(|(seq, _)| log.iter().any(|s| matches!(s, Step::Message { thread: Some(r), .. } if r == seq)))
                .map(|(seq, _)| seq)
                .collect();
            if i == 2 {
                assert!(roots.is_empty(), "no threads outside me's chats");
                assert_eq!(plan.expected(i), Expected { unread: plan.unread(i), threads: 0, mentions: 0 });
                continue;
            }
            // The first two messages after the joins, by me; neither deleted.
            assert_eq!(roots, [5, 6], "chat {i}");
            for r in &roots {
                assert_eq!(log[(*r - 1) as usize], Step::Message { user: 0, thread: None, mention: false });
                assert!(!log.iter().any(|s| matches!(s, Step::Delete { target, .. } if target == r)));
            }
            let listed = plan.threads_of(i);
            assert_eq!(listed.iter().map(|(r, _)| *r).collect::<Vec<_>>(), roots);
            let e = plan.expected(i);
            assert_eq!(e.threads, listed.iter().map(|(_, u)| u).sum::<u64>());
            assert!(e.threads > 0, "chat {i}: {e:?}");
        }
        // Chat 0 read nothing: every third message by another user mentions me, replies included.
        let e = plan.expected(0);
        assert!(e.mentions > 0 && e.unread > 0, "{e:?}");
    }

    #[test]
    fn the_load_order_is_a_permutation() {
        for chats in [1, 10, 300, 7919 * 2] {
            let plan = Plan::new(chats, chats * 10, 1);
            let mut order: Vec<u64> = plan.load_order().collect();
            order.sort_unstable();
            assert_eq!(order, (0..chats).collect::<Vec<_>>(), "{chats} chats");
        }
    }
}
