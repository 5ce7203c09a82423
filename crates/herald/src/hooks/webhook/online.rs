//! Who of a list of users has an open connection anywhere in the cell, for
//! the webhook's `offline` lists. No node keeps the cell's user list: the
//! node building a batch asks the others on the cell's bus (one ask on
//! [`Topic::Online`], `herald.<cell>.online` over NATS, carrying the
//! batch's candidate users by workspace), each node answers with those
//! connected to it ([`Connected`], which the gateway answers), and the asking node answers
//! for itself without a message. A node alone (no bus) asks nobody.
//!
//! A node that does not answer within [`ANSWER_WAIT`] counts as having none
//! of the users connected: a user counted offline by mistake gets a spurious
//! push notification, one counted online by mistake would miss one, and the
//! former is the lesser harm.
//!
//! Not here: which users are candidates (the webhook's batch) or the gateway's
//! index of connections (the gateway implements [`Connected`]; this module
//! sits below the gateway and does not import it).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::broker::bus::{Bus, Topic};
use crate::cluster::Cluster;

/// How long the asking node waits for the other nodes' answers. A live
/// node answers from memory in well under a millisecond plus a bus round
/// trip; one that has not answered by then is taken as having nobody.
pub const ANSWER_WAIT: Duration = Duration::from_millis(500);
/// Largest request payload; a bigger candidate list goes out as several
/// requests. Below NATS's default 1 MiB message limit, with room to spare.
const MAX_ASK_BYTES: usize = 256 * 1024;

/// A question to the cell: which of these users are connected to you?
#[derive(Debug, Serialize, Deserialize)]
struct Ask {
    /// The asking node, which answers for itself.
    from: String,
    /// Users by workspace.
    users: HashMap<String, Vec<String>>,
}

/// A node's answer: the users of the question connected to it.
#[derive(Debug, Serialize, Deserialize)]
struct Answer {
    node: String,
    online: HashMap<String, Vec<String>>,
}

/// What an ask cost, for the metrics.
#[derive(Debug, Default, Clone, Copy)]
struct AskCost {
    /// Asks posted (0 on a node alone).
    requests: u64,
    /// Answers received.
    answers: u64,
    /// Bytes of requests published plus answers received.
    bytes: u64,
    /// Nodes that did not answer in time (their users counted offline).
    missing: u64,
}

/// Who is connected to this node, as the gateway's registry of connections answers.
pub trait Connected: Send + Sync + 'static {
    /// Those of `users` (of workspace `ws`) with at least one connection to this node.
    fn connected(&self, ws: &str, users: &[String]) -> Vec<String>;
}

/// Asks and answers the cell's "who is online" questions (the webhook's `offline` lists).
pub struct Online {
    gateway: Arc<dyn Connected>,
    cluster: Arc<Cluster>,
    /// The cell's bus; none for a node alone.
    bus: Option<Arc<dyn Bus>>,
}

impl Online {
    /// The questions of a node on `gateway`; with `bus`, over its cell (and
    /// answering the other nodes' questions from now on).
    pub fn new(gateway: Arc<dyn Connected>, cluster: Arc<Cluster>, bus: Option<Arc<dyn Bus>>) -> Arc<Online> {
        let presence = Arc::new(Online { gateway, cluster, bus });
        if presence.bus.is_some() {
            presence.clone().spawn_answering();
        }
        presence
    }

