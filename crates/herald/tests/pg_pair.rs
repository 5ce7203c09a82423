//! The failover harness by itself ([`PgPair`], real PostgreSQL, no herald):
//! what a failed-over primary keeps and loses, what the multi-host URL
//! reaches, and that no process of the pair outlives it.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::pg_pair::{PgPair, pids_in};
use tokio_postgres::{Client, NoTls};

/// Runs `f` on the pair in a blocking thread (its methods wait on processes).
async fn on<T: Send + 'static>(pair: &Arc<PgPair>, f: impl FnOnce(&PgPair) -> T + Send + 'static) -> T {
    let pair = pair.clone();
    tokio::task::spawn_blocking(move || f(&pair)).await.expect("pair operation")
}

async fn connect(url: &str) -> Client {
    let (client, conn) = tokio_postgres::connect(url, NoTls).await.unwrap_or_else(|e| panic!("connect {url}: {e}"));
    tokio::spawn(conn);
    client
}

/// The rows of table `t` on the server at `url`, in order.
async fn rows(url: &str) -> Vec<i32> {
    let c = connect(url).await;
    c.query("SELECT n FROM t ORDER BY n", &[]).await.expect("select").iter().map(|r| r.get(0)).collect()
}

/// Inserts `ns` into `t` one commit each.
async fn insert(c: &Client, ns: std::ops::Range<i32>) {
    for n in ns {
        c.execute("INSERT INTO t VALUES ($1)", &[&n]).await.expect("insert");
    }
}

/// Drops the pair and checks that none of its processes is left.
fn drop_and_check(pair: Arc<PgPair>) {
    let dirs = pair.dirs();
    drop(Arc::into_inner(pair).expect("the last handle on the pair"));
    for d in dirs {
        assert!(pids_in(&d).is_empty(), "processes left in {}", d.display());
        assert!(!d.exists(), "{} removed", d.display());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL (Debian's postgresql); scripts/test.sh runs it"]
async fn a_synchronous_pair_keeps_every_commit_over_two_failovers() {
    let t = Instant::now();
    let pair = Arc::new(tokio::task::spawn_blocking(|| PgPair::start(true)).await.unwrap());
    println!("start (initdb, base backup, sync): {:?}", t.elapsed());
    let db = on(&pair, PgPair::create_database).await;
    let url = pair.hosts_url(&db);
    assert_eq!(pair.primary_name(), "a");

    let c = connect(&url).await;
    c.batch_execute("CREATE TABLE t (n int PRIMARY KEY)").await.unwrap();
    insert(&c, 0..100).await;
    drop(c);

    on(&pair, PgPair::kill9_primary).await;
    let t = Instant::now();
    on(&pair, PgPair::promote_standby).await;
    println!("promote_standby (b): {:?}", t.elapsed());
    assert_eq!(pair.primary_name(), "b");
    assert_eq!(rows(&pair.primary_url(&db)).await, (0..100).collect::<Vec<_>>(), "every commit on b");

    // a is down: the multi-host URL skips it and lands on b, which takes writes without a sync standby.
    let c = connect(&url).await;
    let port: i32 = c.query_one("SELECT inet_server_port()", &[]).await.unwrap().get(0);
    assert_eq!(port, i32::from(pair.primary_port()));
    insert(&c, 100..150).await;
    drop(c);

    let t = Instant::now();
    on(&pair, PgPair::rebuild_old_primary).await;
    println!("rebuild_old_primary (a, sync): {:?}", t.elapsed());
    let state =
        on(&pair, |p| p.query_primary("SELECT application_name || ' ' || sync_state FROM pg_stat_replication")).await;
    assert_eq!(state, "a sync");

    // Commits on b now wait for a; then back to a.
    let c = connect(&url).await;
    insert(&c, 150..200).await;
    drop(c);
    on(&pair, PgPair::kill9_primary).await;
    let t = Instant::now();
    on(&pair, PgPair::promote_standby).await;
    println!("promote_standby (a): {:?}", t.elapsed());
    assert_eq!(pair.primary_name(), "a");
    assert_eq!(rows(&url).await, (0..200).collect::<Vec<_>>(), "every commit on a, through the multi-host URL");

    let t = Instant::now();
    on(&pair, PgPair::rebuild_old_primary).await;
    println!("rebuild_old_primary (b, sync): {:?}", t.elapsed());
    drop_and_check(pair);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL (Debian's postgresql); scripts/test.sh runs it"]
async fn a_frozen_primary_is_failed_over_and_rebuilt() {
    let pair = Arc::new(tokio::task::spawn_blocking(|| PgPair::start(true)).await.unwrap());
    let db = on(&pair, PgPair::create_database).await;
    let c = connect(&pair.primary_url(&db)).await;
    c.batch_execute("CREATE TABLE t (n int PRIMARY KEY)").await.unwrap();
    insert(&c, 0..20).await;
    drop(c);

    on(&pair, PgPair::freeze_primary).await;
    let frozen = pids_in(&pair.dirs()[0]);
    assert!(!frozen.is_empty());
    // Frozen, a still accepts TCP connections but never answers them.
    let a_url = pair.primary_url(&db);
    let stalled = tokio::time::timeout(Duration::from_secs(1), tokio_postgres::connect(&a_url, NoTls));
    assert!(stalled.await.is_err(), "a frozen primary answers nothing");

    let t = Instant::now();
    on(&pair, PgPair::promote_standby).await;
    println!("promote_standby (b, a frozen): {:?}", t.elapsed());
    let c = connect(&pair.primary_url(&db)).await;
    insert(&c, 20..40).await;
    drop(c);
    // tokio-postgres's connect_timeout bounds the TCP connect only: with frozen a
    // listed first, the multi-host URL stalls on a's handshake.
    let url = pair.hosts_url(&db);
    let first = tokio::time::timeout(Duration::from_secs(2), tokio_postgres::connect(&url, NoTls));
    println!("multi-host connect with a frozen: {}", if first.await.is_err() { "stalls" } else { "returns" });

    let t = Instant::now();
    on(&pair, PgPair::rebuild_old_primary).await;
    println!("rebuild_old_primary (a, was frozen): {:?}", t.elapsed());
    for pid in &frozen {
        assert!(!std::path::Path::new(&format!("/proc/{pid}/cwd")).exists(), "frozen process {pid} is gone");
    }
    assert_eq!(rows(&pair.hosts_url(&db)).await, (0..40).collect::<Vec<_>>());
    drop_and_check(pair);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL (Debian's postgresql); scripts/test.sh runs it"]
async fn an_asynchronous_pair_loses_what_the_standby_missed() {
    let pair = Arc::new(tokio::task::spawn_blocking(|| PgPair::start(false)).await.unwrap());
    let db = on(&pair, PgPair::create_database).await;
    let c = connect(&pair.primary_url(&db)).await;
    c.batch_execute("CREATE TABLE t (n int PRIMARY KEY)").await.unwrap();
    insert(&c, 0..10).await;
    // What was committed before the pause reaches the standby.
    let standby = pair.standby_url(&db);
    for _ in 0..500 {
        if rows(&standby).await.len() == 10 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    on(&pair, PgPair::pause_replication).await;
    insert(&c, 10..20).await;
    drop(c);
    on(&pair, PgPair::kill9_primary).await;
    on(&pair, PgPair::promote_standby).await;
    assert_eq!(rows(&pair.hosts_url(&db)).await, (0..10).collect::<Vec<_>>(), "10..20 were lost with a");

    on(&pair, PgPair::rebuild_old_primary).await;
    drop_and_check(pair);
}
