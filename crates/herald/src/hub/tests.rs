//! The hub's own tests: hot chats and gap repair, with paused time.

use super::*;
use crate::broker::memory::MemoryBroker;
use crate::broker::{Broker, Sink};
use crate::model::ChatInfo;
use crate::store::{BoxFuture, EventLog, Fetched, Membership, StoreError, Write, Written};
use herald_protocol::{Event, EventType};
use serde_json::value::RawValue;

pub(crate) fn stored(seq: u64) -> Event {
    let body = RawValue::from_string("{}".into()).unwrap();
    Event::new(seq, EventType::Message, Some("u".into()), 0, body)
}

fn event(key: &ChatKey, seq: u64) -> Arc<Published> {
    Published::new(key.clone(), &stored(seq))
}

/// A log holding seq 1..=`latest`; while it is read, it hands the hub the
/// events in `meanwhile`, as reordered publishes would arrive.
pub(crate) struct Log {
    hub: std::sync::Mutex<Weak<Hub>>,
    latest: std::sync::atomic::AtomicU64,
    meanwhile: std::sync::Mutex<Vec<u64>>,
    /// Fetches and heads reads served.
    pub(crate) reads: std::sync::atomic::AtomicUsize,
    heads: std::sync::atomic::AtomicUsize,
    /// Inbox entries read.
    entries: std::sync::atomic::AtomicUsize,
    /// `Some`: the log says which chats moved (as PostgreSQL's does), these since the last call.
    changes: std::sync::Mutex<Option<Vec<(ChatKey, u64)>>>,
    said: std::sync::atomic::AtomicBool,
}

impl Log {
    pub(crate) fn new(latest: u64, meanwhile: Vec<u64>) -> Arc<Log> {
        Arc::new(Log {
            hub: std::sync::Mutex::new(Weak::new()),
            latest: latest.into(),
            meanwhile: std::sync::Mutex::new(meanwhile),
            reads: 0.into(),
            heads: 0.into(),
            entries: 0.into(),
            changes: std::sync::Mutex::new(None),
            said: false.into(),
        })
    }

    /// A log that says which chats moved: `moved` of them, now at seq `latest`.
    fn with_changes(latest: u64) -> Arc<Log> {
        let log = Log::new(latest, vec![]);
        *log.changes.lock().unwrap() = Some(Vec::new());
        log
    }

    fn moved(&self, key: &ChatKey, latest: u64) {
        self.latest.store(latest, std::sync::atomic::Ordering::SeqCst);
        self.changes.lock().unwrap().as_mut().expect("a log with changes").push((key.clone(), latest));
    }

    fn info(&self) -> ChatInfo {
        ChatInfo { seq: self.latest.load(std::sync::atomic::Ordering::SeqCst), members: 1, open: true, profiled: false }
    }
}

impl EventLog for Log {
    fn write(&self, _write: Write) -> BoxFuture<'_, Result<Written, StoreError>> {
        Box::pin(std::future::ready(Err(StoreError::Unavailable("read-only log".into()))))
    }

    fn chat(&self, _key: &ChatKey) -> BoxFuture<'_, Result<Option<ChatInfo>, StoreError>> {
        Box::pin(std::future::ready(Ok(Some(self.info()))))
    }

    fn fetch<'a>(
        &'a self,
        key: &'a ChatKey,
        _member: Option<&'a str>,
        after: u64,
        limit: u32,
    ) -> BoxFuture<'a, Result<Fetched, StoreError>> {
        self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if let Some(hub) = self.hub.lock().unwrap().upgrade() {
            for seq in self.meanwhile.lock().unwrap().drain(..) {
                hub.deliver(event(key, seq));
            }
        }
        let info = self.info();
        let last = info.seq.min(after.saturating_add(limit as u64));
        let events = (after + 1..=last).map(stored).collect();
        Box::pin(std::future::ready(Ok(Fetched { events, info, more: last < info.seq })))
    }

    fn heads<'a>(&'a self, keys: &'a [ChatKey]) -> BoxFuture<'a, Result<Vec<Option<u64>>, StoreError>> {
        self.heads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let seq = self.info().seq;
        Box::pin(std::future::ready(Ok(keys.iter().map(|_| Some(seq)).collect())))
    }

    fn changed_heads(&self) -> BoxFuture<'_, Result<Option<crate::store::Moved>, StoreError>> {
        // Its first call cannot say, as a store reading a log it has not read before.
        let first = !self.said.swap(true, std::sync::atomic::Ordering::SeqCst);
        let changed = self.changes.lock().unwrap().as_mut().map(std::mem::take).filter(|_| !first);
        Box::pin(std::future::ready(Ok(changed)))
    }

    /// The fake stores no `client_id`s.
    fn client_id_seq<'a>(
        &'a self,
        _key: &'a ChatKey,
        _user: &'a str,
        _client_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<u64>, StoreError>> {
        Box::pin(std::future::ready(Ok(None)))
    }
}

