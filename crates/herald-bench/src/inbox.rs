//! The `inbox` scenario: one user's inbox in a large store. It builds a
//! store of C chats and E events (100,000 and 10,000,000 by default) in
//! which one user, `me`, is a member of M chats (1,000) with read positions
//! spread over each chat's log, then reads that user's whole inbox (every
//! page) again and again over the WebSocket `inbox` op and reports the
//! latency of a whole inbox and of one page, p50 and p99.
//!
//! The store is bulk-loaded straight into the store's SQL, not sent through
//! the protocol (ten million durable sends would take hours): herald first
//! starts on the empty store to create its schema, stops, and the bench
//! fills the tables with what herald itself would have stored for that log
//! (the counts kept as counts included), without the secondary indexes,
//! which it then rebuilds. On PostgreSQL (`--store postgres --pg-admin URL`)
//! the bench creates a database for the run and drops it after.
//!
//! The first read of each run is checked: every one of `me`'s chats once,
//! in the inbox's order, each `unread` equal to the count the generator
//! knows (messages above the read position, by others, not deleted).

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, ensure};
use clap::{Args, ValueEnum};
use futures_util::SinkExt;
use serde::Serialize;
use serde_json::{Value, json};

use crate::client::Client;
use crate::latency::Latencies;
use crate::report::{self, Column, RunArgs, col};
use crate::server::{Server, TargetArgs};
use crate::token::Signer;

/// The user whose inbox is read.
const ME: &str = "me";
/// Members of each chat (`me` or another user first, then three more).
const MEMBERS: u64 = 4;
/// Every tenth event after the joins is a reaction; the rest are messages.
const REACTION_EVERY: u64 = 10;
/// About one message in this many is deleted.
const DELETED_ONE_IN: u64 = 50;
/// A started server opens (or migrates) its store within this.
const READY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);
/// Rows per COPY chunk sent to PostgreSQL.
const COPY_CHUNK: usize = 1 << 16;

/// Which store the server under test uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreKind {
    Sqlite,
    Postgres,
}

/// `herald-bench inbox`.
#[derive(Debug, Args, Serialize)]
pub struct InboxArgs {
    /// Chats in the store.
    #[arg(long, default_value_t = 100_000)]
    pub chats: u64,
    /// Events in the store, spread evenly over the chats.
    #[arg(long, default_value_t = 10_000_000)]
    pub events: u64,
    /// Chats `me` is a member of.
    #[arg(long, default_value_t = 1_000)]
    pub member_chats: u64,
    /// `limit` of each inbox page.
    #[arg(long, default_value_t = 200)]
    pub limit: u32,
    /// Whole-inbox reads per run.
    #[arg(long, default_value_t = 50)]
    pub reads: u32,
    #[arg(long, value_enum, default_value_t = StoreKind::Sqlite)]
    pub store: StoreKind,
    /// With `--store postgres`: a URL of the cluster on which the bench may create (and drop) a database.
    #[arg(long, required_if_eq("store", "postgres"))]
    #[serde(skip)]
    pub pg_admin: Option<String>,
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub target: TargetArgs,
}

const COLUMNS: &[Column] = &[
    col("chats_listed", "chats"),
    col("pages", "pages"),
    col("reads", "reads"),
    col("inbox_p50_ms", "inbox p50 ms"),
    col("inbox_p99_ms", "inbox p99 ms"),
    col("page_p50_ms", "page p50 ms"),
    col("page_p99_ms", "page p99 ms"),
    col("exact", "exact"),
];

