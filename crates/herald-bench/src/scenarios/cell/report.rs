//! The cell's figures from what the workers counted and the readings taken
//! (before the users, with them held, at the load's start and end), printed
//! for people or as one JSON object with the machine; and the smoke check
//! (every message reached every watcher once). Counting is `tally`'s,
//! reading `probe`'s.

use serde::Serialize;
use serde_json::{Value, json};

use super::CellArgs;
use super::probe::Reading;
use super::tally::Sum;
use super::workload::Plan;
use crate::fleet::Failures;
use crate::latency::Latencies;
use crate::machine::Machine;

/// One setup step over all workers.
#[derive(Debug, Default, Serialize)]
pub struct Setup {
    pub count: u64,
    pub failures: Failures,
    /// The slowest worker's time.
    pub secs: f64,
    /// The workers' RSS before their first user, in KiB.
    #[serde(skip)]
    pub rss_start_kib: u64,
}

impl Setup {
    pub fn add(&mut self, count: u64, failures: &Failures, secs: f64, rss_start_kib: u64) {
        self.count += count;
        self.failures.merge(failures);
        self.secs = self.secs.max(secs);
        self.rss_start_kib += rss_start_kib;
    }
}

/// The readings of one run.
pub struct Readings<'a> {
    /// Nodes up, no users.
    pub base: &'a Reading,
    /// Users connected, chats open, no load.
    pub held: &'a Reading,
    /// The load's start and end.
    pub start: &'a Reading,
    pub end: &'a Reading,
}

/// Everything else a run's figures come from.
pub struct Inputs<'a> {
    pub args: &'a CellArgs,
    pub plan: &'a Plan,
    pub joined: &'a Setup,
    pub opened: &'a Setup,
    /// Each node's `herald_connections` with the users held.
    pub node_conns: &'a [u64],
    pub client_rss_kib: u64,
    pub sum: &'a Sum,
}