/// Keeps only inbox entries: every other read of members is unavailable.
impl Membership for Log {
    fn member<'a>(
        &'a self,
        _key: &'a ChatKey,
        _user: &'a str,
    ) -> BoxFuture<'a, Result<Option<crate::store::Member>, StoreError>> {
        Box::pin(std::future::ready(Err(StoreError::Unavailable("no members".into()))))
    }

    fn inbox<'a>(
        &'a self,
        _ws: &'a str,
        _user: &'a str,
        _after: Option<&'a crate::store::InboxCursor>,
        _limit: u32,
    ) -> BoxFuture<'a, Result<Vec<herald_protocol::reply::InboxEntry>, StoreError>> {
        Box::pin(std::future::ready(Err(StoreError::Unavailable("no inbox pages".into()))))
    }

    fn member_chats<'a>(
        &'a self,
        _ws: &'a str,
        _user: &'a str,
        _limit: u32,
    ) -> BoxFuture<'a, Result<Vec<(String, i64)>, StoreError>> {
        Box::pin(std::future::ready(Err(StoreError::Unavailable("no members".into()))))
    }

    /// Every event is a message from someone else, and nothing is read.
    fn inbox_entry<'a>(
        &'a self,
        key: &'a ChatKey,
        _user: &'a str,
    ) -> BoxFuture<'a, Result<Option<herald_protocol::reply::InboxEntry>, StoreError>> {
        self.entries.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let seq = self.info().seq;
        let entry = herald_protocol::reply::InboxEntry {
            chat: key.chat.to_string(),
            seq,
            ts: 1000 + seq as i64,
            read: 0,
            unread: seq,
            last: None,
            profile: None,
            threads: None,
            mentions: None,
        };
        Box::pin(std::future::ready(Ok(Some(entry))))
    }
}

crate::store::not_kept!(Log: Lifecycle, Moderation, RevocationList, WebhookPositions, Conversations, Files, Export, Search);

pub(crate) fn hub_over(log: &Arc<Log>, hot: u64) -> Arc<Hub> {
    let hub = Hub::new(Arc::new(MemoryBroker::new()), log.clone(), hot, 1 << 20);
    *log.hub.lock().unwrap() = Arc::downgrade(&hub);
    hub
}

fn pushed_seqs(outbox: &Outbox) -> Vec<u64> {
    pushed(outbox).iter().filter_map(|p| p.strip_prefix("event ")?.parse().ok()).collect()
}

fn pushed(outbox: &Outbox) -> Vec<String> {
    let mut frames = Vec::new();
    outbox.drain(usize::MAX, &mut frames);
    frames
        .iter()
        .map(|f| serde_json::from_str::<serde_json::Value>(f.as_str()).unwrap())
        .map(|v| format!("{} {}", v["ev"].as_str().unwrap_or("reply"), v["seq"]))
        .collect()
}

/// `n` connections (ids 1..=n) of user "u" watching `key` live from seq 0, their replies drained.
fn live_watchers(hub: &Hub, key: &ChatKey, n: u64) -> Vec<Arc<Outbox>> {
    let outboxes: Vec<Arc<Outbox>> = (1..=n).map(|i| Arc::new(Outbox::new(i, 1 << 20))).collect();
    for o in &outboxes {
        hub.begin_watch(key, &Arc::from("u"), o);
        hub.finish_watch(key, o.id(), Replay { reply: Frame::from("{}"), latest: 0, frames: vec![], truncated: false });
        pushed(o);
    }
    outboxes
}

