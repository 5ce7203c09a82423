//! The Socket.IO cell's figures, named as herald's cell names them where
//! they mean the same (`connections`, `held`, `deliveries`, `latency_*`,
//! `node_kib_per_conn`...), from what the workers counted and the servers'
//! readings (before the users, with them held, at the load's start and end);
//! printed for people or as one JSON object with the machine.

use serde_json::{Value, json};

use super::super::CellArgs;
use super::super::report::Setup;
use super::super::tally::Sum;
use super::super::workload::Plan;
use super::servers::Reading;
use crate::latency::Latencies;
use crate::machine::Machine;

/// Everything but the readings a run's figures come from.
pub struct Inputs<'a> {
    pub args: &'a CellArgs,
    pub plan: &'a Plan,
    pub joined: &'a Setup,
    pub opened: &'a Setup,
    pub client_rss_kib: u64,
    pub sum: &'a Sum,
}

/// The run's figures; `r` is the readings before the users, with them held, at the load's start and end.
pub fn figures(i: &Inputs, r: [&Reading; 4]) -> Value {
    let [base, held, start, end] = r;
    let (s, c) = (i.sum, &i.sum.counted);
    let window = end.at.duration_since(start.at).as_secs_f64().max(1e-3);
    // Each connection is one open file of its node; the base reading holds the node's own.
    let node_conns: Vec<u64> = held.node_fds.iter().zip(&base.node_fds).map(|(h, b)| h.saturating_sub(*b)).collect();
    let conns: u64 = node_conns.iter().sum();
    let per_conn = |x: f64| if conns == 0 { Value::Null } else { json!(round(x / conns as f64)) };
    let pushes = c.delivered + c.other_events + c.inbox_pushes + c.typing_pushes;
    let node_cpu: Vec<f64> = end.node_cpu_s.iter().zip(&start.node_cpu_s).map(|(e, b)| (e - b).max(0.0)).collect();
    let nodes_cpu: f64 = node_cpu.iter().sum();
    let redis_cpu = (end.redis_cpu_s - start.redis_cpu_s).max(0.0);
    let us_per = |cpu: f64, n: u64| if n == 0 { Value::Null } else { json!(round(cpu * 1e6 / n as f64)) };
    let node_rss: u64 = held.node_rss_kib.iter().sum();
    let node_rss_base: u64 = base.node_rss_kib.iter().sum();
    let kernel = held.sockets.mem_bytes.saturating_sub(base.sockets.mem_bytes) as f64;
    let nodes: Vec<Value> = (0..node_cpu.len())
        .map(|n| {
            json!({
                "node": n,
                "connections": node_conns[n],
                "cpu_pct": round(node_cpu[n] * 100.0 / window),
                "rss_kib": held.node_rss_kib[n],
            })
        })
        .collect();
    let mut out = json!({
        "peer": "socketio",
        "model": i.plan.summary(),
        "connections": i.args.model.connections,
        "established": i.joined.count,
        "held": i.joined.count.saturating_sub(c.dropped),
        "server_conns": conns,
        "watching": i.opened.count,
        "connect_join_s": round(i.joined.secs),
        "open_s": round(i.opened.secs),
        "setup_failures": merged(i.joined, i.opened),
        "failed": i.joined.failures.total + i.opened.failures.total + c.failed.values().sum::<u64>(),
        "load_s": round(window),
        "messages": s.sent(),
        "messages_per_s": round(s.sent() as f64 / i.args.secs),
        "typings": c.typings,
        "reads": c.reads,
        "reactions": c.reactions,
        "busy_skipped": c.busy,
        "request_failures": c.failed,
        "first_error": c.first_error,
        "deliveries_expected": s.expected(),
        "deliveries": c.delivered,
        "lost": s.lost(),
        "sends_given_up": s.abandoned.values().sum::<u64>(),
        "deliveries_maybe": s.maybe(),
        "beyond": s.beyond(),
        "sends_unanswered_at_end": s.unanswered(),
        "duplicates": c.duplicates,
        "foreign_events": c.foreign_events,
        "dropped": c.dropped,
    });
    let costs = json!({
        "pushes": {
            "message_events": c.delivered,
            "other_events": c.other_events,
            "inbox": c.inbox_pushes,
            "typing": c.typing_pushes,
            "all": pushes,
            "per_s": round(pushes as f64 / window),
        },
        "latency_same_node": latency(&s.same_node),
        "latency_cross_node": latency(&s.cross_node),
        "send_ack": latency(&s.ack),
        "opening": { "watch": latency(&s.opening[0]) },
        "node_cpu_pct": round(nodes_cpu * 100.0 / window),
        "redis_cpu_pct": round(redis_cpu * 100.0 / window),
        "node_cpu_us_per_push": us_per(nodes_cpu, pushes),
        "cpu_us_per_push": us_per(nodes_cpu + redis_cpu, pushes),
        "cpu_us_per_message_delivery": us_per(nodes_cpu + redis_cpu, c.delivered),
        "node_rss_kib": node_rss,
        "node_kib_per_conn": per_conn(node_rss as f64),
        "node_kib_per_conn_added": per_conn(node_rss.saturating_sub(node_rss_base) as f64),
        "redis_rss_kib": held.redis_rss_kib,
        "kernel_tcp_buffers_kib_per_conn": per_conn(kernel / 1024.0),
        "kernel_slab_kib_per_conn": per_conn(held.slab_kib.saturating_sub(base.slab_kib) as f64),
        "client_kib_per_conn": per_conn(i.client_rss_kib.saturating_sub(i.joined.rss_start_kib) as f64),
        "nodes": nodes,
    });
    if let (Some(o), Value::Object(more)) = (out.as_object_mut(), costs) {
        o.extend(more);
    }
    out
}