/// Builds the store, then runs the measurement `args.run.runs` times (each on a fresh server) and reports.
pub async fn run(args: InboxArgs) -> anyhow::Result<Vec<Value>> {
    ensure!(args.target.starts_server(), "inbox builds its own store: it starts its own server");
    ensure!(args.chats > 0 && args.member_chats <= args.chats, "--member-chats must be at most --chats");
    ensure!(args.events / args.chats > MEMBERS, "at least {} events per chat", MEMBERS + 1);
    ensure!((1..=200).contains(&args.limit) && args.reads > 0, "--limit 1 to 200, --reads at least 1");
    let plan = Plan::new(&args);
    let data = tempfile::TempDir::with_prefix("herald-bench-inbox-")?;
    let (flags, pg) = match args.store {
        StoreKind::Sqlite => (Vec::new(), None),
        StoreKind::Postgres => {
            let admin = args.pg_admin.as_deref().context("--pg-admin")?;
            let db = PgDatabase::create(admin).await?;
            (vec!["--store".to_string(), db.url.clone()], Some(db))
        }
    };
    let built = Instant::now();
    // herald creates its schema (once ready, it has), then the bench fills it.
    let first = Server::start_in(&args.target, &flags, data.path()).await?;
    let ready = wait_ready(&first).await;
    first.stop().await?;
    ready?;
    let expected = match &pg {
        None => load_sqlite(&plan, data.path())?,
        Some(db) => load_postgres(&plan, &db.url).await?,
    };
    let build_s = built.elapsed().as_secs_f64();
    eprintln!("store built in {build_s:.0} s: {} chats, {} events", plan.chats, plan.chats * plan.per_chat);
    let result = report::repeat(&args.run, |_| measure(&args, &flags, data.path(), &expected, build_s)).await;
    if let Some(db) = pg {
        db.drop_it().await;
    }
    let runs = result?;
    report::emit("inbox", &args, &runs, COLUMNS, args.run.json);
    Ok(runs)
}

/// Waits until the server answers `/readyz` with 200: its store is open.
async fn wait_ready(server: &Server) -> anyhow::Result<()> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Ok(a) = crate::http::get(server.addr, "/readyz", None).await
            && a.status == 200
        {
            return Ok(());
        }
        ensure!(Instant::now() < deadline, "the server was not ready in {READY_TIMEOUT:?}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// One run: a server on the built store, `reads` whole inboxes.
async fn measure(
    args: &InboxArgs,
    flags: &[String],
    data: &Path,
    expected: &HashMap<String, u64>,
    build_s: f64,
) -> anyhow::Result<Value> {
    let server = Server::start_in(&args.target, flags, data).await?;
    let outcome = match wait_ready(&server).await {
        Ok(()) => read_inboxes(args, &server, expected).await,
        Err(e) => Err(e),
    };
    let log = server.stop().await?;
    let mut out = outcome?;
    out["build_s"] = json!(build_s);
    out["server_warnings"] = json!(log.map(|l| l.warnings).unwrap_or(0));
    Ok(out)
}

async fn read_inboxes(args: &InboxArgs, server: &Server, expected: &HashMap<String, u64>) -> anyhow::Result<Value> {
    let signer = Signer::new(&server.jwt_secret, &args.target.workspace);
    let path = Server::ws_path(&args.target.workspace);
    let mut me = Client::connect(server.addr, &path, std::net::Ipv4Addr::LOCALHOST).await?;
    me.hello(&signer.token(ME)?).await?;
    let (mut whole, mut page) = (Latencies::default(), Latencies::default());
    let (mut exact, mut listed, mut pages) = (true, 0usize, 0u32);
    for read in 0..args.reads {
        let started = Instant::now();
        let mut cursor: Option<String> = None;
        let mut seen = Vec::new();
        pages = 0;
        loop {
            let t = Instant::now();
            let got = me.inbox(args.limit, cursor.as_deref()).await?;
            page.record(t.elapsed());
            pages += 1;
            seen.extend(got.chats);
            match got.cursor {
                Some(c) if got.more => cursor = Some(c),
                _ => break,
            }
        }
        whole.record(started.elapsed());
        if read == 0 {
            listed = seen.len();
            let ordered = seen.windows(2).all(|w| (w[1].ts, &w[0].chat) < (w[0].ts, &w[1].chat));
            let counts = seen.iter().all(|e| expected.get(&e.chat) == Some(&e.unread));
            exact = ordered && counts && seen.len() == expected.len();
            if !exact {
                eprintln!(
                    "inbox: ordered {ordered}, counts as expected {counts}, {} of {}",
                    seen.len(),
                    expected.len()
                );
            }
        }
    }
    let (w, p) = (whole.summary(), page.summary());
    Ok(json!({
        "chats_listed": listed,
        "pages": pages,
        "reads": args.reads,
        "inbox_p50_ms": w.p50_ms,
        "inbox_p99_ms": w.p99_ms,
        "page_p50_ms": p.p50_ms,
        "page_p99_ms": p.p99_ms,
        "exact": exact,
        "failed": if exact { 0 } else { 1 },
    }))
}

/// The store's shape, and what it holds for each chat: all derived from the
/// chat's index, so the loaders and the check agree without storing it.
struct Plan {
    chats: u64,
    per_chat: u64,
    /// `me` is a member of every `stride`-th chat, `member_chats` of them.
    stride: u64,
    member_chats: u64,
    t0: i64,
}

/// One event row as the store keeps it.
struct Row<'a> {
    seq: u64,
    kind: &'static str,
    user: &'a str,
    ts: i64,
    body: String,
    ord: Option<u64>,
    user_ord: Option<u64>,
    deleted: bool,
}