/// The run's figures as one JSON object.
pub fn figures(i: &Inputs, r: &Readings) -> Value {
    let s = &i.sum;
    let c = &s.counted;
    let window = r.end.at.duration_since(r.start.at).as_secs_f64().max(1e-3);
    let conns: u64 = i.node_conns.iter().sum();
    let held = i.joined.count.saturating_sub(c.dropped);
    let per_conn = |x: f64| if conns == 0 { Value::Null } else { json!(round(x / conns as f64)) };
    let expected = s.expected();
    let pushes = c.delivered + c.other_events + c.inbox_pushes + c.typing_pushes + c.presence_pushes + c.notifies;
    let node_cpu: Vec<f64> = r.end.node_cpu_s.iter().zip(&r.start.node_cpu_s).map(|(e, b)| (e - b).max(0.0)).collect();
    let cpu: f64 = node_cpu.iter().sum();
    let us_per = |n: u64| if n == 0 { Value::Null } else { json!(round(cpu * 1e6 / n as f64)) };
    let node_rss: u64 = r.held.node_rss_kib.iter().sum();
    let node_rss_base: u64 = r.base.node_rss_kib.iter().sum();
    let kernel = r.held.sockets.mem_bytes.saturating_sub(r.base.sockets.mem_bytes) as f64;
    let nats: Vec<Value> = (0..r.end.nats_nodes.len())
        .map(|n| {
            let (a, b) = (&r.start.nats_nodes[n], &r.end.nats_nodes[n]);
            json!({
                "node": n,
                "connections": i.node_conns.get(n),
                "cpu_pct": round(node_cpu[n] * 100.0 / window),
                "rss_kib": r.held.node_rss_kib[n],
                "nats_subscriptions": b.subscriptions,
                "nats_published_per_s": round(b.in_msgs.saturating_sub(a.in_msgs) as f64 / window),
                "nats_received_per_s": round(b.out_msgs.saturating_sub(a.out_msgs) as f64 / window),
            })
        })
        .collect();
    let nats_in: u64 =
        r.end.nats_servers.iter().zip(&r.start.nats_servers).map(|(e, b)| e.in_msgs - b.in_msgs.min(e.in_msgs)).sum();
    let nats_out: u64 = r
        .end
        .nats_servers
        .iter()
        .zip(&r.start.nats_servers)
        .map(|(e, b)| e.out_msgs - b.out_msgs.min(e.out_msgs))
        .sum();
    let commits: i64 = r.end.pg.iter().zip(&r.start.pg).map(|(e, b)| e.xact_commit - b.xact_commit).sum();
    let inserted: i64 = r.end.pg.iter().zip(&r.start.pg).map(|(e, b)| e.tup_inserted - b.tup_inserted).sum();
    let updated: i64 = r.end.pg.iter().zip(&r.start.pg).map(|(e, b)| e.tup_updated - b.tup_updated).sum();
    let mut out = json!({
        "model": i.plan.summary(),
        "connections": i.args.model.connections,
        "established": i.joined.count,
        "held": held,
        "server_conns": conns,
        "watching": i.opened.count,
        "connect_join_s": round(i.joined.secs),
        "open_s": round(i.opened.secs),
        "setup_failures": merged(&i.joined.failures, &i.opened.failures),
        "failed": i.joined.failures.total + i.opened.failures.total + c.failed.values().sum::<u64>(),
        "load_s": round(window),
        "messages": s.sent(),
        "messages_per_s": round(s.sent() as f64 / i.args.secs),
        "retries": c.retries,
        "typings": c.typings,
        "reads": c.reads,
        "reactions": c.reactions,
        "busy_skipped": c.busy,
        "request_failures": c.failed,
        "first_error": c.first_error,
        "deliveries_expected": expected,
        "deliveries": c.delivered,
        // Owed and not received; and received beyond what even the sends given up could owe.
        "lost": s.lost(),
        "sends_given_up": s.abandoned.values().sum::<u64>(),
        "deliveries_maybe": s.maybe(),
        "beyond": s.beyond(),
        "sends_unanswered_at_end": s.unanswered(),
        "duplicates": c.duplicates,
        "gaps": c.gaps,
        "gap_events": c.skipped,
        "fetched": c.fetched,
        "missing": c.missing,
        "unrepaired": c.unrepaired,
        "foreign_events": c.foreign_events,
        "dropped": c.dropped,
    });
    // Two objects: one would pass the json! macro's recursion limit.
    let costs = json!({
        "pushes": {
            "message_events": c.delivered,
            "other_events": c.other_events,
            "inbox": c.inbox_pushes,
            "typing": c.typing_pushes,
            "presence": c.presence_pushes,
            "notify": c.notifies,
            "all": pushes,
            "per_s": round(pushes as f64 / window),
        },
        "latency_same_node": latency(&s.same_node),
        "latency_cross_node": latency(&s.cross_node),
        "send_ack": latency(&s.ack),
        "opening": {
            "watch": latency(&s.opening[0]),
            "presence": latency(&s.opening[1]),
            "inbox": latency(&s.opening[2]),
        },
        "node_cpu_s": round(cpu),
        "node_cpu_pct": round(cpu * 100.0 / window),
        "node_cpu_us_per_push": us_per(pushes),
        "node_cpu_us_per_message_delivery": us_per(c.delivered),
        "nats_cpu_pct": round((r.end.nats_cpu_s - r.start.nats_cpu_s) * 100.0 / window),
        "pg_cpu_pct": round((r.end.pg_cpu_s - r.start.pg_cpu_s) * 100.0 / window),
        "node_rss_kib": node_rss,
        "node_kib_per_conn": per_conn(node_rss as f64),
        "node_kib_per_conn_added": per_conn(node_rss.saturating_sub(node_rss_base) as f64),
        "nats_rss_kib": r.held.nats_servers.iter().map(|n| n.mem_bytes / 1024).sum::<u64>(),
        "kernel_tcp_buffers_kib_per_conn": per_conn(kernel / 1024.0),
        "kernel_slab_kib_per_conn": per_conn(r.held.slab_kib.saturating_sub(r.base.slab_kib) as f64),
        "client_kib_per_conn": per_conn(i.client_rss_kib.saturating_sub(i.joined.rss_start_kib) as f64),
        "nats_in_msgs_per_s": round(nats_in as f64 / window),
        "nats_out_msgs_per_s": round(nats_out as f64 / window),
        "pg_commits_per_s": round(commits as f64 / window),
        "pg_rows_inserted_per_s": round(inserted as f64 / window),
        "pg_rows_updated_per_s": round(updated as f64 / window),
        "pg_tables_per_s": pg_tables(r.start, r.end, window),
        "nodes": nats,
    });
    if let (Some(o), Value::Object(more)) = (out.as_object_mut(), costs) {
        o.extend(more);
    }
    out
}

