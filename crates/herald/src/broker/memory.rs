//! The in-process broker and bus: nodes joined without a network.
//!
//! A node alone ([`MemoryBroker::new`]) is what `herald serve` runs without
//! `--broker`: a publish is handed straight to this node's hub on the
//! publisher's task, which is also where the fan-out work happens; there is
//! nobody else to tell, and it has no bus.
//!
//! Several nodes of one process ([`MemoryBroker::join`] on a shared
//! [`MemoryCell`]) make a cell, for tests that run a whole cell without
//! nats-server. Each node still hears its own publishes at once; what goes
//! to another node (events of the chats it subscribed, signals, join
//! notices, bus notes) is queued to that node and handed to its hub by one
//! task per node, in the order sent, as a NATS connection would. Queued,
//! not called in place: a hub sends signals with a chat's lock held, and a
//! node answering in place could call back into that same lock. The bus
//! loses nothing itself, but a node of a cell can be cut off
//! ([`MemoryBroker::cut_off`]) right after a commit, as a NATS node can die:
//! so a node of a cell says [`Broker::may_lose`], and its hub runs the same
//! repairs (tail checks, the sweep of dead nodes' presence) as over NATS.
//!
//! Not here: the NATS backend ([`super::nats`]), what payloads mean.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use bytes::Bytes;
use herald_protocol::EventType;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use super::bus::{Answers, Bus, BusError, Note, Notes, Topic};
use super::{Broker, Sink};
use crate::model::BoxFuture;
use crate::model::{ChatKey, Published, Signal};

/// What one node queues to another's hub.
enum Inbound {
    Event(Arc<Published>),
    Signal(ChatKey, Signal, Option<String>),
    Joined(Arc<Published>),
}

/// Nodes of one process joined into a cell: who subscribed which chat,
/// who follows which topic, and where each open ask's answers go.
#[derive(Default)]
pub struct MemoryCell {
    state: Mutex<CellState>,
}

#[derive(Default)]
struct CellState {
    next_id: u64,
    seats: HashMap<u64, Seat>,
    /// Open asks and gathers by reply address; closed ones are pruned as new ones open.
    replies: HashMap<String, UnboundedSender<Bytes>>,
}

/// One node's place in the cell.
struct Seat {
    inbound: UnboundedSender<Inbound>,
    chats: HashSet<ChatKey>,
    topics: HashMap<Topic, Vec<UnboundedSender<Note>>>,
    /// Signals to this node are lost ([`MemoryBroker::lose_signals`]).
    loses_signals: bool,
}

impl MemoryCell {
    /// An empty cell; nodes join it with [`MemoryBroker::join`].
    pub fn new() -> Arc<MemoryCell> {
        Arc::new(MemoryCell::default())
    }

    /// Nodes in the cell now.
    pub fn nodes(&self) -> usize {
        self.lock().seats.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CellState> {
        self.state.lock().expect("memory cell lock")
    }

    fn sit(&self) -> (u64, UnboundedReceiver<Inbound>) {
        let (inbound, rx) = unbounded_channel();
        let mut state = self.lock();
        state.next_id += 1;
        let id = state.next_id;
        state.seats.insert(id, Seat { inbound, chats: HashSet::new(), topics: HashMap::new(), loses_signals: false });
        (id, rx)
    }

    /// Queues `make()` to every node but `from` for which `to` holds.
    fn send(&self, from: u64, to: impl Fn(&Seat) -> bool, make: impl Fn() -> Inbound) {
        let state = self.lock();
        if !state.seats.contains_key(&from) {
            return; // cut off
        }
        for (_, seat) in state.seats.iter().filter(|(id, seat)| **id != from && to(seat)) {
            let _ = seat.inbound.send(make());
        }
    }

    fn watching(&self, id: u64, key: &ChatKey, on: bool) {
        if let Some(seat) = self.lock().seats.get_mut(&id) {
            if on {
                seat.chats.insert(key.clone());
            } else {
                seat.chats.remove(key);
            }
        }
    }

    fn post(&self, from: u64, topic: Topic, note: Note) {
        let mut state = self.lock();
        if !state.seats.contains_key(&from) {
            return; // cut off
        }
        for (_, seat) in state.seats.iter_mut().filter(|(id, _)| **id != from) {
            if let Some(followers) = seat.topics.get_mut(&topic) {
                followers.retain(|f| f.send(note.clone()).is_ok());
            }
        }
    }

    fn follow(&self, id: u64, topic: Topic) -> UnboundedReceiver<Note> {
        let (tx, rx) = unbounded_channel();
        if let Some(seat) = self.lock().seats.get_mut(&id) {
            seat.topics.entry(topic).or_default().push(tx);
        }
        rx
    }

    /// A new reply address and the answers sent to it.
    fn reply_box(&self) -> (String, Answers) {
        let (tx, mut rx) = unbounded_channel();
        let mut state = self.lock();
        state.replies.retain(|_, tx| !tx.is_closed());
        state.next_id += 1;
        let to = format!("_INBOX.memory.{}", state.next_id);
        state.replies.insert(to.clone(), tx);
        let answers = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
        (to, Answers::new(answers))
    }

    fn reply(&self, from: u64, to: &str, payload: Bytes) {
        let mut state = self.lock();
        if !state.seats.contains_key(&from) {
            return; // cut off
        }
        if state.replies.get(to).is_some_and(|tx| tx.send(payload).is_err()) {
            state.replies.remove(to);
        }
    }

    fn lose_signals(&self, id: u64, on: bool) {
        if let Some(seat) = self.lock().seats.get_mut(&id) {
            seat.loses_signals = on;
        }
    }

    fn leave(&self, id: u64) {
        self.lock().seats.remove(&id);
    }
}

/// A node's broker and bus in process: alone, or one seat of a [`MemoryCell`].
#[derive(Default)]
pub struct MemoryBroker {
    sink: Arc<OnceLock<Weak<dyn Sink>>>,
    seat: Option<(Arc<MemoryCell>, u64)>,
}

impl MemoryBroker {
    /// A node alone.
    pub fn new() -> Self {
        Self::default()
    }

