//! What a chaos run shares: its settings (seed and length, from the
//! environment), its chats and users as the server API set them up, its
//! clock and phase (load, drain, done), the timeline and the failures; and
//! its end: the timeline written beside the node logs, which are removed if
//! the run passed or shown if it failed.
//!
//! Not here: the processes (`chaos_cell.rs`), the clients, the faults and the checks.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::rngs::StdRng;
use serde_json::{Value, json};
use tokio::sync::watch;

use super::presence::{PRESENCE_CHAT, PRESENCE_WS, probe_user};
use super::{BUSY_CHATS, Cell, NODES, QUIET_CHATS, SEND_GIVE_UP, SENDERS, WATCHERS, WORKSPACES};
use crate::common::try_http;

/// The settings of a run, from the environment.
pub struct Settings {
    /// `HERALD_CHAOS_SEED`, or a random one: the bouncer's choices and
    /// timings and the clients' choices (real timing stays the machine's).
    pub seed: u64,
    /// `HERALD_CHAOS_SECS`: how long the load runs (default 30 s).
    pub secs: u64,
    /// When the run started, cell and all.
    started: Instant,
}

impl Settings {
    /// Reads the settings and prints them, with how to replay the seed.
    pub fn from_env() -> Settings {
        let seed: u64 = match std::env::var("HERALD_CHAOS_SEED") {
            Ok(s) => s.trim().parse().expect("HERALD_CHAOS_SEED is a u64"),
            Err(_) => rand::random(),
        };
        let secs: u64 = std::env::var("HERALD_CHAOS_SECS").map_or(30, |s| s.trim().parse().expect("HERALD_CHAOS_SECS"));
        eprintln!("chaos: seed {seed} (replay with HERALD_CHAOS_SEED={seed}), {secs} s of load");
        Settings { seed, secs, started: Instant::now() }
    }

    /// The generator every other seed of the run is drawn from.
    pub fn seeds(&self) -> StdRng {
        StdRng::seed_from_u64(self.seed)
    }
}

/// Where the run is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Phase {
    /// Senders send, the bouncer deals faults.
    Load,
    /// Senders finish what they have in flight; watchers run on.
    Drain,
    /// Everyone stops.
    Done,
}

/// One chat of the run.
pub struct ChatSpec {
    /// Its workspace, an index into [`WORKSPACES`].
    pub ws: usize,
    pub name: String,
    pub quiet: bool,
    /// The shard it is stored on, an index into the cell's shards.
    pub shard: usize,
}

/// What the whole run shares: the cell, the phase, the timeline and the failures.
pub struct Run {
    /// When the load started (the clock of the timeline).
    pub t0: Instant,
    /// When the load stops.
    pub load_ends: Instant,
    pub cell: Arc<Cell>,
    /// The run's chats; everywhere else a chat is its index `k` here.
    pub chats: Vec<ChatSpec>,
    /// The shard of the presence probes' chat ([`PRESENCE_CHAT`], not one of `chats`).
    pub presence_shard: usize,
    phase: watch::Sender<Phase>,
    /// Set when the load stops: pending sends are given up after it.
    give_up: Mutex<Option<Instant>>,
    timeline: Mutex<Vec<(Duration, String)>>,
    /// Every `unavailable` a client got: (chat, when).
    pub unavailable: Mutex<Vec<(usize, Instant)>>,
    /// Every shard outage: (shard, stopped, started again).
    pub shard_outages: Mutex<Vec<(usize, Instant, Instant)>>,
    /// Every failover: (shard, its primary killed or frozen, its standby promoted).
    pub failovers: Mutex<Vec<(usize, Instant, Instant)>>,
    failures: Mutex<Vec<String>>,
}

impl Run {
    /// Chats of every workspace on both shards, their members through the
    /// server API, and a token for every user; the run's clock starts once
    /// that is done. Returns the run and the users' tokens.
    pub async fn set_up(cell: Cell, settings: &Settings) -> (Arc<Run>, HashMap<String, String>) {
        eprintln!(
            "chaos: cell up in {:.1} s; logs in {}",
            settings.started.elapsed().as_secs_f64(),
            cell.dir.display()
        );
        let chats = (0..WORKSPACES.len()).flat_map(|ws| pick_chats(&cell.shard_names, ws)).collect();
        let presence_shard = shard_of(&cell.shard_names, PRESENCE_WS, PRESENCE_CHAT);
        let mut run = Run {
            t0: Instant::now(),
            load_ends: Instant::now(),
            cell: Arc::new(cell),
            chats,
            presence_shard,
            phase: watch::Sender::new(Phase::Load),
            give_up: Mutex::new(None),
            timeline: Mutex::new(Vec::new()),
            unavailable: Mutex::new(Vec::new()),
            shard_outages: Mutex::new(Vec::new()),
            failovers: Mutex::new(Vec::new()),
            failures: Mutex::new(Vec::new()),
        };
        let tokens = set_up_chats(&run, settings.secs).await;
        // The clock of the run starts now that the cell is set up.
        run.t0 = Instant::now();
        run.load_ends = run.t0 + Duration::from_secs(settings.secs);
        run.note(format!("t=0 is {} (the nodes' logs are in UTC)", utc_now()));
        (Arc::new(run), tokens)
    }

