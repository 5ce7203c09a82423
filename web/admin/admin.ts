//! The admin page's script, served by herald at /admin.js: asks for the api key, then shows this node
//! and its cell every two seconds, and drains the node on request; its support panels are support.ts.
//!
//! Owns: the key (in sessionStorage, so it ends with the tab), the refresh loop, drawing an answer, the
//! drain button. Does not own: the answer's type or the rates (status.ts); what a drain does (the
//! server's `POST /v1/admin/drain`, the same drain as SIGTERM's, without the exit).

import { Refused, call } from './api.ts';
import { type AdminStatus, type WebhookStatus, formatLag, formatRate, rates } from './status.ts';
import { Support } from './support.ts';

/** How often the page asks for the node's status. */
const REFRESH_MS = 2000;
/** Where the key is kept: this tab's session only, never localStorage. */
const KEY_STORAGE = 'herald.admin.key';

function $<T extends HTMLElement>(id: string): T {
  const el = document.getElementById(id);
  if (el === null) throw new Error(`admin.html lacks #${id}`);
  return el as T;
}

const ui = {
  login: $('login'),
  loginForm: $<HTMLFormElement>('login-form'),
  key: $<HTMLInputElement>('key'),
  loginError: $('login-error'),
  dash: $('dash'),
  nodeName: $('node-name'),
  cellName: $('cell-name'),
  nodeState: $('node-state'),
  updated: $('updated'),
  signOut: $<HTMLButtonElement>('sign-out'),
  error: $('error'),
  connections: $('connections'),
  watchedChats: $('watched-chats'),
  brokerSubscriptions: $('broker-subscriptions'),
  requestRate: $('request-rate'),
  pushRate: $('push-rate'),
  nodes: $<HTMLTableSectionElement>('nodes'),
  shardsTable: $('shards-table'),
  shards: $<HTMLTableSectionElement>('shards'),
  noShards: $('no-shards'),
  webhooks: $('webhooks'),
  webhookTable: $('webhook-table'),
  webhookHost: $('webhook-host'),
  webhookEvents: $('webhook-events'),
  webhookLag: $('webhook-lag'),
  webhookPending: $('webhook-pending'),
  webhookSuccess: $('webhook-success'),
  webhookError: $('webhook-error'),
  webhookShards: $('webhook-shards'),
  drain: $<HTMLButtonElement>('drain'),
  drainResult: $('drain-result'),
};

function show(el: HTMLElement, text: string | null): void {
  el.hidden = text === null;
  el.textContent = text ?? '';
}

function cell(text: string, className?: string): HTMLTableCellElement {
  const td = document.createElement('td');
  td.textContent = text;
  if (className !== undefined) td.className = className;
  return td;
}

/** Draws the webhook's part: a line saying how it does, and its figures. */
function drawWebhook(w: WebhookStatus | undefined): void {
  ui.webhookTable.hidden = w === undefined;
  if (w === undefined) {
    ui.webhooks.dataset.state = 'none';
    ui.webhooks.textContent = 'no webhooks configured';
    return;
  }
  const state = w.failing ? 'failing' : 'ok';
  ui.webhooks.dataset.state = state;
  ui.webhooks.textContent = w.failing
    ? `delivering to ${w.host} fails: retrying with growing waits`
    : `delivering to ${w.host}`;
  const when = (ms: number | null): string => (ms === null ? 'never' : new Date(ms).toLocaleTimeString());
  ui.webhookHost.textContent = w.host;
  ui.webhookEvents.textContent = w.events === null ? 'all' : w.events.join(', ');
  ui.webhookLag.textContent = formatLag(w.lag_seconds);
  ui.webhookLag.dataset.lag = String(w.lag_seconds);
  ui.webhookPending.textContent = String(w.pending_estimate);
  ui.webhookSuccess.textContent = when(w.last_success_ms);
  ui.webhookError.textContent = w.last_error === null ? 'none' : `${w.last_error} (${when(w.last_error_ms)})`;
  ui.webhookShards.textContent = w.owned_shards.length === 0 ? 'none (another node delivers)' : w.owned_shards.join(', ');
}

