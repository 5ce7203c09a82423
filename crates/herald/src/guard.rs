//! Cheap local limiters. A token bucket per connection caps its request rate;
//! it lives inside the connection's task, so it needs no lock.

use std::time::{Duration, Instant};

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

    /// Whether nothing was taken for `d` before `now` (a bucket that idle is full again
    /// once `d` covers its refill time).
    pub fn idle_for(&self, d: Duration, now: Instant) -> bool {
        now.saturating_duration_since(self.last) >= d
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
    fn join_throttle_caps_one_chat_per_second_and_leaves_the_others_alone() {
        let j = JoinThrottle::new(100);
        let t0 = Instant::now();
        for _ in 0..100 {
            assert!(j.admit(&"hot", t0).is_ok());
        }
        let wait = j.admit(&"hot", t0).unwrap_err();
        assert!((1..=2000).contains(&wait), "{wait}");
        for i in 0..1000 {
            assert!(j.admit(&format!("quiet-{i}"), t0).is_ok(), "a quiet chat is never refused");
        }
        // The next second admits the hot chat again.
        let t1 = t0 + Duration::from_millis(1001);
        assert!(j.admit(&"hot", t1).is_ok());
    }

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

/// Caps joins per chat on this node: a local in-memory count per chat, with
/// no round trip to anything shared, so it cannot lag behind a flood.
///
/// The counts live in a count-min sketch of fixed size: two rows of slots,
/// each chat counted in one slot of each row (by two halves of one hash), its
/// rate read as the lower of the two. It allocates nothing per chat and
/// forgets nothing it needs, so the common path (a chat far below the cap) is
/// two atomic adds. A quiet chat is refused only when both of its slots are
/// shared with flooded chats: with 4,096 slots a row, about one in 16 million
/// per hot chat. Each slot counts joins in one-second windows, packed into one
/// atomic word as (window, count).
pub struct JoinThrottle {
    per_second: u32,
    started: Instant,
    hasher: std::hash::RandomState,
    rows: [Box<[std::sync::atomic::AtomicU64]>; 2],
}

/// Slots in each row of the join throttle's sketch.
const THROTTLE_SLOTS: usize = 4096;

impl JoinThrottle {
    /// Admits `per_second` joins per chat per second.
    pub fn new(per_second: u32) -> Self {
        let row = || (0..THROTTLE_SLOTS).map(|_| std::sync::atomic::AtomicU64::new(0)).collect();
        JoinThrottle {
            per_second,
            started: Instant::now(),
            hasher: std::hash::RandomState::new(),
            rows: [row(), row()],
        }
    }

    /// Counts a join into `chat`. On refusal, returns how long to wait: until
    /// the current window ends, plus a random part of the next window, so
    /// refused clients do not all come back at its first millisecond.
    pub fn admit(&self, chat: &impl std::hash::Hash, now: Instant) -> Result<(), u64> {
        use std::hash::BuildHasher;
        use std::sync::atomic::Ordering;
        let elapsed = now.saturating_duration_since(self.started);
        let window = elapsed.as_secs() as u32;
        let h = self.hasher.hash_one(chat);
        let slots = [(h as usize) % THROTTLE_SLOTS, ((h >> 32) as usize) % THROTTLE_SLOTS];
        let mut estimate = u32::MAX;
        for (row, slot) in self.rows.iter().zip(slots) {
            let cell = &row[slot];
            let mut seen = cell.load(Ordering::Relaxed);
            let count = loop {
                let (w, c) = ((seen >> 32) as u32, seen as u32);
                let c = if w == window { c.saturating_add(1) } else { 1 };
                match cell.compare_exchange_weak(
                    seen,
                    (u64::from(window) << 32) | u64::from(c),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => break c,
                    Err(now_seen) => seen = now_seen,
                }
            };
            estimate = estimate.min(count);
        }
        if estimate <= self.per_second {
            return Ok(());
        }
        let rest_of_window = 1000 - elapsed.subsec_millis() as u64;
        Err(rest_of_window + rand::random_range(0..1000u64))
    }
}

/// Bounds a resource's concurrent operations and the queue in front of them.
/// Beyond both, callers are refused at once instead of piling up: one slow
/// shard cannot take every task of the node with it.
#[derive(Debug)]
pub struct Bulkhead {
    max_in_flight: usize,
    permits: tokio::sync::Semaphore,
    max_waiting: usize,
    waiting: std::sync::atomic::AtomicUsize,
}

impl Bulkhead {
    pub fn new(max_in_flight: usize, max_waiting: usize) -> Self {
        Bulkhead {
            max_in_flight,
            permits: tokio::sync::Semaphore::new(max_in_flight),
            max_waiting,
            waiting: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// A slot, waiting in the bounded queue if all are taken; `None` when the
    /// queue is full too. A caller dropped while it waits leaves the queue
    /// (its place is a guard), and one dropped while it holds a slot frees it.
    pub async fn enter(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        use std::sync::atomic::Ordering;
        if let Ok(p) = self.permits.try_acquire() {
            return Some(p);
        }
        if self.waiting.fetch_add(1, Ordering::AcqRel) >= self.max_waiting {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        let _place = Waiting(&self.waiting);
        self.permits.acquire().await.ok()
    }

    /// Operations holding a slot now.
    pub fn in_flight(&self) -> usize {
        self.max_in_flight - self.permits.available_permits()
    }

    /// Operations waiting for a slot now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// A place in a [`Bulkhead`]'s queue, given up when dropped.
struct Waiting<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// The state of a [`Breaker`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls go through; consecutive failures are counted.
    Closed,
    /// Calls fail fast until the cool-down ends.
    Open,
    /// One probe call is let through; its outcome closes or reopens the breaker.
    HalfOpen,
}

impl BreakerState {
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }
}

/// Settings of a [`Breaker`].
#[derive(Debug, Clone, Copy)]
pub struct BreakerConfig {
    /// Consecutive failures that open the breaker.
    pub failures: u32,
    /// First cool-down; doubled after each failed probe, up to `max_cooldown`.
    pub cooldown: std::time::Duration,
    pub max_cooldown: std::time::Duration,
}

/// A consecutive-failures circuit breaker. Fails calls fast while a
/// resource is known to be down, and probes it with one call at a time.
#[derive(Debug)]
pub struct Breaker {
    cfg: BreakerConfig,
    inner: std::sync::Mutex<BreakerInner>,
}

#[derive(Debug)]
struct BreakerInner {
    state: BreakerState,
    failures: u32,
    cooldown: std::time::Duration,
    open_until: tokio::time::Instant,
}

/// A call the breaker let through; report its outcome with
/// [`Admitted::record`]. A probe dropped without an outcome (its caller was
/// cancelled) hands the probe back: the breaker stays open and lets the next
/// call probe at once, instead of waiting half-open for a verdict that
/// will never come.
#[derive(Debug)]
#[must_use = "report the call's outcome with record()"]
pub struct Admitted<'a> {
    breaker: &'a Breaker,
    probe: bool,
    recorded: bool,
}

impl Admitted<'_> {
    /// Reports how the call went. Returns the breaker's state change, if any.
    pub fn record(mut self, ok: bool) -> Option<BreakerState> {
        self.recorded = true;
        self.breaker.record(self.probe, ok)
    }
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        if self.probe && !self.recorded {
            let mut b = self.breaker.inner.lock().expect("breaker lock");
            if b.state == BreakerState::HalfOpen {
                b.state = BreakerState::Open;
                b.open_until = tokio::time::Instant::now();
            }
        }
    }
}

