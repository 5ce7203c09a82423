//! The bouncer: deals the chaos run's faults, one every 1 to 3 s while the
//! load runs: a node killed with SIGKILL or frozen with SIGSTOP (its machine
//! hung for 5 to 30 s, then SIGCONT), a NATS server killed, a PostgreSQL
//! shard's primary stopped, killed (a machine gone) or frozen (a machine
//! hung) and then failed over to its synchronous standby; each for an outage
//! of its own, then mended (a failed-over shard's old primary is rebuilt as
//! the new one's standby). Never two of one kind at once, so one node, one
//! NATS server and one shard at most are down. Most faults are aimed at a
//! quiet chat's burst: they land in its last send's round trip, on what that
//! send goes through, or as the fault is mended. Every choice comes from the
//! seeded generator it is given. Each mend starts the presence audit's check
//! of that fault (`chaos_presence.rs`). `HERALD_CHAOS_FAULTS` (names as in
//! [`Fault::key`], comma separated) restricts the faults dealt.
//!
//! Not here: the processes it strikes (`chaos_cell.rs`), the bursts (`chaos_sender.rs`).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rand::RngExt;
use rand::rngs::StdRng;

use super::presence::Presence;
use super::sender::QuietCtl;
use super::{NODES, QUIET_ROOM, Run};

/// The faults the bouncer deals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL a herald node; it is started again on its port after the outage.
    KillNode,
    /// SIGSTOP a herald node (its machine hung: sockets open, nothing answers)
    /// for 5 to 30 s, then SIGCONT.
    FreezeNode,
    /// Kill a nats-server; it is started again on its ports after the outage.
    RestartNats,
    /// Stop a PostgreSQL shard's primary (fast shutdown); it is started again after the outage.
    StopShard,
    /// SIGKILL a shard's primary and every process of it (its machine gone); after the outage (a
    /// failover manager noticing) its standby is promoted, then the old primary is rebuilt as the
    /// new one's synchronous standby.
    FailShard,
    /// SIGSTOP a shard's primary (its machine hung: TCP still accepts); then as [`Fault::FailShard`].
    FreezeShard,
}

/// The kinds of fault, each down once at most: nodes, NATS servers, shards.
const KINDS: usize = 3;
/// The node faults, one drawn when the kind is a node's.
const NODE_FAULTS: [Fault; 2] = [Fault::KillNode, Fault::FreezeNode];
/// The shard faults, one drawn when the kind is a shard's.
const SHARD_FAULTS: [Fault; 3] = [Fault::StopShard, Fault::FailShard, Fault::FreezeShard];
/// Every fault, for `HERALD_CHAOS_FAULTS`.
const ALL: [Fault; 6] =
    [Fault::KillNode, Fault::FreezeNode, Fault::RestartNats, Fault::StopShard, Fault::FailShard, Fault::FreezeShard];
/// A frozen node's outage, in ms: long enough that the other nodes drop its
/// users (3 s) and that it finds its own sweeps far apart when it wakes.
const FREEZE_MS: std::ops::RangeInclusive<u64> = 5_000..=30_000;

impl Fault {
    /// The fault's name in `HERALD_CHAOS_FAULTS`.
    pub fn key(self) -> &'static str {
        match self {
            Fault::KillNode => "kill-node",
            Fault::FreezeNode => "freeze-node",
            Fault::RestartNats => "restart-nats",
            Fault::StopShard => "stop-shard",
            Fault::FailShard => "fail-shard",
            Fault::FreezeShard => "freeze-shard",
        }
    }
}

/// The faults `HERALD_CHAOS_FAULTS` allows (every one when it is not set).
fn allowed_faults() -> Vec<Fault> {
    let Ok(list) = std::env::var("HERALD_CHAOS_FAULTS") else { return ALL.to_vec() };
    let names: Vec<&str> = list.split(',').map(str::trim).filter(|n| !n.is_empty()).collect();
    for n in &names {
        assert!(
            ALL.iter().any(|f| f.key() == *n),
            "HERALD_CHAOS_FAULTS: no fault {n:?}; faults are {:?}",
            ALL.map(Fault::key)
        );
    }
    let allowed: Vec<Fault> = ALL.into_iter().filter(|f| names.contains(&f.key())).collect();
    eprintln!("chaos: HERALD_CHAOS_FAULTS deals only {:?}", allowed.iter().map(|f| f.key()).collect::<Vec<_>>());
    allowed
}

