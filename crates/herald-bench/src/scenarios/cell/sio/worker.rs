//! The hidden `cell-sio-worker` subcommand: one load process of the Socket.IO
//! cell, with the same flags, lines and steps as herald's `cell-worker`
//! (`super::super::worker`): it connects its users to the node the model
//! gives each, joins each user to the member room of every one of its chats
//! and prints `Joined`; on `open` each user joins its open chat's watchers'
//! room (`Opened`); on `go` it runs the same per-second mix (R messages each
//! after a typing, R reads, R/5 reactions, each by a random user of its own,
//! seeded alike), waits `--drain-s`, prints `Done`, and on `stop` (or EOF)
//! closes its users and exits.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use tokio::io::AsyncBufReadExt;
use tokio::sync::mpsc;

use super::super::tally::Tally;
use super::super::worker::{Act, CellWorkerArgs, Line, load_and_count, say, wait_word};
use super::super::workload::{Plan, node_of};
use super::session::{self, Cmd, Who};
use crate::client::{Failure, source_addr};
use crate::fleet::{self, Failures, Launch};
use crate::machine::rss_kib;
use crate::pclient::PeerClient;
use crate::peer::Peer;

/// A worker whose parent vanished still ends.
const MAX_LIFE: Duration = Duration::from_secs(3600);
/// Commands queued per session: a user still busy with this many is skipped (counted as busy).
const SESSION_QUEUE: usize = 4;
/// Users joining their open chat's room at once.
const OPEN_BATCH: usize = 64;
/// One user's opening gets this long.
const OPEN_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs a worker to its end.
pub fn run(args: CellWorkerArgs) -> anyhow::Result<()> {
    // One thread, as herald's workers: the nodes need the cores.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async { tokio::time::timeout(MAX_LIFE, serve(args)).await.unwrap_or_else(|_| Ok(())) })
}

struct User {
    open: Option<u32>,
    tx: mpsc::Sender<Cmd>,
}

async fn serve(args: CellWorkerArgs) -> anyhow::Result<()> {
    let rss_start_kib = rss_kib(std::process::id()).unwrap_or(0);
    let mut stdin = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let plan = Arc::new(Plan::build(&args.model));
    anyhow::ensure!(args.first + args.count <= plan.open.len(), "users beyond the model's");
    let tally = Arc::new(Mutex::new(Tally::default()));
    let (users, failures, secs) = connect(&args, &plan, &tally).await;
    say(&Line::Joined { rss_start_kib, established: users.len() as u64, failures, secs })?;

    wait_word(&mut stdin, "open").await?;
    let t = Instant::now();
    let (watchers, failures) = open_all(&users, args.open_concurrency.unwrap_or(OPEN_BATCH)).await;
    let watching = watchers.values().sum();
    say(&Line::Opened { watching, failures, secs: t.elapsed().as_secs_f64() })?;

    let open: Vec<&mpsc::Sender<Cmd>> = users.iter().filter(|u| u.open.is_some()).map(|u| &u.tx).collect();
    // herald's cell's mix and draws: the same users act in the same order.
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

/// Connects each user and joins it to the member room of each of its chats; each gets a session.
async fn connect(args: &CellWorkerArgs, plan: &Arc<Plan>, tally: &Arc<Mutex<Tally>>) -> (Vec<User>, Failures, f64) {
    let spec = Launch {
        count: args.count,
        concurrency: args.concurrency.max(1),
        rate: Some(args.connect_rate),
        deadline: Duration::from_secs_f64(args.deadline_s),
    };
    let launched = fleet::launch(spec, |i| {
        let user = args.first + i;
        let node = node_of(user, args.nodes.len());
        let (server, source) = (args.nodes[node], source_addr(args.source_offset, i));
        let (plan, tally) = (plan.clone(), tally.clone());
        async move {
            let mut client = PeerClient::connect(Peer::Socketio, server, source).await?;
            for &c in &plan.user_chats[user] {
                client.join(&format!("m:{}", plan.chat_name(c))).await?;
            }
            let open = plan.open[user];
            let who = Who { user: user as u32, node: node as u32, open: open.map(|c| (c, plan.chat_name(c))) };
            let (tx, rx) = mpsc::channel(SESSION_QUEUE);
            tokio::spawn(session::run(client, who, rx, tally));
            Ok::<_, Failure>(User { open, tx })
        }
    })
    .await;
    let users = launched.ok.into_iter().map(|(_, u)| u).collect();
    (users, launched.failures, launched.elapsed.as_secs_f64())
}

/// Joins every user to its open chat's watchers' room, `at_once` at a time; watchers per chat.
async fn open_all(users: &[User], at_once: usize) -> (HashMap<u32, u64>, Failures) {
    let mut failures = Failures::default();
    let mut watchers: HashMap<u32, u64> = HashMap::new();
    let mut opening = futures_util::stream::iter(users.iter().filter(|u| u.open.is_some()).map(|u| async move {
        let (tx, rx) = tokio::sync::oneshot::channel();
        u.tx.send(Cmd::Open(tx)).await.map_err(|_| "the session had ended".to_string())?;
        match tokio::time::timeout(OPEN_TIMEOUT, rx).await {
            Ok(Ok(Ok(()))) => Ok(u.open),
            Ok(Ok(Err(e))) => Err(e),
            Ok(Err(_)) => Err("the session had ended".to_string()),
            Err(_) => Err(format!("not open in {OPEN_TIMEOUT:?}")),
        }
    }))
    .buffer_unordered(at_once);
    while let Some(r) = opening.next().await {
        match r {
            Ok(Some(c)) => *watchers.entry(c).or_default() += 1,
            Ok(None) => {}
            Err(e) => failures.add("open", || e),
        }
    }
    (watchers, failures)
}