#[tokio::test(start_paused = true)]
async fn a_hot_chat_gets_coalesced_notifies_then_events_again_once_it_cools() {
    // Hot at 100 deliveries a second: with two watchers, the 50th event of a second.
    let hub = hub_over(&Log::new(0, vec![]), 100);
    let key = ChatKey::new("w", "c");
    let outboxes = live_watchers(&hub, &key, 2);
    for seq in 1..=200 {
        hub.deliver(event(&key, seq));
    }
    tokio::time::sleep(HOT_NOTIFY_EVERY + Duration::from_millis(50)).await;
    let mut want: Vec<String> = (1..=49).map(|s| format!("event {s}")).collect();
    want.push("notify 200".into());
    for o in &outboxes {
        assert_eq!(pushed(o), want, "49 events, then one notify for the other 151");
    }
    // The next second is still hot: the last one was far above half the threshold.
    tokio::time::sleep(Duration::from_secs(1)).await;
    hub.deliver(event(&key, 201));
    tokio::time::sleep(HOT_NOTIFY_EVERY + Duration::from_millis(50)).await;
    for o in &outboxes {
        assert_eq!(pushed(o), vec!["notify 201".to_string()]);
    }
    // A quiet second later, events are pushed one by one again.
    tokio::time::sleep(Duration::from_secs(2)).await;
    hub.deliver(event(&key, 202));
    hub.deliver(event(&key, 203));
    for o in &outboxes {
        assert_eq!(pushed(o), vec!["event 202".to_string(), "event 203".to_string()]);
    }
}

/// A hot chat's notifies are spread over the period by connection: a fifth
/// of its watchers hear first, every watcher within one period, once.
#[tokio::test(start_paused = true)]
async fn a_hot_chats_notifies_are_spread_over_the_period() {
    let hub = hub_over(&Log::new(0, vec![]), 1);
    let key = ChatKey::new("w", "c");
    let outboxes = live_watchers(&hub, &key, 10);
    for seq in 1..=20 {
        hub.deliver(event(&key, seq));
    }
    let notified = |outboxes: &[Arc<Outbox>]| {
        outboxes.iter().filter(|o| pushed(o).iter().any(|f| f.starts_with("notify"))).count()
    };
    tokio::time::sleep(HOT_NOTIFY_EVERY / 5 + Duration::from_millis(1)).await;
    assert_eq!(notified(&outboxes), 2, "the first slot: 2 of 10 watchers");
    tokio::time::sleep(HOT_NOTIFY_EVERY).await;
    assert_eq!(notified(&outboxes), 8, "the other 8 within the period, none twice");
    tokio::time::sleep(HOT_NOTIFY_EVERY).await;
    assert_eq!(notified(&outboxes), 0, "nothing new: no more notifies");
}

#[tokio::test(start_paused = true)]
async fn a_chat_under_the_events_floor_is_pushed_event_by_event_whatever_its_watchers() {
    // Past the deliveries threshold from its first event, but only 9 events a second.
    let hub = hub_over(&Log::new(0, vec![]), 2);
    let key = ChatKey::new("w", "c");
    let outbox = Arc::new(Outbox::new(1, 1 << 20));
    hub.begin_watch(&key, &Arc::from("u"), &outbox);
    hub.finish_watch(&key, 1, Replay { reply: Frame::from("{}"), latest: 0, frames: vec![], truncated: false });
    pushed(&outbox);
    for second in 0..3u64 {
        for i in 1..HOT_MIN_EVENTS as u64 {
            hub.deliver(event(&key, second * 9 + i));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!(pushed_seqs(&outbox), (1..=27).collect::<Vec<_>>(), "every event pushed");
    // The 10th event of a second turns it hot.
    for seq in 28..=40 {
        hub.deliver(event(&key, seq));
    }
    tokio::time::sleep(HOT_NOTIFY_EVERY + Duration::from_millis(50)).await;
    let mut want: Vec<String> = (28..=36).map(|s| format!("event {s}")).collect();
    want.push("notify 40".into());
    assert_eq!(pushed(&outbox), want);
}

#[tokio::test(start_paused = true)]
async fn a_gap_that_reopens_during_repair_is_repaired_again_not_skipped() {
    // The log has 1..=4 when first read; 6 arrives (ahead of 5) while it is read.
    let hub = hub_over(&Log::new(4, vec![6]), 0);
    let key = ChatKey::new("w", "c");
    let outbox = Arc::new(Outbox::new(1, 1 << 20));
    hub.begin_watch(&key, &Arc::from("u"), &outbox);
    hub.finish_watch(&key, 1, Replay { reply: Frame::from("{}"), latest: 0, frames: vec![], truncated: false });
    // 1 is lost on the way; 3 arrives: a gap at 1..=2.
    hub.deliver(event(&key, 3));
    tokio::time::sleep(GAP_WAIT * 2).await;
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    // Repaired 1..=4 from the log; 5 is still on its way, and 6 must wait for it.
    assert_eq!(pushed_seqs(&outbox), vec![1, 2, 3, 4]);
    hub.deliver(event(&key, 5));
    assert_eq!(pushed_seqs(&outbox), vec![5, 6], "5 arrived late and 6 was not skipped past it");
}

/// A broker whose hints are all lost, and which records the node's interest
/// changes in the order it hears of them.
#[derive(Default)]
struct LossyBroker {
    interest: std::sync::Mutex<Vec<bool>>,
}

impl Broker for LossyBroker {
    fn attach(&self, _sink: Weak<dyn Sink>) {}
    fn publish(&self, _event: Arc<Published>) -> BoxFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }
    fn subscribe(&self, _key: &ChatKey) {
        // A subscribe takes a moment (a real broker spawns and registers):
        // room for a concurrent unwatch to overtake it, were it unordered.
        std::thread::sleep(Duration::from_micros(50));
        self.interest.lock().unwrap().push(true);
    }
    fn subscribed(&self, _key: &ChatKey) -> BoxFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }
    fn unsubscribe(&self, _key: &ChatKey) {
        std::thread::sleep(Duration::from_micros(50));
        self.interest.lock().unwrap().push(false);
    }
    fn ready(&self) -> bool {
        true
    }
    fn may_lose(&self) -> bool {
        true
    }
}

