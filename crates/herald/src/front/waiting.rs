//! The sockets that wait for a request to finish (new, mid-request, or idle
//! between requests), by age and by client address, so the oldest can be
//! closed first: the node's, or one address's. Plain data: who is closed,
//! and how, is [`super::Front`]'s.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;

/// When a socket started waiting: a number that only grows (never 0, which
/// stands for "not waiting").
pub(crate) type Since = u64;

/// Waiting sockets, each an `T`, with the address it counts against.
pub(crate) struct Waiting<T> {
    by_age: BTreeMap<Since, (IpAddr, T)>,
    by_address: HashMap<IpAddr, BTreeSet<Since>>,
    next: Since,
}

impl<T> Default for Waiting<T> {
    fn default() -> Self {
        Waiting { by_age: BTreeMap::new(), by_address: HashMap::new(), next: 1 }
    }
}

impl<T> Waiting<T> {
    /// Adds `item`, from `address`; when it started waiting, to remove it by.
    pub(crate) fn insert(&mut self, address: IpAddr, item: T) -> Since {
        let since = self.next;
        self.next += 1;
        self.by_age.insert(since, (address, item));
        self.by_address.entry(address).or_default().insert(since);
        since
    }

    /// Removes what started waiting at `since`, if it still waits.
    pub(crate) fn remove(&mut self, since: Since) -> Option<T> {
        let (address, item) = self.by_age.remove(&since)?;
        if let Some(of) = self.by_address.get_mut(&address) {
            of.remove(&since);
            if of.is_empty() {
                self.by_address.remove(&address);
            }
        }
        Some(item)
    }

    /// Removes the one that has waited longest.
    pub(crate) fn pop_oldest(&mut self) -> Option<T> {
        let since = *self.by_age.keys().next()?;
        self.remove(since)
    }

    /// Removes the one from `address` that has waited longest.
    pub(crate) fn pop_oldest_of(&mut self, address: IpAddr) -> Option<T> {
        let since = *self.by_address.get(&address)?.first()?;
        self.remove(since)
    }

    pub(crate) fn len(&self) -> usize {
        self.by_age.len()
    }

    /// How many wait from `address`.
    pub(crate) fn len_of(&self, address: IpAddr) -> usize {
        self.by_address.get(&address).map_or(0, BTreeSet::len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_goes_first_overall_and_per_address() {
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let mut w = Waiting::default();
        let first = w.insert(a, "a1");
        w.insert(b, "b1");
        w.insert(a, "a2");
        w.insert(b, "b2");
        assert_eq!((w.len(), w.len_of(a), w.len_of(b)), (4, 2, 2));
        assert_eq!(w.pop_oldest_of(b), Some("b1"));
        assert_eq!(w.remove(first), Some("a1"));
        assert_eq!(w.remove(first), None, "removed once");
        assert_eq!(w.pop_oldest(), Some("a2"));
        assert_eq!(w.len_of(a), 0);
        // One that stops waiting and starts again is the youngest.
        let again = w.insert(a, "a3");
        assert!(again > first);
        assert_eq!(w.pop_oldest(), Some("b2"));
        assert_eq!(w.pop_oldest(), Some("a3"));
        assert_eq!((w.pop_oldest(), w.pop_oldest_of(a), w.len()), (None, None, 0));
        assert!(w.by_address.is_empty(), "no address is kept once none of its sockets waits");
    }
}