/** Draws one answer, with rates against the one before it. */
function draw(status: AdminStatus, prev: AdminStatus | null): void {
  ui.nodeName.textContent = status.node;
  ui.cellName.textContent = status.cell;
  const state = status.draining ? 'draining' : 'serving';
  ui.nodeState.dataset.state = state;
  ui.nodeState.textContent = state;
  ui.updated.textContent = new Date(status.at_ms).toLocaleTimeString();
  ui.connections.textContent = String(status.connections);
  ui.watchedChats.textContent = String(status.watched_chats);
  ui.brokerSubscriptions.textContent = status.broker_ready ? String(status.broker_subscriptions) : `${status.broker_subscriptions} (broker down)`;
  const r = rates(prev, status);
  ui.requestRate.textContent = formatRate(r.requests);
  ui.pushRate.textContent = formatRate(r.pushes);

  ui.nodes.replaceChildren(
    ...status.nodes.map((n) => {
      const tr = document.createElement('tr');
      tr.dataset.node = n.node;
      if (n.this) tr.dataset.this = 'true';
      tr.append(cell(n.this ? `${n.node} (this node)` : n.node), cell(n.url), cell(String(n.connections), 'num'));
      tr.lastElementChild?.setAttribute('data-connections', String(n.connections));
      return tr;
    }),
  );

  ui.shardsTable.hidden = status.shards.length === 0;
  ui.noShards.hidden = status.shards.length !== 0;
  ui.shards.replaceChildren(
    ...status.shards.map((s) => {
      const tr = document.createElement('tr');
      tr.dataset.shard = s.label;
      const breaker = cell(s.breaker.replace('_', '-'));
      breaker.dataset.breaker = s.breaker;
      tr.append(cell(s.label), breaker, cell(String(s.in_flight), 'num'), cell(String(s.waiting), 'num'));
      return tr;
    }),
  );
  drawWebhook(status.webhook);
  ui.drain.disabled = status.draining;
}

/** One signed-in session: the refresh loop and the drain button, until sign-out or a refused key. */
class Session {
  private prev: AdminStatus | null = null;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private stopped = false;

  constructor(readonly key: string) {}

  start(): void {
    ui.login.hidden = true;
    ui.dash.hidden = false;
    void this.refresh();
  }

  stop(): void {
    this.stopped = true;
    if (this.timer !== null) clearTimeout(this.timer);
  }

  /** Fetches and draws, then schedules the next refresh; a failure is shown and retried, a refused key ends the session. */
  private async refresh(): Promise<void> {
    try {
      const status = await call<AdminStatus>(this.key, 'GET', '/v1/admin/status');
      if (this.stopped) return;
      draw(status, this.prev);
      this.prev = status;
      show(ui.error, null);
    } catch (e) {
      if (this.stopped) return;
      if (e instanceof Refused) {
        signOut(e.message);
        return;
      }
      show(ui.error, `cannot read the node's status: ${(e as Error).message}`);
    }
    this.timer = setTimeout(() => void this.refresh(), REFRESH_MS);
  }

  async drain(): Promise<void> {
    if (!confirm('Drain this node? Its clients are asked to reconnect, and it refuses new WebSockets until restarted.')) return;
    ui.drain.disabled = true;
    try {
      const r = await call<{ draining: number; window_ms: number }>(this.key, 'POST', '/v1/admin/drain');
      show(ui.drainResult, `Draining: ${r.draining} connection(s) asked to reconnect over ${r.window_ms} ms.`);
      if (this.timer !== null) clearTimeout(this.timer);
      void this.refresh();
    } catch (e) {
      if (e instanceof Refused) {
        signOut(e.message);
        return;
      }
      ui.drain.disabled = false;
      show(ui.drainResult, `The drain failed: ${(e as Error).message}`);
    }
  }
}

let session: Session | null = null;
const support = new Support(
  () => session?.key ?? null,
  (why) => signOut(why),
);

function signOut(why: string | null): void {
  session?.stop();
  session = null;
  support.reset();
  sessionStorage.removeItem(KEY_STORAGE);
  ui.dash.hidden = true;
  ui.login.hidden = false;
  show(ui.loginError, why);
  ui.key.focus();
}

/** Checks `key` against the server before keeping it, so a wrong one is said at once, not on the next refresh. */
async function signIn(key: string): Promise<void> {
  try {
    await call<AdminStatus>(key, 'GET', '/v1/admin/status');
  } catch (e) {
    if (e instanceof Refused) sessionStorage.removeItem(KEY_STORAGE);
    show(ui.loginError, e instanceof Refused ? 'That api key was refused.' : `Cannot reach the node: ${(e as Error).message}`);
    return;
  }
  sessionStorage.setItem(KEY_STORAGE, key);
  show(ui.loginError, null);
  ui.key.value = '';
  session = new Session(key);
  session.start();
}

ui.loginForm.addEventListener('submit', (e) => {
  e.preventDefault();
  const key = ui.key.value.trim();
  if (key !== '') void signIn(key);
});
ui.signOut.addEventListener('click', () => signOut(null));
ui.drain.addEventListener('click', () => void session?.drain());

const kept = sessionStorage.getItem(KEY_STORAGE);
if (kept !== null) void signIn(kept);
else ui.key.focus();