fn live_watch(hub: &Hub, key: &ChatKey, outbox: &Arc<Outbox>, latest: u64) {
    hub.begin_watch(key, &Arc::from("u"), outbox);
    assert!(hub.finish_watch(
        key,
        outbox.id(),
        Replay { reply: Frame::from("{}"), latest, frames: vec![], truncated: false }
    ));
}

#[tokio::test(start_paused = true)]
async fn a_lost_tail_reaches_watchers_within_two_tail_checks_with_no_later_event() {
    let log = Log::new(2, vec![]);
    let hub = Hub::new(Arc::new(LossyBroker::default()), log.clone(), 0, 1 << 20);
    let key = ChatKey::new("w", "quiet");
    let outbox = Arc::new(Outbox::new(1, 1 << 20));
    live_watch(&hub, &key, &outbox, 2);
    pushed(&outbox);
    // Three events are committed; every hint for them is lost, and the chat goes quiet.
    log.latest.store(5, std::sync::atomic::Ordering::SeqCst);
    tokio::time::sleep(TAIL_EVERY * 2 + Duration::from_millis(50)).await;
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert_eq!(pushed_seqs(&outbox), vec![3, 4, 5], "caught up from the log, in order, once");
    tokio::time::sleep(TAIL_EVERY * 3).await;
    assert_eq!(pushed_seqs(&outbox), Vec::<u64>::new(), "nothing twice");
}

#[tokio::test(start_paused = true)]
async fn where_the_log_says_which_chats_moved_a_lost_tail_is_caught_up_without_reading_every_head() {
    let log = Log::with_changes(2);
    let hub = Hub::new(Arc::new(LossyBroker::default()), log.clone(), 0, 1 << 20);
    let key = ChatKey::new("w", "quiet");
    let outbox = Arc::new(Outbox::new(1, 1 << 20));
    live_watch(&hub, &key, &outbox, 2);
    for i in 0..100 {
        live_watch(&hub, &ChatKey::new("w", &format!("other{i}")), &outbox, 2);
    }
    pushed(&outbox);
    // The first check cannot trust a log it has not read before: it reads every head once.
    tokio::time::sleep(TAIL_EVERY + Duration::from_millis(50)).await;
    let first = log.heads.load(std::sync::atomic::Ordering::SeqCst);
    assert!(first >= 1, "the first check reads the heads");
    // Three events are committed in one chat; every hint for them is lost.
    log.moved(&key, 5);
    tokio::time::sleep(TAIL_EVERY * 2 + Duration::from_millis(50)).await;
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert_eq!(pushed_seqs(&outbox), vec![3, 4, 5], "caught up from the log, in order, once");
    tokio::time::sleep(TAIL_EVERY * 10).await;
    assert_eq!(pushed_seqs(&outbox), Vec::<u64>::new(), "nothing twice");
    assert_eq!(log.heads.load(std::sync::atomic::Ordering::SeqCst), first, "no chat's head read again");
    assert_eq!(log.reads.load(std::sync::atomic::Ordering::SeqCst), 1, "one catch-up read, of the chat that moved");
}