    /// Answers other nodes' questions until the process ends.
    fn spawn_answering(self: Arc<Self>) {
        let Some(bus) = self.bus.clone() else { return };
        let weak = Arc::downgrade(&self);
        drop(self);
        tokio::spawn(async move {
            let mut notes = bus.follow(Topic::Online).await;
            while let Some(note) = notes.next().await {
                let Some(me) = weak.upgrade() else { return };
                let Some(reply) = note.reply else { continue };
                let ask: Ask = match serde_json::from_slice(&note.payload) {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!(error = %e, "bad presence question");
                        continue;
                    }
                };
                let node = me.cluster.name();
                if ask.from == node {
                    continue; // the asking node answers for itself
                }
                let online = me.local(&ask.users);
                let payload = serde_json::to_vec(&Answer { node, online }).expect("answers serialize");
                if let Err(e) = bus.reply(&reply, payload.into()).await {
                    tracing::warn!(error = %e, "cannot answer a presence question");
                }
            }
        });
    }

    /// The users of `users` connected to this node.
    fn local(&self, users: &HashMap<String, Vec<String>>) -> HashMap<String, Vec<String>> {
        users
            .iter()
            .filter_map(|(ws, list)| {
                let here = self.gateway.connected(ws, list);
                (!here.is_empty()).then(|| (ws.clone(), here))
            })
            .collect()
    }

    /// Which of `users` (by workspace) have a connection anywhere in the
    /// cell, by workspace.
    pub async fn online(&self, users: &HashMap<String, Vec<String>>) -> HashMap<String, HashSet<String>> {
        let mut found: HashMap<String, HashSet<String>> = HashMap::new();
        let mut add = |online: HashMap<String, Vec<String>>| {
            for (ws, list) in online {
                found.entry(ws).or_default().extend(list);
            }
        };
        add(self.local(users));
        let Some(bus) = &self.bus else { return found };
        let me = self.cluster.name();
        let others: HashSet<String> = self.cluster.nodes().into_iter().map(|n| n.name).filter(|n| *n != me).collect();
        if others.is_empty() || users.is_empty() {
            return found;
        }
        let mut cost = AskCost::default();
        for part in split(users, MAX_ASK_BYTES) {
            let payload = serde_json::to_vec(&Ask { from: me.clone(), users: part }).expect("questions serialize");
            let (answers, part_cost) = ask(bus.as_ref(), payload, &others).await;
            cost.requests += part_cost.requests;
            cost.answers += part_cost.answers;
            cost.bytes += part_cost.bytes;
            cost.missing = cost.missing.max(part_cost.missing);
            for a in answers {
                add(a.online);
            }
        }
        metrics::counter!("herald_webhook_presence_requests_total").increment(cost.requests);
        metrics::counter!("herald_webhook_presence_bytes_total").increment(cost.bytes);
        if cost.missing > 0 {
            metrics::counter!("herald_webhook_presence_missing_total").increment(cost.missing);
        }
        found
    }
}

/// One request, gathering the answers of `others` until all came or
/// [`ANSWER_WAIT`] passed.
async fn ask(bus: &dyn Bus, payload: Vec<u8>, others: &HashSet<String>) -> (Vec<Answer>, AskCost) {
    let mut cost = AskCost { requests: 1, bytes: payload.len() as u64, ..AskCost::default() };
    let mut asked = match bus.ask(Topic::Online, payload.into()).await {
        Ok(asked) => asked,
        Err(e) => {
            tracing::warn!(error = %e, "cannot ask the cell who is online; counting the other nodes' users offline");
            cost.missing = others.len() as u64;
            return (Vec::new(), cost);
        }
    };
    let mut answers = Vec::new();
    let mut heard: HashSet<String> = HashSet::new();
    let deadline = tokio::time::Instant::now() + ANSWER_WAIT;
    while heard.len() < others.len() {
        let Some(payload) = asked.next_before(deadline).await else { break };
        cost.bytes += payload.len() as u64;
        match serde_json::from_slice::<Answer>(&payload) {
            Ok(a) if others.contains(&a.node) && heard.insert(a.node.clone()) => {
                cost.answers += 1;
                answers.push(a);
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "bad presence answer"),
        }
    }
    cost.missing = (others.len() - heard.len()) as u64;
    (answers, cost)
}

/// `users` in parts of at most about `max_bytes` of JSON each.
fn split(users: &HashMap<String, Vec<String>>, max_bytes: usize) -> Vec<HashMap<String, Vec<String>>> {
    let mut parts = vec![HashMap::new()];
    let mut bytes = 0;
    for (ws, list) in users {
        for user in list {
            // A user's share of the JSON: quotes, comma, and the workspace's key now and then.
            let size = user.len() + 3;
            if bytes + size > max_bytes && bytes > 0 {
                parts.push(HashMap::new());
                bytes = 0;
            }
            let part: &mut HashMap<String, Vec<String>> = parts.last_mut().expect("one part at least");
            if !part.contains_key(ws) {
                bytes += ws.len() + 6;
            }
            part.entry(ws.clone()).or_default().push(user.clone());
            bytes += size;
        }
    }
    parts.retain(|p| !p.is_empty());
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_list_is_split_into_asks_that_each_fit() {
        let users: HashMap<String, Vec<String>> =
            [("acme".to_string(), (0..10_000).map(|i| format!("user-{i:05}")).collect())].into();
        let parts = split(&users, 16 * 1024);
        assert!(parts.len() > 1);
        let mut all: Vec<String> = parts.iter().flat_map(|p| p["acme"].clone()).collect();
        all.sort();
        assert_eq!(all, users["acme"], "every user asked once");
        for p in &parts {
            let json = serde_json::to_vec(&Ask { from: "n".into(), users: p.clone() }).unwrap();
            assert!(json.len() <= 16 * 1024 + 64, "{}", json.len());
        }
        assert!(split(&HashMap::new(), 100).is_empty());
    }
}