    /// Waits until the load has run its time, then stops it: senders finish
    /// what is in flight (given up [`SEND_GIVE_UP`] later), watchers run on.
    /// Returns when it stopped.
    pub async fn stop_load_when_due(&self) -> Instant {
        tokio::time::sleep_until(self.load_ends.into()).await;
        let stopped = Instant::now();
        *self.give_up.lock().unwrap() = Some(stopped + SEND_GIVE_UP);
        self.phase.send_replace(Phase::Drain);
        self.note("LOAD STOPPED".into());
        stopped
    }

    /// Ends the run: every client stops.
    pub fn stop_clients(&self) {
        self.phase.send_replace(Phase::Done);
    }

    /// Seconds since the load started.
    pub fn secs(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    /// `t` in seconds on the run's clock.
    pub fn at(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.t0).as_secs_f64()
    }

    /// A line of the timeline.
    pub fn note(&self, what: String) {
        self.timeline.lock().unwrap().push((self.t0.elapsed(), what));
    }

    /// A failure of the run: on the timeline, and reported at the end.
    pub fn fail(&self, what: String) {
        let line = format!("t={:.2}s {what}", self.secs());
        self.note(format!("FAILURE {what}"));
        self.failures.lock().unwrap().push(line);
    }

    /// How many failures so far.
    pub fn failure_count(&self) -> usize {
        self.failures.lock().unwrap().len()
    }

    /// The phase now.
    pub fn phase(&self) -> Phase {
        *self.phase.borrow()
    }

    /// The phase, to wait on.
    pub fn phases(&self) -> watch::Receiver<Phase> {
        self.phase.subscribe()
    }

    /// Whether every client is to stop.
    pub fn done(&self) -> bool {
        self.phase() == Phase::Done
    }

    /// Whether pending sends are given up by now.
    pub fn gave_up(&self) -> bool {
        self.give_up.lock().unwrap().is_some_and(|t| Instant::now() >= t)
    }

    /// `workspace/chat` of the run's chat `k`.
    pub fn chat_label(&self, k: usize) -> String {
        let c = &self.chats[k];
        format!("{}/{}", WORKSPACES[c.ws], c.name)
    }

    /// Sleeps `d`, or less if the run is done meanwhile.
    pub async fn sleep(&self, d: Duration) {
        let mut phase = self.phases();
        tokio::select! {
            _ = tokio::time::sleep(d) => {}
            _ = phase.wait_for(|p| *p == Phase::Done) => {}
        }
    }

    /// Writes the timeline next to the node logs; removes them if the run passed
    /// (unless `HERALD_CHAOS_KEEP` is set), fails loudly with the evidence if not.
    pub fn finish(&self, settings: &Settings) {
        let (seed, secs) = (settings.seed, settings.secs);
        let cell = &self.cell;
        let timeline: String =
            self.timeline.lock().unwrap().iter().map(|(t, s)| format!("{:8.3} {s}\n", t.as_secs_f64())).collect();
        let _ = std::fs::write(cell.dir.join("timeline.txt"), &timeline);
        let failures = self.failures.lock().unwrap().clone();
        if failures.is_empty() {
            if std::env::var_os("HERALD_CHAOS_KEEP").is_none() {
                cell.remove_dir();
            }
            return;
        }
        let faults: String = timeline
            .lines()
            .filter(|l| {
                l.contains("FAULT") || l.contains("MENDED") || l.contains("LOAD STOPPED") || l.contains("burst")
            })
            .map(|l| format!("{l}\n"))
            .collect();
        let shown: Vec<String> = failures.iter().take(60).map(|s| format!("  {s}")).collect();
        panic!(
            "chaos seed {seed} failed ({} failures; replay with HERALD_CHAOS_SEED={seed} HERALD_CHAOS_SECS={secs}):\n{}\n\n\
             faults:\n{faults}\nfull timeline: {dir}/timeline.txt; node logs kept in {dir}\n{}",
            failures.len(),
            shown.join("\n"),
            cell.log_tails(15),
            dir = cell.dir.display(),
        );
    }
}

