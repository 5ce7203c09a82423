//! The cell's workload model, built the same way from the same flags in the
//! parent and in every load worker (seeded, no randomness from outside): who
//! is in which chat, which chat each user has open, and which node each user
//! connects to. The chats are direct messages (2 members), groups of 3 to 50
//! members with Zipf-like sizes (many small, few large), and a few channels of
//! 5,000 members or more, the first the largest (`users / 4`, then halving in
//! the Zipf way: the k-th is `users / 4k`). What each user does per second
//! (the mix of actions) is `worker`'s; this file is only the shape.

use clap::Args;
use serde::Serialize;

/// The smallest group.
const GROUP_MIN: usize = 3;
/// The largest group.
const GROUP_MAX: usize = 50;
/// The exponent of group sizes: P(size = 3 + k) is proportional to 1 / (k + 1)^GROUP_ZIPF.
const GROUP_ZIPF: f64 = 1.2;
/// Channels are at least this large (or half the users, in a cell smaller than twice it).
const CHANNEL_MIN: usize = 5_000;

/// The model's flags, passed on verbatim to every worker.
#[derive(Debug, Clone, Args, Serialize)]
pub struct ModelArgs {
    /// Users (one connection each) in the whole cell.
    #[arg(long, default_value_t = 10_000)]
    pub connections: usize,
    /// Direct-message chats per user, on average (each has two members).
    #[arg(long, default_value_t = 3.0)]
    pub dms_per_user: f64,
    /// Groups (3 to 50 members, Zipf-like sizes) per user, on average.
    #[arg(long, default_value_t = 2.0)]
    pub groups_per_user: f64,
    /// Channels of 5,000 members or more (the k-th has connections/4k members).
    #[arg(long, default_value_t = 3)]
    pub channels: usize,
    /// Seeds every random choice of the model and of the load.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The share of users who are active (0 to 1): each opens a chat (watch,
    /// presence, live inbox) and sends, reads and reacts there. The others are
    /// idle, as an app in the background: they connect, say `hello`, stay
    /// members of their chats and hold the connection, and nothing is pushed
    /// to them. Picked by a hash of the user's index, so every node gets its share.
    #[arg(long, default_value_t = 1.0)]
    pub active: f64,
}

/// Whether user `u` is active when `share` of the users are (a hash of `u`,
/// independent of the node `u` connects to).
pub fn is_active(u: usize, share: f64) -> bool {
    if share >= 1.0 {
        return true;
    }
    let h = (u as u64 ^ 0x5851_f42d_4c95_7f2d).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    ((h >> 11) as f64 / (1u64 << 53) as f64) < share
}

/// What a chat is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dm,
    Group,
    Channel,
}

/// One chat: its kind and members (user indexes, distinct).
#[derive(Debug)]
pub struct ChatPlan {
    pub kind: Kind,
    pub members: Vec<u32>,
}

/// The whole cell's chats and each user's place in them.
#[derive(Debug)]
pub struct Plan {
    pub chats: Vec<ChatPlan>,
    /// Each user's chats (indexes into `chats`), in the order the user joins them.
    pub user_chats: Vec<Vec<u32>>,
    /// The chat each user has open (watches, asks presence of, sends in), if the user has any.
    pub open: Vec<Option<u32>>,
}

impl Plan {
    /// Builds the plan of `m`; the same flags give the same plan in every process.
    pub fn build(m: &ModelArgs) -> Plan {
        let users = m.connections;
        let mut rng = Rng::new(m.seed);
        let mut chats = Vec::new();
        if users >= 2 {
            let floor = CHANNEL_MIN.min(users / 2);
            for k in 1..=m.channels {
                let size = (users / (4 * k)).max(floor).min(users);
                chats.push(ChatPlan { kind: Kind::Channel, members: sample(&mut rng, users, size) });
            }
            let sizes = GroupSizes::new();
            let groups = (users as f64 * m.groups_per_user / sizes.mean()).round() as usize;
            for _ in 0..groups {
                let size = sizes.draw(&mut rng).min(users);
                chats.push(ChatPlan { kind: Kind::Group, members: sample(&mut rng, users, size) });
            }
            let dms = (users as f64 * m.dms_per_user / 2.0).round() as usize;
            for _ in 0..dms {
                chats.push(ChatPlan { kind: Kind::Dm, members: sample(&mut rng, users, 2) });
            }
        }
        let mut user_chats = vec![Vec::new(); users];
        for (c, chat) in chats.iter().enumerate() {
            for &u in &chat.members {
                user_chats[u as usize].push(c as u32);
            }
        }
        let open = user_chats
            .iter()
            .enumerate()
            .map(|(u, cs)| {
                let pick = (!cs.is_empty()).then(|| cs[rng.below(cs.len() as u64) as usize]);
                pick.filter(|_| is_active(u, m.active))
            })
            .collect();
        Plan { chats, user_chats, open }
    }

