//! What a join is and how joins are counted, for both join floods (the
//! closed-loop `sends --op join` and the open-loop, rising-rate `joinflood`):
//! [`timed_join`] joins one user through whichever server a run measures
//! (`Conn::join_as`), bounded; [`JoinTally`] adds up latencies, acks,
//! failures and the largest member count an answer gave. Not here: how
//! joins are offered (each scenario's own loop).

use std::time::Instant;

use crate::client::{Failure, REQUEST_TIMEOUT};
use crate::conn::Conn;
use crate::fleet::Failures;
use crate::latency::Latencies;

/// What a set of timed joins did.
#[derive(Default)]
pub struct JoinTally {
    pub latencies: Latencies,
    pub acked: u64,
    pub failures: Failures,
    /// When the last ack came.
    pub last_ack: Option<Instant>,
    /// The largest member count an answer gave.
    pub members_seen: u64,
}

impl JoinTally {
    /// Counts one join that started at `started`, with its outcome.
    pub fn record(&mut self, started: Instant, outcome: Result<Option<u64>, Failure>) {
        match outcome {
            Ok(members) => {
                let now = Instant::now();
                self.latencies.record(now - started);
                self.acked += 1;
                self.last_ack = Some(self.last_ack.map_or(now, |l| l.max(now)));
                self.members_seen = self.members_seen.max(members.unwrap_or(0));
            }
            Err(f) => self.failures.add_failure(&f),
        }
    }

    /// Adds another task's tally.
    pub fn merge(&mut self, other: &JoinTally) {
        self.latencies.merge(&other.latencies);
        self.acked += other.acked;
        self.failures.merge(&other.failures);
        self.last_ack = self.last_ack.max(other.last_ack);
        self.members_seen = self.members_seen.max(other.members_seen);
    }
}

/// `conn` joins `room` as `user`, bounded by [`REQUEST_TIMEOUT`]; the member count the answer gave.
pub async fn timed_join(conn: &mut Conn, room: &str, user: &str) -> Result<Option<u64>, Failure> {
    match tokio::time::timeout(REQUEST_TIMEOUT, conn.join_as(room, user)).await {
        Ok(r) => r,
        Err(_) => Err(Failure::timeout(format!("no join ack in {REQUEST_TIMEOUT:?}"))),
    }
}
