//! Readings of a running cell at one moment, for the report's deltas: each
//! node's CPU and RSS, the NATS servers' counters (`/varz`) and each herald
//! node's own NATS connection (`/connz`, matched to the node by the local
//! port of its socket to NATS), the shards' `pg_stat_database` counters and
//! the kernel's socket memory (buffers and slab). Reading only; what the figures mean is
//! `report`'s.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use serde::Serialize;
use serde_json::Value;

use super::spawn::Services;
use crate::http;
use crate::machine::rss_kib;
use crate::procstat::{self, TcpSockets};

/// Connections asked of `/connz` at once: more than a cell's nodes.
const CONNZ_LIMIT: usize = 4096;

/// One herald node's NATS connection, as the NATS server counts it.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct NatsConn {
    pub subscriptions: u64,
    /// Messages the node published.
    pub in_msgs: u64,
    /// Messages delivered to the node.
    pub out_msgs: u64,
}

/// One NATS server's counters.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct NatsServerReading {
    pub in_msgs: u64,
    pub out_msgs: u64,
    pub subscriptions: u64,
    pub mem_bytes: u64,
}

/// One shard's `pg_stat_database` counters for its `herald` database, and
/// its tables' (`pg_stat_user_tables`): where the reads and writes go.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PgReading {
    pub xact_commit: i64,
    pub tup_inserted: i64,
    pub tup_updated: i64,
    /// Per table: scans (sequential and by index), rows inserted, rows updated.
    pub tables: HashMap<String, [i64; 3]>,
}

/// Everything read at one moment.
pub struct Reading {
    pub at: Instant,
    pub node_cpu_s: Vec<f64>,
    pub node_rss_kib: Vec<u64>,
    pub nats_cpu_s: f64,
    pub pg_cpu_s: f64,
    pub nats_servers: Vec<NatsServerReading>,
    /// Per node: its NATS connection(s), summed.
    pub nats_nodes: Vec<NatsConn>,
    pub pg: Vec<PgReading>,
    pub sockets: TcpSockets,
    pub slab_kib: u64,
}

/// Reads the cell now: the nodes are `node_pids`.
pub async fn read(services: &Services, node_pids: &[u32]) -> Reading {
    let at = Instant::now();
    let node_cpu_s = node_pids.iter().map(|&p| procstat::cpu_s(p)).collect();
    let node_rss_kib = node_pids.iter().map(|&p| rss_kib(p).unwrap_or(0)).collect();
    let mut nats_servers = Vec::new();
    let mut by_port: HashMap<u16, NatsConn> = HashMap::new();
    for s in &services.nats {
        let varz = get_json(s.monitor, "/varz").await;
        nats_servers.push(NatsServerReading {
            in_msgs: varz["in_msgs"].as_u64().unwrap_or(0),
            out_msgs: varz["out_msgs"].as_u64().unwrap_or(0),
            subscriptions: varz["subscriptions"].as_u64().unwrap_or(0),
            mem_bytes: varz["mem"].as_u64().unwrap_or(0),
        });
        let connz = get_json(s.monitor, &format!("/connz?limit={CONNZ_LIMIT}")).await;
        for c in connz["connections"].as_array().into_iter().flatten() {
            let Some(port) = c["port"].as_u64() else { continue };
            by_port.insert(
                port as u16,
                NatsConn {
                    subscriptions: c["subscriptions"].as_u64().unwrap_or(0),
                    in_msgs: c["in_msgs"].as_u64().unwrap_or(0),
                    out_msgs: c["out_msgs"].as_u64().unwrap_or(0),
                },
            );
        }
    }
    let nats_ports: HashSet<u16> = services.nats.iter().map(|s| s.port).collect();
    let sockets = tcp_table();
    let nats_nodes = node_pids
        .iter()
        .map(|&pid| {
            let mut sum = NatsConn::default();
            for port in local_ports_to(pid, &nats_ports, &sockets) {
                if let Some(c) = by_port.get(&port) {
                    sum.subscriptions += c.subscriptions;
                    sum.in_msgs += c.in_msgs;
                    sum.out_msgs += c.out_msgs;
                }
            }
            sum
        })
        .collect();
    let mut pg = Vec::new();
    for url in &services.shard_urls {
        pg.push(pg_reading(url).await.unwrap_or_default());
    }
    Reading {
        at,
        node_cpu_s,
        node_rss_kib,
        nats_cpu_s: services.nats_cpu_s(),
        pg_cpu_s: services.pg_cpu_s(),
        nats_servers,
        nats_nodes,
        pg,
        sockets: procstat::tcp_sockets(),
        slab_kib: procstat::slab_kib(),
    }
}

async fn get_json(addr: std::net::SocketAddr, path: &str) -> Value {
    match http::get(addr, path, None).await {
        Ok(a) if a.status == 200 => serde_json::from_str(&a.body).unwrap_or(Value::Null),
        _ => Value::Null,
    }
}

async fn pg_reading(url: &str) -> anyhow::Result<PgReading> {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(conn);
    let row = client
        .query_one(
            "SELECT xact_commit, tup_inserted, tup_updated FROM pg_stat_database WHERE datname = current_database()",
            &[],
        )
        .await?;
    let mut tables = HashMap::new();
    let rows = client
        .query(
            "SELECT relname::text, COALESCE(seq_scan, 0) + COALESCE(idx_scan, 0), n_tup_ins, n_tup_upd \
             FROM pg_stat_user_tables",
            &[],
        )
        .await?;
    for r in rows {
        tables.insert(r.get::<_, String>(0), [r.get(1), r.get(2), r.get(3)]);
    }
    Ok(PgReading { xact_commit: row.get(0), tup_inserted: row.get(1), tup_updated: row.get(2), tables })
}

/// A TCP socket of `/proc/net/tcp`: its inode, local port and remote port.
struct TcpEntry {
    local_port: u16,
    remote_port: u16,
}

/// Loopback TCP sockets by inode (IPv4: the cell is on 127.0.0.0/8).
fn tcp_table() -> HashMap<u64, TcpEntry> {
    let text = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    text.lines().skip(1).filter_map(parse_tcp_line).collect()
}

fn parse_tcp_line(line: &str) -> Option<(u64, TcpEntry)> {
    let f: Vec<&str> = line.split_whitespace().collect();
    let port = |addr: &str| u16::from_str_radix(addr.rsplit(':').next()?, 16).ok();
    let inode = f.get(9)?.parse::<u64>().ok()?;
    Some((inode, TcpEntry { local_port: port(f.get(1)?)?, remote_port: port(f.get(2)?)? }))
}

/// The local ports of `pid`'s sockets to one of `ports`.
fn local_ports_to(pid: u32, ports: &HashSet<u16>, table: &HashMap<u64, TcpEntry>) -> Vec<u16> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return Vec::new() };
    fds.flatten()
        .filter_map(|fd| {
            let link = std::fs::read_link(fd.path()).ok()?;
            let inode = link.to_str()?.strip_prefix("socket:[")?.strip_suffix(']')?.parse::<u64>().ok()?;
            let e = table.get(&inode)?;
            ports.contains(&e.remote_port).then_some(e.local_port)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_lines_are_read() {
        let line =
            "   3: 0100007F:A1B2 0100007F:1092 01 00000000:00000000 00:00000000 00000000     0        0 123456 1 0";
        let (inode, e) = parse_tcp_line(line).unwrap();
        assert_eq!((inode, e.local_port, e.remote_port), (123456, 0xA1B2, 0x1092));
        assert!(parse_tcp_line("  sl  local_address rem_address").is_none());
    }
}
