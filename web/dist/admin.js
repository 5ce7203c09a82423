// Generated from web/admin/*.ts by `npm run build` in web/. Do not edit; see web/README.md.

// admin/api.ts
var Refused = class extends Error {
};
async function failure(res) {
  if (res.status === 401) return new Refused("the api key was refused");
  let message = `${res.status} ${res.statusText}`;
  try {
    let err = await res.json();
    err.error?.message !== void 0 && (message = `${err.error.code}: ${err.error.message}`);
  } catch {
  }
  return new Error(message);
}
async function request(key, method, path, body) {
  let res = await fetch(path, {
    method,
    headers: { authorization: `Bearer ${key}`, ...body === void 0 ? {} : { "content-type": "application/json" } },
    body: body === void 0 ? void 0 : JSON.stringify(body),
    cache: "no-store"
  });
  if (!res.ok) throw await failure(res);
  return res;
}
async function call(key, method, path, body) {
  return await (await request(key, method, path, body)).json();
}

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

// admin/support.ts
var CHATS_PAGE = 20, MEMBERS_SHOWN = 100, EVENTS_SHOWN = 50, USER_CHATS_SHOWN = 200, ACTIONS = {
  ban: { method: "PUT", route: "bans", done: "banned from" },
  unban: { method: "DELETE", route: "bans", done: "unbanned in" },
  mute: { method: "PUT", route: "mutes", done: "muted in" },
  unmute: { method: "DELETE", route: "mutes", done: "unmuted in" }
};
function $(id) {
  let el = document.getElementById(id);
  if (el === null) throw new Error(`admin.html lacks #${id}`);
  return el;
}
function show(el, text) {
  el.hidden = text === null, el.textContent = text ?? "";
}
function cell(text, className) {
  let td = document.createElement("td");
  return td.textContent = text, className !== void 0 && (td.className = className), td;
}
function button(text, className, onClick) {
  let b = document.createElement("button");
  return b.type = "button", b.className = className, b.textContent = text, b.addEventListener("click", onClick), b;
}
function asText(v) {
  return v == null ? "" : typeof v == "string" ? v : JSON.stringify(v);
}
var enc = encodeURIComponent, Support = class {
  constructor(key, refused) {
    this.key = key;
    this.refused = refused;
    let u = this.ui;
    u.wsForm.addEventListener("submit", (e) => {
      e.preventDefault(), u.chatPrefix.focus();
    }), u.chatFind.addEventListener("submit", (e) => {
      e.preventDefault(), this.findChats(!1);
    }), u.chatMore.addEventListener("click", () => {
      this.findChats(!0);
    }), u.chatReload.addEventListener("click", () => this.chat !== null && void this.openChat(this.chat.ws, this.chat.chat)), u.memberForm.addEventListener("submit", (e) => e.preventDefault());
    for (let b of u.memberForm.querySelectorAll("button[data-action]"))
      b.addEventListener("click", () => {
        let user = u.memberUser.value.trim();
        if (user === "") {
          show(u.chatError, "Type the user id first."), u.memberUser.focus();
          return;
        }
        this.moderate(b.dataset.action ?? "", user);
      });
    u.userFind.addEventListener("submit", (e) => {
      e.preventDefault();
      let ws = this.workspace(), user = u.userId.value.trim();
      ws !== null && user !== "" && this.openUser(ws, user);
    }), u.userRevoke.addEventListener("click", () => {
      this.revoke();
    }), u.userExport.addEventListener("click", () => {
      this.exportUser();
    }), u.eraseConfirm.addEventListener("input", () => this.checkConfirmation()), u.eraseForm.addEventListener("submit", (e) => {
      e.preventDefault(), this.erase();
    });
  }
  key;
  refused;
  ui = {
    ws: $("support-ws"),
    wsForm: $("ws-form"),
    chatFind: $("chat-find"),
    chatPrefix: $("chat-prefix"),
    chatError: $("chat-error"),
    chatNotice: $("chat-notice"),
    chatResults: $("chat-results"),
    chatNone: $("chat-none"),
    chatMore: $("chat-more"),
    chatDetail: $("chat-detail"),
    chatId: $("chat-id"),
    chatName: $("chat-name"),
    chatImage: $("chat-image"),
    chatData: $("chat-data"),
    chatOpen: $("chat-open"),
    chatMembersCount: $("chat-members-count"),
    chatSeq: $("chat-seq"),
    chatMembers: $("chat-members"),
    chatMembersMore: $("chat-members-more"),
    memberForm: $("member-form"),
    memberUser: $("member-user"),
    chatEvents: $("chat-events"),
    chatReload: $("chat-reload"),
    userFind: $("user-find"),
    userId: $("user-id"),
    userError: $("user-error"),
    userNotice: $("user-notice"),
    userDetail: $("user-detail"),
    userName: $("user-name"),
    userChats: $("user-chats"),
    userNoChats: $("user-no-chats"),
    userChatsMore: $("user-chats-more"),
    userRevoke: $("user-revoke"),
    userExport: $("user-export"),
    userDownload: $("user-download"),
    eraseForm: $("erase-form"),
    eraseConfirm: $("erase-confirm"),
    userErase: $("user-erase")
  };
  /** The search shown: its workspace and prefix, and where its next page starts. */
  search = null;
  /** The chat shown, and the user shown, each with its workspace. */
  chat = null;
  user = null;
  downloadUrl = null;
  /** Forgets everything shown (on sign-out). */
  reset() {
    let u = this.ui;
    this.search = this.chat = this.user = null, u.chatResults.replaceChildren(), u.chatMore.hidden = u.chatNone.hidden = u.chatDetail.hidden = u.userDetail.hidden = !0;
    for (let el of [u.chatError, u.chatNotice, u.userError, u.userNotice]) show(el, null);
    this.dropDownload();
  }
  workspace() {
    let ws = this.ui.ws.value.trim();
    return ws === "" ? (show(this.ui.chatError, "Type the workspace first."), this.ui.ws.focus(), null) : ws;
  }
  /** Runs a call with the key; a refused key signs out, any other failure is shown in `errorEl`. */
  async guarded(errorEl, what, f) {
    let key = this.key();
    if (key === null) return null;
    try {
      let out = await f(key);
      return show(errorEl, null), out;
    } catch (e) {
      return e instanceof Refused ? this.refused(e.message) : show(errorEl, `${what} failed: ${e.message}`), null;
    }
  }
  async findChats(more) {
    let u = this.ui;
    if (!more) {
      let ws = this.workspace(), prefix = u.chatPrefix.value.trim();
      if (ws === null || prefix === "") return;
      this.search = { ws, prefix, cursor: null }, u.chatResults.replaceChildren();
    }
    let s = this.search;
    if (s === null) return;
    let cursor = s.cursor === null ? "" : `&cursor=${enc(s.cursor)}`, page = await this.guarded(
      u.chatError,
      "Finding chats",
      (key) => call(key, "GET", `/v1/workspaces/${enc(s.ws)}/chats?prefix=${enc(s.prefix)}&limit=${CHATS_PAGE}${cursor}`)
    );
    if (!(page === null || this.search !== s)) {
      s.cursor = page.cursor ?? null;
      for (let c of page.chats) {
        let li = document.createElement("li"), label = c.name ? `${c.chat} (${c.name})` : c.chat, b = button(`${label}: ${c.members} member(s)`, "secondary chat-result", () => {
          this.openChat(s.ws, c.chat);
        });
        b.dataset.chat = c.chat, li.append(b), u.chatResults.append(li);
      }
      u.chatNone.hidden = u.chatResults.childElementCount !== 0, u.chatMore.hidden = !page.more, u.chatResults.querySelector("button")?.focus();
    }
  }
  /** Shows a chat: its profile, its first members and its latest events. */
  async openChat(ws, chat) {
    let u = this.ui, base = `/v1/workspaces/${enc(ws)}/chats/${enc(chat)}`, got = await this.guarded(u.chatError, `Reading chat ${chat}`, async (key) => {
      let view2 = await call(key, "GET", base), members2 = await call(key, "GET", `${base}/members?limit=${MEMBERS_SHOWN}`), after = Math.max(0, view2.seq - EVENTS_SHOWN), events2 = await call(key, "GET", `${base}/events?after=${after}&limit=${EVENTS_SHOWN}`);
      return { view: view2, members: members2, events: events2.events };
    });
    if (got === null) return;
    let wasShown = this.chat?.ws === ws && this.chat.chat === chat;
    this.chat = { ws, chat };
    let { view, members, events } = got;
    u.chatDetail.hidden = !1, u.chatId.textContent = view.chat, u.chatName.textContent = view.name ?? "(none)", u.chatImage.textContent = view.image ?? "(none)", u.chatData.textContent = view.data === void 0 || view.data === null ? "(none)" : JSON.stringify(view.data), u.chatOpen.textContent = view.open ? "yes: anyone may join" : "no: members are added by the server", u.chatMembersCount.textContent = String(members.count), u.chatSeq.textContent = String(view.seq), u.chatMembers.replaceChildren(
      ...members.members.map((m) => {
        let tr = document.createElement("tr");
        tr.dataset.user = m.user;
        let actions = cell("", "actions");
        for (let action of Object.keys(ACTIONS)) {
          let b = button(action[0]?.toUpperCase() + action.slice(1), "secondary", () => {
            this.moderate(action, m.user);
          });
          b.dataset.action = action, b.setAttribute("aria-label", `${action} ${m.user}`), actions.append(b);
        }
        return tr.append(cell(m.user), cell(String(m.read), "num"), actions), tr;
      })
    ), u.chatMembersMore.hidden = !members.more, u.chatEvents.replaceChildren(...events.map((e) => this.eventRow(e))), wasShown || show(u.chatNotice, null);
  }
  eventRow(e) {
    let tr = document.createElement("tr");
    tr.dataset.seq = String(e.seq), tr.dataset.type = e.type, e.deleted && (tr.dataset.deleted = "true");
    let body = e.deleted ? "(deleted)" : asText(e.body) + (e.edited !== void 0 ? " (edited)" : ""), actions = cell("", "actions");
    if (e.type === "message" && !e.deleted) {
      let b = button("Delete", "secondary delete-event", () => {
        this.deleteEvent(e.seq);
      });
      b.setAttribute("aria-label", `delete message ${e.seq}`), actions.append(b);
    }
    return tr.append(cell(String(e.seq), "num"), cell(e.type), cell(e.user ?? ""), cell(new Date(e.ts).toLocaleString()), cell(body, "body"), actions), tr;
  }
  async deleteEvent(seq) {
    let c = this.chat;
    c === null || !confirm(`Delete message ${seq} of ${c.chat}? Its body is erased for everyone.`) || await this.guarded(
      this.ui.chatError,
      `Deleting message ${seq}`,
      (key) => call(key, "DELETE", `/v1/workspaces/${enc(c.ws)}/chats/${enc(c.chat)}/events/${seq}`)
    ) === null || (await this.openChat(c.ws, c.chat), show(this.ui.chatNotice, `Message ${seq} deleted.`));
  }
  async moderate(action, user) {
    let c = this.chat, a = ACTIONS[action];
    c === null || a === void 0 || await this.guarded(
      this.ui.chatError,
      `${action} ${user}`,
      (key) => call(key, a.method, `/v1/workspaces/${enc(c.ws)}/chats/${enc(c.chat)}/${a.route}/${enc(user)}`)
    ) === null || (await this.openChat(c.ws, c.chat), show(this.ui.chatNotice, `${user} ${a.done} ${c.chat}.`));
  }
  /** Shows a user: the chats they are a member of, and what can be done to them. */
  async openUser(ws, user) {
    let u = this.ui, inbox = await this.guarded(
      u.userError,
      `Reading user ${user}`,
      (key) => call(key, "GET", `/v1/workspaces/${enc(ws)}/users/${enc(user)}/inbox?limit=${USER_CHATS_SHOWN}`)
    );
    inbox !== null && ((this.user?.ws !== ws || this.user.user !== user) && (show(u.userNotice, null), this.dropDownload(), u.eraseConfirm.value = ""), this.user = { ws, user }, u.userDetail.hidden = !1, u.userName.textContent = user, u.userChats.replaceChildren(
      ...inbox.chats.map((c) => {
        let tr = document.createElement("tr");
        tr.dataset.chat = c.chat;
        let open = cell(""), b = button(c.chat, "secondary open-chat", () => {
          this.openChat(ws, c.chat);
        });
        return b.setAttribute("aria-label", `open chat ${c.chat}`), open.append(b), tr.append(open, cell(c.profile?.name ?? ""), cell(String(c.unread), "num"), cell(String(c.read), "num")), tr;
      })
    ), u.userNoChats.hidden = inbox.chats.length !== 0, u.userChatsMore.hidden = !inbox.more, this.checkConfirmation());
  }
  async revoke() {
    let who = this.user;
    if (who === null) return;
    await this.guarded(
      this.ui.userError,
      "Revoking",
      (key) => call(key, "POST", `/v1/workspaces/${enc(who.ws)}/users/${enc(who.user)}/revoke`)
    ) !== null && show(this.ui.userNotice, `${who.user}'s tokens are revoked: their connections close within seconds.`);
  }
  /** Downloads the user's export: read whole here (a support export is small; the server streams it). */
  async exportUser() {
    let who = this.user;
    if (who === null) return;
    let u = this.ui;
    u.userExport.disabled = !0;
    let text = await this.guarded(
      u.userError,
      "Exporting",
      async (key) => (await request(key, "GET", `/v1/workspaces/${enc(who.ws)}/users/${enc(who.user)}/export`)).text()
    );
    if (u.userExport.disabled = !1, text === null) return;
    let lines = text.split(`
`).filter((l) => l !== ""), messages = lines.filter((l) => l.startsWith('{"kind":"message"')).length;
    this.dropDownload(), this.downloadUrl = URL.createObjectURL(new Blob([text], { type: "application/x-ndjson" })), u.userDownload.href = this.downloadUrl, u.userDownload.download = `${who.ws}-${who.user}-export.ndjson`.replace(/[^A-Za-z0-9_.@+-]/g, "_"), u.userDownload.textContent = `Save the export again (${lines.length} lines)`, u.userDownload.hidden = !1, u.userDownload.click(), show(u.userNotice, `Exported ${lines.length - messages} membership(s) and ${messages} message(s) of ${who.user}.`);
  }
  dropDownload() {
    this.downloadUrl !== null && URL.revokeObjectURL(this.downloadUrl), this.downloadUrl = null, this.ui.userDownload.hidden = !0, this.ui.userDownload.removeAttribute("href");
  }
  /** The erase button works only once the confirmation names the user shown. */
  checkConfirmation() {
    let ok = this.user !== null && this.ui.eraseConfirm.value === this.user.user;
    return this.ui.userErase.disabled = !ok, ok;
  }
  async erase() {
    let who = this.user, u = this.ui;
    if (who === null) return;
    if (!this.checkConfirmation()) {
      show(u.userError, `Not erased: the confirmation must be the user id, ${who.user}.`), u.eraseConfirm.focus();
      return;
    }
    u.userErase.disabled = !0;
    let done = await this.guarded(
      u.userError,
      "Erasing",
      (key) => call(key, "DELETE", `/v1/workspaces/${enc(who.ws)}/users/${enc(who.user)}`)
    );
    if (u.eraseConfirm.value = "", done === null) {
      this.checkConfirmation();
      return;
    }
    await this.openUser(who.ws, who.user), show(u.userNotice, `${who.user} is erased: ${done.erased} message(s) erased, every membership ended.`);
  }
};