/// The tables of all shards with any scans or writes over the load, busiest first:
/// scans, rows inserted and rows updated per second.
fn pg_tables(start: &Reading, end: &Reading, window: f64) -> Value {
    let mut sum: std::collections::BTreeMap<&str, [i64; 3]> = Default::default();
    for (b, e) in start.pg.iter().zip(&end.pg) {
        for (name, after) in &e.tables {
            let before = b.tables.get(name).copied().unwrap_or_default();
            let t = sum.entry(name.as_str()).or_default();
            for k in 0..3 {
                t[k] += after[k] - before[k];
            }
        }
    }
    let mut rows: Vec<(&str, [i64; 3])> = sum.into_iter().filter(|(_, t)| t.iter().any(|&x| x > 0)).collect();
    rows.sort_by_key(|(_, t)| std::cmp::Reverse(t[0] + t[1] + t[2]));
    let per_s = |x: i64| round(x as f64 / window);
    rows.into_iter()
        .map(|(name, t)| json!({"table": name, "scans": per_s(t[0]), "inserted": per_s(t[1]), "updated": per_s(t[2])}))
        .collect()
}

fn merged(a: &Failures, b: &Failures) -> Failures {
    let mut f = a.clone();
    f.merge(b);
    f
}

fn latency(l: &Latencies) -> Value {
    let p = l.summary();
    json!({"count": l.count(), "p50_ms": p.p50_ms, "p99_ms": p.p99_ms, "p999_ms": p.p999_ms, "max_ms": p.max_ms})
}

