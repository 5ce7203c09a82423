//! Chaos, with real servers: three nats-servers, two PostgreSQL shards (each
//! a primary with a synchronous standby) and three herald binaries, while a
//! seeded bouncer kills a node with SIGKILL or freezes it with SIGSTOP for 5
//! to 30 s, restarts a NATS server, stops a shard's primary, or kills
//! (SIGKILL) or freezes (SIGSTOP) it and fails the shard over to its standby,
//! every 1 to 3 seconds, and clients behave as the protocol says: patient on
//! `throttled` and `unavailable`, reconnecting and resuming each chat with
//! `watch` `after` the last seq held, fetching on a gap and on `notify`,
//! resending with the same `client_id` until the send is acknowledged, and
//! (watchers, as the SDK) pinging a silent link and leaving a node that does
//! not answer.
//!
//! The auditor then checks what a user would see:
//! - every acknowledged send is stored exactly once, at the seq it was acknowledged with;
//! - each chat's seqs are 1, 2, 3, ... without a gap;
//! - every watcher holds every event of its chats, in order, as stored, and was never pushed a seq twice;
//! - within 10 s after the load stops, every watcher holds its chats' latest seq, through pushes and the
//!   fetches the protocol prescribes (a gap, a `notify`), never an unconditional final fetch;
//! - a quiet chat (a burst of sends, then silence while the faults go on) reaches all its watchers within
//!   10 s of its last acknowledged send: a lost hint must not wait for a next event that never comes;
//! - after every fault is mended, every node agrees again on who is present (a probe user on each node,
//!   asking its node `presence` and following the pushes), within 15 s of time with no fault down
//!   (`tests/common/chaos_presence.rs` has the rule).
//!
//! Many faults are aimed at a quiet chat's burst: they strike the node, the NATS server or the shard its
//! last send goes through while that send is in flight, or the burst starts as a fault is mended.
//!
//! `HERALD_CHAOS_SEED` replays a seed (the bouncer's choices and timings and the clients' choices; real
//! timing stays the machine's). `HERALD_CHAOS_SECS` sets the length of the load (default 30 s).
//! `HERALD_CHAOS_FAULTS` (e.g. `freeze-node` or `kill-node,restart-nats`) deals only those faults. The run
//! prints its seed and figures; `cargo test -p herald --test chaos -- --include-ignored --nocapture` shows them when it
//! passes. A failed run keeps the node logs and a timeline (`HERALD_CHAOS_KEEP=1`: a passed one too).
//! docs/reliability.md has the long run's figures. The machinery (the cell, the clients, the bouncer,
//! the auditor) is in `tests/common/chaos*.rs`; this file is the story.

mod common;

use common::chaos::load::Load;
use common::chaos::presence::Presence;
use common::chaos::{Cell, NODES, Run, Settings, audit, faults};
use rand::{RngExt, SeedableRng};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs nats-server and PostgreSQL (Debian packages); scripts/test.sh runs it"]
async fn under_kills_restarts_and_stopped_shards_every_acked_send_is_stored_once_and_reaches_every_watcher_in_order() {
    let settings = Settings::from_env();
    let mut seeds = settings.seeds();

    // A cell: three herald nodes over three NATS servers and two PostgreSQL shards.
    let cell = Cell::start(NODES).await;
    // Busy and quiet chats on both shards, their members, and a token for every user.
    let (run, tokens) = Run::set_up(cell, &settings).await;

    // The load: watchers of every chat, then busy senders and quiet chats' bursts, spread over the nodes.
    let mut load = Load::start(&run, &tokens, &mut seeds);
    // A presence probe on every node, each asking its own node who is present in their chat.
    let presence = Presence::start(&run, &tokens);
    // The faults, one every 1 to 3 s while the load runs: a node killed or frozen, a NATS server killed,
    // a shard stopped, each mended after an outage; most aimed at a quiet chat's burst. After each mend,
    // every node must agree again on who is present.
    let bouncer = rand::rngs::StdRng::seed_from_u64(seeds.random());
    let faults = tokio::spawn(faults::bouncer(run.clone(), load.quiet.clone(), presence.clone(), bouncer));

    // The load runs its time; then pending sends get their last chance and every fault is mended.
    let stopped = run.stop_load_when_due().await;
    let ledger = load.senders_done().await;
    let dealt = faults.await.expect("bouncer");
    run.note("every fault mended; senders done".into());

    // Every watcher holds each chat's latest seq within 10 s, by itself; every node agrees on presence.
    let (converged, ()) = tokio::join!(audit::converge_after_load(&run, &load, &ledger, stopped), presence.settle());
    run.stop_clients();
    presence.stop();
    load.watchers_done().await;

    // Nothing acknowledged is lost: every log holds each acknowledged send once, at its seq, as every
    // watcher holds it.
    let checked = audit::check_logs(&run, &ledger, &load, &converged.targets).await;

    eprintln!("{}", audit::report(&run, &settings, &ledger, &load, &checked, &converged, dealt, &presence));
    run.finish(&settings);
}