impl Plan {
    fn new(args: &InboxArgs) -> Plan {
        Plan {
            chats: args.chats,
            per_chat: args.events / args.chats,
            stride: (args.chats / args.member_chats.max(1)).max(1),
            member_chats: args.member_chats,
            t0: 1_700_000_000_000,
        }
    }

    fn name(i: u64) -> String {
        format!("c{i:07}")
    }

    fn mine(&self, i: u64) -> bool {
        i.is_multiple_of(self.stride) && i / self.stride < self.member_chats
    }

    fn members(&self, i: u64) -> [String; MEMBERS as usize] {
        let first = if self.mine(i) { ME.to_string() } else { format!("o{i}") };
        [first, format!("a{}", i % 997), format!("b{}", i % 991), format!("c{}", i % 983)]
    }

    /// When the chat's log starts: activity spread over the chats, not in their order.
    fn base_ts(&self, i: u64) -> i64 {
        self.t0 + ((i * 7919) % self.chats) as i64 * 10
    }

    /// `me`'s read position in chat `i`: anywhere from nothing read to all of it.
    fn read(&self, i: u64) -> u64 {
        if self.mine(i) { (i / self.stride * 37) % (self.per_chat + 1) } else { 0 }
    }

    /// Chat `i`'s log, with each message's places among the chat's and its sender's messages.
    fn events<'a>(&self, i: u64, members: &'a [String]) -> impl Iterator<Item = Row<'a>> {
        let base = self.base_ts(i);
        let mut ords = [0u64; MEMBERS as usize];
        let mut ord = 0u64;
        (1..=self.per_chat).map(move |seq| {
            let ts = base + seq as i64;
            if seq <= MEMBERS {
                let user = &members[(seq - 1) as usize];
                return Row {
                    seq,
                    kind: "join",
                    user,
                    ts,
                    body: "{}".into(),
                    ord: None,
                    user_ord: None,
                    deleted: false,
                };
            }
            let who = (seq % MEMBERS) as usize;
            let user = &members[who];
            if seq.is_multiple_of(REACTION_EVERY) {
                let body = format!(r#"{{"target":{},"emoji":"+1","on":true}}"#, seq - 1);
                return Row { seq, kind: "reaction", user, ts, body, ord: None, user_ord: None, deleted: false };
            }
            ord += 1;
            ords[who] += 1;
            let deleted = (seq * 31 + i).is_multiple_of(DELETED_ONE_IN);
            let body = if deleted { "null".into() } else { format!(r#"{{"n":{seq}}}"#) };
            Row { seq, kind: "message", user, ts, body, ord: Some(ord), user_ord: Some(ords[who]), deleted }
        })
    }

    /// The chat row's counts: messages, and the latest message's seq.
    fn counts(&self, i: u64, members: &[String]) -> (u64, u64) {
        self.events(i, members).filter(|r| r.ord.is_some()).fold((0, 0), |(n, _), r| (n + 1, r.seq))
    }

    /// `me`'s unread count in chat `i`, counted the slow way.
    fn unread(&self, i: u64, members: &[String]) -> u64 {
        let read = self.read(i);
        self.events(i, members).filter(|r| r.ord.is_some() && r.seq > read && r.user != ME && !r.deleted).count() as u64
    }
}

/// Fills the SQLite store herald created in `dir`; answers `me`'s expected unread counts.
fn load_sqlite(plan: &Plan, dir: &Path) -> anyhow::Result<HashMap<String, u64>> {
    let mut conn = rusqlite::Connection::open(dir.join("herald.db"))?;
    conn.execute_batch("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF;")?;
    let indexes: Vec<(String, String)> = conn
        .prepare(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name IN ('events', 'members')
             AND sql IS NOT NULL",
        )?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    for (name, _) in &indexes {
        conn.execute_batch(&format!("DROP INDEX {name}"))?;
    }
    let mut expected = HashMap::new();
    let tx = conn.transaction()?;
    {
        let mut chat = tx.prepare(
            "INSERT INTO chats (id, ws, chat, open, seq, members, created_ms, messages, last_ts, last_message)
             VALUES (?1, 'bench', ?2, 1, ?3, ?4, ?5, ?6, ?7, ?8)",
        )?;
        let mut member =
            tx.prepare("INSERT INTO members (chat_id, user, read_seq, joined_ms) VALUES (?1, ?2, ?3, ?4)")?;
        let mut event = tx.prepare(
            "INSERT INTO events (chat_id, seq, type, user, ts, body, ord, user_ord, deleted)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        )?;
        for i in 0..plan.chats {
            let id = i as i64 + 1;
            let members = plan.members(i);
            let (messages, last) = plan.counts(i, &members);
            let base = plan.base_ts(i);
            chat.execute(rusqlite::params![
                id,
                Plan::name(i),
                plan.per_chat as i64,
                MEMBERS as i64,
                base,
                messages as i64,
                base + plan.per_chat as i64,
                last as i64
            ])?;
            for (k, m) in members.iter().enumerate() {
                let read = if m == ME { plan.read(i) } else { 0 };
                member.execute(rusqlite::params![id, m, read as i64, base + k as i64 + 1])?;
            }
            for r in plan.events(i, &members) {
                event.execute(rusqlite::params![
                    id,
                    r.seq as i64,
                    r.kind,
                    r.user,
                    r.ts,
                    r.body,
                    r.ord.map(|v| v as i64),
                    r.user_ord.map(|v| v as i64),
                    r.deleted
                ])?;
            }
            if plan.mine(i) {
                expected.insert(Plan::name(i), plan.unread(i, &members));
            }
            if i % 10_000 == 9_999 {
                eprintln!("sqlite: {} chats loaded", i + 1);
            }
        }
    }
    tx.commit()?;
    for (_, sql) in &indexes {
        conn.execute_batch(sql)?;
    }
    conn.execute_batch("ANALYZE; PRAGMA journal_mode = WAL;")?;
    Ok(expected)
}

/// A database of its own on the cluster at `--pg-admin`.
struct PgDatabase {
    admin: String,
    name: String,
    url: String,
}

impl PgDatabase {
    async fn create(admin: &str) -> anyhow::Result<PgDatabase> {
        let client = pg_connect(admin).await?;
        let name = format!("herald_bench_inbox_{:08x}", std::process::id());
        client.batch_execute(&format!("DROP DATABASE IF EXISTS {name}")).await?;
        client.batch_execute(&format!("CREATE DATABASE {name}")).await?;
        let base = admin.rsplit_once('/').context("--pg-admin needs a database in its URL")?.0;
        Ok(PgDatabase { admin: admin.to_string(), url: format!("{base}/{name}"), name })
    }

    async fn drop_it(self) {
        if let Ok(client) = pg_connect(&self.admin).await {
            let _ = client.batch_execute(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name)).await;
        }
    }
}

async fn pg_connect(url: &str) -> anyhow::Result<tokio_postgres::Client> {
    let (client, conn) =
        tokio_postgres::connect(url, tokio_postgres::NoTls).await.context("connecting to PostgreSQL")?;
    tokio::spawn(conn);
    Ok(client)
}

/// Fills the PostgreSQL shard herald created at `url` with COPY; answers `me`'s expected unread counts.
async fn load_postgres(plan: &Plan, url: &str) -> anyhow::Result<HashMap<String, u64>> {
    let client = pg_connect(url).await?;
    let indexes: Vec<(String, String)> = client
        .query(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename IN ('events', 'members')
             AND indexname NOT LIKE '%_pkey'",
            &[],
        )
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    for (name, _) in &indexes {
        client.batch_execute(&format!("DROP INDEX {name}")).await?;
    }
    let mut expected = HashMap::new();
    let (mut chats, mut members, mut events) = (String::new(), String::new(), String::new());
    for i in 0..plan.chats {
        let id = i + 1;
        let ms = plan.members(i);
        let (messages, last) = plan.counts(i, &ms);
        let base = plan.base_ts(i);
        let last_ts = base + plan.per_chat as i64;
        chats.push_str(&format!(
            "{id}\tbench\t{}\tt\t{}\t{MEMBERS}\t{base}\t{messages}\t{last_ts}\t{last}\n",
            Plan::name(i),
            plan.per_chat
        ));
        for (k, m) in ms.iter().enumerate() {
            let read = if m == ME { plan.read(i) } else { 0 };
            members.push_str(&format!("{id}\t{m}\t{read}\t{}\n", base + k as i64 + 1));
        }
        for r in plan.events(i, &ms) {
            let n = |v: Option<u64>| v.map_or("\\N".to_string(), |v| v.to_string());
            events.push_str(&format!(
                "{id}\t{}\t{}\t{}\t{}\t{}\t\\N\t{}\t{}\t\\N\t\\N\t{}\n",
                r.seq,
                r.kind,
                r.user,
                r.ts,
                r.body,
                n(r.ord),
                n(r.user_ord),
                if r.deleted { "t" } else { "f" }
            ));
        }
        if plan.mine(i) {
            expected.insert(Plan::name(i), plan.unread(i, &ms));
        }
        if events.len() > COPY_CHUNK * 64 || i + 1 == plan.chats {
            copy(
                &client,
                "chats (id, ws, chat, open, seq, members, created_ms, messages, last_ts, last_message)",
                &mut chats,
            )
            .await?;
            copy(&client, r#"members (chat_id, "user", read_seq, joined_ms)"#, &mut members).await?;
            copy(
                &client,
                r#"events (chat_id, seq, type, "user", ts, body, client_id, ord, user_ord, target, edited, deleted)"#,
                &mut events,
            )
            .await?;
        }
        if i % 10_000 == 9_999 {
            eprintln!("postgres: {} chats loaded", i + 1);
        }
    }
    for (_, def) in &indexes {
        client.batch_execute(def).await?;
    }
    client.batch_execute(&format!("SELECT setval('chats_id_seq', {})", plan.chats)).await?;
    // Its own statement: VACUUM cannot run in the implicit transaction of a multi-statement batch.
    client.batch_execute("VACUUM ANALYZE").await?;
    Ok(expected)
}

/// Sends `rows` (COPY's text format) into `table` and empties it.
async fn copy(client: &tokio_postgres::Client, table: &str, rows: &mut String) -> anyhow::Result<()> {
    let sink = client.copy_in(&format!("COPY {table} FROM STDIN")).await?;
    futures_util::pin_mut!(sink);
    sink.send(bytes::Bytes::from(std::mem::take(rows))).await?;
    sink.finish().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_counts_what_the_inbox_should_say() {
        let args = InboxArgs::try_parse_from(["x", "--chats", "10", "--events", "200", "--member-chats", "3"]);
        let plan = Plan::new(&args.unwrap());
        assert_eq!(plan.per_chat, 20);
        let mine: Vec<u64> = (0..10).filter(|&i| plan.mine(i)).collect();
        assert_eq!(mine, [0, 3, 6]);
        let members = plan.members(3);
        let events: Vec<Row> = plan.events(3, &members).collect();
        assert_eq!(events.len(), 20);
        assert_eq!(events.iter().filter(|r| r.kind == "join").count(), 4);
        assert_eq!(events.iter().filter(|r| r.kind == "reaction").count(), 2); // seq 10 and 20
        let (messages, last) = plan.counts(3, &members);
        assert_eq!((messages, last), (14, 19));
        // The slow count agrees with the arithmetic the store does.
        let read = plan.read(3);
        let at_read = events.iter().filter(|r| r.ord.is_some() && r.seq <= read).count() as u64;
        let mine_total = events.iter().filter(|r| r.ord.is_some() && r.user == ME).count() as u64;
        let mine_at_read = events.iter().filter(|r| r.ord.is_some() && r.user == ME && r.seq <= read).count() as u64;
        let deleted_after = events.iter().filter(|r| r.deleted && r.seq > read && r.user != ME).count() as u64;
        let arithmetic = (messages - at_read) - (mine_total - mine_at_read) - deleted_after;
        assert_eq!(plan.unread(3, &members), arithmetic);
    }

    impl InboxArgs {
        fn try_parse_from(argv: [&str; 7]) -> Result<InboxArgs, clap::Error> {
            #[derive(clap::Parser)]
            struct P {
                #[command(flatten)]
                a: InboxArgs,
            }
            <P as clap::Parser>::try_parse_from(argv).map(|p| p.a)
        }
    }
}