/// The fault of `kind` whose draw is `pick`, among those allowed.
fn fault_of(kind: usize, pick: usize, allowed: &[Fault]) -> Option<Fault> {
    let of_kind: Vec<Fault> = match kind {
        0 => NODE_FAULTS.to_vec(),
        1 => vec![Fault::RestartNats],
        _ => SHARD_FAULTS.to_vec(),
    };
    let of_kind: Vec<Fault> = of_kind.into_iter().filter(|f| allowed.contains(f)).collect();
    (!of_kind.is_empty()).then(|| of_kind[pick % of_kind.len()])
}

fn kind_of(f: Fault) -> usize {
    match f {
        Fault::KillNode | Fault::FreezeNode => 0,
        Fault::RestartNats => 1,
        Fault::StopShard | Fault::FailShard | Fault::FreezeShard => 2,
    }
}

fn on_shard(f: Fault) -> bool {
    kind_of(f) == 2
}

/// Deals a fault every 1 to 3 s until the load stops, never two of one kind
/// at once (so one node, one NATS server, one shard at most is down), and
/// waits until every fault has been undone. Most faults are aimed at a quiet
/// chat: its burst starts just before the fault (a send in flight on the
/// killed node or the stopped shard) or right as the fault is mended.
pub async fn bouncer(
    run: Arc<Run>,
    quiet: Vec<Arc<QuietCtl>>,
    presence: Arc<Presence>,
    mut rng: StdRng,
) -> HashMap<&'static str, u64> {
    let allowed = allowed_faults();
    let down: Arc<[AtomicBool; KINDS]> = Arc::new(Default::default());
    let mut dealt: HashMap<&'static str, u64> = HashMap::new();
    let mut tasks = Vec::new();
    loop {
        let pause = Duration::from_millis(rng.random_range(1_000..=3_000));
        if Instant::now() + pause >= run.load_ends {
            break;
        }
        tokio::time::sleep(pause).await;
        // Every choice is drawn whether it is used or not, so a seed replays the same choices.
        let kind_pick: usize = rng.random_range(0..KINDS);
        let node_how: usize = rng.random_range(0..NODE_FAULTS.len());
        let shard_how: usize = rng.random_range(0..SHARD_FAULTS.len());
        let node = rng.random_range(0..NODES);
        let nats = rng.random_range(0..3);
        let shard = rng.random_range(0..2);
        let outage = [rng.random_range(500..2_000), rng.random_range(200..2_000), rng.random_range(500..3_000)];
        let freeze_ms = rng.random_range(FREEZE_MS);
        let (aim, aim_at_mend, lead, quiet_pick) =
            (rng.random_bool(0.7), rng.random_bool(0.3), rng.random::<f64>(), rng.random::<u64>() as usize);
        let free: Vec<usize> =
            (0..KINDS).filter(|&i| !down[i].load(Ordering::SeqCst) && fault_of(i, 0, &allowed).is_some()).collect();
        if free.is_empty() {
            run.note("bouncer: one of each kind is down already; skipped".into());
            continue;
        }
        let kind = free[kind_pick % free.len()];
        let how = if kind == 0 { node_how } else { shard_how };
        let Some(fault) = fault_of(kind, how, &allowed) else { continue };
        let target = match kind {
            0 => node,
            1 => nats,
            _ => shard,
        };
        // The quiet chat to aim at: one whose sender is on the node, or whose chat is on the shard, if any waits.
        let mut target_chat = None;
        if aim && Instant::now() + QUIET_ROOM < run.load_ends {
            let idle: Vec<&Arc<QuietCtl>> = quiet.iter().filter(|q| q.idle.load(Ordering::SeqCst)).collect();
            let fits: Vec<&Arc<QuietCtl>> = idle
                .iter()
                .copied()
                .filter(|q| match fault {
                    Fault::KillNode | Fault::FreezeNode => q.node.load(Ordering::SeqCst) == target,
                    f if on_shard(f) => q.shard == target,
                    _ => true,
                })
                .collect();
            let pool = if fits.is_empty() { idle } else { fits };
            if !pool.is_empty() {
                let q = pool[quiet_pick % pool.len()];
                if q.idle.compare_exchange(true, false, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
                    target_chat = Some(q.clone());
                }
            }
        }
        // A fault aimed at a burst takes down what its last send goes through: its sender's
        // node, the NATS server that node publishes through, or its chat's shard.
        let mut target = target;
        if let Some(q) = &target_chat {
            let node = q.node.load(Ordering::SeqCst);
            match fault {
                Fault::KillNode | Fault::FreezeNode if node != usize::MAX => target = node,
                Fault::RestartNats if node != usize::MAX => {
                    if let Some(server) = run.cell.nats_server_of_node(node).await {
                        target = server;
                    }
                }
                f if on_shard(f) => target = q.shard,
                _ => {}
            }
        }
        down[kind].store(true, Ordering::SeqCst);
        *dealt.entry(fault_name(fault)).or_default() += 1;
        let mut at_mend = None;
        if let Some(q) = target_chat {
            let label = run.chat_label(q.chat);
            if aim_at_mend {
                run.note(format!("bouncer: {label}'s burst will start as the next fault is mended"));
                at_mend = Some(q);
            } else {
                // The fault lands on the tail of the burst: somewhere in the last send's round trip
                // (as long as the quickest send before it took) or just after it, when the node has
                // stored it (a write that commits as its node dies or its shard stops may never be
                // announced) or published it (a message inside a NATS server that dies is lost).
                let sent = q.last.notified();
                tokio::pin!(sent);
                sent.as_mut().enable();
                q.go.notify_one();
                let came = tokio::time::timeout(Duration::from_secs(10), sent).await.is_ok();
                let window_us = q.rtt_us.load(Ordering::SeqCst).clamp(500, 50_000) + 2_000;
                let lead = (lead * window_us as f64) as u64;
                tokio::time::sleep(Duration::from_micros(lead)).await;
                let on = q.node.load(Ordering::SeqCst);
                run.note(format!(
                    "bouncer: {label}'s last send {} (its sender on {}); the fault comes {lead} µs later",
                    if came { "went out" } else { "did not go out in 10 s" },
                    if on == usize::MAX { "no node".to_string() } else { format!("node-{on}") }
                ));
            }
        }
        let outage = Duration::from_millis(if fault == Fault::FreezeNode { freeze_ms } else { outage[kind] });
        let struck = Instant::now();
        // A fault of the other shard than the probes' chat's does not touch presence.
        let touches = !on_shard(fault) || target == run.presence_shard;
        presence.struck(touches);
        strike(&run, fault, target, outage).await;
        let (run2, down2, presence) = (run.clone(), down.clone(), presence.clone());
        tasks.push(tokio::spawn(async move {
            mend(&run2, fault, target, struck, outage, at_mend, &presence, touches).await;
            down2[kind].store(false, Ordering::SeqCst);
            presence.cleared(touches);
        }));
    }
    for t in tasks {
        t.await.expect("fault task");
    }
    dealt
}