    /// A node of `cell`. Its hub hears the other nodes from the moment it attaches.
    pub fn join(cell: &Arc<MemoryCell>) -> Arc<MemoryBroker> {
        let (id, mut inbound) = cell.sit();
        let sink: Arc<OnceLock<Weak<dyn Sink>>> = Arc::new(OnceLock::new());
        let to = sink.clone();
        // Ends when the seat is given up (the broker dropped): its sender goes with it.
        tokio::spawn(async move {
            while let Some(message) = inbound.recv().await {
                let Some(sink) = to.get().and_then(Weak::upgrade) else { continue };
                metrics::counter!("herald_broker_received_total").increment(1);
                match message {
                    Inbound::Event(event) => sink.deliver(event),
                    Inbound::Signal(key, signal, reply) => sink.signal(&key, signal, reply),
                    Inbound::Joined(event) => sink.joined(event),
                }
            }
        });
        Arc::new(MemoryBroker { sink, seat: Some((cell.clone(), id)) })
    }

    /// Cuts this node off the cell, as a `kill -9` would look from the
    /// other nodes: from now on it hears nothing and nothing it sends
    /// reaches anyone (its own hub still hears its own publishes).
    pub fn cut_off(&self) {
        if let Some((cell, id)) = &self.seat {
            cell.leave(*id);
        }
    }

    /// While `on`, the chats' signals (presence, typing) the other nodes send
    /// this node are lost on the way, as a NATS route that broke for a moment
    /// loses them with no gap anyone sees; events and bus notes still arrive.
    pub fn lose_signals(&self, on: bool) {
        if let Some((cell, id)) = &self.seat {
            cell.lose_signals(*id, on);
        }
    }
}

impl Drop for MemoryBroker {
    fn drop(&mut self) {
        if let Some((cell, id)) = &self.seat {
            cell.leave(*id);
        }
    }
}

impl Broker for MemoryBroker {
    fn attach(&self, sink: Weak<dyn Sink>) {
        let _ = self.sink.set(sink);
    }

    fn publish(&self, event: Arc<Published>) -> BoxFuture<'_, ()> {
        if let Some(sink) = self.sink.get().and_then(Weak::upgrade) {
            sink.deliver(event.clone());
        }
        if let Some((cell, id)) = &self.seat {
            if event.kind == EventType::Join {
                cell.send(*id, |_| true, || Inbound::Joined(event.clone()));
            }
            cell.send(*id, |seat| seat.chats.contains(&event.key), || Inbound::Event(event.clone()));
            metrics::counter!("herald_broker_published_total").increment(1);
        }
        Box::pin(std::future::ready(()))
    }