    /// The wire name of chat `c`: its kind and index (`dm17`, `g5`, `ch0`).
    pub fn chat_name(&self, c: u32) -> String {
        let prefix = match self.chats[c as usize].kind {
            Kind::Dm => "dm",
            Kind::Group => "g",
            Kind::Channel => "ch",
        };
        format!("{prefix}{c}")
    }

    /// Memberships in all (joins the setup makes).
    pub fn memberships(&self) -> usize {
        self.chats.iter().map(|c| c.members.len()).sum()
    }

    /// How many chats of each kind, and their member counts, for the report.
    pub fn summary(&self) -> serde_json::Value {
        let of = |k: Kind| {
            let sizes: Vec<usize> = self.chats.iter().filter(|c| c.kind == k).map(|c| c.members.len()).collect();
            serde_json::json!({
                "chats": sizes.len(),
                "members": sizes.iter().sum::<usize>(),
                "largest": sizes.iter().max().copied().unwrap_or(0),
            })
        };
        serde_json::json!({
            "dm": of(Kind::Dm),
            "group": of(Kind::Group),
            "channel": of(Kind::Channel),
            "memberships": self.memberships(),
            "users_without_chats": self.user_chats.iter().filter(|c| c.is_empty()).count(),
            "users_with_a_chat_open": self.open.iter().filter(|o| o.is_some()).count(),
        })
    }
}

/// The node user `u` connects to (users dealt round-robin, so every chat spans nodes).
pub fn node_of(u: usize, nodes: usize) -> usize {
    u % nodes.max(1)
}

/// Group sizes 3..=50 with Zipf-like weights, drawn by their cumulative weights.
struct GroupSizes {
    cumulative: Vec<f64>,
}

impl GroupSizes {
    fn new() -> GroupSizes {
        let mut total = 0.0;
        let cumulative = (0..=GROUP_MAX - GROUP_MIN)
            .map(|k| {
                total += 1.0 / ((k + 1) as f64).powf(GROUP_ZIPF);
                total
            })
            .collect();
        GroupSizes { cumulative }
    }

    fn draw(&self, rng: &mut Rng) -> usize {
        let total = self.cumulative.last().copied().unwrap_or(1.0);
        let x = rng.unit() * total;
        GROUP_MIN + self.cumulative.iter().position(|&c| x < c).unwrap_or(self.cumulative.len() - 1)
    }

    fn mean(&self) -> f64 {
        let mut prev = 0.0;
        let total = self.cumulative.last().copied().unwrap_or(1.0);
        self.cumulative
            .iter()
            .enumerate()
            .map(|(k, &c)| {
                let w = c - prev;
                prev = c;
                (GROUP_MIN + k) as f64 * w / total
            })
            .sum()
    }
}

/// `size` distinct users out of `users`: by rejection for a small chat (a
/// group or a DM), by a partial shuffle for a channel.
fn sample(rng: &mut Rng, users: usize, size: usize) -> Vec<u32> {
    let size = size.min(users);
    if size <= GROUP_MAX && size * 4 <= users {
        let mut out: Vec<u32> = Vec::with_capacity(size);
        // Each draw hits a taken user with probability below 1/4: bounded in expectation, and in count.
        for _ in 0..size * 64 {
            if out.len() == size {
                break;
            }
            let u = rng.below(users as u64) as u32;
            if !out.contains(&u) {
                out.push(u);
            }
        }
        return out;
    }
    let mut all: Vec<u32> = (0..users as u32).collect();
    for i in 0..size {
        let j = i + rng.below((users - i) as u64) as usize;
        all.swap(i, j);
    }
    all.truncate(size);
    all
}