fn merged(a: &Setup, b: &Setup) -> crate::fleet::Failures {
    let mut f = a.failures.clone();
    f.merge(&b.failures);
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
        println!(
            "{}",
            json!({"scenario": "cell", "peer": "socketio", "machine": machine, "params": args, "runs": [out]})
        );
        return;
    }
    let g = |p: &str| crate::report::cell(out.pointer(p));
    println!("herald-bench cell --peer socketio: {}", machine.summary());
    println!(
        "cell: {} Socket.IO nodes over one Redis; {} users (seed {}), {} messages/s for {} s",
        args.nodes, args.model.connections, args.model.seed, args.rate, args.secs
    );
    println!("model: {}", out["model"]);
    println!(
        "connections: {} established, {} held at the end, {} open at the nodes; {} watching; setup {} s + {} s; {} failed",
        g("/established"),
        g("/held"),
        g("/server_conns"),
        g("/watching"),
        g("/connect_join_s"),
        g("/open_s"),
        g("/failed")
    );
    println!(
        "load: {} messages ({}/s), {} typings, {} reads, {} reactions, {} skipped (user busy)",
        g("/messages"),
        g("/messages_per_s"),
        g("/typings"),
        g("/reads"),
        g("/reactions"),
        g("/busy_skipped")
    );
    println!(
        "delivery: {} of {} message deliveries owed (up to {} more from sends unacked), lost {}, beyond {}, \
         duplicates {}; pushes {} ({}/s: inbox {}, typing {}, reads and reactions {})",
        g("/deliveries"),
        g("/deliveries_expected"),
        g("/deliveries_maybe"),
        g("/lost"),
        g("/beyond"),
        g("/duplicates"),
        g("/pushes/all"),
        g("/pushes/per_s"),
        g("/pushes/inbox"),
        g("/pushes/typing"),
        g("/pushes/other_events")
    );
    for (name, key) in
        [("same node", "latency_same_node"), ("cross node", "latency_cross_node"), ("send to ack", "send_ack")]
    {
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
        "cpu: nodes {}% of a core, Redis {}%; {} µs per push (nodes and Redis; nodes alone {}), {} µs per message delivery",
        g("/node_cpu_pct"),
        g("/redis_cpu_pct"),
        g("/cpu_us_per_push"),
        g("/node_cpu_us_per_push"),
        g("/cpu_us_per_message_delivery")
    );
    println!(
        "memory per connection: nodes {} KiB ({} KiB added by the users); Redis {} KiB in all; kernel {} KiB slab, \
         {} KiB TCP buffers; clients {} KiB",
        g("/node_kib_per_conn"),
        g("/node_kib_per_conn_added"),
        g("/redis_rss_kib"),
        g("/kernel_slab_kib_per_conn"),
        g("/kernel_tcp_buffers_kib_per_conn"),
        g("/client_kib_per_conn")
    );
    let mut rows = vec![["node", "conns", "cpu %", "RSS KiB"].map(String::from).to_vec()];
    for n in out["nodes"].as_array().into_iter().flatten() {
        let f = |k: &str| crate::report::cell(n.get(k));
        rows.push(vec![f("node"), f("connections"), f("cpu_pct"), f("rss_kib")]);
    }
    crate::report::print_rows(&rows);
    if let Some(e) = out["first_error"].as_str() {
        println!("first request error: {e}");
    }
    if let Some(e) = out.pointer("/setup_failures/first").and_then(Value::as_str) {
        println!("setup: {} failed, first: {e}", g("/setup_failures/total"));
    }
}

/// The smoke's verdict: every user connected and in its room, every message reached every watcher
/// once, across nodes too, nothing failed or dropped.
pub fn check_exact(out: &Value) -> Result<(), String> {
    let n = |k: &str| out[k].as_i64().unwrap_or(-1);
    let checks = [
        ("every user connected", n("established") == n("connections") && n("server_conns") == n("connections")),
        ("some messages sent", n("messages") > 0),
        ("no message lost", n("lost") == 0 && n("beyond") == 0),
        ("no duplicate", n("duplicates") == 0),
        ("nothing failed", n("failed") == 0),
        ("nothing dropped", n("dropped") == 0),
        ("cross-node deliveries", out.pointer("/latency_cross_node/count").and_then(Value::as_u64).unwrap_or(0) > 0),
    ];
    let failed: Vec<&str> = checks.iter().filter(|(_, ok)| !ok).map(|(name, _)| *name).collect();
    if failed.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{}: messages {}, deliveries {} of {}, duplicates {}, failed {}, dropped {}, first error {}",
        failed.join(", "),
        n("messages"),
        n("deliveries"),
        n("deliveries_expected"),
        n("duplicates"),
        n("failed"),
        n("dropped"),
        out["first_error"]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_smoke_fails_on_a_lost_message() {
        let run = |lost: i64| {
            json!({
                "connections": 200, "established": 200, "server_conns": 200, "messages": 200, "lost": lost,
                "beyond": 0, "duplicates": 0, "failed": 0, "dropped": 0, "latency_cross_node": {"count": 9},
            })
        };
        assert!(check_exact(&run(0)).is_ok());
        assert!(check_exact(&run(1)).unwrap_err().contains("no message lost"));
    }
}