fn round(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// Prints the run: one JSON object, or a summary for people.
pub fn emit(args: &CellArgs, out: &Value) {
    let machine = Machine::detect();
    if args.json {
        println!("{}", json!({"scenario": "cell", "machine": machine, "params": args, "runs": [out]}));
        return;
    }
    let g = |p: &str| crate::report::cell(out.pointer(p));
    println!("herald-bench cell: {}", machine.summary());
    println!(
        "cell: {} nodes, {} shards, 3 NATS servers; {} users (seed {}), {} messages/s for {} s",
        args.nodes, args.shards, args.model.connections, args.model.seed, args.rate, args.secs
    );
    println!("model: {}", out["model"]);
    println!(
        "connections: {} established, {} held at the end, {} counted by the nodes; {} watching; setup {} s + {} s; {} failed",
        g("/established"),
        g("/held"),
        g("/server_conns"),
        g("/watching"),
        g("/connect_join_s"),
        g("/open_s"),
        g("/failed")
    );
    println!(
        "load: {} messages ({}/s), {} typings, {} reads, {} reactions, {} skipped (user busy), {} retried",
        g("/messages"),
        g("/messages_per_s"),
        g("/typings"),
        g("/reads"),
        g("/reactions"),
        g("/busy_skipped"),
        g("/retries")
    );
    println!(
        "delivery: {} of {} message deliveries owed (up to {} more from {} sends given up, {} unanswered at the end), \
         lost {}, beyond {}, duplicates {}, \
         gaps {} ({} events skipped, {} fetched, {} missing); pushes {} ({}/s: inbox {}, typing {}, presence {})",
        g("/deliveries"),
        g("/deliveries_expected"),
        g("/deliveries_maybe"),
        g("/sends_given_up"),
        g("/sends_unanswered_at_end"),
        g("/lost"),
        g("/beyond"),
        g("/duplicates"),
        g("/gaps"),
        g("/gap_events"),
        g("/fetched"),
        g("/missing"),
        g("/pushes/all"),
        g("/pushes/per_s"),
        g("/pushes/inbox"),
        g("/pushes/typing"),
        g("/pushes/presence")
    );
    let steps = [
        ("same node", "latency_same_node"),
        ("cross node", "latency_cross_node"),
        ("send to ack", "send_ack"),
        ("open: watch", "opening/watch"),
        ("presence", "opening/presence"),
        ("live inbox", "opening/inbox"),
    ];
    for (name, key) in steps {
        println!(
            "{name:>11}: p50 {} ms, p99 {} ms, p99.9 {} ms, max {} ms ({} samples)",
            g(&format!("/{key}/p50_ms")),
            g(&format!("/{key}/p99_ms")),
            g(&format!("/{key}/p999_ms")),
            g(&format!("/{key}/max_ms")),
            g(&format!("/{key}/count"))
        );
    }
    println!(
        "cpu: nodes {}% of a core ({} µs per push, {} µs per message delivery); NATS {}%; PostgreSQL {}%",
        g("/node_cpu_pct"),
        g("/node_cpu_us_per_push"),
        g("/node_cpu_us_per_message_delivery"),
        g("/nats_cpu_pct"),
        g("/pg_cpu_pct")
    );
    println!(
        "memory per connection: nodes {} KiB ({} KiB added by the users); kernel, both ends of the loopback \
         connection: {} KiB slab, {} KiB TCP buffers; clients {} KiB",
        g("/node_kib_per_conn"),
        g("/node_kib_per_conn_added"),
        g("/kernel_slab_kib_per_conn"),
        g("/kernel_tcp_buffers_kib_per_conn"),
        g("/client_kib_per_conn")
    );
    println!(
        "NATS: {} msgs/s in, {} msgs/s out (all servers); PostgreSQL: {} commits/s, {} rows inserted/s, {} updated/s",
        g("/nats_in_msgs_per_s"),
        g("/nats_out_msgs_per_s"),
        g("/pg_commits_per_s"),
        g("/pg_rows_inserted_per_s"),
        g("/pg_rows_updated_per_s")
    );
    let mut rows = vec![
        ["node", "conns", "cpu %", "RSS KiB", "NATS subs", "published/s", "received/s"].map(String::from).to_vec(),
    ];
    for n in out["nodes"].as_array().into_iter().flatten() {
        let f = |k: &str| crate::report::cell(n.get(k));
        rows.push(vec![
            f("node"),
            f("connections"),
            f("cpu_pct"),
            f("rss_kib"),
            f("nats_subscriptions"),
            f("nats_published_per_s"),
            f("nats_received_per_s"),
        ]);
    }
    crate::report::print_rows(&rows);
    let tables: Vec<String> = out["pg_tables_per_s"]
        .as_array()
        .into_iter()
        .flatten()
        .take(6)
        .map(|t| {
            let f = |k: &str| crate::report::cell(t.get(k));
            format!("{} {}/{}/{}", f("table"), f("scans"), f("inserted"), f("updated"))
        })
        .collect();
    println!("PostgreSQL tables, scans/inserted/updated per s: {}", tables.join(", "));
    if let Some(e) = out["first_error"].as_str() {
        println!("first request error: {e}");
    }
    if let Some(e) = out.pointer("/setup_failures/first").and_then(Value::as_str) {
        println!("setup: {} failed, first: {e}", g("/setup_failures/total"));
    }
    for (n, log) in out["server_logs"].as_array().into_iter().flatten().enumerate() {
        if log["warnings"].as_u64().unwrap_or(0) + log["errors"].as_u64().unwrap_or(0) > 0 {
            println!("node {n} logged {} warnings, {} errors; first: {}", log["warnings"], log["errors"], log["first"]);
        }
    }
}

/// The smoke's verdict: every user connected and opened its chat, every message reached every
/// watcher once, nothing failed or dropped.
pub fn check_exact(out: &Value) -> Result<(), String> {
    let n = |k: &str| out[k].as_i64().unwrap_or(-1);
    let checks = [
        ("every user connected", n("established") == n("connections") && n("server_conns") == n("connections")),
        ("some messages sent", n("messages") > 0),
        ("no message lost", n("lost") == 0 && n("beyond") == 0),
        ("no duplicate", n("duplicates") == 0),
        ("every gap fetched", n("missing") == 0 && n("unrepaired") == 0),
        ("nothing failed", n("failed") == 0),
        ("nothing dropped", n("dropped") == 0),
        ("cross-node deliveries", out.pointer("/latency_cross_node/count").and_then(Value::as_u64).unwrap_or(0) > 0),
    ];
    let failed: Vec<&str> = checks.iter().filter(|(_, ok)| !ok).map(|(name, _)| *name).collect();
    if failed.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{}: messages {}, deliveries {} of {}, duplicates {}, gaps {}, failed {}, dropped {}, first error {}",
        failed.join(", "),
        n("messages"),
        n("deliveries"),
        n("deliveries_expected"),
        n("duplicates"),
        n("gaps"),
        n("failed"),
        n("dropped"),
        out["first_error"]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(lost: i64, missing: i64) -> Value {
        json!({
            "connections": 200, "established": 200, "server_conns": 200, "messages": 200,
            "lost": lost, "beyond": 0, "duplicates": 0, "missing": missing, "unrepaired": 0, "failed": 0, "dropped": 0,
            "latency_cross_node": {"count": 288}, "deliveries": 796 - lost, "deliveries_expected": 796,
        })
    }

    #[test]
    fn the_smoke_fails_on_a_lost_message_or_an_unfilled_gap() {
        assert!(check_exact(&run(0, 0)).is_ok());
        let lost = check_exact(&run(1, 0)).unwrap_err();
        assert!(lost.contains("no message lost") && lost.contains("deliveries 795 of 796"), "{lost}");
        assert!(check_exact(&run(0, 2)).unwrap_err().contains("every gap fetched"));
    }
}