/// Now as UTC `YYYY-MM-DDTHH:MM:SS.mmmZ`, the form of the nodes' log lines, so the timeline reads against them.
fn utc_now() -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    let (secs, ms) = (now.as_secs() as i64, now.subsec_millis());
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{ms:03}Z", rest / 3_600, rest / 60 % 60, rest % 60)
}

/// The shard (an index into `shard_names`) herald stores chat `name` of workspace `ws` on.
fn shard_of(shard_names: &[String], ws: usize, name: &str) -> usize {
    herald::hashing::rendezvous(&[WORKSPACES[ws].as_bytes(), name.as_bytes()], shard_names.iter().map(String::as_str))
        .unwrap()
}

/// Chat names of one workspace: `BUSY_CHATS` busy ones and `QUIET_CHATS` quiet ones, each kind over both shards.
fn pick_chats(shard_names: &[String], ws: usize) -> Vec<ChatSpec> {
    let shard_of = |name: &str| shard_of(shard_names, ws, name);
    let mut out = Vec::new();
    let mut i = 0;
    for j in 0..BUSY_CHATS {
        let want = (j + ws) % 2;
        loop {
            let name = format!("busy{i}");
            i += 1;
            if shard_of(&name) == want {
                out.push(ChatSpec { ws, name, quiet: false, shard: want });
                break;
            }
        }
    }
    for j in 0..QUIET_CHATS {
        let want = (j + ws) % 2;
        loop {
            let name = format!("quiet{i}");
            i += 1;
            if shard_of(&name) == want {
                out.push(ChatSpec { ws, name, quiet: true, shard: want });
                break;
            }
        }
    }
    out
}

async fn admin(run: &Run, method: &str, path: &str, body: Option<Value>) -> Value {
    let (status, v) = try_http(run.cell.addrs[0], method, path, body, Duration::from_secs(10))
        .await
        .unwrap_or_else(|| panic!("{method} {path}: no answer"));
    assert_eq!(status, 200, "{method} {path}: {v}");
    v
}

/// The users of workspace `ws`: its watchers, busy senders and quiet senders.
fn user_names(ws: usize) -> Vec<String> {
    (0..WATCHERS)
        .map(|i| format!("watcher{ws}-{i}"))
        .chain((0..SENDERS).map(|i| format!("sender{ws}-{i}")))
        .chain((0..QUIET_CHATS).map(|i| format!("quiet{ws}-{i}")))
        .collect()
}

/// Chats and their members through the server API; returns every user's token.
async fn set_up_chats(run: &Run, secs: u64) -> HashMap<String, String> {
    for (k, c) in run.chats.iter().enumerate() {
        let ws = WORKSPACES[c.ws];
        admin(run, "PUT", &format!("/v1/workspaces/{ws}/chats/{}", c.name), Some(json!({"open": true}))).await;
        for u in user_names(c.ws) {
            admin(run, "PUT", &format!("/v1/workspaces/{ws}/chats/{}/members/{u}", c.name), None).await;
        }
        eprintln!("chaos: chat {} on shard {}{}", run.chat_label(k), c.shard, if c.quiet { " (quiet)" } else { "" });
    }
    // The presence probes' chat: one member per node, no events, nobody else.
    let ws = WORKSPACES[PRESENCE_WS];
    admin(run, "PUT", &format!("/v1/workspaces/{ws}/chats/{PRESENCE_CHAT}"), Some(json!({"open": true}))).await;
    for i in 0..NODES {
        let u = probe_user(i);
        admin(run, "PUT", &format!("/v1/workspaces/{ws}/chats/{PRESENCE_CHAT}/members/{u}"), None).await;
    }
    eprintln!("chaos: presence probes' chat {ws}/{PRESENCE_CHAT} on shard {}", run.presence_shard);
    let mut tokens = HashMap::new();
    let probes = (0..NODES).map(|i| (PRESENCE_WS, probe_user(i)));
    for (ws, u) in (0..WORKSPACES.len()).flat_map(|ws| user_names(ws).into_iter().map(move |u| (ws, u))).chain(probes) {
        let body = json!({"workspace": WORKSPACES[ws], "user": u, "ttl_s": secs + 3_600});
        let v = admin(run, "POST", "/v1/tokens", Some(body)).await;
        tokens.insert(u, v["token"].as_str().unwrap().to_string());
    }
    tokens
}