    fn subscribed(&self, _key: &ChatKey) -> BoxFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }

    fn subscribe(&self, key: &ChatKey) {
        if let Some((cell, id)) = &self.seat {
            cell.watching(*id, key, true);
        }
        metrics::counter!("herald_broker_subscribes_total").increment(1);
        metrics::gauge!("herald_broker_subjects").increment(1.0);
    }

    fn unsubscribe(&self, key: &ChatKey) {
        if let Some((cell, id)) = &self.seat {
            cell.watching(*id, key, false);
        }
        metrics::counter!("herald_broker_unsubscribes_total").increment(1);
        metrics::gauge!("herald_broker_subjects").decrement(1.0);
    }

    fn ready(&self) -> bool {
        true
    }

    fn may_lose(&self) -> bool {
        self.seat.is_some()
    }

    fn signal(&self, key: &ChatKey, signal: &Signal) {
        let Some((cell, id)) = &self.seat else { return };
        metrics::counter!("herald_signals_sent_total", "kind" => signal.label()).increment(1);
        let to = |seat: &Seat| seat.chats.contains(key) && !seat.loses_signals;
        cell.send(*id, to, || Inbound::Signal(key.clone(), signal.clone(), None));
    }

    fn answer(&self, to: &str, signal: &Signal) {
        let Some((cell, id)) = &self.seat else { return };
        match serde_json::to_vec(signal) {
            Ok(payload) => cell.reply(*id, to, payload.into()),
            Err(e) => tracing::error!(error = %e, "a signal did not serialize"),
        }
    }

    fn gather(&self, key: &ChatKey, ask: &Signal, wait: Duration) -> BoxFuture<'_, Vec<Signal>> {
        let Some((cell, id)) = &self.seat else { return Box::pin(std::future::ready(Vec::new())) };
        let (to, answers) = cell.reply_box();
        cell.send(*id, |seat| seat.chats.contains(key), || Inbound::Signal(key.clone(), ask.clone(), Some(to.clone())));
        Box::pin(super::gather_signals(answers, wait))
    }
}

