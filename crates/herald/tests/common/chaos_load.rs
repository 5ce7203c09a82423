//! The chaos run's load: every watcher and sender, started on nodes of their
//! own so that events cross NATS, and stopped in the run's order (senders
//! when the load stops, watchers once the auditor has seen them converge).
//!
//! Not here: what each client does (`chaos_watcher.rs`, `chaos_sender.rs`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use super::sender::{Ledger, QuietCtl, Sender};
use super::watcher::{Watcher, WatcherView};
use super::{NODES, Run, SENDERS, WATCHERS, WORKSPACES};

/// The clients of the run, started.
pub struct Load {
    /// Each watcher's view, with its workspace.
    pub views: Vec<(usize, Arc<Mutex<WatcherView>>)>,
    watchers: Vec<tokio::task::JoinHandle<()>>,
    senders: Vec<tokio::task::JoinHandle<()>>,
    ledger: Arc<Mutex<Ledger>>,
    /// The quiet chats' senders, for the bouncer to aim at.
    pub quiet: Vec<Arc<QuietCtl>>,
    /// How long after each quiet burst's last ack its slowest watcher held it.
    pub quiet_lags: Arc<Mutex<Vec<Duration>>>,
}

impl Load {
    /// Starts the watchers (first, so that they hold every chat from its first
    /// event), then the busy and quiet senders, each on a node of its own to start
    /// with, so that events cross NATS.
    pub fn start(run: &Arc<Run>, tokens: &HashMap<String, String>, seeds: &mut StdRng) -> Load {
        let mut c = Load {
            views: Vec::new(),
            watchers: Vec::new(),
            senders: Vec::new(),
            ledger: Arc::new(Mutex::new(Ledger::default())),
            quiet: Vec::new(),
            quiet_lags: Arc::new(Mutex::new(Vec::new())),
        };
        for (ws, &ws_name) in WORKSPACES.iter().enumerate() {
            let chats: Vec<usize> = (0..run.chats.len()).filter(|&k| run.chats[k].ws == ws).collect();
            for i in 0..WATCHERS {
                let name = format!("watcher{ws}-{i}");
                let view = Arc::new(Mutex::new(WatcherView::new(name.clone(), chats.clone())));
                c.views.push((ws, view.clone()));
                let w = Watcher {
                    run: run.clone(),
                    view,
                    ws: ws_name,
                    token: tokens[&name].clone(),
                    rng: StdRng::seed_from_u64(seeds.random()),
                };
                c.watchers.push(tokio::spawn(w.run((i + ws) % NODES)));
            }
        }
        for (ws, &ws_name) in WORKSPACES.iter().enumerate() {
            let of_ws = |quiet: bool| -> Vec<usize> {
                (0..run.chats.len()).filter(|&k| run.chats[k].ws == ws && run.chats[k].quiet == quiet).collect()
            };
            let sender = |name: String, node: usize, rng: StdRng| {
                let token = tokens[&name].clone();
                Sender::new(run.clone(), c.ledger.clone(), name, ws_name, token, node, rng)
            };
            let busy = of_ws(false);
            for i in 0..SENDERS {
                let s = sender(format!("sender{ws}-{i}"), (i + ws + 1) % NODES, StdRng::seed_from_u64(seeds.random()));
                c.senders.push(tokio::spawn(s.busy(busy.clone())));
            }
            for (i, k) in of_ws(true).into_iter().enumerate() {
                let s = sender(format!("quiet{ws}-{i}"), (ws + i + 2) % NODES, StdRng::seed_from_u64(seeds.random()));
                let watchers: Vec<_> = c.views.iter().filter(|(w, _)| *w == ws).map(|(_, v)| v.clone()).collect();
                let ctl = Arc::new(QuietCtl::new(k, run.chats[k].shard, s.at_node()));
                c.quiet.push(ctl.clone());
                c.senders.push(tokio::spawn(s.quiet(ctl, watchers, c.quiet_lags.clone())));
            }
        }
        c
    }

    /// Waits until every sender is done (the load stopped and pending sends
    /// were acknowledged or given up); returns the ledger of every send.
    pub async fn senders_done(&mut self) -> Ledger {
        for t in self.senders.drain(..) {
            t.await.expect("sender");
        }
        std::mem::take(&mut *self.ledger.lock().unwrap())
    }

    /// Waits until every watcher is done (after [`Run::stop_clients`]).
    pub async fn watchers_done(&mut self) {
        for t in self.watchers.drain(..) {
            t.await.expect("watcher");
        }
    }
}
