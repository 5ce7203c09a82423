//! Opening many clients at once, bounded three ways: a connect rate, a number
//! of attempts in flight, and a time after which no more are started. Every
//! attempt has its own timeout, so a stuck server shows up as counted
//! failures, never as a hang. What an attempt does (connect, hello, join...)
//! is the caller's; [`open_clients`] is the common case of clients that said hello.
//! [`for_each`] then takes every opened client through a setup step, bounded alike.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::{Semaphore, mpsc};
use tokio::time::MissedTickBehavior;

use crate::client::{Client, Failure, source_addr};
use crate::conn::{Conn, Dial};
use crate::peer::Peer;
use crate::server::Server;
use crate::token::Signer;

/// Clients connecting at once while a scenario sets up (not measured).
const SETUP_CONCURRENCY: usize = 100;
/// Setup connects must be done by then.
const SETUP_DEADLINE: Duration = Duration::from_secs(120);
/// One attempt (connect, upgrade and the first few requests) gets this long.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(20);
/// Setup requests (joins, watches, presence) of [`for_each`] in flight at once.
const EACH_CONCURRENCY: usize = 256;

/// How to open a fleet.
#[derive(Debug, Clone, Copy)]
pub struct Launch {
    pub count: usize,
    /// Attempts in flight at once.
    pub concurrency: usize,
    /// Attempts started per second at most; `None` for as fast as `concurrency` allows.
    pub rate: Option<f64>,
    /// No attempt starts after this long.
    pub deadline: Duration,
}

/// Failed attempts by stage, and the first one's message.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Failures {
    pub total: u64,
    pub by_stage: BTreeMap<String, u64>,
    pub first: Option<String>,
}

impl Failures {
    pub fn add(&mut self, stage: &str, message: impl FnOnce() -> String) {
        self.total += 1;
        *self.by_stage.entry(stage.to_string()).or_default() += 1;
        if self.first.is_none() {
            self.first = Some(message());
        }
    }

    pub fn add_failure(&mut self, f: &Failure) {
        self.add(f.stage.as_str(), || f.to_string());
    }

    pub fn merge(&mut self, other: &Failures) {
        self.total += other.total;
        for (k, v) in &other.by_stage {
            *self.by_stage.entry(k.clone()).or_default() += v;
        }
        if self.first.is_none() {
            self.first.clone_from(&other.first);
        }
    }
}

/// What a launch opened.
pub struct Launched<T> {
    /// The successful attempts' values, with their index.
    pub ok: Vec<(usize, T)>,
    pub failures: Failures,
    /// From the first attempt to the last answer.
    pub elapsed: Duration,
}

/// Runs `attempt(i)` for `i` in `0..spec.count`, bounded as `spec` says.
pub async fn launch<T, F, Fut>(spec: Launch, attempt: F) -> Launched<T>
where
    T: Send + 'static,
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Result<T, Failure>> + Send + 'static,
{
    let started = Instant::now();
    let slots = Arc::new(Semaphore::new(spec.concurrency.max(1)));
    let (tx, mut rx) = mpsc::unbounded_channel::<(usize, Result<T, Failure>)>();
    let mut pace = spec.rate.map(|r| {
        let mut i = tokio::time::interval(Duration::from_secs_f64(1.0 / r.max(1.0)));
        // Catch up after a stall (slots were full): the average rate stays bounded, and so does concurrency.
        i.set_missed_tick_behavior(MissedTickBehavior::Burst);
        i
    });
    let mut failures = Failures::default();
    let mut launched = 0;
    for i in 0..spec.count {
        if let Some(p) = pace.as_mut() {
            p.tick().await;
        }
        let left = spec.deadline.saturating_sub(started.elapsed());
        let Ok(Ok(permit)) = tokio::time::timeout(left, slots.clone().acquire_owned()).await else { break };
        let fut = attempt(i);
        let tx = tx.clone();
        tokio::spawn(async move {
            let r = tokio::time::timeout(ATTEMPT_TIMEOUT, fut)
                .await
                .unwrap_or_else(|_| Err(Failure::timeout(format!("no answer in {ATTEMPT_TIMEOUT:?}"))));
            drop(permit);
            let _ = tx.send((i, r));
        });
        launched += 1;
    }
    drop(tx);
    for _ in launched..spec.count {
        failures.add("not_started", || format!("no attempt started within {:?}", spec.deadline));
    }
    let mut ok = Vec::with_capacity(launched);
    // Every attempt answers within its timeout; the margin only guards against a lost task.
    let _ = tokio::time::timeout(ATTEMPT_TIMEOUT + Duration::from_secs(5), async {
        while let Some((i, r)) = rx.recv().await {
            match r {
                Ok(v) => ok.push((i, v)),
                Err(f) => failures.add_failure(&f),
            }
        }
    })
    .await;
    let answered = ok.len() as u64 + failures.total - (spec.count - launched) as u64;
    for _ in answered..launched as u64 {
        failures.add("lost", || "an attempt never answered".into());
    }
    ok.sort_by_key(|(i, _)| *i);
    Launched { ok, failures, elapsed: started.elapsed() }
}