/// SplitMix64: small, fast, and the same sequence on every platform for a seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (n > 0; the tiny modulo bias does not matter here).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// A number in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(connections: usize) -> ModelArgs {
        ModelArgs { connections, dms_per_user: 3.0, groups_per_user: 2.0, channels: 3, seed: 7, active: 1.0 }
    }

    #[test]
    fn the_same_flags_give_the_same_plan() {
        let (a, b) = (Plan::build(&model(1000)), Plan::build(&model(1000)));
        assert_eq!(a.open, b.open);
        assert_eq!(a.user_chats, b.user_chats);
        let c = Plan::build(&ModelArgs { seed: 8, ..model(1000) });
        assert_ne!(a.open, c.open);
    }

    #[test]
    fn a_share_of_active_users_is_spread_over_the_nodes() {
        let all = Plan::build(&model(20_000));
        let some = Plan::build(&ModelArgs { active: 0.2, ..model(20_000) });
        assert_eq!(all.user_chats, some.user_chats, "the chats are the same");
        for node in 0..7 {
            let users = (0..20_000).filter(|u| node_of(*u, 7) == node);
            let (n, open) = users.fold((0, 0), |(n, o), u| (n + 1, o + usize::from(some.open[u].is_some())));
            let share = open as f64 / n as f64;
            assert!((0.17..0.23).contains(&share), "node {node}: {share}");
        }
        for (u, open) in some.open.iter().enumerate() {
            assert!(open.is_none() || *open == all.open[u], "an active user opens the same chat");
        }
    }

    #[test]
    fn chats_have_their_kinds_sizes_and_distinct_members() {
        let p = Plan::build(&model(20_000));
        for chat in &p.chats {
            let mut m = chat.members.clone();
            m.sort_unstable();
            m.dedup();
            assert_eq!(m.len(), chat.members.len(), "members are distinct");
            match chat.kind {
                Kind::Dm => assert_eq!(chat.members.len(), 2),
                Kind::Group => assert!((GROUP_MIN..=GROUP_MAX).contains(&chat.members.len())),
                Kind::Channel => assert!(chat.members.len() >= CHANNEL_MIN),
            }
        }
        let channels: Vec<usize> =
            p.chats.iter().filter(|c| c.kind == Kind::Channel).map(|c| c.members.len()).collect();
        assert_eq!(channels, vec![5_000, 5_000, 5_000]);
        // About 3 DMs + 2 groups + 0.75 channels per user.
        let per_user = p.memberships() as f64 / 20_000.0;
        assert!((5.0..6.5).contains(&per_user), "{per_user}");
        // Zipf-like: most groups small, a few large.
        let groups: Vec<usize> = p.chats.iter().filter(|c| c.kind == Kind::Group).map(|c| c.members.len()).collect();
        let small = groups.iter().filter(|&&s| s <= 6).count();
        assert!(small * 2 > groups.len(), "{small} of {}", groups.len());
        assert!(groups.iter().any(|&s| s >= 40));
    }

    #[test]
    fn open_chats_are_the_users_own() {
        let p = Plan::build(&model(500));
        for (u, open) in p.open.iter().enumerate() {
            match open {
                Some(c) => assert!(p.chats[*c as usize].members.contains(&(u as u32))),
                None => assert!(p.user_chats[u].is_empty()),
            }
        }
        // A small cell's channels are half of it.
        assert!(p.chats.iter().filter(|c| c.kind == Kind::Channel).all(|c| c.members.len() >= 125));
    }

    #[test]
    fn large_channels_follow_zipf() {
        let p = Plan::build(&model(200_000));
        let channels: Vec<usize> =
            p.chats.iter().filter(|c| c.kind == Kind::Channel).map(|c| c.members.len()).collect();
        assert_eq!(channels, vec![50_000, 25_000, 16_666]);
    }
}