// admin/admin.ts
var REFRESH_MS = 2e3, KEY_STORAGE = "herald.admin.key";
function $2(id) {
  let el = document.getElementById(id);
  if (el === null) throw new Error(`admin.html lacks #${id}`);
  return el;
}
var ui = {
  login: $2("login"),
  loginForm: $2("login-form"),
  key: $2("key"),
  loginError: $2("login-error"),
  dash: $2("dash"),
  nodeName: $2("node-name"),
  cellName: $2("cell-name"),
  nodeState: $2("node-state"),
  updated: $2("updated"),
  signOut: $2("sign-out"),
  error: $2("error"),
  connections: $2("connections"),
  watchedChats: $2("watched-chats"),
  brokerSubscriptions: $2("broker-subscriptions"),
  requestRate: $2("request-rate"),
  pushRate: $2("push-rate"),
  nodes: $2("nodes"),
  shardsTable: $2("shards-table"),
  shards: $2("shards"),
  noShards: $2("no-shards"),
  webhooks: $2("webhooks"),
  webhookTable: $2("webhook-table"),
  webhookHost: $2("webhook-host"),
  webhookEvents: $2("webhook-events"),
  webhookLag: $2("webhook-lag"),
  webhookPending: $2("webhook-pending"),
  webhookSuccess: $2("webhook-success"),
  webhookError: $2("webhook-error"),
  webhookShards: $2("webhook-shards"),
  drain: $2("drain"),
  drainResult: $2("drain-result")
};
function show2(el, text) {
  el.hidden = text === null, el.textContent = text ?? "";
}
function cell2(text, className) {
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
      return tr.dataset.node = n.node, n.this && (tr.dataset.this = "true"), tr.append(cell2(n.this ? `${n.node} (this node)` : n.node), cell2(n.url), cell2(String(n.connections), "num")), tr.lastElementChild?.setAttribute("data-connections", String(n.connections)), tr;
    })
  ), ui.shardsTable.hidden = status.shards.length === 0, ui.noShards.hidden = status.shards.length !== 0, ui.shards.replaceChildren(
    ...status.shards.map((s) => {
      let tr = document.createElement("tr");
      tr.dataset.shard = s.label;
      let breaker = cell2(s.breaker.replace("_", "-"));
      return breaker.dataset.breaker = s.breaker, tr.append(cell2(s.label), breaker, cell2(String(s.in_flight), "num"), cell2(String(s.waiting), "num")), tr;
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
      draw(status, this.prev), this.prev = status, show2(ui.error, null);
    } catch (e) {
      if (this.stopped) return;
      if (e instanceof Refused) {
        signOut(e.message);
        return;
      }
      show2(ui.error, `cannot read the node's status: ${e.message}`);
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
        show2(ui.drainResult, `Draining: ${r.draining} connection(s) asked to reconnect over ${r.window_ms} ms.`), this.timer !== null && clearTimeout(this.timer), this.refresh();
      } catch (e) {
        if (e instanceof Refused) {
          signOut(e.message);
          return;
        }
        ui.drain.disabled = !1, show2(ui.drainResult, `The drain failed: ${e.message}`);
      }
    }
  }
}, session = null, support = new Support(
  () => session?.key ?? null,
  (why) => signOut(why)
);
function signOut(why) {
  session?.stop(), session = null, support.reset(), sessionStorage.removeItem(KEY_STORAGE), ui.dash.hidden = !0, ui.login.hidden = !1, show2(ui.loginError, why), ui.key.focus();
}
async function signIn(key) {
  try {
    await call(key, "GET", "/v1/admin/status");
  } catch (e) {
    e instanceof Refused && sessionStorage.removeItem(KEY_STORAGE), show2(ui.loginError, e instanceof Refused ? "That api key was refused." : `Cannot reach the node: ${e.message}`);
    return;
  }
  sessionStorage.setItem(KEY_STORAGE, key), show2(ui.loginError, null), ui.key.value = "", session = new Session(key), session.start();
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