/// How the report names a fault.
pub fn fault_name(f: Fault) -> &'static str {
    match f {
        Fault::KillNode => "node SIGKILL",
        Fault::FreezeNode => "node SIGSTOP",
        Fault::RestartNats => "NATS server restart",
        Fault::StopShard => "PostgreSQL shard stop",
        Fault::FailShard => "PostgreSQL failover after a primary SIGKILL",
        Fault::FreezeShard => "PostgreSQL failover after a primary SIGSTOP",
    }
}

/// The breaking half of a fault, done at once (the bouncer may have aimed it
/// at a send in flight): SIGKILL or SIGSTOP a node, kill a NATS server, or
/// signal a shard's fast shutdown.
async fn strike(run: &Run, fault: Fault, i: usize, outage: Duration) {
    let cell = &run.cell;
    let ms = outage.as_millis();
    match fault {
        Fault::KillNode => {
            cell.kill_node(i, &format!("SIGKILL at t={:.3}s", run.secs()));
            run.note(format!("FAULT kill -9 node-{i} for {ms} ms"));
        }
        Fault::FreezeNode => {
            cell.freeze_node(i, &format!("SIGSTOP at t={:.3}s", run.secs()));
            run.note(format!("FAULT SIGSTOP node-{i} for {ms} ms"));
        }
        Fault::RestartNats => {
            cell.kill_nats(i).await;
            run.note(format!("FAULT NATS server {i} down for {ms} ms"));
        }
        Fault::StopShard => {
            cell.signal_shard_stop(i);
            run.note(format!("FAULT stop PostgreSQL shard {i} for {ms} ms"));
        }
        Fault::FailShard => {
            cell.on_shard(i, |s| s.kill9_primary()).await;
            run.note(format!("FAULT kill -9 shard {i}'s primary; its standby promoted {ms} ms later"));
        }
        Fault::FreezeShard => {
            cell.on_shard(i, |s| s.freeze_primary()).await;
            run.note(format!("FAULT SIGSTOP shard {i}'s primary; its standby promoted {ms} ms later"));
        }
    }
}

