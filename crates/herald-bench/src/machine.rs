//! What a figure was measured on: the machine (CPU model, cores, kernel), the
//! git commit of the code under test, and the resident memory of a process.
//! Read straight from `/proc` and `git`, so a figure carries its context.

use std::process::Command;

use serde::Serialize;

/// The machine and code a run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    pub kernel: String,
    pub commit: String,
    /// The work tree had uncommitted changes: the commit alone does not name the code.
    pub dirty: bool,
}

impl Machine {
    /// Reads the machine's description; unknown parts read "unknown".
    pub fn detect() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name").and_then(|r| r.split_once(':')).map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
        let commit = git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into());
        let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
        Machine { cpu, cores, kernel, commit, dirty }
    }

    /// One line for the human report.
    pub fn summary(&self) -> String {
        let dirty = if self.dirty { " (dirty tree)" } else { "" };
        format!("{}, {} cores, Linux {}, commit {}{}", self.cpu, self.cores, self.kernel, self.commit, dirty)
    }
}

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The resident set size of process `pid` in KiB (`VmRSS` of `/proc/PID/status`),
/// or `None` when the process is gone.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_rss_is_readable() {
        let kib = rss_kib(std::process::id()).expect("this process exists");
        assert!(kib > 0);
    }
}
