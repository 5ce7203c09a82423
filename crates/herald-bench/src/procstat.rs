//! CPU time and sockets of processes the bench started, read from `/proc`:
//! one process by pid, or every process working in a directory (a
//! PostgreSQL server's, whose backends come and go), and the kernel's
//! memory for sockets: their buffers (`/proc/net/sockstat`) and its slab
//! caches (`/proc/meminfo`, where the socket structures themselves live). Not here: resident memory
//! (`machine::rss_kib`), starting or stopping anything.

use std::path::Path;

/// Clock ticks per second of `/proc/PID/stat`'s times.
fn hz() -> f64 {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64
}

/// CPU seconds (user + system, with reaped children's) of process `pid`; 0 when it is gone.
pub fn cpu_s(pid: u32) -> f64 {
    let ticks = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().and_then(|s| stat_ticks(&s)).unwrap_or(0);
    ticks as f64 / hz()
}

/// CPU seconds of every process working in `dir` (PostgreSQL's processes
/// work in their data dir, as pg.sh's `pids_in` relies on too), with the
/// time of the children each has reaped.
pub fn cpu_in(dir: &Path) -> f64 {
    let Ok(dir) = dir.canonicalize() else { return 0.0 };
    let Ok(procs) = std::fs::read_dir("/proc") else { return 0.0 };
    let mut ticks = 0u64;
    for p in procs.flatten() {
        let path = p.path();
        if std::fs::read_link(path.join("cwd")).ok().as_deref() != Some(dir.as_path()) {
            continue;
        }
        ticks += std::fs::read_to_string(path.join("stat")).ok().and_then(|s| stat_ticks(&s)).unwrap_or(0);
    }
    ticks as f64 / hz()
}

/// utime + stime + cutime + cstime (fields 14 to 17 of stat(5)) of one `/proc/PID/stat`.
pub fn stat_ticks(stat: &str) -> Option<u64> {
    // Fields after the command name (which may hold spaces) start after the last ')', at field 3.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    (11..15).map(|i| fields.get(i)?.parse::<u64>().ok()).sum()
}

/// The kernel's TCP sockets now (`/proc/net/sockstat`): in use, and the
/// memory of their buffers in bytes (the `mem` field counts pages).
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct TcpSockets {
    pub inuse: u64,
    pub mem_bytes: u64,
}

/// Reads [`TcpSockets`]; zeros when `/proc/net/sockstat` cannot be read.
pub fn tcp_sockets() -> TcpSockets {
    let text = std::fs::read_to_string("/proc/net/sockstat").unwrap_or_default();
    parse_sockstat(&text)
}

fn parse_sockstat(text: &str) -> TcpSockets {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as u64;
    let Some(line) = text.lines().find_map(|l| l.strip_prefix("TCP:")) else { return TcpSockets::default() };
    let words: Vec<&str> = line.split_whitespace().collect();
    let field = |name: &str| {
        words.iter().position(|w| *w == name).and_then(|i| words.get(i + 1)).and_then(|v| v.parse::<u64>().ok())
    };
    TcpSockets { inuse: field("inuse").unwrap_or(0), mem_bytes: field("mem").unwrap_or(0) * page }
}

/// The kernel's unreclaimable slab caches in KiB (`SUnreclaim` of `/proc/meminfo`): socket
/// structures, their files and epoll entries live there, with everything
/// else the kernel caches, so only a difference across a step means anything.
pub fn slab_kib() -> u64 {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    meminfo_kib(&text, "SUnreclaim:").unwrap_or(0)
}

fn meminfo_kib(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix(key)).and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_times_are_summed() {
        let stat = "42 (postgres: w (x)) S 1 42 42 0 -1 4194560 100 0 0 0 7 3 11 2 20 0 1 0 5 0 0";
        assert_eq!(stat_ticks(stat), Some(23));
        assert_eq!(stat_ticks("42 (x)"), None);
    }

    #[test]
    fn sockstat_is_read() {
        let text = "sockets: used 290\nTCP: inuse 27 orphan 0 tw 3 alloc 31 mem 5\nUDP: inuse 2 mem 0\n";
        let s = parse_sockstat(text);
        assert_eq!(s.inuse, 27);
        assert!(s.mem_bytes >= 5 * 4096);
        assert!(tcp_sockets().inuse > 0 || std::fs::metadata("/proc/net/sockstat").is_err());
    }

    #[test]
    fn slab_is_read() {
        assert_eq!(meminfo_kib("MemTotal: 10 kB\nSlab:             123456 kB\n", "Slab:"), Some(123456));
        assert!(slab_kib() > 0 || std::fs::metadata("/proc/meminfo").is_err());
    }

    #[test]
    fn own_cpu_is_readable() {
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        assert!(x > 0);
        assert!(cpu_s(std::process::id()) >= 0.0);
    }
}