#[tokio::test(start_paused = true)]
async fn where_the_log_says_which_chats_moved_a_live_inbox_hears_of_a_lost_hint_within_two_checks() {
    let log = Log::with_changes(2);
    let hub = Hub::new(Arc::new(LossyBroker::default()), log.clone(), 0, 1 << 20);
    let key = ChatKey::new("w", "quiet");
    let outbox = live_inbox(&hub, &key, 1, 2);
    tokio::time::sleep(TAIL_EVERY + Duration::from_millis(50)).await;
    log.moved(&key, 5);
    tokio::time::sleep(TAIL_EVERY * 2 + Duration::from_millis(50)).await;
    settle().await;
    assert_eq!(inbox_pushed(&outbox), vec![("quiet".into(), 5, 5)]);
    tokio::time::sleep(INBOX_TAIL_EVERY * 2).await;
    settle().await;
    assert_eq!(inbox_pushed(&outbox), vec![], "nothing twice");
    assert_eq!(log.heads.load(std::sync::atomic::Ordering::SeqCst), 0, "no followed chat's head read (none watched)");
}

#[tokio::test(start_paused = true)]
async fn a_resync_reads_the_log_in_batches_and_catches_up_only_chats_that_are_behind() {
    let log = Log::new(1, vec![]);
    let hub = Hub::new(Arc::new(LossyBroker::default()), log.clone(), 0, 1 << 20);
    let outbox = Arc::new(Outbox::new(1, 1 << 22));
    for i in 0..1200 {
        live_watch(&hub, &ChatKey::new("w", &format!("c{i}")), &outbox, 1);
    }
    // Every chat is up to date: a check reads 3 batches of heads and fetches nothing.
    assert_eq!(hub.check_tails().await, 0);
    assert_eq!(hub.check_tails().await, 0);
    assert_eq!(log.reads.load(std::sync::atomic::Ordering::SeqCst), 0, "no catch-up reads for chats in step");
    assert_eq!(log.heads.load(std::sync::atomic::Ordering::SeqCst), 2 * 3, "1,200 chats: three reads a check");
}

#[test]
fn the_broker_hears_a_chats_interest_in_the_order_watches_changed() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let _guard = rt.enter();
    for _ in 0..50 {
        let broker = Arc::new(LossyBroker::default());
        let hub = Hub::new(broker.clone(), Log::new(0, vec![]), 0, 1 << 20);
        let key = ChatKey::new("w", "c");
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let (hub, key) = (&hub, &key);
                s.spawn(move || {
                    for i in 0..50 {
                        let outbox = Arc::new(Outbox::new(t * 1000 + i, 1 << 10));
                        hub.begin_watch(key, &Arc::from("u"), &outbox);
                        hub.unwatch(key, outbox.id());
                    }
                });
            }
        });
        assert_eq!(hub.chats(), 0);
        let interest = broker.interest.lock().unwrap();
        // Alternating subscribe / unsubscribe, ending unsubscribed: never a
        // subscription left behind with no watcher, never an unsubscribe of nothing.
        for (i, on) in interest.iter().enumerate() {
            assert_eq!(*on, i % 2 == 0, "interest changes out of order: {interest:?}");
        }
        assert_eq!(interest.len() % 2, 0, "left subscribed with no watcher");
    }
}

/// `outbox`'s inbox pushes as (chat, seq, unread).
fn inbox_pushed(outbox: &Outbox) -> Vec<(String, u64, u64)> {
    let mut frames = Vec::new();
    outbox.drain(usize::MAX, &mut frames);
    frames
        .iter()
        .map(|f| serde_json::from_str::<serde_json::Value>(f.as_str()).unwrap())
        .filter(|v| v["ev"] == "inbox")
        .map(|v| (v["chat"].as_str().unwrap().to_string(), v["seq"].as_u64().unwrap(), v["unread"].as_u64().unwrap()))
        .collect()
}

