//! `smoke`: every herald scenario at a tiny size, one run each, for the test
//! suite: idle (200 connections), sends, the join flood, fanout (100
//! watchers, two short steps; then again with hot-chat coalescing on and the
//! watchers fetching what each `notify` tells them of), hot (one chat, 50
//! watchers, 40 messages/s for 1 s, pushed and then coalesced), churn (400
//! short-lived connections), joinflood (two short steps: 100 joins at
//! 200/s, 200 at 400/s, a quiet chat beside), presence (30 present users, 5
//! of them churning, 100 changes) and inbox (300 chats, 6,000 events, one
//! user in 50 of them, pages of 20), inbox-live (100 live inboxes in chats of 5, 100 messages/s for
//! 2 s), sendhook (50 sends without and with a send hook) and webhook (4 senders at 200/s, 1 s with the
//! receiver up, 1 s down), slowloris (400 attack sockets against a node of 256 files, 5 s), and
//! v1.2's streams (4 streams, 3 watchers each, 25 appends/s for 1 s), threads (40 threads in 20
//! chats of a 300-chat store, pages of 5), members (a chat of 300, pages of 50), files (10 files
//! of 64 KiB through an S3 bucket's signed URLs) and search (2,000 messages in 200 chats, a member of
//! 20). Fails
//! (non-zero exit) when a scenario errs or
//! its own checks say something was lost. `--peers` adds the peers' idle,
//! fanout, churn and joinflood at the same size (they must be installed).

use std::time::Instant;

use clap::{Args, Parser};
use serde_json::Value;

use crate::peer::Peer;
use crate::report;

/// `herald-bench smoke`.
#[derive(Debug, Args)]
pub struct SmokeArgs {
    /// Also run these peers' idle, fanout, churn and joinflood at the same size.
    #[arg(long, value_delimiter = ',')]
    pub peers: Vec<Peer>,
    /// Flags passed on to every scenario (e.g. --server-bin=PATH), after `--`.
    #[arg(last = true)]
    pub extra: Vec<String>,
}