impl Breaker {
    pub fn new(cfg: BreakerConfig) -> Self {
        Breaker {
            cfg,
            inner: std::sync::Mutex::new(BreakerInner {
                state: BreakerState::Closed,
                failures: 0,
                cooldown: cfg.cooldown,
                open_until: tokio::time::Instant::now(),
            }),
        }
    }

    pub fn state(&self) -> BreakerState {
        self.inner.lock().expect("breaker lock").state
    }

    /// Lets a call through, or refuses it with the milliseconds until the next probe.
    pub fn admit(&self) -> Result<Admitted<'_>, u64> {
        let mut b = self.inner.lock().expect("breaker lock");
        let now = tokio::time::Instant::now();
        match b.state {
            BreakerState::Closed => Ok(self.call(false)),
            BreakerState::Open if now >= b.open_until => {
                b.state = BreakerState::HalfOpen;
                Ok(self.call(true))
            }
            BreakerState::Open => Err(b.open_until.duration_since(now).as_millis().max(1) as u64),
            // A probe is out; everyone else waits for its verdict.
            BreakerState::HalfOpen => Err(b.cooldown.as_millis().max(1) as u64),
        }
    }

    fn call(&self, probe: bool) -> Admitted<'_> {
        Admitted { breaker: self, probe, recorded: false }
    }

    /// Reports how an admitted call went. Returns the state change, if any.
    fn record(&self, probe: bool, ok: bool) -> Option<BreakerState> {
        let mut b = self.inner.lock().expect("breaker lock");
        let before = b.state;
        if ok {
            b.failures = 0;
            if probe || b.state == BreakerState::HalfOpen {
                b.state = BreakerState::Closed;
                b.cooldown = self.cfg.cooldown;
            }
        } else if probe {
            b.cooldown = (b.cooldown * 2).min(self.cfg.max_cooldown);
            b.state = BreakerState::Open;
            b.open_until = tokio::time::Instant::now() + b.cooldown;
        } else if b.state == BreakerState::Closed {
            b.failures += 1;
            if b.failures >= self.cfg.failures {
                b.state = BreakerState::Open;
                b.open_until = tokio::time::Instant::now() + b.cooldown;
            }
        }
        (b.state != before).then_some(b.state)
    }
}

