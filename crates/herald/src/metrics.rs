//! The Prometheus recorder. Installed once per process (the `metrics` facade
//! has one global recorder), so several servers in one test process share it.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// How often histograms fold their recorded samples into buckets. Without
/// it, samples pile up between scrapes, and forever on a node nobody scrapes.
const UPKEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Latency buckets in seconds: from a cached read to a stalled disk.
const SECONDS_BUCKETS: &[f64] =
    &[0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0];
/// Writes per store batch.
const BATCH_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0];

/// The process's metrics handle, installing the recorder on first use.
pub fn handle() -> &'static PrometheusHandle {
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)
            .and_then(|b| b.set_buckets_for_metric(Matcher::Full("herald_store_batch_writes".into()), BATCH_BUCKETS))
            .expect("bucket lists are not empty")
            .build_recorder();
        let handle = recorder.handle();
        if metrics::set_global_recorder(recorder).is_err() {
            tracing::warn!("a metrics recorder was already installed; /metrics will be empty");
        }
        describe();
        handle
    })
}

/// Folds histogram samples into their buckets every few seconds, for as long
/// as the runtime it is spawned on runs (one per server; more do no harm).
pub fn spawn_upkeep() {
    let handle = handle();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(UPKEEP_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            handle.run_upkeep();
        }
    });
}

