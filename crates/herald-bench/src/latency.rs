//! Latency recording: an HdrHistogram in microseconds per task, merged at the
//! end, summarized as the percentiles the reports quote.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// Highest latency tracked, in microseconds: a minute, beyond any request timeout.
const MAX_US: u64 = 60_000_000;
/// Three significant digits: 0.1% resolution at any magnitude.
const SIGFIGS: u8 = 3;

/// Request latencies of one task or of a whole run.
pub struct Latencies(Histogram<u64>);

impl Default for Latencies {
    fn default() -> Self {
        Latencies(Histogram::new_with_bounds(1, MAX_US, SIGFIGS).expect("valid histogram bounds"))
    }
}

impl Latencies {
    /// Records one latency; longer than [`MAX_US`] counts as the maximum.
    pub fn record(&mut self, d: Duration) {
        self.0.saturating_record((d.as_micros() as u64).clamp(1, MAX_US));
    }

    /// Adds another task's latencies.
    pub fn merge(&mut self, other: &Latencies) {
        self.0.add(&other.0).expect("same bounds");
    }

    /// Latencies recorded.
    pub fn count(&self) -> u64 {
        self.0.len()
    }

    /// The recorded values and their counts, to carry a histogram to another
    /// process (values at the histogram's resolution).
    pub fn to_counts(&self) -> Vec<(u64, u64)> {
        self.0.iter_recorded().map(|v| (v.value_iterated_to(), v.count_at_value())).collect()
    }

    /// A histogram from [`Latencies::to_counts`]'s pairs.
    pub fn from_counts(counts: &[(u64, u64)]) -> Latencies {
        let mut l = Latencies::default();
        for &(value, count) in counts {
            l.0.saturating_record_n(value.clamp(1, MAX_US), count);
        }
        l
    }

    /// p50, p99, p99.9 and max, in milliseconds.
    pub fn summary(&self) -> Percentiles {
        let ms = |us: u64| us as f64 / 1000.0;
        Percentiles {
            p50_ms: ms(self.0.value_at_quantile(0.50)),
            p99_ms: ms(self.0.value_at_quantile(0.99)),
            p999_ms: ms(self.0.value_at_quantile(0.999)),
            max_ms: ms(self.0.max()),
        }
    }
}

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Percentiles {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_known_spread() {
        let mut a = Latencies::default();
        let mut b = Latencies::default();
        for i in 1..=500u64 {
            a.record(Duration::from_micros(i * 1000));
            b.record(Duration::from_micros((500 + i) * 1000));
        }
        a.merge(&b);
        let p = a.summary();
        assert!((p.p50_ms - 500.0).abs() < 1.0, "{p:?}");
        assert!((p.p99_ms - 990.0).abs() < 1.5, "{p:?}");
        assert!((p.max_ms - 1000.0).abs() < 1.0, "{p:?}");
        let carried = Latencies::from_counts(&a.to_counts());
        assert_eq!(carried.count(), 1000);
        assert!((carried.summary().p99_ms - p.p99_ms).abs() < 1.0);
    }
}
