//! What a search indexer has to do next: the chats written since it last looked, handed over by
//! the store's writes after they commit, or "everything" (at start, after too many chats queued,
//! and now and then, for writes this process did not see: other nodes of a PostgreSQL cluster).
//! Marking a chat costs a lock and a set insert; it never blocks a write on the index.
//!
//! Not here: reading the log or writing the index (each backend's indexer).

use std::collections::HashSet;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use crate::model::ChatKey;

/// Chats queued beyond this make the indexer read every chat's position instead: memory stays
/// bounded under any write rate.
const MAX_QUEUED: usize = 50_000;

/// The environment variable that turns indexing off (`off`): searches then find what was indexed
/// before. For measuring what indexing costs, and for an operator who must shed every cost.
pub const INDEX_ENV: &str = "HERALD_SEARCH_INDEX";

/// Whether this process indexes for search (see [`INDEX_ENV`]).
pub fn indexing_on() -> bool {
    std::env::var(INDEX_ENV).map_or(true, |v| v != "off")
}

/// The work handed to an indexer.
#[derive(Debug, PartialEq)]
pub enum Work {
    /// These chats were written.
    Chats(Vec<ChatKey>),
    /// Read every chat's position against the log.
    All,
    /// The store is closing.
    Close,
}

#[derive(Default)]
struct State {
    chats: HashSet<ChatKey>,
    all: bool,
    closed: bool,
}

/// The queue between a store's writes and its indexer; see the module's documentation.
pub struct Pending {
    state: Mutex<State>,
    /// Wakes a thread-based indexer (SQLite).
    cond: Condvar,
    /// Wakes a task-based indexer (PostgreSQL).
    notify: tokio::sync::Notify,
}

impl Pending {
    /// A queue whose first work is [`Work::All`]: the indexer catches up with the log at start.
    pub fn new() -> Pending {
        Pending {
            state: Mutex::new(State { all: true, ..State::default() }),
            cond: Condvar::new(),
            notify: tokio::sync::Notify::new(),
        }
    }

    /// `key` was written.
    pub fn mark(&self, key: &ChatKey) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if !s.all && !s.chats.contains(key) {
            if s.chats.len() >= MAX_QUEUED {
                s.all = true;
                s.chats.clear();
            } else {
                s.chats.insert(key.clone());
            }
        }
        drop(s);
        self.cond.notify_one();
        self.notify.notify_one();
    }

    /// Asks for a pass over every chat.
    pub fn mark_all(&self) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.all = true;
        s.chats.clear();
        drop(s);
        self.cond.notify_one();
        self.notify.notify_one();
    }

    /// Stops the indexer after the work it has.
    pub fn close(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).closed = true;
        self.cond.notify_one();
        self.notify.notify_one();
    }

    /// Whether [`Pending::close`] was called: a long pass stops early.
    pub fn closing(&self) -> bool {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).closed
    }

    /// The work queued now, if any.
    pub fn take(&self) -> Option<Work> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        take(&mut s)
    }

    /// Waits (blocking the thread) up to `timeout` for work; [`Work::All`] when none came.
    pub fn wait(&self, timeout: Duration) -> Work {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (mut s, _) = self
            .cond
            .wait_timeout_while(s, timeout, |s| !s.closed && !s.all && s.chats.is_empty())
            .unwrap_or_else(|e| e.into_inner());
        take(&mut s).unwrap_or(Work::All)
    }

    /// Waits (asynchronously) up to `timeout` for work; [`Work::All`] when none came.
    pub async fn next(&self, timeout: Duration) -> Work {
        if let Some(w) = self.take() {
            return w;
        }
        let _ = tokio::time::timeout(timeout, self.notify.notified()).await;
        self.take().unwrap_or(Work::All)
    }

    /// Chats queued now.
    pub fn queued(&self) -> usize {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).chats.len()
    }

    /// Sets the indexer's lag gauge, in chats: `behind` left in its pass and those queued since.
    pub fn report_lag(&self, behind: usize) {
        metrics::gauge!("herald_search_index_lag_chats").set((behind + self.queued()) as f64);
    }
}

fn take(s: &mut State) -> Option<Work> {
    if s.closed {
        return Some(Work::Close);
    }
    if s.all {
        s.all = false;
        s.chats.clear();
        return Some(Work::All);
    }
    if s.chats.is_empty() {
        return None;
    }
    Some(Work::Chats(s.chats.drain().collect()))
}

impl Default for Pending {
    fn default() -> Self {
        Pending::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_with_everything_then_hands_over_chats_once() {
        let p = Pending::new();
        p.mark(&ChatKey::new("w", "a"));
        assert_eq!(p.take(), Some(Work::All), "the first pass reads every chat anyway");
        p.mark(&ChatKey::new("w", "a"));
        p.mark(&ChatKey::new("w", "a"));
        assert_eq!(p.take(), Some(Work::Chats(vec![ChatKey::new("w", "a")])));
        assert_eq!(p.take(), None);
        assert_eq!(p.wait(Duration::from_millis(1)), Work::All, "idle: a pass over every chat");
        p.close();
        assert_eq!(p.take(), Some(Work::Close));
    }
}
