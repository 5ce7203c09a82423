//! The hidden `cell-worker` subcommand: one load process of `cell`, holding
//! its share of the users (under the 20,000 open files a process may hold),
//! each on the node the model gives it, from loopback source addresses of its
//! own. It rebuilds the model from the same flags as its parent, so nothing
//! but flags crosses over.
//!
//! It talks to its parent by lines, each step waiting for the parent's word
//! so that every worker is at the same step: it connects its users (hello,
//! then a join of each of their chats) and prints [`Line::Joined`]; on
//! `open` each user watches its open chat, asks its presence and turns its
//! inbox live, and it prints [`Line::Opened`]; on `go` it runs the load for
//! `--secs` (per second, `--rate` messages in all, each after a `typing`,
//! as many `read`s and a fifth as many reactions, each by a random user of
//! its own), waits `--drain-s` for the last pushes, prints [`Line::Done`],
//! and on `stop` (or EOF) closes its users and exits. It exits by itself
//! after [`MAX_LIFE`] whatever its parent does.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, BufReader, Lines, Stdin};
use tokio::sync::mpsc;
use tokio::time::MissedTickBehavior;

use super::resume::Dial;
use super::session::{self, Cmd, Who};
use super::tally::{Counted, Tally};
use super::workload::{ModelArgs, Plan, Rng, node_of};
use crate::client::{Client, Failure, source_addr};
use crate::fleet::{self, Failures, Launch};
use crate::machine::rss_kib;
use crate::server::Server;
use crate::token::Signer;
use crate::worker::SECRET_ENV;

/// A worker whose parent vanished still ends.
const MAX_LIFE: Duration = Duration::from_secs(3600);
/// Commands queued per session: a user still busy with this many is skipped (counted as busy).
const SESSION_QUEUE: usize = 4;
/// Sessions opened at once: each opening reads the user's inbox, and a burst of them would
/// only queue at the shards' read pools (refused at once past them, and retried).
const OPEN_BATCH: usize = 32;
/// One session's opening (watch, presence, inbox) gets this long.
const OPEN_TIMEOUT: Duration = Duration::from_secs(60);
/// A reaction per this many messages.
const MESSAGES_PER_REACTION: u64 = 5;

/// One worker's share of the cell's users.
#[derive(Debug, Args)]
pub struct CellWorkerArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Every node's address, in node order.
    #[arg(long, value_delimiter = ',')]
    pub nodes: Vec<SocketAddr>,
    #[arg(long)]
    pub workspace: String,
    /// This worker's users: `first..first + count`.
    #[arg(long)]
    pub first: usize,
    #[arg(long)]
    pub count: usize,
    /// Messages per second of this worker.
    #[arg(long)]
    pub rate: f64,
    #[arg(long)]
    pub secs: f64,
    #[arg(long)]
    pub drain_s: f64,
    /// Connects per second of this worker, and in flight.
    #[arg(long)]
    pub connect_rate: f64,
    #[arg(long)]
    pub concurrency: usize,
    /// Source addresses start this many after 127.0.0.2.
    #[arg(long)]
    pub source_offset: u32,
    /// No connect starts after this many seconds.
    #[arg(long)]
    pub deadline_s: f64,
    /// The memberships are in the store already (`cell --preload`): users only connect.
    #[arg(long)]
    pub preloaded: bool,
    /// Sessions opened at once [default: the worker's own, `OPEN_BATCH`].
    #[arg(long)]
    pub open_concurrency: Option<usize>,
}

/// A line a worker prints.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Line {
    /// Users connected and joined.
    Joined { rss_start_kib: u64, established: u64, failures: Failures, secs: f64 },
    /// Users with their chat open.
    Opened { watching: u64, failures: Failures, secs: f64 },
    /// The load is over.
    Done(Box<Counted>),
}

/// Runs a worker to its end.
pub fn run(args: CellWorkerArgs) -> anyhow::Result<()> {
    let secret = std::env::var(SECRET_ENV).map_err(|_| anyhow::anyhow!("{SECRET_ENV} is not set"))?;
    // One thread: the parent runs several workers beside the nodes; more threads would only contend.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async { tokio::time::timeout(MAX_LIFE, serve(args, secret)).await.unwrap_or_else(|_| Ok(())) })
}