/// The rest of a fault: wait `outage`, mend (starting `at_mend`'s burst right
/// then), wait until it is mended, and start the presence check of it.
#[allow(clippy::too_many_arguments)]
async fn mend(
    run: &Run,
    fault: Fault,
    i: usize,
    struck: Instant,
    outage: Duration,
    at_mend: Option<Arc<QuietCtl>>,
    presence: &Presence,
    touches: bool,
) {
    let cell = &run.cell;
    let name = fault_name(fault);
    let mended = || {
        if let Some(q) = &at_mend {
            q.go.notify_one();
        }
    };
    match fault {
        Fault::KillNode => {
            tokio::time::sleep(outage).await;
            cell.restart_node(i, &format!("started again at t={:.3}s", run.secs()));
            mended();
            let started = Instant::now();
            if cell.wait_serving(i, Duration::from_secs(20)).await {
                run.note(format!("MENDED node-{i} serving after {} ms", started.elapsed().as_millis()));
            } else {
                run.fail(format!("node-{i} did not serve HTTP within 20 s of its restart"));
            }
            presence.mended(name, touches);
        }
        Fault::FreezeNode => {
            tokio::time::sleep(outage).await;
            cell.thaw_node(i, &format!("SIGCONT at t={:.3}s", run.secs()));
            mended();
            let started = Instant::now();
            if cell.wait_serving(i, Duration::from_secs(20)).await {
                run.note(format!("MENDED node-{i} woken, serving after {} ms", started.elapsed().as_millis()));
            } else {
                run.fail(format!("node-{i} did not serve HTTP within 20 s of its SIGCONT"));
            }
            presence.mended(name, touches);
        }
        Fault::RestartNats => {
            tokio::time::sleep(outage).await;
            cell.start_nats(i).await;
            mended();
            let started = Instant::now();
            if cell.nats_formed(Duration::from_secs(20)).await {
                run.note(format!("MENDED NATS cluster whole again after {} ms", started.elapsed().as_millis()));
            } else {
                run.note(format!("NATS cluster not whole 20 s after server {i} restarted"));
            }
            presence.mended(name, touches);
        }
        Fault::StopShard => {
            cell.stop_shard(i).await;
            run.note(format!("shard {i} stopped"));
            tokio::time::sleep(outage).await;
            cell.start_shard(i).await;
            mended();
            run.shard_outages.lock().unwrap().push((i, struck, Instant::now()));
            run.note(format!("MENDED shard {i} started again"));
            presence.mended(name, touches);
        }
        Fault::FailShard | Fault::FreezeShard => {
            tokio::time::sleep(outage).await;
            let started = Instant::now();
            cell.on_shard(i, |s| s.promote_standby()).await;
            mended();
            run.failovers.lock().unwrap().push((i, struck, Instant::now()));
            run.note(format!("MENDED shard {i} failed over: standby promoted in {} ms", started.elapsed().as_millis()));
            // Presence reads the promoted standby from now on; the rebuild below still counts as down.
            presence.mended(name, touches);
            let started = Instant::now();
            cell.on_shard(i, |s| s.rebuild_old_primary()).await;
            run.note(format!(
                "shard {i}'s old primary rebuilt as the synchronous standby in {} ms",
                started.elapsed().as_millis()
            ));
        }
    }
}
