//! Stable hashing for routing: the same input hashes the same in every
//! process and on every machine (std's `RandomState` does not, by design).
//! Rendezvous (highest random weight) hashing picks an owner among named
//! candidates; adding or removing one moves only the keys it wins or owned.

/// FNV-1a over `parts` (each followed by a separator byte), then a
/// splitmix64 finalizer so that close inputs land far apart.
pub fn stable_hash(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in *part {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// The index of the candidate that owns `key`: the one whose name scores highest with it.
pub fn rendezvous<'a>(key: &[&[u8]], candidates: impl IntoIterator<Item = &'a str>) -> Option<usize> {
    let mut best: Option<(u64, usize)> = None;
    for (i, name) in candidates.into_iter().enumerate() {
        let mut parts: Vec<&[u8]> = Vec::with_capacity(key.len() + 1);
        parts.push(name.as_bytes());
        parts.extend_from_slice(key);
        let score = stable_hash(&parts);
        if best.is_none_or(|(s, _)| score > s) {
            best = Some((score, i));
        }
    }
    best.map(|(_, i)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `stable_hash(&[b"a"])` as of the first release.
    const PINNED_A: u64 = 1_819_190_507_042_467_253;

    #[test]
    fn stable_across_runs() {
        // Fixed values: a change here would re-route every chat of every deployment.
        assert_eq!(stable_hash(&[b"acme", b"general"]), stable_hash(&[b"acme", b"general"]));
        assert_ne!(stable_hash(&[b"acme", b"general"]), stable_hash(&[b"acmeg", b"eneral"]));
        assert_eq!(stable_hash(&[b"a"]), PINNED_A, "the routing hash must never change");
    }

    #[test]
    fn adding_a_candidate_moves_about_its_share() {
        let three = ["s0", "s1", "s2"];
        let four = ["s0", "s1", "s2", "s3"];
        let n = 10_000;
        let mut moved = 0;
        let mut counts = [0usize; 3];
        for i in 0..n {
            let k = format!("chat-{i}");
            let a = rendezvous(&[b"w", k.as_bytes()], three).unwrap();
            let b = rendezvous(&[b"w", k.as_bytes()], four).unwrap();
            counts[a] += 1;
            if a != b {
                assert_eq!(b, 3, "a key only ever moves to the new candidate");
                moved += 1;
            }
        }
        assert!((2000..3000).contains(&moved), "about a quarter moved: {moved}");
        assert!(counts.iter().all(|c| (2900..3800).contains(c)), "balanced: {counts:?}");
    }
}
