//! Cheap local limiters. A token bucket per connection caps its request rate;
//! it lives inside the connection's task, so it needs no lock.

use std::time::Instant;

/// A token bucket: `rate` tokens a second, at most `burst` saved up.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: f32,
    burst: f32,
    tokens: f32,
    last: Instant,
}

impl TokenBucket {
    pub fn new(rate: u32, burst: u32, now: Instant) -> Self {
        TokenBucket { rate: rate as f32, burst: burst as f32, tokens: burst as f32, last: now }
    }

    /// Takes one token. On refusal, returns the milliseconds until one is available.
    pub fn take(&mut self, now: Instant) -> Result<(), u64> {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f32();
        self.last = now;
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err((((1.0 - self.tokens) / self.rate) * 1000.0).ceil() as u64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn burst_then_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(100, 200, t0);
        for _ in 0..200 {
            assert!(b.take(t0).is_ok());
        }
        let wait = b.take(t0).unwrap_err();
        assert!((1..=10).contains(&wait), "{wait}");
        // 100 ms later, 10 more.
        let t1 = t0 + Duration::from_millis(100);
        for _ in 0..10 {
            assert!(b.take(t1).is_ok());
        }
        assert!(b.take(t1).is_err());
    }
}