/// Runs the smoke set; an error names every scenario that failed.
pub async fn run(args: SmokeArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut cases: Vec<(String, Vec<String>)> = vec![
        ("idle".into(), words("idle --conns 200 --chats 10 --settle-s 0.5 --connect-rate 5000")),
        ("sends".into(), words("sends --senders 10 --messages 20")),
        ("joins".into(), words("sends --op join --senders 10 --messages 10")),
        (
            "fanout".into(),
            words("fanout --watchers 100 --publishers 4 --start 2000 --steps 2 --step-s 0.5 --latency-s 0.5"),
        ),
        // A small chat's send-to-delivery latency at a given rate, no ladder.
        (
            "fanout latency".into(),
            words("fanout --watchers 20 --publishers 4 --steps 0 --latency-rate 100 --latency-s 0.5"),
        ),
        // The hub's hot-chat coalescing (50 events/s: past the 10/s floor), watchers fetching on notify.
        (
            "fanout coalesced".into(),
            words(
                "fanout --watchers 100 --publishers 4 --start 5000 --steps 1 --step-s 0.5 --latency-s 0.5 \
                 --drain-ms 1000 --fetch-on-notify --server-arg=--hot-chat-deliveries=1000",
            ),
        ),
        // One hot chat: herald pushing, then notify + fetch (the threshold lowered to this size).
        ("hot".into(), words("hot --watchers 50 --rate 40 --seconds 1 --publishers 4 --threshold 500")),
        ("churn".into(), words("churn --rate 200 --duration-s 2 --hold-ms 100 --chats 10")),
        ("joinflood".into(), words("joinflood --start 200 --steps 2 --step-s 0.5 --quiet-rate 20")),
        ("presence".into(), words("presence --present 30 --churners 5 --changes 100 --settle-ms 300")),
        ("inbox".into(), words("inbox --chats 300 --events 6000 --member-chats 50 --limit 20 --reads 3")),
        ("inbox-live".into(), words("inbox-live --users 100 --members 5 --rate 100 --seconds 2")),
        ("sendhook".into(), words("sendhook --messages 50")),
        ("webhook".into(), words("webhook --senders 4 --chats 2 --rate 200 --seconds 1")),
        // More attack sockets than the server has files, 2 s deadlines; real clients timed after 2.5 s.
        (
            "slowloris".into(),
            words(
                "slowloris --attack-sockets 400 --per-process 400 --seconds 5 --warmup-s 2.5 --probe-every-ms 200 \
                 --server-nofile 256 --server-arg=--header-timeout-ms=2000 --server-arg=--keepalive-timeout-ms=2000 \
                 --server-arg=--body-timeout-ms=2000",
            ),
        ),
        // v1.2: 4 streams, 3 watchers each, 25 appends/s each for 1 s.
        ("streams".into(), words("streams --streams 4 --watchers 3 --rate 25 --seconds 1")),
        // v1.2: 40 threads (2 in each of 20 chats) in a 300-chat store, pages of 5.
        (
            "threads".into(),
            words("threads --chats 300 --events 9000 --member-chats 20 --threads 40 --limit 5 --reads 2"),
        ),
        // v1.2: a chat of 300 members, pages of 50.
        ("members".into(), words("members --members 300 --limit 50 --reads 2")),
        // v1.2: 10 files of 64 KiB up and down through an S3 bucket's signed URLs (versitygw, scripts/s3.sh).
        ("files".into(), words("files --files 10 --size-kib 64")),
        // v1.2: search in a store of 2,000 messages in 200 chats, as a member of 20.
        ("search".into(), words("search --chats 200 --events 2000 --member-chats 20 --reads 3")),
    ];
    for p in &args.peers {
        if *p == Peer::Herald {
            continue;
        }
        let peer = format!("--peer={}", p.as_str());
        let mut idle = words("idle --conns 200 --chats 10 --settle-s 0.5 --connect-rate 5000");
        idle.push(peer.clone());
        cases.push((format!("idle {}", p.as_str()), idle));
        let mut fan = words("fanout --watchers 100 --publishers 4 --start 2000 --steps 2 --step-s 0.5 --latency-s 0.5");
        fan.push(peer.clone());
        cases.push((format!("fanout {}", p.as_str()), fan));
        let mut churn = words("churn --rate 200 --duration-s 2 --hold-ms 100 --chats 10");
        churn.push(peer.clone());
        cases.push((format!("churn {}", p.as_str()), churn));
        if *p != Peer::Nats {
            let mut flood = words("joinflood --start 200 --steps 2 --step-s 0.5 --quiet-rate 20");
            flood.push(peer);
            cases.push((format!("joinflood {}", p.as_str()), flood));
        }
    }
    let mut failed = Vec::new();
    for (name, mut argv) in cases {
        let herald_only = !argv.iter().any(|a| a.starts_with("--peer="));
        if herald_only {
            argv.extend(args.extra.iter().cloned());
        }
        let t = Instant::now();
        let result = run_case(argv).await;
        let verdict = match &result {
            Ok(runs) if name == "hot" => check_hot(runs),
            Ok(runs) => check(&name, &report::median(runs)),
            Err(e) => Err(format!("{e:#}")),
        };
        match verdict {
            Ok(()) => eprintln!("smoke {name}: ok ({:.1} s)", t.elapsed().as_secs_f64()),
            Err(why) => {
                eprintln!("smoke {name}: FAILED: {why}");
                failed.push(format!("{name} ({why})"));
            }
        }
    }
    eprintln!("smoke: {:.1} s in all", started.elapsed().as_secs_f64());
    // Each failure again with its reason: the end of the output is what a CI log shows.
    anyhow::ensure!(failed.is_empty(), "smoke failed: {}", failed.join("; "));
    Ok(())
}

fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(String::from).collect()
}

async fn run_case(argv: Vec<String>) -> anyhow::Result<Vec<Value>> {
    let cli = crate::Cli::try_parse_from(std::iter::once("herald-bench".to_string()).chain(argv))?;
    Box::pin(crate::dispatch(cli.command)).await
}