/// The sum of metric `name`'s samples over all its label sets in `rendered`
/// (the Prometheus text [`handle`] renders); 0 when it has none yet. For
/// counters and gauges: a histogram's samples are its `_bucket`, `_sum` and
/// `_count` lines, which are other names.
pub fn sum(rendered: &str, name: &str) -> f64 {
    rendered
        .lines()
        .filter(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{')))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_gauge!("herald_connections", "Open WebSocket connections");
    describe_counter!("herald_connections_total", "WebSocket connections accepted");
    describe_counter!(
        "herald_upgrades_refused_total",
        "WebSocket upgrades refused, by reason (origin, ip_rate, max_connections, max_pending_hellos, draining)"
    );
    describe_gauge!("herald_http_sockets", "Sockets open before a WebSocket upgrade (HTTP connections)");
    describe_counter!(
        "herald_http_closed_total",
        "HTTP sockets closed at a deadline, by reason (header_timeout, body_timeout, idle_timeout, send_timeout, linger)"
    );
    describe_counter!(
        "herald_http_shed_total",
        "Sockets waiting for a request closed to make room, by reason (node_cap, address_cap, out_of_files)"
    );
    describe_counter!(
        "herald_accept_failures_total",
        "Failed accepts, by kind (process_files, system_files, memory, other)"
    );
    describe_counter!("herald_watches_refused_total", "Watches refused: the connection watched --max-watches chats");
    describe_counter!("herald_hub_gap_reads_total", "Starting watches whose gap behind another watch's start was read");
    describe_counter!("herald_requests_total", "Requests by op and outcome (ok or an error code)");
    describe_histogram!("herald_request_seconds", "Time to serve a request, by op");
    describe_counter!("herald_events_stored_total", "Events stored durably");
    describe_counter!("herald_pushes_total", "Event frames queued to connections");
    describe_counter!("herald_joins_throttled_total", "Client joins refused by the per-chat join cap");
    describe_counter!(
        "herald_send_fences_total",
        "Sends refused for now that hold back the later sends of their chat on their connection"
    );
    describe_counter!(
        "herald_sends_fenced_total",
        "Sends held back (refused like the send they wait for) behind an earlier refused send to their chat"
    );
    describe_counter!("herald_frames_written_total", "Frames written to sockets");
    describe_counter!("herald_slow_consumer_closes_total", "Connections closed with 4008");
    describe_counter!("herald_closes_total", "Connections closed by the server, by close code");
    describe_counter!("herald_write_timeouts_total", "Connections dropped because the peer stopped reading");
    describe_histogram!("herald_store_write_seconds", "Time from a write's submission to its durable commit");
    describe_histogram!("herald_store_commit_seconds", "Time to apply and commit one batch");
    describe_histogram!("herald_store_read_seconds", "Time of one store read");
    describe_histogram!("herald_store_batch_writes", "Writes per committed batch");
    describe_counter!("herald_store_errors_total", "Store failures, by kind");
    describe_counter!(
        "herald_store_pg_primary_changes_total",
        "Times a multi-host PostgreSQL shard's primary was found on another host (a failover), by shard"
    );
    describe_counter!(
        "herald_store_pg_host_timeouts_total",
        "PostgreSQL connection attempts given up because a host did not answer in time (a hung host), by shard"
    );
    describe_counter!(
        "herald_store_pg_fence_total",
        "Times a shard's pooled connections were retired after a failure, by shard and reason (write, slow, closed, idle)"
    );
    describe_counter!(
        "herald_store_pg_retries_total",
        "PostgreSQL requests run again on a new connection because theirs was gone, by shard, op (read, write) and reason (closed, shutdown, connection)"
    );
    describe_counter!(
        "herald_store_pg_idle_closed_total",
        "Pooled PostgreSQL connections idle 15 s or more that failed their check and were closed, by shard"
    );
    describe_counter!(
        "herald_node_pauses_total",
        "Times this node's 1 s sweep came 2 s or more late (the process was stopped or starved); each asks the cell for presence instead of expiring it"
    );
    describe_counter!(
        "herald_store_seq_rewinds_total",
        "Chats found behind a seq this node saw stored (a standby promoted without every commit), moved past it, by shard"
    );
    describe_gauge!("herald_watches", "Watches of chats by local connections");
    describe_gauge!("herald_hub_chats", "Chats with local watchers");
    describe_counter!(
        "herald_hub_cache_reads_total",
        "Fetches and watch replays answered from a chat's window of recent events (hit) or the store (miss)"
    );
    describe_gauge!("herald_hub_cache_bytes", "Bytes held by the chats' windows of recent events");
    describe_counter!(
        "herald_hub_cache_evicted_total",
        "Events dropped from a window for its chat's cap or the node's budget"
    );
    describe_counter!("herald_hub_gaps_skipped_total", "Gaps in a chat's stream given up on (watchers fetch them)");
    describe_counter!("herald_broker_subscribes_total", "Broker subscriptions made (first local watcher of a chat)");
    describe_counter!("herald_broker_unsubscribes_total", "Broker subscriptions ended");
    describe_gauge!("herald_broker_subjects", "Live broker subscriptions");
    // webhook
    describe_counter!("herald_webhook_deliveries_total", "Webhook POSTs, by outcome (ok, error, timeout)");
    describe_counter!("herald_webhook_retries_total", "Webhook POSTs that failed and are tried again");
    describe_counter!("herald_webhook_events_total", "Events delivered by the webhook (acknowledged)");
    describe_gauge!(
        "herald_webhook_lag_seconds",
        "Age of the oldest stored event this node owes the webhook and has not had acknowledged (0: caught up)"
    );
    describe_histogram!("herald_hook_seconds", "Time of one hook request, by hook");
    describe_counter!(
        "herald_webhook_presence_requests_total",
        "Presence questions sent to the cell for offline lists"
    );
    describe_counter!("herald_webhook_presence_bytes_total", "Bytes of presence questions sent and answers received");
    describe_counter!(
        "herald_webhook_presence_missing_total",
        "Nodes that did not answer a presence question in time (their users counted offline)"
    );
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_sum_adds_every_label_set_of_one_name_only() {
        let text = "# HELP herald_pushes_total Event frames\n\
                    # TYPE herald_pushes_total counter\n\
                    herald_pushes_total 7\n\
                    herald_requests_total{op=\"send\",outcome=\"ok\"} 5\n\
                    herald_requests_total{op=\"hello\",outcome=\"ok\"} 2\n\
                    herald_requests_totally 100\n\
                    herald_request_seconds_count{op=\"send\"} 5\n";
        assert_eq!(super::sum(text, "herald_requests_total"), 7.0);
        assert_eq!(super::sum(text, "herald_pushes_total"), 7.0);
        assert_eq!(super::sum(text, "herald_broker_subjects"), 0.0);
    }
}