impl Bus for MemoryBroker {
    fn post(&self, topic: Topic, payload: Bytes) -> BoxFuture<'_, Result<(), BusError>> {
        if let Some((cell, id)) = &self.seat {
            cell.post(*id, topic, Note { payload, reply: None });
        }
        Box::pin(std::future::ready(Ok(())))
    }

    fn follow(&self, topic: Topic) -> BoxFuture<'_, Notes> {
        let notes = match &self.seat {
            Some((cell, id)) => {
                let mut rx = cell.follow(*id, topic);
                Notes::new(futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)))
            }
            None => Notes::new(futures_util::stream::pending()),
        };
        Box::pin(std::future::ready(notes))
    }

    fn ask(&self, topic: Topic, payload: Bytes) -> BoxFuture<'_, Result<Answers, BusError>> {
        let answers = match &self.seat {
            Some((cell, id)) => {
                let (to, answers) = cell.reply_box();
                cell.post(*id, topic, Note { payload, reply: Some(to) });
                answers
            }
            None => Answers::new(futures_util::stream::empty()),
        };
        Box::pin(std::future::ready(Ok(answers)))
    }

    fn reply(&self, to: &str, payload: Bytes) -> BoxFuture<'_, Result<(), BusError>> {
        if let Some((cell, id)) = &self.seat {
            cell.reply(*id, to, payload);
        }
        Box::pin(std::future::ready(Ok(())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hub stand-in that writes down what reaches it, and the reply addresses of asks.
    #[derive(Default)]
    struct Heard {
        seen: Mutex<Vec<String>>,
        replies: Mutex<Vec<String>>,
    }

    impl Sink for Heard {
        fn deliver(&self, event: Arc<Published>) {
            self.seen.lock().unwrap().push(format!("event {} {}", event.key, event.seq));
        }
        fn resync(&self) {}
        fn catch_up(&self, _key: &ChatKey) {}
        fn signal(&self, key: &ChatKey, signal: Signal, reply: Option<String>) {
            self.seen.lock().unwrap().push(format!("signal {key} {}", signal.label()));
            self.replies.lock().unwrap().extend(reply);
        }
        fn joined(&self, event: Arc<Published>) {
            self.seen.lock().unwrap().push(format!("joined {} {}", event.key, event.seq));
        }
    }

    impl Heard {
        fn take(&self) -> Vec<String> {
            std::mem::take(&mut *self.seen.lock().unwrap())
        }
    }

    fn event(key: &ChatKey, seq: u64, kind: EventType) -> Arc<Published> {
        Arc::new(Published { key: key.clone(), seq, kind, user: None, ts: 0, frame: "{}".into(), from_log: false })
    }

    /// Attaches a new [`Heard`] to `broker`; the broker holds it weakly, as it holds a hub.
    fn hear(broker: &MemoryBroker) -> Arc<Heard> {
        let heard = Arc::new(Heard::default());
        let sink: Arc<dyn Sink> = heard.clone();
        broker.attach(Arc::downgrade(&sink));
        heard
    }

    fn node(cell: &Arc<MemoryCell>) -> (Arc<MemoryBroker>, Arc<Heard>) {
        let broker = MemoryBroker::join(cell);
        let heard = hear(&broker);
        (broker, heard)
    }

    /// Lets every node's queue run dry.
    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[test]
    fn a_node_alone_hears_its_own_publish_at_once_and_has_nobody_to_tell() {
        // No runtime at all: nothing is spawned and nothing waits.
        let broker = MemoryBroker::new();
        let heard = hear(&broker);
        let key = ChatKey::new("w", "g");
        drop(broker.publish(event(&key, 1, EventType::Join)));
        broker.signal(&key, &Signal::Typing { user: "bob".into() });
        assert_eq!(heard.take(), ["event w/g 1"]);
    }

    #[tokio::test(start_paused = true)]
    async fn events_and_signals_reach_the_nodes_subscribed_to_the_chat_in_order() {
        let cell = MemoryCell::new();
        let ((a, heard_a), (b, heard_b), (c, heard_c)) = (node(&cell), node(&cell), node(&cell));
        let key = ChatKey::new("w", "g");
        b.subscribe(&key);
        a.publish(event(&key, 1, EventType::Message)).await;
        assert_eq!(heard_a.take(), ["event w/g 1"], "the publisher's own hub, at once");
        a.signal(&key, &Signal::Typing { user: "alice".into() });
        a.publish(event(&key, 2, EventType::Join)).await;
        settle().await;
        assert_eq!(heard_b.take(), ["event w/g 1", "signal w/g typing", "joined w/g 2", "event w/g 2"]);
        assert_eq!(heard_c.take(), ["joined w/g 2"], "join notices go to every node; the rest to subscribers");
        assert_eq!(heard_a.take(), ["event w/g 2"], "nothing comes back to the sender");
        b.unsubscribe(&key);
        a.publish(event(&key, 3, EventType::Message)).await;
        settle().await;
        assert!(heard_b.take().is_empty());
        assert_eq!(heard_a.take(), ["event w/g 3"]);
        drop(b);
        assert_eq!(cell.nodes(), 2, "a dropped node leaves the cell");
        c.cut_off();
        a.publish(event(&key, 4, EventType::Join)).await;
        c.publish(event(&key, 5, EventType::Join)).await;
        settle().await;
        assert_eq!(heard_c.take(), ["event w/g 5"], "a node cut off hears only itself");
        assert_eq!(heard_a.take(), ["event w/g 4"], "and nobody hears it");
    }

    #[tokio::test(start_paused = true)]
    async fn a_gather_collects_the_answers_of_the_nodes_watching_within_its_wait() {
        let cell = MemoryCell::new();
        let ((a, _), (b, heard_b)) = (node(&cell), node(&cell));
        let key = ChatKey::new("w", "g");
        b.subscribe(&key);
        let ask = Signal::Typing { user: "asker".into() };
        let gather = tokio::spawn(async move { a.gather(&key, &ask, Duration::from_millis(200)).await });
        settle().await;
        assert_eq!(heard_b.take(), ["signal w/g typing"]);
        let to = heard_b.replies.lock().unwrap().pop().expect("an ask carries a reply address");
        // A node may answer in parts.
        b.answer(&to, &Signal::Typing { user: "one".into() });
        b.answer(&to, &Signal::Typing { user: "two".into() });
        let got = gather.await.unwrap();
        assert_eq!(got, [Signal::Typing { user: "one".into() }, Signal::Typing { user: "two".into() }]);
    }

    #[tokio::test(start_paused = true)]
    async fn bus_notes_reach_the_other_followers_and_asks_get_their_replies() {
        let cell = MemoryCell::new();
        let ((a, _), (b, _), (c, _)) = (node(&cell), node(&cell), node(&cell));
        let (mut at_a, mut at_b) = (a.follow(Topic::Nodes).await, b.follow(Topic::Nodes).await);
        let mut online_c = c.follow(Topic::Online).await;
        a.post(Topic::Nodes, Bytes::from_static(b"1")).await.unwrap();
        a.post(Topic::Nodes, Bytes::from_static(b"2")).await.unwrap();
        assert_eq!(at_b.next().await.unwrap().payload, "1");
        assert_eq!(at_b.next().await.unwrap().payload, "2");
        let quiet = tokio::time::timeout(Duration::from_millis(50), at_a.next()).await;
        assert!(quiet.is_err(), "a node does not hear its own posts");

        let mut answers = a.ask(Topic::Online, Bytes::from_static(b"who?")).await.unwrap();
        let asked = online_c.next().await.unwrap();
        assert_eq!(asked.payload, "who?");
        c.reply(&asked.reply.unwrap(), Bytes::from_static(b"me")).await.unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_millis(500);
        assert_eq!(answers.next_before(deadline).await.unwrap(), "me");
        assert_eq!(answers.next_before(deadline).await, None, "nobody else answered");
    }
}