/// A started live inbox of user "me" (every event is "u"'s) on connection
/// `id`, following `key` as told up to `told`.
fn live_inbox(hub: &Hub, key: &ChatKey, id: u64, told: u64) -> Arc<Outbox> {
    let outbox = Arc::new(Outbox::new(id, 1 << 20));
    let (l, setup) = hub.feed().listen(&key.ws, &Arc::from("me"), &outbox);
    assert!(setup);
    hub.feed().follow(&l, &[(key.clone(), 0)]);
    hub.feed().told(&l, &[(key.clone(), told, None)]);
    hub.feed().start(&l);
    outbox
}

async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_live_inbox_gets_one_push_per_chat_per_quarter_second_however_busy() {
    let log = Log::new(0, vec![]);
    let hub = hub_over(&log, 0);
    let key = ChatKey::new("w", "busy");
    let outbox = live_inbox(&hub, &key, 1, 0);
    for seq in 1..=10 {
        log.latest.store(seq, std::sync::atomic::Ordering::SeqCst);
        hub.deliver(event(&key, seq));
        settle().await;
        if seq == 1 {
            assert_eq!(inbox_pushed(&outbox), vec![("busy".into(), 1, 1)], "the first change at once");
        }
    }
    assert_eq!(inbox_pushed(&outbox), vec![], "the rest wait for the quarter second");
    tokio::time::sleep(INBOX_PUSH_EVERY).await;
    settle().await;
    assert_eq!(inbox_pushed(&outbox), vec![("busy".into(), 10, 10)], "then one push with the latest");
    assert_eq!(log.entries.load(std::sync::atomic::Ordering::SeqCst), 1, "counted from the events, one by one");
    // An event out of order (a gap) is not counted blindly: the store is read.
    log.latest.store(12, std::sync::atomic::Ordering::SeqCst);
    hub.deliver(event(&key, 12));
    tokio::time::sleep(INBOX_PUSH_EVERY).await;
    settle().await;
    assert_eq!(inbox_pushed(&outbox), vec![("busy".into(), 12, 12)]);
    assert_eq!(log.entries.load(std::sync::atomic::Ordering::SeqCst), 2);
    tokio::time::sleep(INBOX_PUSH_EVERY * 4).await;
    assert_eq!(inbox_pushed(&outbox), vec![], "nothing new, nothing pushed");
    // The user's own message changes the seq, not the count.
    let mine = Published::new(key.clone(), &Event { user: Some("me".into()), ..stored(13) });
    log.latest.store(13, std::sync::atomic::Ordering::SeqCst);
    hub.deliver(mine);
    settle().await;
    assert_eq!(inbox_pushed(&outbox), vec![("busy".into(), 13, 12)]);
}

#[tokio::test(start_paused = true)]
async fn a_live_inbox_hears_of_an_event_whose_hint_was_lost_at_the_next_tail_check() {
    let log = Log::new(2, vec![]);
    let hub = Hub::new(Arc::new(LossyBroker::default()), log.clone(), 0, 1 << 20);
    let key = ChatKey::new("w", "quiet");
    let outbox = live_inbox(&hub, &key, 1, 2);
    log.latest.store(5, std::sync::atomic::Ordering::SeqCst);
    // Where the store cannot say which chats moved, every followed chat is read at the first tail
    // check INBOX_TAIL_EVERY after the previous one.
    tokio::time::sleep(INBOX_TAIL_EVERY + TAIL_EVERY + Duration::from_millis(50)).await;
    settle().await;
    assert_eq!(inbox_pushed(&outbox), vec![("quiet".into(), 5, 5)]);
    tokio::time::sleep(INBOX_TAIL_EVERY * 2).await;
    settle().await;
    assert_eq!(inbox_pushed(&outbox), vec![], "nothing twice");
}

#[tokio::test(start_paused = true)]
async fn watchers_and_live_inboxes_of_a_chat_share_one_broker_subscription() {
    let broker = Arc::new(LossyBroker::default());
    let hub = Hub::new(broker.clone(), Log::new(0, vec![]), 0, 1 << 20);
    let key = ChatKey::new("w", "c");
    let watcher = Arc::new(Outbox::new(1, 1 << 20));
    live_watch(&hub, &key, &watcher, 0);
    let inbox = live_inbox(&hub, &key, 2, 0);
    hub.unwatch(&key, watcher.id());
    assert_eq!(*broker.interest.lock().unwrap(), vec![true], "the inbox still follows it");
    hub.feed().unlisten(inbox.id());
    assert_eq!(*broker.interest.lock().unwrap(), vec![true, false]);
    assert_eq!(hub.feed().listeners(), 0);
}
