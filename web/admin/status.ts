//! What `GET /v1/admin/status` answers, and the rates the page derives from it.
//!
//! Owns: the answer's type (the server's `AdminStatus`, see the OpenAPI document at /v1/openapi.json)
//! and turning two answers in a row into requests and pushes per second. Does not own: fetching or
//! drawing (admin.ts).

/** One node of the cell. */
export interface NodeStatus {
  node: string;
  url: string;
  /** This node's open connections now; another node's as it last announced them. */
  connections: number;
  /** Whether this is the node that answered. */
  this: boolean;
}

/** One PostgreSQL shard of the store, behind its breaker and bulkhead. */
export interface ShardStatus {
  label: string;
  breaker: 'closed' | 'open' | 'half_open';
  in_flight: number;
  waiting: number;
}

/** The webhook as the answering node delivers it (absent without `--webhook-url`). */
export interface WebhookStatus {
  /** The receiver's host (and port), never its path or the secret. */
  host: string;
  /** The event types delivered; `null`: all. */
  events: string[] | null;
  /** Age in seconds of the oldest stored event this node owes and has not had acknowledged; 0 when caught up. */
  lag_seconds: number;
  last_success_ms: number | null;
  last_error: string | null;
  last_error_ms: number | null;
  /** Whether the latest try failed: the webhook is retrying. */
  failing: boolean;
  /** Undelivered events in the chats of the latest round: at least this many are pending. */
  pending_estimate: number;
  /** The shards this node delivers (`local` for the embedded store). */
  owned_shards: string[];
}

/** A lag as the page shows it. */
export function formatLag(seconds: number): string {
  if (seconds <= 0) return 'caught up';
  if (seconds < 10) return `${seconds.toFixed(1)} s`;
  if (seconds < 3600) return `${Math.round(seconds)} s`;
  return `${(seconds / 3600).toFixed(1)} h`;
}

/** The answer of `GET /v1/admin/status`. */
export interface AdminStatus {
  node: string;
  cell: string;
  draining: boolean;
  at_ms: number;
  connections: number;
  watched_chats: number;
  broker_subscriptions: number;
  broker_ready: boolean;
  nodes: NodeStatus[];
  shards: ShardStatus[];
  requests_total: number;
  pushes_total: number;
  webhook?: WebhookStatus;
}

/** Per-second rates between two answers; `null` where they cannot be told. */
export interface Rates {
  requests: number | null;
  pushes: number | null;
}

/**
 * Requests and pushes per second between `prev` and `next`. Nothing before the first answer, and
 * nothing across a counter that went down (the node restarted between the two): a rate then would be
 * negative or made up.
 */
export function rates(prev: AdminStatus | null, next: AdminStatus): Rates {
  if (prev === null) return { requests: null, pushes: null };
  const ms = next.at_ms - prev.at_ms;
  const per = (a: number, b: number): number | null => (ms > 0 && b >= a ? ((b - a) * 1000) / ms : null);
  return { requests: per(prev.requests_total, next.requests_total), pushes: per(prev.pushes_total, next.pushes_total) };
}

/** A rate as the page shows it: one decimal below 10, whole numbers above. */
export function formatRate(r: number | null): string {
  if (r === null) return '…';
  return r < 10 ? r.toFixed(1) : Math.round(r).toLocaleString('en');
}
