//! What a cell's bad day is measured by, over time: live deliveries' latency
//! per wall-clock second (a coarse log histogram each, so that a long run
//! stays small), and per node lost, the sessions that lost it, when each got
//! back (per second) and how long it took. Seconds and instants are the
//! machine's clock (microseconds since the epoch), the same in the parent and
//! every worker, so the parent can cut windows around a kill or a drain it
//! timed itself. Recording is the sessions'; the windows' figures are `fault`'s.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::latency::Latencies;

/// Buckets of the coarse histogram: each 5% wider than the one before, from 100 µs.
const GROWTH: f64 = 1.05;
const FLOOR_US: f64 = 100.0;
/// Past 60 s (the highest latency kept elsewhere too) everything is the last bucket.
const BUCKETS: usize = 330;

/// A coarse latency histogram: 5% resolution, a few hundred counters.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Coarse(BTreeMap<u16, u64>);

impl Coarse {
    fn bucket(us: u64) -> u16 {
        if (us as f64) <= FLOOR_US {
            return 0;
        }
        let b = ((us as f64 / FLOOR_US).ln() / GROWTH.ln()).ceil() as usize;
        b.min(BUCKETS) as u16
    }

    /// The upper bound of bucket `b`, in microseconds.
    fn upper_us(b: u16) -> f64 {
        FLOOR_US * GROWTH.powi(b as i32)
    }

    pub fn record(&mut self, d: Duration) {
        *self.0.entry(Self::bucket(d.as_micros() as u64)).or_default() += 1;
    }

    pub fn merge(&mut self, other: &Coarse) {
        for (b, n) in &other.0 {
            *self.0.entry(*b).or_default() += n;
        }
    }

    pub fn count(&self) -> u64 {
        self.0.values().sum()
    }

    /// The `q` quantile in milliseconds (a bucket's upper bound), `None` when empty.
    pub fn quantile_ms(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = ((total as f64 * q).ceil() as u64).max(1);
        let mut seen = 0;
        for (b, n) in &self.0 {
            seen += n;
            if seen >= rank {
                return Some((Self::upper_us(*b) / 1000.0 * 100.0).round() / 100.0);
            }
        }
        None
    }
}

/// The sessions that lost one node: how many, how long each took to resume, and when.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Losses {
    /// Connections lost (each session once per loss).
    pub lost: u64,
    /// Of them, resumed (reconnected elsewhere and the open chat re-watched).
    pub resumed: u64,
    /// Of them, given up after every node was tried for the resume bound.
    pub never: u64,
    /// Loss to resumed, per session (HdrHistogram counts).
    pub resume: Vec<(u64, u64)>,
    /// Reconnects (hello answered) per second of the clock.
    pub reconnects_per_s: BTreeMap<u64, u64>,
    /// The first loss and the last resume, µs since the epoch.
    pub first_loss_us: Option<u64>,
    pub last_resumed_us: Option<u64>,
}

/// A worker's timeline: live latency per second, losses per node lost.
#[derive(Default)]
pub struct Timeline {
    pub live: BTreeMap<u64, Coarse>,
    pub losses: BTreeMap<u32, NodeLosses>,
}

/// [`Losses`] while they are counted (with a live histogram).
#[derive(Default)]
pub struct NodeLosses {
    lost: u64,
    resumed: u64,
    never: u64,
    resume: Latencies,
    reconnects_per_s: BTreeMap<u64, u64>,
    first_loss_us: Option<u64>,
    last_resumed_us: Option<u64>,
}

impl Timeline {
    /// A live delivery received at `now_us` that took `d`.
    pub fn live(&mut self, now_us: u64, d: Duration) {
        self.live.entry(now_us / 1_000_000).or_default().record(d);
    }

    /// A session lost its connection to `node` at `at_us`.
    pub fn lost(&mut self, node: u32, at_us: u64) {
        let l = self.losses.entry(node).or_default();
        l.lost += 1;
        l.first_loss_us = Some(l.first_loss_us.map_or(at_us, |f| f.min(at_us)));
    }