/// Opens `count` herald clients that said hello as `user(i)` (setup, not measured).
pub async fn open_clients(
    server: &Server,
    signer: &Signer,
    count: usize,
    source_offset: u32,
    user: impl Fn(usize) -> String,
) -> (Vec<Client>, Failures) {
    let dial = Dial { peer: Peer::Herald, addr: server.addr, signer: Some(signer.clone()) };
    let (conns, failures) = open_conns(&dial, count, source_offset, user).await;
    let clients = conns
        .into_iter()
        .filter_map(|c| match c {
            Conn::Herald(c) => Some(c),
            Conn::Peer(_) => None,
        })
        .collect();
    (clients, failures)
}

/// Opens `count` clients of the server `dial` names (herald: after `hello` as
/// `user(i)`), from the sources at `source_offset` (setup, not measured).
pub async fn open_conns(
    dial: &Dial,
    count: usize,
    source_offset: u32,
    user: impl Fn(usize) -> String,
) -> (Vec<Conn>, Failures) {
    let spec = Launch { count, concurrency: SETUP_CONCURRENCY, rate: None, deadline: SETUP_DEADLINE };
    let out = launch(spec, |i| {
        let (dial, user) = (dial.clone(), user(i));
        async move { Conn::open(&dial, &user, source_addr(source_offset, i)).await }
    })
    .await;
    (out.ok.into_iter().map(|(_, c)| c).collect(), out.failures)
}

/// `f` for every item, [`EACH_CONCURRENCY`] at a time; what it gave for
/// those it did not fail, in the items' order (failures counted).
pub async fn for_each<T, U, F, Fut>(items: Vec<T>, failures: &mut Failures, f: F) -> Vec<U>
where
    F: Fn(T) -> Fut,
    Fut: Future<Output = Result<U, Failure>> + Send + 'static,
    U: Send + 'static,
{
    let slots = Arc::new(Semaphore::new(EACH_CONCURRENCY));
    let mut tasks = Vec::new();
    for item in items {
        let permit = slots.clone().acquire_owned().await.expect("the semaphore is never closed");
        let fut = f(item);
        tasks.push(tokio::spawn(async move {
            let r = fut.await;
            drop(permit);
            r
        }));
    }
    let mut kept = Vec::new();
    for t in tasks {
        match t.await {
            Ok(Ok(u)) => kept.push(u),
            Ok(Err(e)) => failures.add_failure(&e),
            Err(e) => failures.add("task", || e.to_string()),
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{ClientError, Stage};

    #[tokio::test]
    async fn counts_successes_and_failures() {
        let spec = Launch { count: 10, concurrency: 3, rate: None, deadline: Duration::from_secs(5) };
        let out = launch(spec, |i| async move {
            if i % 2 == 0 {
                Ok(i)
            } else {
                Err(Failure { stage: Stage::Hello, error: ClientError::BadFrame("odd".into()) })
            }
        })
        .await;
        assert_eq!(out.ok.iter().map(|(_, v)| *v).collect::<Vec<_>>(), vec![0, 2, 4, 6, 8]);
        assert_eq!(out.failures.total, 5);
        assert_eq!(out.failures.by_stage.get("hello"), Some(&5));
    }

    #[tokio::test]
    async fn stops_starting_at_the_deadline() {
        let spec = Launch { count: 5, concurrency: 1, rate: None, deadline: Duration::from_millis(50) };
        let out = launch(spec, |_| async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            Ok(())
        })
        .await;
        assert_eq!(out.ok.len(), 1);
        assert_eq!(out.failures.by_stage.get("not_started"), Some(&4));
    }
}