/// A connected user: its open chat's index, and its session's command channel.
struct User {
    open: Option<u32>,
    tx: mpsc::Sender<Cmd>,
}

async fn serve(args: CellWorkerArgs, secret: String) -> anyhow::Result<()> {
    let rss_start_kib = rss_kib(std::process::id()).unwrap_or(0);
    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    let plan = Arc::new(Plan::build(&args.model));
    anyhow::ensure!(args.first + args.count <= plan.open.len(), "users beyond the model's");
    let tally = Arc::new(Mutex::new(Tally::default()));
    let (users, failures, secs) = connect(&args, &plan, &secret, &tally).await;
    say(&Line::Joined { rss_start_kib, established: users.len() as u64, failures, secs })?;

    wait_word(&mut stdin, "open").await?;
    let t = Instant::now();
    let (watchers, failures) = open_all(&users, args.open_concurrency.unwrap_or(OPEN_BATCH)).await;
    let watching = watchers.values().sum();
    say(&Line::Opened { watching, failures, secs: t.elapsed().as_secs_f64() })?;

    let open: Vec<&mpsc::Sender<Cmd>> = users.iter().filter(|u| u.open.is_some()).map(|u| &u.tx).collect();
    load_and_count(&args, &mut stdin, &tally, &watchers, &open, |act| match act {
        Act::Message => Cmd::Message,
        Act::Read => Cmd::Read,
        Act::React => Cmd::React,
    })
    .await?;

    let _ = stdin.next_line().await;
    drop(users);
    Ok(())
}

/// Connects, says hello and joins every chat of each of this worker's users; each joined user gets a session.
async fn connect(
    args: &CellWorkerArgs,
    plan: &Arc<Plan>,
    secret: &str,
    tally: &Arc<Mutex<Tally>>,
) -> (Vec<User>, Failures, f64) {
    let signer = Signer::new(secret, &args.workspace);
    let path: Arc<str> = Server::ws_path(&args.workspace).into();
    let nodes: Arc<[SocketAddr]> = args.nodes.clone().into();
    let spec = Launch {
        count: args.count,
        concurrency: args.concurrency.max(1),
        rate: Some(args.connect_rate),
        deadline: Duration::from_secs_f64(args.deadline_s),
    };
    let preloaded = args.preloaded;
    let launched = fleet::launch(spec, |i| {
        let user = args.first + i;
        let node = node_of(user, args.nodes.len());
        let (server, source) = (args.nodes[node], source_addr(args.source_offset, i));
        let token = signer.token(&format!("u{user}"));
        let (plan, path, tally, nodes) = (plan.clone(), path.clone(), tally.clone(), nodes.clone());
        async move {
            let token = token.map_err(Failure::signing)?;
            let mut client = Client::connect(server, &path, source).await?;
            client.hello(&token).await?;
            if !preloaded {
                for &c in &plan.user_chats[user] {
                    client.join(&plan.chat_name(c)).await?;
                }
            }
            let open = plan.open[user];
            let who = Who { user: user as u32, node: node as u32, open: open.map(|c| (c, plan.chat_name(c))) };
            let (tx, rx) = mpsc::channel(SESSION_QUEUE);
            let dial = Dial { nodes, path, source, token };
            tokio::spawn(session::run(client, who, dial, rx, tally));
            Ok(User { open, tx })
        }
    })
    .await;
    let users = launched.ok.into_iter().map(|(_, u)| u).collect();
    (users, launched.failures, launched.elapsed.as_secs_f64())
}