    /// A session that lost `node` said hello to another at `at_us`.
    pub fn reconnected(&mut self, node: u32, at_us: u64) {
        *self.losses.entry(node).or_default().reconnects_per_s.entry(at_us / 1_000_000).or_default() += 1;
    }

    /// A session that lost `node` at `lost_us` re-watched its chat at `at_us`.
    pub fn resumed(&mut self, node: u32, lost_us: u64, at_us: u64) {
        let l = self.losses.entry(node).or_default();
        l.resumed += 1;
        l.resume.record(Duration::from_micros(at_us.saturating_sub(lost_us)));
        l.last_resumed_us = Some(l.last_resumed_us.map_or(at_us, |x| x.max(at_us)));
    }

    /// A session that lost `node` gave up.
    pub fn never(&mut self, node: u32) {
        self.losses.entry(node).or_default().never += 1;
    }

    /// The printed form of the losses.
    pub fn losses(&self) -> Vec<(u32, Losses)> {
        self.losses
            .iter()
            .map(|(n, l)| {
                let out = Losses {
                    lost: l.lost,
                    resumed: l.resumed,
                    never: l.never,
                    resume: l.resume.to_counts(),
                    reconnects_per_s: l.reconnects_per_s.clone(),
                    first_loss_us: l.first_loss_us,
                    last_resumed_us: l.last_resumed_us,
                };
                (*n, out)
            })
            .collect()
    }
}

impl Losses {
    /// Adds another worker's losses of the same node.
    pub fn add(&mut self, o: Losses) {
        self.lost += o.lost;
        self.resumed += o.resumed;
        self.never += o.never;
        let mut h = Latencies::from_counts(&self.resume);
        h.merge(&Latencies::from_counts(&o.resume));
        self.resume = h.to_counts();
        for (s, n) in o.reconnects_per_s {
            *self.reconnects_per_s.entry(s).or_default() += n;
        }
        self.first_loss_us = min_some(self.first_loss_us, o.first_loss_us);
        self.last_resumed_us = self.last_resumed_us.max(o.last_resumed_us);
    }
}

fn min_some(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Live latencies of the seconds `from..to` (clock seconds) merged.
pub fn window(live: &BTreeMap<u64, Coarse>, from_s: u64, to_s: u64) -> Coarse {
    let mut out = Coarse::default();
    for (_, c) in live.range(from_s..to_s.max(from_s)) {
        out.merge(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_coarse_histogram_is_within_five_percent() {
        let mut c = Coarse::default();
        for ms in 1..=100 {
            c.record(Duration::from_millis(ms));
        }
        let p99 = c.quantile_ms(0.99).unwrap();
        assert!((99.0..=99.0 * GROWTH + 0.01).contains(&p99), "{p99}");
        let p50 = c.quantile_ms(0.50).unwrap();
        assert!((50.0..=50.0 * GROWTH + 0.01).contains(&p50), "{p50}");
        c.record(Duration::from_secs(3600));
        assert_eq!(Coarse::bucket(3_600_000_000), BUCKETS as u16);
        assert_eq!(Coarse::default().quantile_ms(0.5), None);
    }

    #[test]
    fn losses_add_up_over_workers() {
        let mut t = Timeline::default();
        t.lost(0, 10_000_000);
        t.reconnected(0, 10_500_000);
        t.resumed(0, 10_000_000, 10_600_000);
        t.lost(0, 10_100_000);
        t.never(0);
        let mut l = t.losses().remove(0).1;
        let mut u = Timeline::default();
        u.lost(0, 9_000_000);
        u.resumed(0, 9_000_000, 12_000_000);
        l.add(u.losses().remove(0).1);
        assert_eq!((l.lost, l.resumed, l.never), (3, 2, 1));
        assert_eq!((l.first_loss_us, l.last_resumed_us), (Some(9_000_000), Some(12_000_000)));
        assert_eq!(l.reconnects_per_s.get(&10), Some(&1));
        assert_eq!(Latencies::from_counts(&l.resume).count(), 2);
    }
}
