// Generated from web/admin/*.ts by `npm run build` in web/. Do not edit; see web/README.md.

// admin/status.ts
function formatLag(seconds) {
  return seconds <= 0 ? "caught up" : seconds < 10 ? `${seconds.toFixed(1)} s` : seconds < 3600 ? `${Math.round(seconds)} s` : `${(seconds / 3600).toFixed(1)} h`;
}
function rates(prev, next) {
  if (prev === null) return { requests: null, pushes: null };
  let ms = next.at_ms - prev.at_ms, per = (a, b) => ms > 0 && b >= a ? (b - a) * 1e3 / ms : null;
  return { requests: per(prev.requests_total, next.requests_total), pushes: per(prev.pushes_total, next.pushes_total) };
}
function formatRate(r) {
  return r === null ? "…" : r < 10 ? r.toFixed(1) : Math.round(r).toLocaleString("en");
}

// admin/admin.ts
var REFRESH_MS = 2e3, KEY_STORAGE = "herald.admin.key";
function $(id) {
  let el = document.getElementById(id);
  if (el === null) throw new Error(`admin.html lacks #${id}`);
  return el;
}
var ui = {
  login: $("login"),
  loginForm: $("login-form"),
  key: $("key"),
  loginError: $("login-error"),
  dash: $("dash"),
  nodeName: $("node-name"),
  cellName: $("cell-name"),
  nodeState: $("node-state"),
  updated: $("updated"),
  signOut: $("sign-out"),
  error: $("error"),
  connections: $("connections"),
  watchedChats: $("watched-chats"),
  brokerSubscriptions: $("broker-subscriptions"),
  requestRate: $("request-rate"),
  pushRate: $("push-rate"),
  nodes: $("nodes"),
  shardsTable: $("shards-table"),
  shards: $("shards"),
  noShards: $("no-shards"),
  webhooks: $("webhooks"),
  webhookTable: $("webhook-table"),
  webhookHost: $("webhook-host"),
  webhookEvents: $("webhook-events"),
  webhookLag: $("webhook-lag"),
  webhookPending: $("webhook-pending"),
  webhookSuccess: $("webhook-success"),
  webhookError: $("webhook-error"),
  webhookShards: $("webhook-shards"),
  drain: $("drain"),
  drainResult: $("drain-result")
}, Refused = class extends Error {
};
async function call(key, method, path, body) {
  let res = await fetch(path, {
    method,
    headers: { authorization: `Bearer ${key}`, ...body === void 0 ? {} : { "content-type": "application/json" } },
    body: body === void 0 ? void 0 : JSON.stringify(body),
    cache: "no-store"
  });
  if (res.status === 401) throw new Refused("the api key was refused");
  if (!res.ok) {
    let message = `${res.status} ${res.statusText}`;
    try {
      let err = await res.json();
      err.error?.message !== void 0 && (message = `${err.error.code}: ${err.error.message}`);
    } catch {
    }
    throw new Error(message);
  }
  return await res.json();
}
function show(el, text) {
  el.hidden = text === null, el.textContent = text ?? "";
}
function cell(text, className) {
  let td = document.createElement("td");
  return td.textContent = text, className !== void 0 && (td.className = className), td;
}
function drawWebhook(w) {
  if (ui.webhookTable.hidden = w === void 0, w === void 0) {
    ui.webhooks.dataset.state = "none", ui.webhooks.textContent = "no webhooks configured";
    return;
  }
  let state = w.failing ? "failing" : "ok";
  ui.webhooks.dataset.state = state, ui.webhooks.textContent = w.failing ? `delivering to ${w.host} fails: retrying with growing waits` : `delivering to ${w.host}`;
  let when = (ms) => ms === null ? "never" : new Date(ms).toLocaleTimeString();
  ui.webhookHost.textContent = w.host, ui.webhookEvents.textContent = w.events === null ? "all" : w.events.join(", "), ui.webhookLag.textContent = formatLag(w.lag_seconds), ui.webhookLag.dataset.lag = String(w.lag_seconds), ui.webhookPending.textContent = String(w.pending_estimate), ui.webhookSuccess.textContent = when(w.last_success_ms), ui.webhookError.textContent = w.last_error === null ? "none" : `${w.last_error} (${when(w.last_error_ms)})`, ui.webhookShards.textContent = w.owned_shards.length === 0 ? "none (another node delivers)" : w.owned_shards.join(", ");
}
function draw(status, prev) {
  ui.nodeName.textContent = status.node, ui.cellName.textContent = status.cell;
  let state = status.draining ? "draining" : "serving";
  ui.nodeState.dataset.state = state, ui.nodeState.textContent = state, ui.updated.textContent = new Date(status.at_ms).toLocaleTimeString(), ui.connections.textContent = String(status.connections), ui.watchedChats.textContent = String(status.watched_chats), ui.brokerSubscriptions.textContent = status.broker_ready ? String(status.broker_subscriptions) : `${status.broker_subscriptions} (broker down)`;
  let r = rates(prev, status);
  ui.requestRate.textContent = formatRate(r.requests), ui.pushRate.textContent = formatRate(r.pushes), ui.nodes.replaceChildren(
    ...status.nodes.map((n) => {
      let tr = document.createElement("tr");
      return tr.dataset.node = n.node, n.this && (tr.dataset.this = "true"), tr.append(cell(n.this ? `${n.node} (this node)` : n.node), cell(n.url), cell(String(n.connections), "num")), tr.lastElementChild?.setAttribute("data-connections", String(n.connections)), tr;
    })
  ), ui.shardsTable.hidden = status.shards.length === 0, ui.noShards.hidden = status.shards.length !== 0, ui.shards.replaceChildren(
    ...status.shards.map((s) => {
      let tr = document.createElement("tr");
      tr.dataset.shard = s.label;
      let breaker = cell(s.breaker.replace("_", "-"));
      return breaker.dataset.breaker = s.breaker, tr.append(cell(s.label), breaker, cell(String(s.in_flight), "num"), cell(String(s.waiting), "num")), tr;
    })
  ), drawWebhook(status.webhook), ui.drain.disabled = status.draining;
}
var Session = class {
  constructor(key) {
    this.key = key;
  }
  key;
  prev = null;
  timer = null;
  stopped = !1;
  start() {
    ui.login.hidden = !0, ui.dash.hidden = !1, this.refresh();
  }
  stop() {
    this.stopped = !0, this.timer !== null && clearTimeout(this.timer);
  }
  /** Fetches and draws, then schedules the next refresh; a failure is shown and retried, a refused key ends the session. */
  async refresh() {
    try {
      let status = await call(this.key, "GET", "/v1/admin/status");
      if (this.stopped) return;
      draw(status, this.prev), this.prev = status, show(ui.error, null);
    } catch (e) {
      if (this.stopped) return;
      if (e instanceof Refused) {
        signOut(e.message);
        return;
      }
      show(ui.error, `cannot read the node's status: ${e.message}`);
    }
    this.timer = setTimeout(() => {
      this.refresh();
    }, REFRESH_MS);
  }
  async drain() {
    if (confirm("Drain this node? Its clients are asked to reconnect, and it refuses new WebSockets until restarted.")) {
      ui.drain.disabled = !0;
      try {
        let r = await call(this.key, "POST", "/v1/admin/drain");
        show(ui.drainResult, `Draining: ${r.draining} connection(s) asked to reconnect over ${r.window_ms} ms.`), this.timer !== null && clearTimeout(this.timer), this.refresh();
      } catch (e) {
        if (e instanceof Refused) {
          signOut(e.message);
          return;
        }
        ui.drain.disabled = !1, show(ui.drainResult, `The drain failed: ${e.message}`);
      }
    }
  }
}, session = null;
function signOut(why) {
  session?.stop(), session = null, sessionStorage.removeItem(KEY_STORAGE), ui.dash.hidden = !0, ui.login.hidden = !1, show(ui.loginError, why), ui.key.focus();
}
async function signIn(key) {
  try {
    await call(key, "GET", "/v1/admin/status");
  } catch (e) {
    e instanceof Refused && sessionStorage.removeItem(KEY_STORAGE), show(ui.loginError, e instanceof Refused ? "That api key was refused." : `Cannot reach the node: ${e.message}`);
    return;
  }
  sessionStorage.setItem(KEY_STORAGE, key), show(ui.loginError, null), ui.key.value = "", session = new Session(key), session.start();
}
ui.loginForm.addEventListener("submit", (e) => {
  e.preventDefault();
  let key = ui.key.value.trim();
  key !== "" && signIn(key);
});
ui.signOut.addEventListener("click", () => signOut(null));
ui.drain.addEventListener("click", () => {
  session?.drain();
});
var kept = sessionStorage.getItem(KEY_STORAGE);
kept !== null ? signIn(kept) : ui.key.focus();