/// Opens every user's chat, `at_once` at a time; the watchers per chat, and the failures.
async fn open_all(users: &[User], at_once: usize) -> (HashMap<u32, u64>, Failures) {
    let mut failures = Failures::default();
    let mut watchers: HashMap<u32, u64> = HashMap::new();
    let mut opening = futures_util::stream::iter(users.iter().map(|u| async move {
        let (tx, rx) = tokio::sync::oneshot::channel();
        u.tx.send(Cmd::Open(tx)).await.map_err(|_| "the session had ended".to_string())?;
        match tokio::time::timeout(OPEN_TIMEOUT, rx).await {
            Ok(Ok(opened)) => Ok((u.open, opened)),
            Ok(Err(_)) => Err("the session had ended".to_string()),
            Err(_) => Err(format!("not open in {OPEN_TIMEOUT:?}")),
        }
    }))
    .buffer_unordered(at_once);
    while let Some(r) = opening.next().await {
        match r {
            Ok((open, opened)) => {
                if let (true, Some(c)) = (opened.watching, open) {
                    *watchers.entry(c).or_default() += 1;
                }
                if let Some(e) = opened.error {
                    failures.add("open", || e);
                }
            }
            Err(e) => failures.add("open", || e),
        }
    }
    (watchers, failures)
}

/// One command of the load's mix, as each peer's session takes it.
pub(super) enum Act {
    Message,
    Read,
    React,
}

/// The load phase of a worker, whatever its peer: waits for `go`, counts
/// from then on (what the opening pushed is not the load's), gives the load
/// to `open` through `cmd` ([`load`]), waits `args.drain_s` and says what
/// was counted against `watchers`.
pub(super) async fn load_and_count<C>(
    args: &CellWorkerArgs,
    stdin: &mut Lines<BufReader<Stdin>>,
    tally: &Mutex<Tally>,
    watchers: &HashMap<u32, u64>,
    open: &[&mpsc::Sender<C>],
    cmd: impl Fn(Act) -> C,
) -> anyhow::Result<()> {
    wait_word(stdin, "go").await?;
    tally.lock().expect("tally lock").restart();
    let busy = load(args, open, cmd).await;
    tokio::time::sleep(Duration::from_secs_f64(args.drain_s)).await;
    let counted = tally.lock().expect("tally lock").counted(watchers, busy);
    say(&Line::Done(Box::new(counted)))
}

/// Gives the load's commands for `args.secs`: per tick a message, a read, and every fifth tick a
/// reaction, each to a random one of `open` (the sessions of the users with an open chat), made by
/// `cmd`. The same draws for every peer (herald, Socket.IO): the same users act in the same order.
/// Returns the commands skipped because the user was busy.
async fn load<C>(args: &CellWorkerArgs, open: &[&mpsc::Sender<C>], cmd: impl Fn(Act) -> C) -> u64 {
    if open.is_empty() || args.rate <= 0.0 {
        tokio::time::sleep(Duration::from_secs_f64(args.secs)).await;
        return 0;
    }
    let seed = args.model.seed ^ (args.first as u64).wrapping_mul(0x2545_f491_4f6c_dd1d);
    let mut rng = Rng::new(seed);
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / args.rate));
    // A late tick is given at once, then the pace resumes: the rate holds on average.
    tick.set_missed_tick_behavior(MissedTickBehavior::Burst);
    let ticks = (args.secs * args.rate).round() as u64;
    let end = Instant::now() + Duration::from_secs_f64(args.secs) + Duration::from_secs(1);
    let mut busy = 0;
    for n in 0..ticks {
        tick.tick().await;
        if Instant::now() > end {
            break;
        }
        let mut give = |act: Act| {
            let tx = open[rng.below(open.len() as u64) as usize];
            if tx.try_send(cmd(act)).is_err() {
                busy += 1;
            }
        };
        give(Act::Message);
        give(Act::Read);
        if n % MESSAGES_PER_REACTION == 0 {
            give(Act::React);
        }
    }
    busy
}

pub(super) fn say(line: &Line) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string(line)?);
    Ok(())
}

/// Waits for the parent's `word` on stdin.
pub(super) async fn wait_word(stdin: &mut Lines<BufReader<Stdin>>, word: &str) -> anyhow::Result<()> {
    let line = stdin.next_line().await?.with_context(|| format!("the parent left before saying {word}"))?;
    anyhow::ensure!(line.trim() == word, "expected {word}, got {line}");
    Ok(())
}
