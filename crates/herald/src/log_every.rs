//! A failure that can repeat thousands of times a second (a full disk, a
//! dead connection, no file to accept with) is logged at most once a
//! second, with how many occurred since the last line: the log stays
//! readable and the count stays exact. Counting in `/metrics` is the
//! caller's.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// At most one line this often.
const EVERY: Duration = Duration::from_secs(1);

/// One kind of failure's log gate.
#[derive(Default)]
pub struct LogEvery(Mutex<Gate>);

#[derive(Default)]
struct Gate {
    /// When the last line went out.
    at: Option<Instant>,
    /// Occurrences since, this one included once noted.
    unlogged: u64,
}

impl LogEvery {
    /// Notes one occurrence. Answers how many the caller's line stands for
    /// when a line is due now, `None` when the last one went out under a second ago.
    pub fn note(&self) -> Option<u64> {
        let mut g = self.0.lock().expect("log gate lock poisoned");
        g.unlogged += 1;
        if g.at.is_some_and(|at| at.elapsed() < EVERY) {
            return None;
        }
        g.at = Some(Instant::now());
        Some(std::mem::take(&mut g.unlogged))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_occurrence_is_logged_and_the_next_line_counts_the_rest() {
        let gate = LogEvery::default();
        assert_eq!(gate.note(), Some(1));
        assert_eq!(gate.note(), None);
        assert_eq!(gate.note(), None);
        gate.0.lock().unwrap().at = Some(Instant::now() - EVERY);
        assert_eq!(gate.note(), Some(3), "the two passed over and this one");
    }
}