/// A scenario's own checks, on its (single) run.
fn check(name: &str, m: &Value) -> Result<(), String> {
    let num = |k: &str| m.get(k).and_then(Value::as_f64).unwrap_or(-1.0);
    let yes = |k: &str| m.get(k).and_then(Value::as_bool).unwrap_or(false);
    if num("failed") != 0.0 {
        return Err(format!("failed requests: {}", m.get("failures").map_or("-".into(), |f| f.to_string())));
    }
    let ok = match name.split(' ').next().unwrap_or(name) {
        "idle" => num("established") == num("conns") && num("dropped") == 0.0,
        "sends" => yes("all_delivered") && num("acked") == num("sent"),
        "joins" => yes("members_match"),
        "churn" => num("completed") == num("planned"),
        // Real clients served after the first deadline, the attack's sockets closed, nothing acked lost.
        "slowloris" => num("probes_ok") > 0.0 && num("attack_closed") > 0.0 && num("acked_lost") == 0.0,
        // Every change counted and pushed to the 25 watchers (fewer than 100 present: one push per watcher).
        // Every message's chat pushed to its members, and every inbox exact at the end.
        "inbox-live" => {
            num("sent") >= 100.0
                && num("uncovered") == 0.0
                && num("inexact") == 0.0
                && num("dropped") == 0.0
                && num("pushes") >= num("sent")
        }
        "presence" => num("changes") >= 100.0 && num("pushes_per_change") >= 25.0 && num("dropped") == 0.0,
        // Every join offered acked and counted as a member; the ladder's rate verdict is not checked
        // (a loaded machine may fall behind a step's rate without anything being wrong).
        "joinflood" => {
            num("joins_acked") == num("joins_planned")
                && yes("members_match")
                && num("steps_run") >= 1.0
                && m.get("quiet_error").is_none_or(Value::is_null)
        }
        // The latency form has no ladder: its one phase delivered, nothing lost.
        "fanout" if name == "fanout latency" => {
            num("latency_deliveries_per_s") > 0.0 && num("latency_lost") == 0.0 && num("watcher_errors") == 0.0
        }
        // Coalescing: every event reached every watcher (pushed or fetched on a notice), in order, and
        // both happened; the step's rate and drain verdict is not checked, as for joinflood.
        "fanout" if name == "fanout coalesced" => {
            let steps = m.get("steps").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
            let whole = |s: &Value| s["lost"] == 0 && s["publish_errors"] == 0 && s["published"].as_u64() > Some(0);
            !steps.is_empty()
                && steps.iter().all(whole)
                && num("latency_lost") == 0.0
                && num("out_of_order") == 0.0
                && num("watcher_errors") == 0.0
                && num("fetched") > 0.0
                && num("notifies") > 0.0
        }
        "fanout" => num("steps_passed") >= 1.0 && num("latency_lost") == 0.0 && num("watcher_errors") == 0.0,
        "inbox" => yes("exact") && num("chats_listed") > 0.0,
        "members" => yes("exact") && num("members_listed") == 300.0,
        "search" => num("failed") == 0.0 && num("found") > 0.0,
        "threads" => yes("exact") && yes("threads_exact") && num("threads_listed") == 40.0,
        // Every acked append pushed to every watcher in place, each stream stored as 2 events
        // (message, final edit) and ended, every watcher's text equal to the stored one.
        "streams" => {
            num("appends") > 0.0
                && num("lost") == 0.0
                && num("out_of_place") == 0.0
                && num("events_per_stream") == 2.0
                && num("not_done") == 0.0
                && num("dropped") == 0.0
                && yes("texts_equal")
        }
        // Every event stored with the receiver up, then down, delivered once it is back, each signed.
        "webhook" => yes("complete") && num("backlog") > 0.0,
        // Every send asked the hook, over kept-alive connections.
        "sendhook" => num("hook_requests") > 50.0 && (1.0..=2.0).contains(&num("hook_connections")),
        _ => true,
    };
    if !ok {
        let detail = serde_json::to_string(&strip(m)).unwrap_or_default();
        return Err(format!("its checks failed: {}", detail.chars().take(600).collect::<String>()));
    }
    Ok(())
}

/// `hot`'s checks, on each of its runs (herald pushing, then coalescing):
/// every watcher ended with every event, none closed, and the second run
/// did notify and fetch.
fn check_hot(runs: &[Value]) -> Result<(), String> {
    for m in runs {
        let num = |k: &str| m.get(k).and_then(Value::as_f64).unwrap_or(-1.0);
        let coalesced = m["mode"] != "herald push";
        let ok = num("published") > 0.0
            && num("lost") == 0.0
            && num("watchers_short") == 0.0
            && num("closed_4008") == 0.0
            && num("watcher_errors") == 0.0
            && (!coalesced || (num("notifies") > 0.0 && num("fetched") > 0.0));
        if !ok {
            let detail = serde_json::to_string(&strip(m)).unwrap_or_default();
            return Err(format!("its checks failed: {}", detail.chars().take(600).collect::<String>()));
        }
    }
    Ok(())
}

/// A run without its bulky parts (per-step detail), for a failure message.
fn strip(m: &Value) -> Value {
    let mut m = m.clone();
    if let Some(o) = m.as_object_mut() {
        o.remove("steps");
        o.remove("server_log");
    }
    m
}