#[cfg(test)]
mod breaker_tests {
    use super::*;
    use std::time::Duration;

    fn breaker() -> Breaker {
        Breaker::new(BreakerConfig {
            failures: 3,
            cooldown: Duration::from_millis(100),
            max_cooldown: Duration::from_millis(400),
        })
    }

    #[tokio::test(start_paused = true)]
    async fn opens_after_consecutive_failures_and_probes_to_close() {
        let b = breaker();
        for _ in 0..2 {
            let a = b.admit().unwrap();
            assert_eq!(a.record(false), None);
        }
        // A success in between resets the count.
        let a = b.admit().unwrap();
        a.record(true);
        for _ in 0..2 {
            let a = b.admit().unwrap();
            a.record(false);
        }
        let a = b.admit().unwrap();
        assert_eq!(a.record(false), Some(BreakerState::Open));
        assert!(b.admit().is_err(), "open: fail fast");
        tokio::time::advance(Duration::from_millis(101)).await;
        let probe = b.admit().unwrap();
        assert_eq!(b.state(), BreakerState::HalfOpen);
        assert!(b.admit().is_err(), "one probe at a time");
        assert_eq!(probe.record(true), Some(BreakerState::Closed));
        assert!(b.admit().is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_probe_reopens_for_longer() {
        let b = breaker();
        for _ in 0..3 {
            let a = b.admit().unwrap();
            a.record(false);
        }
        tokio::time::advance(Duration::from_millis(101)).await;
        let probe = b.admit().unwrap();
        assert_eq!(probe.record(false), Some(BreakerState::Open));
        tokio::time::advance(Duration::from_millis(150)).await;
        assert!(b.admit().is_err(), "cool-down doubled to 200 ms");
        tokio::time::advance(Duration::from_millis(60)).await;
        assert!(b.admit().is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_probe_hands_the_probe_back() {
        let b = breaker();
        for _ in 0..3 {
            b.admit().unwrap().record(false);
        }
        tokio::time::advance(Duration::from_millis(101)).await;
        let probe = b.admit().unwrap();
        assert_eq!(b.state(), BreakerState::HalfOpen);
        // The probing call is cancelled before it could report.
        drop(probe);
        assert_eq!(b.state(), BreakerState::Open, "not stuck half-open");
        let again = b.admit().expect("the next call probes at once");
        assert_eq!(again.record(true), Some(BreakerState::Closed));
    }

    /// A task waiting in `h`'s queue (returned once it waits); it yields whether it got in.
    async fn queued(h: &std::sync::Arc<Bulkhead>) -> tokio::task::JoinHandle<bool> {
        let h2 = h.clone();
        let task = tokio::spawn(async move { h2.enter().await.is_some() });
        while h.waiting() == 0 {
            tokio::task::yield_now().await;
        }
        task
    }

    #[tokio::test]
    async fn a_waiter_dropped_in_the_queue_gives_its_place_back() {
        let h = std::sync::Arc::new(Bulkhead::new(1, 1));
        let first = h.enter().await.unwrap();
        let waiter = queued(&h).await;
        waiter.abort();
        let _ = waiter.await;
        assert_eq!(h.waiting(), 0, "the cancelled waiter left the queue");
        let next = queued(&h).await;
        drop(first);
        assert!(next.await.unwrap(), "the queue still admits");
        assert_eq!(h.in_flight(), 0);
    }

    #[tokio::test]
    async fn bulkhead_refuses_beyond_its_queue() {
        let h = std::sync::Arc::new(Bulkhead::new(1, 1));
        let first = h.enter().await.unwrap();
        let waiter = queued(&h).await;
        assert!(h.enter().await.is_none(), "queue full: refused at once");
        drop(first);
        assert!(waiter.await.unwrap());
    }
}
