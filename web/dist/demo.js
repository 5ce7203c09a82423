// Generated from web/src/*.ts and sdk/ts/src by `npm run build` in web/. Do not edit; see web/README.md.

// ../sdk/ts/src/emitter.ts
var Emitter = class {
  listeners = /* @__PURE__ */ new Map();
  /** Adds a listener; returns a function that removes it. */
  on(name, fn) {
    let set = this.listeners.get(name);
    return set === void 0 && (set = /* @__PURE__ */ new Set(), this.listeners.set(name, set)), set.add(fn), () => this.off(name, fn);
  }
  /** Adds a listener that runs at most once. */
  once(name, fn) {
    let off = this.on(name, (payload) => {
      off(), fn(payload);
    });
    return off;
  }
  /** Removes a listener added with `on`. */
  off(name, fn) {
    let set = this.listeners.get(name);
    set !== void 0 && (set.delete(fn), set.size === 0 && this.listeners.delete(name));
  }
  /** Removes every listener. */
  removeAllListeners() {
    this.listeners.clear();
  }
  /** Calls every listener of `name` with `payload`. */
  emit(name, payload) {
    let set = this.listeners.get(name);
    if (set !== void 0)
      for (let fn of [...set])
        try {
          fn(payload);
        } catch (err) {
          queueMicrotask(() => {
            throw err;
          });
        }
  }
  /** How many listeners `name` has; lets callers skip building a payload nobody reads. */
  listenerCount(name) {
    return this.listeners.get(name)?.size ?? 0;
  }
};

// ../sdk/ts/src/chat-options.ts
function pageArgs(opts) {
  let out = {};
  return opts.limit !== void 0 && (out.limit = opts.limit), opts.cursor !== void 0 && (out.cursor = opts.cursor), out;
}

// ../sdk/ts/src/file-path.ts
var NODE_FS = "node:fs";
function baseName(path) {
  let parts = path.split(/[\\/]/);
  return parts[parts.length - 1] ?? path;
}
async function openPath(path) {
  let fs;
  try {
    fs = await import(
      /* @vite-ignore */
      /* webpackIgnore: true */
      NODE_FS
    );
  } catch (err) {
    throw new TypeError(`herald: uploadPath needs Node's fs (in a browser, upload a File): ${String(err)}`);
  }
  let st = await fs.promises.stat(path);
  if (!st.isFile()) throw new TypeError(`herald: uploadPath: ${path} is not a file`);
  return { stream: st.size === 0 ? empty() : fs.createReadStream(path, { start: 0, end: st.size - 1 }), size: st.size, name: baseName(path) };
}
async function* empty() {
}

// ../sdk/ts/src/errors.ts
var HeraldError = class _HeraldError extends Error {
  /** The machine-readable code. */
  code;
  /** The server's retry hint in milliseconds, when it gave one. */
  retryAfterMs;
  /** The request operation that failed, when there was one. */
  op;
  /** The close code of the link, when the error is about a closed link. */
  closeCode;
  constructor(code, message, init = {}) {
    super(message, init.cause === void 0 ? void 0 : { cause: init.cause }), this.name = "HeraldError", this.code = code, this.retryAfterMs = init.retryAfterMs, this.op = init.op, this.closeCode = init.closeCode;
  }
  /** Builds the error for a reply's `err` object. */
  static fromWire(err, op) {
    let code = typeof err.code == "string" ? err.code : "internal", retry = typeof err.retry_after_ms == "number" ? err.retry_after_ms : void 0;
    return new _HeraldError(code, err.message ?? code, { retryAfterMs: retry, op });
  }
};

// ../sdk/ts/src/files.ts
var DEFAULT_FILE_TYPE = "application/octet-stream", UploadError = class extends HeraldError {
  /** The HTTP status of the storage's answer, or 0 when there was none. */
  status;
  /** The start of the answer's body, for logs (storage errors say why there, S3's as XML). */
  body;
  constructor(status, message, body = "", cause) {
    super("upload_failed", message, { op: "upload", cause }), this.name = "UploadError", this.status = status, this.body = body;
  }
}, ERROR_BODY_CHARS = 500;
function describeUpload(source, opts) {
  let name = opts.name, type = opts.type, size;
  if (isBlob(source)) {
    let own = source.name;
    name ??= typeof own == "string" ? own : void 0, type ??= source.type === "" ? void 0 : source.type, size = source.size;
  } else if (source instanceof ArrayBuffer)
    size = source.byteLength;
  else if (ArrayBuffer.isView(source))
    size = source.byteLength;
  else if (isStream(source)) {
    if (size = opts.size, size === void 0) throw new TypeError("herald: upload of a stream needs `size`: exactly the bytes it yields");
  } else
    throw new TypeError("herald: upload takes a Blob or File, bytes (Uint8Array, ArrayBuffer) or a stream with `size`");
  if (opts.size !== void 0 && opts.size !== size) throw new TypeError(`herald: upload's \`size\` ${opts.size} is not the source's ${size} bytes`);
  if (name === void 0 || name === "") throw new TypeError("herald: upload needs a `name` (a File has its own)");
  if (!Number.isSafeInteger(size) || size < 0) throw new TypeError("herald: upload `size` must be a whole number of bytes");
  return { name, type: type ?? DEFAULT_FILE_TYPE, size };
}
async function putFile(grant, source, opts) {
  let doFetch = opts.fetch ?? globalThis.fetch;
  if (typeof doFetch != "function") throw new TypeError("herald: upload needs fetch (browsers and Node 20 have it)");
  let headers = { ...grant.headers }, init = { method: grant.method, headers };
  opts.signal !== void 0 && (init.signal = opts.signal);
  let { size } = opts;
  opts.type !== void 0 && !hasHeader(headers, "content-type") && (headers["content-type"] = opts.type);
  let whole = !isStream(source);
  whole ? init.body = source : (hasHeader(headers, "content-length") || (headers["content-length"] = String(size)), init.body = readable(counted(source, size, opts.onProgress)), init.duplex = "half");
  let res;
  try {
    res = await doFetch(grant.url, init);
  } catch (err) {
    throw new UploadError(0, `herald: upload to ${origin(grant.url)} failed: ${String(err?.message ?? err)}`, "", err);
  }
  if (res.status < 200 || res.status > 299) {
    let body = await res.text().catch(() => "");
    throw new UploadError(res.status, `herald: upload to ${origin(grant.url)} answered ${res.status}`, body.slice(0, ERROR_BODY_CHARS));
  }
  await res.arrayBuffer().catch(() => {
  }), whole && opts.onProgress?.(size, size);
}
function origin(url) {
  try {
    return new URL(url).origin;
  } catch {
    return "the upload URL";
  }
}
function hasHeader(headers, name) {
  return Object.keys(headers).some((k) => k.toLowerCase() === name);
}
function isBlob(v) {
  return typeof Blob < "u" && v instanceof Blob;
}
function isStream(v) {
  return typeof v != "object" || v === null ? !1 : typeof v.getReader == "function" || typeof v[Symbol.asyncIterator] == "function";
}
async function* counted(source, size, onProgress) {
  let sent = 0;
  for await (let chunk of chunks(source)) {
    let bytes = chunk instanceof Uint8Array ? chunk : new Uint8Array(chunk);
    if (sent += bytes.byteLength, sent > size) throw new TypeError(`herald: the upload stream yielded more than the ${size} bytes announced`);
    yield bytes, onProgress?.(sent, size);
  }
}
function readable(gen) {
  return new ReadableStream({
    async pull(controller) {
      try {
        let { done, value } = await gen.next();
        done ? controller.close() : controller.enqueue(value);
      } catch (err) {
        controller.error(err);
      }
    },
    async cancel(reason) {
      await gen.return(void 0);
    }
  });
}
async function* chunks(source) {
  if (typeof source[Symbol.asyncIterator] == "function") {
    yield* source;
    return;
  }
  let reader = source.getReader();
  try {
    for (; ; ) {
      let { done, value } = await reader.read();
      if (done) return;
      yield value;
    }
  } finally {
    reader.releaseLock();
  }
}

// ../sdk/ts/src/history.ts
async function* historyPages(chat, fetchPage, after, opts) {
  if (!Number.isInteger(after) || after < 0) throw new TypeError("herald: `after` must be a non-negative integer");
  if (opts.until !== void 0 && (!Number.isInteger(opts.until) || opts.until < 0))
    throw new TypeError("herald: `until` must be a non-negative integer");
  let until = opts.until ?? Number.POSITIVE_INFINITY, last = after;
  for (; last < until; ) {
    let page = await fetchPage(last), before = last;
    for (let ev of page.events)
      if (!(ev.seq <= last)) {
        if (ev.seq > until) return;
        last = ev.seq, yield ev;
      }
    if (!page.more) return;
    if (last === before)
      throw new HeraldError("protocol", `herald: chat ${chat}: more announced after ${last} but no events came`, { op: "fetch" });
  }
}

// ../sdk/ts/src/message.ts
function isSeq(v) {
  return typeof v == "number" && Number.isInteger(v) && v > 0;
}
function isObject(v) {
  return typeof v == "object" && v !== null && !Array.isArray(v);
}
function strings(v) {
  return Array.isArray(v) && v.every((x) => typeof x == "string") ? [...v] : void 0;
}
function fileList(v) {
  if (Array.isArray(v))
    return v.filter(
      (f) => isObject(f) && typeof f.id == "string" && typeof f.name == "string" && typeof f.type == "string" && typeof f.size == "number" && typeof f.url == "string"
    );
}
function counts(v) {
  if (!isObject(v)) return;
  let out = {};
  for (let [k, n] of Object.entries(v)) typeof n == "number" && Number.isInteger(n) && n > 0 && (out[k] = n);
  return Object.keys(out).length > 0 ? out : void 0;
}
function fromEvent(ev) {
  let r = ev.replies, replies = isObject(r) && isSeq(r.count) && isSeq(r.last) ? { count: r.count, last: r.last } : void 0, mentions = strings(ev.mentions), reactions = ev.deleted === !0 ? void 0 : counts(ev.reactions), files = ev.deleted === !0 ? void 0 : fileList(ev.files);
  return {
    seq: ev.seq,
    type: ev.type,
    ...ev.user !== void 0 ? { user: ev.user } : {},
    ts: ev.ts,
    body: ev.deleted === !0 ? null : ev.body,
    ...ev.client_id !== void 0 ? { client_id: ev.client_id } : {},
    ...isSeq(ev.edited) ? { edited: ev.edited } : {},
    deleted: ev.deleted === !0,
    ...isSeq(ev.thread) ? { thread: ev.thread } : {},
    ...isSeq(ev.quote) ? { quote: ev.quote } : {},
    ...mentions !== void 0 ? { mentions } : {},
    ...replies !== void 0 ? { replies } : {},
    pinned: ev.pinned === !0 && ev.deleted !== !0,
    ...reactions !== void 0 ? { reactions } : {},
    ...ev.stream === "open" || ev.stream === "done" ? { stream: ev.stream } : {},
    ...files !== void 0 && files.length > 0 ? { files } : {}
  };
}
function withChange(m, c) {
  if (m.deleted) return m;
  if (c.deleted) {
    let { reactions: _r, files: _f, ...rest2 } = m;
    return { ...rest2, body: null, deleted: !0, pinned: !1, ...m.stream === "open" ? { stream: "done" } : {} };
  }
  if (m.edited !== void 0 && m.edited >= c.seq) return m;
  let { files: held, ...rest } = m, files = c.files ?? held;
  return {
    ...rest,
    ...files !== void 0 && files.length > 0 ? { files } : {},
    body: c.body,
    edited: c.seq,
    ...c.mentions !== void 0 ? { mentions: c.mentions } : {},
    ...m.stream === "open" ? { stream: "done" } : {}
  };
}
function bodyChange(held, next) {
  return held.deleted ? null : next.deleted ? "deleted" : (next.edited ?? 0) > (held.edited ?? 0) ? "edited" : null;
}
function withReaction(m, emoji, delta) {
  let was = m.reactions?.[emoji] ?? 0, now = Math.max(0, was + delta);
  if (now === was) return m;
  let reactions = { ...m.reactions };
  now === 0 ? delete reactions[emoji] : reactions[emoji] = now;
  let { reactions: _r, ...rest } = m;
  return Object.keys(reactions).length > 0 ? { ...rest, reactions } : rest;
}
function withReplies(m, count, last) {
  let { replies: _r, ...rest } = m;
  return count <= 0 || last === void 0 ? rest : m.replies?.count === count && m.replies.last === last ? m : { ...rest, replies: { count, last } };
}
function streamText(m) {
  return isObject(m.body) && typeof m.body.text == "string" ? m.body.text : void 0;
}
function withAppended(m, text) {
  let body = m.body;
  return { ...m, body: { ...body, text: `${String(body.text)}${text}` } };
}
function withDerived(m, view) {
  let { replies: _a, reactions: _b, ...rest } = m;
  return {
    ...rest,
    ...view.replies !== void 0 ? { replies: view.replies } : {},
    pinned: view.pinned && !m.deleted,
    ...view.reactions !== void 0 && !m.deleted ? { reactions: view.reactions } : {}
  };
}
function sameDerived(a, b) {
  return a.pinned === b.pinned && a.replies?.count === b.replies?.count && a.replies?.last === b.replies?.last && sameCounts(a.reactions ?? {}, b.reactions ?? {});
}
function sameCounts(a, b) {
  let keys = Object.keys(a);
  return keys.length === Object.keys(b).length && keys.every((k) => a[k] === b[k]);
}

// ../sdk/ts/src/messages.ts
var DEFAULT_MAX_MESSAGES = 1e4, MAX_ORPHANS = 1e3;
function isObject2(v) {
  return typeof v == "object" && v !== null && !Array.isArray(v);
}
function isSeq2(v) {
  return typeof v == "number" && Number.isInteger(v) && v > 0;
}
function namedAsOf(ev) {
  return Math.max(ev.seq, isSeq2(ev.edited) ? ev.edited : 0, isObject2(ev.replies) && isSeq2(ev.replies.last) ? ev.replies.last : 0);
}
var MessageList = class extends Emitter {
  /** Seqs of the main list (no thread replies) in increasing order; inserts are nearly always appends. */
  seqs = [];
  /** Every message held: the main list's and the threads'. */
  bySeq = /* @__PURE__ */ new Map();
  held = /* @__PURE__ */ new Map();
  /** Root -> its replies' seqs, increasing; in the order roots were first seen, for eviction. */
  threads = /* @__PURE__ */ new Map();
  replyCount = 0;
  orphans = /* @__PURE__ */ new Map();
  /** Streams being read again -> the appends that arrived meanwhile, applied after. */
  refetching = /* @__PURE__ */ new Map();
  chatProfile = null;
  profileSeq = 0;
  max;
  refetch;
  constructor(opts = {}) {
    super();
    let max = opts.maxMessages ?? DEFAULT_MAX_MESSAGES;
    if (!Number.isInteger(max) || max <= 0) throw new TypeError("herald: `maxMessages` must be a positive integer");
    this.max = max, this.refetch = opts.refetch;
  }
  /** The messages not in a thread, oldest first. */
  get messages() {
    return this.seqs.map((s) => this.bySeq.get(s));
  }
  /** How many messages the main list holds (thread replies not counted). */
  get size() {
    return this.seqs.length;
  }
  /** The oldest message of the main list, if any. */
  get first() {
    let s = this.seqs[0];
    return s === void 0 ? void 0 : this.bySeq.get(s);
  }
  /** The chat's profile, once a `join` reply or a `profile` event told it; null before. */
  get profile() {
    return this.chatProfile;
  }
  /** The message with this seq (in the main list or a thread), if held. */
  get(seq) {
    return this.bySeq.get(seq);
  }
  /** The replies held of the thread under `root`, oldest first (load more with `chat.history(.., { thread })`). */
  thread(root) {
    return (this.threads.get(root) ?? []).map((s) => this.bySeq.get(s));
  }
  /**
   * Folds one event in: a `message` or `system` is added (or merged, when already held); an `edit` or
   * `delete` changes its target; a `reaction` or `pin` moves its target's counts; a `profile` replaces the
   * profile. `asOf`: for a stored view, the chat's seq when it was read (see the file's doc). Other types,
   * and events that are not well formed, are ignored.
   */
  apply(ev, asOf) {
    if (!isObject2(ev) || !isSeq2(ev.seq)) return;
    let body = isObject2(ev.body) ? ev.body : {};
    switch (ev.type) {
      case "message":
      case "system":
        this.put(ev, Math.max(asOf ?? 0, namedAsOf(ev)));
        return;
      case "edit": {
        if (!isSeq2(body.target)) return;
        let mentions = Array.isArray(ev.mentions) ? ev.mentions.filter((m) => typeof m == "string") : void 0, files = fileList(ev.files);
        this.change(body.target, {
          seq: ev.seq,
          deleted: !1,
          body: body.body,
          ...mentions !== void 0 ? { mentions } : {},
          ...files !== void 0 ? { files } : {}
        });
        return;
      }
      case "delete":
        isSeq2(body.target) && this.change(body.target, { seq: ev.seq, deleted: !0, body: null });
        return;
      case "reaction":
        isSeq2(body.target) && typeof body.emoji == "string" && ev.user !== void 0 && this.react(ev.seq, body.target, body.emoji, ev.user, body.on !== !1);
        return;
      case "pin":
        isSeq2(body.target) && this.pin(ev.seq, body.target, body.on !== !1);
        return;
      case "profile":
        this.setProfile(ev.body, ev.seq);
        return;
      default:
        return;
    }
  }
  /** Folds in fetched events (a page of `fetch` or `history`), in the order given; `asOf` as for `apply`. */
  load(events, asOf) {
    for (let ev of events) this.apply(ev, asOf);
  }
  /**
   * Folds in an `append` push: when `at` is the length of the message's text (in UTF-16 code units, a
   * string's `length`) the chunk is added; a chunk already shown is ignored; any other `at` means a chunk
   * was missed, and the list reads the message again (`refetch`) and takes its stored text.
   */
  append(push) {
    let queued = this.refetching.get(push.target);
    if (queued !== void 0) {
      queued.push(push);
      return;
    }
    let m = this.bySeq.get(push.target);
    if (m === void 0 || m.deleted || m.stream !== "open") return;
    let text = streamText(m);
    if (!(text === void 0 || typeof push.text != "string")) {
      if (push.at === text.length) {
        push.text.length > 0 && this.update(m, withAppended(m, push.text), "appended");
        return;
      }
      push.at + push.text.length <= text.length && text.startsWith(push.text, push.at) || this.reread(push.target);
    }
  }
  /** Sets the profile as of the chat's `seq` (a `join` reply's); an older one than held is ignored. */
  setProfile(profile, seq) {
    if (!isObject2(profile) || seq < this.profileSeq) return;
    let next = {
      name: typeof profile.name == "string" ? profile.name : null,
      image: typeof profile.image == "string" ? profile.image : null,
      data: profile.data ?? null
    };
    this.profileSeq = seq, !(this.chatProfile !== null && JSON.stringify(this.chatProfile) === JSON.stringify(next)) && (this.chatProfile = next, this.emit("profile", next));
  }
  /** Empties the list (the profile stays: it is the chat's, not its messages'). */
  clear() {
    this.seqs = [], this.bySeq.clear(), this.held.clear(), this.threads.clear(), this.replyCount = 0, this.orphans.clear(), this.refetching.clear();
  }
  // ---- internals --------------------------------------------------------------------------------
  /** Adds a message, or merges a newer view of one already held. */
  put(ev, asOf) {
    let next = fromEvent(ev), orphan = this.orphans.get(ev.seq);
    orphan !== void 0 && (this.orphans.delete(ev.seq), next = withChange(next, orphan));
    let held = this.bySeq.get(ev.seq);
    if (held !== void 0) {
      this.merge(held, next, asOf);
      return;
    }
    if (next.thread !== void 0) {
      this.addReply(next, asOf);
      return;
    }
    if (!(this.seqs.length >= this.max && ev.seq < this.seqs[0]))
      for (this.insert(this.seqs, ev.seq), this.bySeq.set(ev.seq, next), this.held.set(ev.seq, { asOf, version: asOf }), this.emit("change", { kind: "added", message: next }); this.seqs.length > this.max; ) this.forget(this.seqs.shift());
  }
  /** A held message seen again in a view: take what is newer of its body, its stream text and its counts. */
  merge(held, view, asOf) {
    let h = this.held.get(held.seq), m = held, kind = bodyChange(held, view);
    if (kind !== null)
      m = withDerived(view, held);
    else if (held.stream === "open" && !held.deleted) {
      let was = streamText(held) ?? "", now = streamText(view);
      now !== void 0 && now.length >= was.length && now !== was && (m = { ...m, body: view.body }, kind = "appended");
    }
    if (kind === null && !held.deleted && view.edited === held.edited && view.files !== void 0 && !sameUrls(held.files, view.files) && (m = { ...m, files: view.files }, kind = "updated"), asOf >= h.version) {
      let derived = withDerived(m, view);
      sameDerived(derived, m) || (kind ??= "updated"), m = derived, this.held.set(held.seq, { asOf, version: asOf });
    }
    kind !== null && this.update(held, m, kind);
  }
  addReply(reply, asOf) {
    let root = reply.thread, seqs = this.threads.get(root);
    for (seqs === void 0 && (seqs = [], this.threads.set(root, seqs)), this.insert(seqs, reply.seq), this.replyCount++, this.bySeq.set(reply.seq, reply), this.held.set(reply.seq, { asOf, version: asOf }), this.emit("change", { kind: "added", message: reply }), this.countReply(root, reply); this.replyCount > this.max; ) {
      let [oldest, list] = this.threads.entries().next().value, gone = list.shift();
      this.replyCount--, this.bySeq.delete(gone), this.held.delete(gone), list.length === 0 && this.threads.delete(oldest);
    }
  }
  /** A new reply: one more in its root's `replies`, unless the root's view counted it already. */
  countReply(root, reply) {
    let r = this.bySeq.get(root), h = this.held.get(root);
    r === void 0 || h === void 0 || reply.deleted || reply.seq <= h.asOf || (h.counted ??= /* @__PURE__ */ new Set(), !h.counted.has(reply.seq) && (h.counted.add(reply.seq), h.version = Math.max(h.version, reply.seq), this.update(r, withReplies(r, (r.replies?.count ?? 0) + 1, Math.max(r.replies?.last ?? 0, reply.seq)), "updated")));
  }
  /** `reply` was deleted by the event `at`: one fewer in its root's `replies`, if it was counted there. */
  uncountReply(reply, at) {
    let root = reply.thread, r = this.bySeq.get(root), h = this.held.get(root);
    if (r === void 0 || h === void 0 || at <= h.asOf || !(h.counted?.delete(reply.seq) ?? !1) && reply.seq > h.asOf) return;
    h.version = Math.max(h.version, at);
    let last = r.replies?.last;
    if (last === reply.seq) {
      let alive = (this.threads.get(root) ?? []).filter((s) => s !== reply.seq && this.bySeq.get(s)?.deleted === !1);
      last = alive.length > 0 ? alive[alive.length - 1] : last;
    }
    this.update(r, withReplies(r, (r.replies?.count ?? 0) - 1, last), "updated");
  }
  /** Applies an edit or delete to `target`, or remembers it until the target is added. */
  change(target, c) {
    let held = this.bySeq.get(target);
    if (held === void 0) {
      let known = this.orphans.get(target);
      if (known !== void 0 && (known.deleted || known.seq >= c.seq)) return;
      this.orphans.delete(target), this.orphans.set(target, c), this.orphans.size > MAX_ORPHANS && this.orphans.delete(this.orphans.keys().next().value);
      return;
    }
    let next = withChange(held, c), kind = bodyChange(held, next);
    kind !== null && (this.update(held, next, kind), kind === "deleted" && held.thread !== void 0 && this.uncountReply(held, c.seq));
  }
  /** A reaction event: moves the target's count of `emoji` when it changes `user`'s reaction. */
  react(seq, target, emoji, user, on) {
    let m = this.bySeq.get(target), h = this.held.get(target);
    if (m === void 0 || h === void 0 || m.deleted || seq <= h.asOf) return;
    h.reactors ??= /* @__PURE__ */ new Map();
    let users = h.reactors.get(emoji);
    users === void 0 && (users = /* @__PURE__ */ new Map(), h.reactors.set(emoji, users)), users.get(user) !== on && (users.set(user, on), h.version = Math.max(h.version, seq), this.update(m, withReaction(m, emoji, on ? 1 : -1), "updated"));
  }
  pin(seq, target, on) {
    let m = this.bySeq.get(target), h = this.held.get(target);
    m === void 0 || h === void 0 || m.deleted || seq <= h.asOf || (h.version = Math.max(h.version, seq), m.pinned !== on && this.update(m, { ...m, pinned: on }, "updated"));
  }
  /** Reads a stream again; appends that arrive meanwhile wait, and are folded in after its stored text. */
  reread(target) {
    if (this.refetch === void 0) return;
    let queued = [];
    this.refetching.set(target, queued);
    let done = (view) => {
      if (this.refetching.get(target) === queued && (this.refetching.delete(target), view !== null)) {
        isObject2(view.event) && view.event.seq === target && this.apply(view.event, view.asOf);
        for (let p of queued) this.append(p);
      }
    };
    this.refetch(target).then(done, () => done(null));
  }
  update(held, next, kind) {
    next !== held && (this.bySeq.set(held.seq, next), this.emit("change", { kind, message: next }));
  }
  /** Drops a message of the main list, and the thread under it. */
  forget(seq) {
    this.bySeq.delete(seq), this.held.delete(seq);
    for (let r of this.threads.get(seq) ?? [])
      this.bySeq.delete(r), this.held.delete(r), this.replyCount--;
    this.threads.delete(seq);
  }
  insert(seqs, seq) {
    let last = seqs[seqs.length - 1];
    if (last === void 0 || seq > last) {
      seqs.push(seq);
      return;
    }
    let lo = 0, hi = seqs.length;
    for (; lo < hi; ) {
      let mid = lo + hi >>> 1;
      seqs[mid] < seq ? lo = mid + 1 : hi = mid;
    }
    seqs.splice(lo, 0, seq);
  }
};
function sameUrls(a, b) {
  return a !== void 0 && a.length === b.length && a.every((f, i) => f.id === b[i].id && f.url === b[i].url);
}

// ../sdk/ts/src/presence.ts
var PRESENCE_LIST_MAX = 100, Presence = class {
  count = 0;
  users = /* @__PURE__ */ new Set();
  known = !1;
  /** A count-only push came: the list may name people who left, so it cannot be trusted at <= 100. */
  partial = !1;
  /** The state, or null before the first `presence` reply. */
  get state() {
    return this.known ? { count: this.count, users: [...this.users].sort() } : null;
  }
  /** True when the state disagrees with itself and only a `presence` reply can fix it. */
  get stale() {
    return this.known && this.count <= PRESENCE_LIST_MAX && (this.partial || this.users.size !== this.count);
  }
  /** Replaces the state with a `presence` reply. */
  reset(ok) {
    this.users.clear();
    for (let u of ok.users) typeof u == "string" && this.users.add(u);
    this.count = Number.isInteger(ok.count) && ok.count >= 0 ? ok.count : this.users.size, this.known = !0, this.partial = !1;
  }
  /** Applies a push; returns true when the state changed. Pushes before the first reply are dropped. */
  apply(push) {
    if (!this.known) return !1;
    if (typeof push.user == "string" && typeof push.present == "boolean") {
      let complete = this.users.size === this.count;
      return this.users.has(push.user) === push.present ? !1 : (push.present ? this.users.add(push.user) : this.users.delete(push.user), this.count = complete ? this.users.size : Math.max(0, this.count + (push.present ? 1 : -1)), !0);
    }
    return typeof push.count == "number" && Number.isInteger(push.count) && push.count >= 0 ? push.count === this.count ? !1 : (this.count = push.count, this.partial = !0, !0) : !1;
  }
  /** Forgets the state (the watch ended). */
  clear() {
    this.users.clear(), this.count = 0, this.known = !1, this.partial = !1;
  }
}, TRANSIENT = /* @__PURE__ */ new Set(["throttled", "unavailable", "timeout", "internal"]), DEFAULT_RETRY_MS = 1e3, PresenceTracker = class {
  constructor(host) {
    this.host = host;
  }
  host;
  presence = new Presence();
  on = !1;
  /** Pushes that came while a request was out; null while none is. */
  held = null;
  /** Bumped when the link drops or tracking stops, so an older reply is ignored. */
  epoch = 0;
  cancelRetry = null;
  /** True once enabled and until `stop`. */
  get enabled() {
    return this.on;
  }
  /** The state, or null before the first reply. */
  get state() {
    return this.presence.state;
  }
  /** Starts tracking (the next `sync` fetches). */
  enable() {
    this.on = !0;
  }
  /** Fetches the state now, unless a request is already out. Call after each watch reply. */
  sync() {
    if (!this.on || this.held !== null) return;
    this.cancelTimer();
    let epoch = this.epoch;
    this.held = [], this.host.request().then(
      (ok) => {
        if (epoch !== this.epoch) return;
        let held = this.held ?? [];
        this.held = null, this.presence.reset(ok);
        for (let push of held) this.presence.apply(push);
        this.emit(), this.presence.stale && this.sync();
      },
      (err) => {
        if (epoch !== this.epoch) return;
        this.held = null;
        let e = err instanceof HeraldError ? err : new HeraldError("internal", String(err), { op: "presence" });
        if (!(e.code === "disconnected" || e.code === "closed")) {
          if (TRANSIENT.has(e.code)) {
            this.cancelRetry = this.host.schedule(() => {
              this.cancelRetry = null, epoch === this.epoch && this.sync();
            }, e.retryAfterMs ?? DEFAULT_RETRY_MS);
            return;
          }
          this.host.failed(e);
        }
      }
    );
  }
  /** A `presence` push for the chat while it is watched. */
  pushed(push) {
    if (this.on) {
      if (this.held !== null) {
        this.held.push(push);
        return;
      }
      this.presence.apply(push) && this.emit(), this.presence.stale && this.sync();
    }
  }
  /** The link dropped: a request out is void; the state stays on show until the next sync. */
  suspend() {
    this.epoch++, this.held = null, this.cancelTimer();
  }
  /** Stops tracking and forgets the state (the watch ended). */
  stop() {
    this.suspend(), this.on = !1, this.presence.clear();
  }
  emit() {
    let state = this.presence.state;
    state !== null && this.host.changed(state);
  }
  cancelTimer() {
    this.cancelRetry?.(), this.cancelRetry = null;
  }
};

// ../sdk/ts/src/search.ts
var MAX_QUERY_CHARS = 200;
function searchArgs(query, opts) {
  let chars = [...query].length;
  if (query.trim() === "" || chars > MAX_QUERY_CHARS)
    throw new TypeError(`herald: a search query is 1 to ${MAX_QUERY_CHARS} characters with at least one word`);
  let args = { query };
  return opts.chat !== void 0 && (args.chat = opts.chat), opts.limit !== void 0 && (args.limit = opts.limit), opts.cursor !== void 0 && (args.cursor = opts.cursor), args;
}
async function* searchPages(request, query, opts = {}) {
  let max = opts.max ?? Number.POSITIVE_INFINITY, cursor = opts.cursor, yielded = 0;
  for (; ; ) {
    let page = await request(searchArgs(query, { ...opts, ...cursor !== void 0 ? { cursor } : {} }));
    for (let r of page.results) {
      if (yielded >= max) return;
      yielded++, yield r;
    }
    if (!page.more || yielded >= max) return;
    if (page.cursor === void 0 || page.cursor === cursor)
      throw new HeraldError("protocol", "herald: search said more but gave no new cursor", { op: "search" });
    cursor = page.cursor;
  }
}

// ../sdk/ts/src/typing.ts
var Typing = class {
  constructor(host) {
    this.host = host;
  }
  host;
  /** When the last `typing` request went out (ms), or null for never. */
  sentAt = null;
  /** Cancels the trailing request, when one is scheduled. */
  cancelTrailing = null;
  /** Others typing, with the timer that expires each. */
  typists = /* @__PURE__ */ new Map();
  /** Others typing now, sorted. */
  get users() {
    return [...this.typists.keys()].sort();
  }
  /**
   * This user typed: sends `typing` unless one went out less than 2 s ago, in which case one goes out
   * when those 2 s are over. Nothing is sent offline (a request parked until a reconnect would announce
   * typing that is long over). Returns whether a request went out now. Errors (a muted member's
   * `forbidden`, a dropped link) are ignored: typing is a hint.
   */
  typed() {
    if (!this.host.connected) return !1;
    let now = Date.now();
    return this.sentAt === null || now - this.sentAt >= 2e3 ? (this.stopTrailing(), this.send(now), !0) : (this.cancelTrailing === null && (this.cancelTrailing = this.host.schedule(() => {
      this.cancelTrailing = null, this.host.connected && this.send(Date.now());
    }, this.sentAt + 2e3 + 250 - now)), !1);
  }
  /** This user sent their message (or left): a trailing `typing` would announce typing that is over. */
  stopTrailing() {
    this.cancelTrailing?.(), this.cancelTrailing = null;
  }
  /** A `typing` push: `user` typed; (re)starts their expiry. */
  pushed(user) {
    let known = this.typists.get(user);
    known?.(), this.typists.set(
      user,
      this.host.schedule(() => this.remove(user), 5e3)
    ), known === void 0 && this.host.changed(this.users);
  }
  /** `user`'s message arrived: they stopped typing it. */
  remove(user) {
    let cancel = this.typists.get(user);
    cancel !== void 0 && (cancel(), this.typists.delete(user), this.host.changed(this.users));
  }
  send(now) {
    this.sentAt = now, this.host.sendTyping().catch(() => {
    });
  }
  /** Forgets everyone (the link dropped or the watch ended: nobody's pushes will come). */
  clear() {
    if (this.typists.size !== 0) {
      for (let cancel of this.typists.values()) cancel();
      this.typists.clear(), this.host.changed([]);
    }
  }
};

// ../sdk/ts/src/watch.ts
var WATCH_TRANSITIONS = {
  unwatched: ["subscribing", "suspended"],
  subscribing: ["live", "repairing", "suspended", "unwatched"],
  live: ["repairing", "suspended", "unwatched"],
  repairing: ["live", "suspended", "unwatched"],
  suspended: ["subscribing", "unwatched"]
}, TRANSIENT2 = /* @__PURE__ */ new Set(["throttled", "unavailable", "timeout", "internal"]), DEFAULT_RETRY_MS2 = 1e3, MAX_STALLS = 3, Watch = class {
  constructor(chat, owner) {
    this.chat = chat;
    this.owner = owner;
  }
  chat;
  owner;
  current = "unwatched";
  /** The application wants this chat watched (survives link loss; cleared by unwatch/leave/forbidden). */
  wanted = !1;
  /** The seq of the last event handed on; null before the first watch reply. */
  last = null;
  /** The seq of the current watch's reply: pushes up to it are its replay, stored views read after it. */
  watchSeq = 0;
  /** The highest seq the server said exists (notify, gaps, fetch replies) that may not be delivered yet. */
  known = 0;
  /** Pushes that arrived out of order or while subscribing or repairing, by seq. */
  buffer = /* @__PURE__ */ new Map();
  /** Bumped whenever watching restarts or stops, so replies of an older round are ignored. */
  epoch = 0;
  cancelRetry = null;
  /** Repair fetches in a row that made no progress. */
  stalls = 0;
  waiters = [];
  get state() {
    return this.current;
  }
  get lastSeq() {
    return this.last;
  }
  /** True while the application wants the chat watched, whatever the link does. */
  get isWanted() {
    return this.wanted;
  }
  /** True when a watch reply was taken on the current link: events flow (maybe through a repair). */
  get flowing() {
    return this.current === "live" || this.current === "repairing";
  }
  /** True when pushes for this chat are to be taken (neither unwatched nor waiting for a link). */
  get receiving() {
    return this.current !== "unwatched" && this.current !== "suspended";
  }
  /** A promise of the next watch reply (or of the current one, once `start` sees it is flowing). */
  nextReply() {
    return new Promise((resolve, reject) => this.waiters.push({ resolve, reject }));
  }
  /**
   * Starts watching after `after` (undefined: after the chat's seq when the watch begins). On a chat
   * already wanted, only settles the waiters when a reply was taken on this link.
   */
  start(after) {
    if (this.wanted) {
      this.flowing && this.settleWaiters({ chat: this.chat, seq: this.last ?? 0 });
      return;
    }
    this.wanted = !0, this.last = after ?? null, this.known = 0, this.owner.connected ? this.subscribe() : this.setState("suspended");
  }
  /** A new link is greeted: resume watching. */
  linkUp() {
    this.wanted && this.current === "suspended" && this.subscribe();
  }
  /** The link dropped: keep `last`, forget the rest; the next watch's replay refills it. */
  linkDown() {
    this.current !== "unwatched" && (this.epoch++, this.cancelTimer(), this.buffer.clear(), this.known = 0, this.stalls = 0, this.owner.suspended(), this.setState("suspended"));
  }
  /** An `event` push for this chat. */
  onEventPush(push) {
    if (!this.receiving) return;
    let ev = toEvent(push);
    if (!(this.last !== null && ev.seq <= this.last)) {
      if (this.current === "live" && this.last !== null && ev.seq === this.last + 1) {
        this.deliver(ev, ev.seq <= this.watchSeq ? this.watchSeq : ev.seq), this.drainContiguous();
        return;
      }
      this.hold(ev), this.current === "live" && this.repair();
    }
  }
  /** A `notify` push: events up to `seq` exist. */
  onNotify(push) {
    this.receiving && (this.last !== null && push.seq <= this.last || (this.known = Math.max(this.known, push.seq), this.current === "live" && this.repair()));
  }
  /** Ends watching locally; rejects pending `watch()` promises with `err` when given. */
  stop(err) {
    this.wanted = !1, this.epoch++, this.cancelTimer(), this.buffer.clear(), this.last = null, this.known = 0, this.stalls = 0, this.owner.stopped(), this.current !== "unwatched" && this.setState("unwatched");
    let waiters = this.waiters;
    this.waiters = [];
    let reason = err ?? new HeraldError("closed", `herald: chat ${this.chat} is no longer watched`);
    for (let w of waiters) w.reject(reason);
  }
  // ---- the state machine ----------------------------------------------------------------------
  setState(to) {
    let from = this.current;
    if (from !== to) {
      if (!WATCH_TRANSITIONS[from].includes(to))
        throw new Error(`herald: chat ${this.chat}: no transition ${from} -> ${to}`);
      this.current = to, this.owner.changed({ chat: this.chat, from, to });
    }
  }
  async subscribe() {
    this.cancelTimer();
    let epoch = ++this.epoch;
    this.setState("subscribing");
    let args = { chat: this.chat };
    this.last !== null && (args.after = this.last);
    let ok;
    try {
      ok = await this.owner.subscribe(args);
    } catch (err) {
      if (epoch !== this.epoch) return;
      this.failed(err, () => this.subscribe());
      return;
    }
    epoch === this.epoch && (this.last === null && (this.last = ok.seq), this.watchSeq = ok.seq, this.settleWaiters(ok), epoch === this.epoch && (this.setState("live"), this.owner.live(), this.catchUp()));
  }
  /** Delivers held events in order, then repairs if a gap or a notify is still open. */
  catchUp() {
    this.drainContiguous(), this.current === "live" && (this.buffer.size > 0 || this.known > (this.last ?? 0)) && this.repair();
  }
  /** Starts a repair from `live`; pushes that arrive meanwhile are held. */
  repair() {
    this.current === "live" && (this.setState("repairing"), this.runRepair(this.epoch));
  }
  /**
   * Fetches pages after the last delivered seq until nothing is held, nothing announced is missing and
   * the last page did not say `more`. Fetching up to the chat's latest seq rather than just to the gap's
   * end costs a few duplicate events, which are dropped, and saves a round trip per page in a busy chat.
   */
  async runRepair(epoch) {
    for (; ; ) {
      if (this.drainContiguous(), epoch !== this.epoch) return;
      let last = this.last ?? 0;
      if (this.buffer.size === 0 && this.known <= last) break;
      let page;
      try {
        page = await this.owner.fetchPage(last);
      } catch (err) {
        if (epoch !== this.epoch) return;
        this.failed(err, () => {
          this.runRepair(epoch);
        });
        return;
      }
      if (epoch !== this.epoch) return;
      for (let ev of page.events)
        if (ev.seq === (this.last ?? 0) + 1 && (this.buffer.delete(ev.seq), this.deliver(ev, page.seq), epoch !== this.epoch))
          return;
      if (this.known = Math.max(this.known, announcedBy(page, last)), (this.last ?? 0) > last) {
        this.stalls = 0;
        continue;
      }
      if (this.stalls < MAX_STALLS) {
        this.stalls++, this.cancelRetry = this.owner.schedule(() => {
          this.cancelRetry = null, this.runRepair(epoch);
        }, DEFAULT_RETRY_MS2);
        return;
      }
      this.stalls = 0, this.owner.error(
        new HeraldError("protocol", `herald: chat ${this.chat}: no events after ${last} though seq ${this.known} was announced`)
      ), this.buffer.clear(), this.known = last;
      break;
    }
    epoch === this.epoch && this.setState("live");
  }
  /** Handles a failed watch or fetch: retry transient errors, give up on the rest. */
  failed(err, retry) {
    let e = err instanceof HeraldError ? err : new HeraldError("internal", String(err));
    if (!(e.code === "disconnected" || e.code === "closed")) {
      if (TRANSIENT2.has(e.code)) {
        this.cancelTimer(), this.cancelRetry = this.owner.schedule(() => {
          this.cancelRetry = null, retry();
        }, e.retryAfterMs ?? DEFAULT_RETRY_MS2);
        return;
      }
      this.owner.error(e), this.stop(e);
    }
  }
  // ---- delivery -------------------------------------------------------------------------------
  hold(ev) {
    if (this.known = Math.max(this.known, ev.seq - 1), this.buffer.size >= this.owner.maxBufferedEvents) {
      this.known = Math.max(this.known, ev.seq), this.buffer.clear();
      return;
    }
    this.buffer.set(ev.seq, ev);
  }
  drainContiguous() {
    if (this.last === null) return;
    let epoch = this.epoch;
    for (let next = this.buffer.get(this.last + 1); next !== void 0; next = this.buffer.get(this.last + 1))
      if (this.buffer.delete(next.seq), this.deliver(next, next.seq <= this.watchSeq ? this.watchSeq : next.seq), epoch !== this.epoch) return;
    this.dropStale();
  }
  dropStale() {
    let last = this.last ?? 0;
    for (let seq of this.buffer.keys()) seq <= last && this.buffer.delete(seq);
  }
  deliver(ev, asOf) {
    this.last = ev.seq, this.owner.deliver(ev, asOf);
  }
  settleWaiters(ok) {
    let waiters = this.waiters;
    this.waiters = [];
    for (let w of waiters) w.resolve(ok);
  }
  cancelTimer() {
    this.cancelRetry !== null && (this.cancelRetry(), this.cancelRetry = null);
  }
};
function announcedBy(page, after) {
  let end = page.events.reduce((hi, ev) => Math.max(hi, ev.seq), after);
  return Math.max(page.seq, page.more ? end + 1 : end);
}
function toEvent(push) {
  let { ev: _ev, chat: _chat, ...event } = push;
  return event;
}

// ../sdk/ts/src/chat.ts
var Chat = class extends Emitter {
  /** The chat id. */
  id;
  host;
  /** Watching: delivery once and in order, gap repair, resuming on a new link. */
  watcher;
  /** Created by the first `messages()` call; fed every delivered event from then on. */
  list = null;
  /** The profile of the latest `join` reply and its seq, for a list made after it. */
  joined = null;
  typists;
  presenceTracker;
  /** @internal Created by `HeraldClient.chat`. */
  constructor(id, host) {
    super(), this.id = id, this.host = host, this.typists = new Typing({
      get connected() {
        return host.connected;
      },
      sendTyping: () => this.typing(),
      schedule: host.schedule,
      changed: (users) => this.emit("typing", { chat: id, users })
    }), this.presenceTracker = new PresenceTracker({
      request: () => this.presence(),
      schedule: host.schedule,
      changed: (state) => this.emit("presence", { chat: id, ...state }),
      failed: (err) => this.emit("error", err)
    }), this.watcher = new Watch(id, {
      get connected() {
        return host.connected;
      },
      subscribe: (args) => host.request("watch", args),
      fetchPage: (after) => this.fetchPage(after),
      schedule: host.schedule,
      get maxBufferedEvents() {
        return host.maxBufferedEvents;
      },
      changed: (change) => this.emit("state", change),
      deliver: (ev, asOf) => this.deliver(ev, asOf),
      error: (err) => this.emit("error", err),
      // After the watch, so that this connection is present, and its pushes flow, before asking.
      live: () => this.presenceTracker.sync(),
      suspended: () => {
        this.presenceTracker.suspend(), this.typists.clear();
      },
      stopped: () => {
        this.presenceTracker.stop(), this.typists.stopTrailing(), this.typists.clear(), this.list?.clear();
      }
    });
  }
  /** The watch state. */
  get state() {
    return this.watcher.state;
  }
  /** The seq of the last event delivered to the application, or null when none is known yet. */
  get lastSeq() {
    return this.watcher.lastSeq;
  }
  /** Others typing in this chat now (from typing pushes, each kept 5 s), sorted. */
  get typingUsers() {
    return this.typists.users;
  }
  /** Who is present, kept current after `watch({ presence: true })`; null before the first reply. */
  get present() {
    return this.presenceTracker.state;
  }
  /**
   * The chat's message list: its `message` and `system` events with edits and deletes applied, fed with
   * every event this handle delivers from now on (pushes and gap repair, in seq order). Load older ones
   * with `list.load(...)` from `history()`. The same list on every call; emptied when the watch ends.
   */
  messages(opts = {}) {
    return this.list === null && (this.list = new MessageList({ refetch: (seq) => this.reread(seq), ...opts }), this.joined !== null && this.list.setProfile(this.joined.profile, this.joined.seq)), this.list;
  }
  /** Joins the chat (creating an open chat that does not exist yet); from 1.2 the reply has its profile. */
  async join() {
    let ok = await this.host.request("join", { chat: this.id });
    return ok.profile !== void 0 && ok.profile !== null && (this.joined = { profile: ok.profile, seq: ok.seq }, this.list?.setProfile(ok.profile, ok.seq)), ok;
  }
  /** Leaves the chat; the server ends this user's watches of it, and so does this handle. */
  async leave() {
    await this.host.request("leave", { chat: this.id }), this.watcher.stop(null);
  }
  /**
   * Starts delivering events: those after `opts.after` when given, else those after the chat's seq when
   * the watch begins. Resolves on the first watch reply; the watch then survives reconnects (resuming
   * with `after` = the last delivered seq) until `unwatch` or `leave`. Calling it on a watched chat only
   * waits for the current subscription.
   */
  watch(opts = {}) {
    if (opts.after !== void 0 && (!Number.isInteger(opts.after) || opts.after < 0))
      return Promise.reject(new TypeError("herald: `after` must be a non-negative integer"));
    let p = this.watcher.nextReply();
    return opts.presence === !0 && !this.presenceTracker.enabled && (this.presenceTracker.enable(), this.watcher.isWanted && this.watcher.flowing && this.presenceTracker.sync()), this.watcher.start(opts.after), p;
  }
  /** Stops delivering events; a later `watch()` starts from the chat's seq at that time. */
  async unwatch() {
    let wasWatching = this.watcher.isWanted;
    this.watcher.stop(null), wasWatching && this.host.connected && await this.host.request("unwatch", { chat: this.id });
  }
  /**
   * Sends a message. Resolves with its seq once it is durable. The send survives link drops and is
   * retried with the same `client_id`, so it is stored once; made offline, it waits for the next link.
   * Rejects with `queue_full` when too many sends wait unsent, and with `timeout` when it could not be
   * written within `sendTimeoutMs` (60 s) of the call.
   */
  send(body, opts = {}) {
    this.typists.stopTrailing();
    let extra = {};
    return opts.thread !== void 0 && (extra.thread = opts.thread), opts.quote !== void 0 && (extra.quote = opts.quote), opts.mentions !== void 0 && (extra.mentions = opts.mentions), opts.stream === !0 && (extra.stream = !0), opts.files !== void 0 && (extra.files = opts.files), this.host.send(this.id, body, opts.clientId, extra);
  }
  /**
   * 1.2: uploads a file for a message of this chat: asks herald where (`upload`), sends exactly its
   * bytes there with `fetch`, and resolves with the file id to pass in `send`'s or `edit`'s `files`,
   * with the `upload` answer. A browser `File` names itself; bytes need `name`, a stream `name` and
   * `size`. Rejects with the `upload` request's `HeraldError` (`forbidden` for a muted member,
   * `too_large` past the server's file limit, ...), or with an `UploadError` (code `upload_failed`, its
   * `status` the storage's answer, 0 for none) when the bytes were not taken. Nothing is retried: call
   * again for a new file.
   *
   *     const { id } = await chat.upload(input.files[0]);
   *     await chat.send({ text: 'the plan' }, { files: [id] });
   */
  async upload(source, opts = {}) {
    let file = describeUpload(source, opts), grant = await this.host.request("upload", { chat: this.id, ...file });
    return await putFile(grant, source, {
      size: file.size,
      type: file.type,
      ...opts.onProgress !== void 0 ? { onProgress: opts.onProgress } : {},
      ...opts.signal !== void 0 ? { signal: opts.signal } : {},
      ...this.host.fetch !== void 0 ? { fetch: this.host.fetch } : {}
    }), { id: typeof grant.file == "string" ? grant.file : String(grant.file?.id ?? ""), ...file, upload: grant };
  }
  /**
   * 1.2, Node: uploads the file at `path`, streamed from disk (named by its base name unless `name` is
   * given; `type` defaults to `application/octet-stream`). As `upload` otherwise.
   */
  async uploadPath(path, opts = {}) {
    let file = await openPath(path);
    return this.upload(file.stream, { ...opts, name: opts.name ?? file.name, size: file.size });
  }
  /** 1.2: one page of `client.search` within this chat (newest first). */
  search(query, opts = {}) {
    return this.host.request("search", searchArgs(query, { ...opts, chat: this.id }));
  }
  /**
   * 1.2: adds `text` to the end of this user's open stream `target` (a message sent with
   * `stream: true`); `{ done: true }` ends it (the server then stores the final body as an `edit`).
   * Resolves once the text is durable. Not retried across a link drop: an append is not idempotent, so a
   * `disconnected` rejection leaves its outcome unknown (fetch the message to see its text). Await each
   * append before the next: requests on one link are answered in order, but a dropped link fails all
   * that are out.
   */
  async append(target, text, opts = {}) {
    let args = { chat: this.id, target, text };
    opts.done === !0 && (args.done = !0), await this.host.request("append", args);
  }
  /** Adds (`on` true, the default) or takes back a reaction to the event `target`. */
  react(target, emoji, on = !0) {
    return this.host.request("react", { chat: this.id, target, emoji, on });
  }
  /**
   * Moves this member's read position forward to `seq`; resolves with the position now stored. With
   * `thread` (1.2), this member's position in the thread under that root.
   */
  read(seq, opts = {}) {
    let args = { chat: this.id, seq };
    return opts.thread !== void 0 && (args.thread = opts.thread), this.host.request("read", args);
  }
  /**
   * 1.2: sets the chat's profile fields given (`null` clears one; one left out is kept). Resolves with
   * the `profile` event's seq, or, when nothing changed, the latest one's (0 if none). Watchers' message
   * lists show the new profile (`list.profile`).
   */
  profile(fields2) {
    let args = { chat: this.id };
    return fields2.name !== void 0 && (args.name = fields2.name), fields2.image !== void 0 && (args.image = fields2.image), fields2.data !== void 0 && (args.data = fields2.data), this.host.request("profile", args);
  }
  /**
   * 1.2: one page of the chat's members, sorted by user id, each with their read position; `count` is
   * the chat's member count. `limit` defaults to 100, at most 1,000; pass the reply's `cursor` for the
   * next page while `more`.
   */
  members(opts = {}) {
    return this.host.request("members", { chat: this.id, ...pageArgs(opts) });
  }
  /** 1.2: the threads of this chat that this user follows, latest reply first (see `client.threads`). */
  threads(opts = {}) {
    return this.host.request("threads", { chat: this.id, ...pageArgs(opts) });
  }
  /**
   * 1.2: pins (`on` true, the default) or unpins the message `target`; resolves with the `pin` event's
   * seq, or, when that changes nothing, the latest pin event's of that target (0 if none). At most 50
   * pinned messages per chat (`bad_request` past it).
   */
  pin(target, on = !0) {
    return this.host.request("pin", { chat: this.id, target, on });
  }
  /** 1.2: the pinned messages, latest pin first, each as `fetch` shows it with who pinned it. */
  pins() {
    return this.host.request("pins", { chat: this.id });
  }
  /** 1.2: who reacted to `target` with what: up to 100 users per emoji, sorted. */
  reactions(target) {
    return this.host.request("reactions", { chat: this.id, target });
  }
  /**
   * Replaces the body of this user's message `target` (with `mentions` or `files` (1.2), those too; left
   * out, they are kept); resolves with the `edit` event's seq. `not_found`
   * when `target` is not a message of this chat or is deleted, `forbidden` for another's message or
   * while muted; the body has `send`'s size limit. Not retried across a link drop: a `disconnected`
   * rejection means the outcome is unknown (the watch shows whether it was stored).
   */
  edit(target, body, opts = {}) {
    let args = { chat: this.id, target, body };
    return opts.mentions !== void 0 && (args.mentions = opts.mentions), opts.files !== void 0 && (args.files = opts.files), this.host.request("edit", args);
  }
  /**
   * Deletes this user's message `target`: the server erases its body for good. Resolves with the
   * `delete` event's seq; errors as for `edit`.
   */
  delete(target) {
    return this.host.request("delete", { chat: this.id, target });
  }
  /** The bare `typing` request; `notifyTyping()` is what a text box should call. */
  async typing() {
    await this.host.request("typing", { chat: this.id });
  }
  /**
   * Call on every keystroke: sends `typing` at most once every 2 s (keystrokes inside the 2 s are
   * announced by one request when they are over, unless a `send` comes first), and only while
   * connected; errors are ignored (typing is a hint). Returns whether a request went out now.
   */
  notifyTyping() {
    return this.typists.typed();
  }
  /** The bare `presence` request: how many are present, and at most 100 of them, sorted. */
  presence() {
    return this.host.request("presence", { chat: this.id });
  }
  /**
   * Fetches one page of events after `after`, without touching delivery: at most `limit` (at most 500,
   * default 100), and possibly fewer, since the server also bounds a reply in bytes. When the reply says
   * `more`, the next page starts after its last event's seq; `history()` does that paging. With
   * `thread` (1.2), only the replies of the thread under that root.
   */
  fetch(after, limit, opts = {}) {
    let args = { chat: this.id, after };
    return limit !== void 0 && (args.limit = limit), opts.thread !== void 0 && (args.thread = opts.thread), this.host.request("fetch", args);
  }
  /**
   * The events after `after`, in seq order, fetched page by page until the server says there is no more
   * (or past `opts.until`); outside delivery, like `fetch`. Pages use the client's page size, which shrinks
   * after slow-consumer closes. A failed fetch (a dropped link, `forbidden`, ...) ends the iteration with
   * its `HeraldError`; start again after the last event received to go on.
   *
   *     for await (const ev of chat.history(0, { until: watchStartSeq })) render(ev);
   */
  history(after = 0, opts = {}) {
    return historyPages(this.id, (from) => this.fetchPage(from, opts.thread), after, opts);
  }
  // ---- called by the client -------------------------------------------------------------------
  /** @internal A new link is greeted: resume watching. */
  linkUp() {
    this.watcher.linkUp();
  }
  /** @internal The link dropped: keep the last delivered seq, forget the rest until the watch resumes. */
  linkDown() {
    this.watcher.linkDown();
  }
  /** @internal The client is closed for good. */
  shutdown(err) {
    this.watcher.stop(err);
  }
  /** @internal An `event` push for this chat. */
  onEventPush(push) {
    this.watcher.onEventPush(push);
  }
  /** @internal A `typing` push: `user` is typing here. */
  onTypingPush(user) {
    this.watcher.receiving && user !== this.host.user && this.typists.pushed(user);
  }
  /** @internal A `presence` push. */
  onPresencePush(push) {
    this.watcher.receiving && this.presenceTracker.pushed(push);
  }
  /** @internal An `append` push: streamed text for a message of this chat. */
  onAppendPush(push) {
    this.watcher.receiving && (this.list?.append(push), this.emit("append", push));
  }
  /** @internal A `notify` push: events up to `seq` exist. */
  onNotify(push) {
    this.watcher.onNotify(push);
  }
  // ---- internals ------------------------------------------------------------------------------
  /** One page after `after` at the client's page size; a reply lets the page size grow back a step. */
  async fetchPage(after, thread) {
    let args = { chat: this.id, after, limit: this.host.pageSize.current };
    thread !== void 0 && (args.thread = thread);
    let page = await this.host.request("fetch", args);
    return this.host.pageSize.grow(), page;
  }
  /** The stored view of the message `seq`, for the list's stream repair; null when it cannot be read. */
  async reread(seq) {
    let page = await this.host.request("fetch", { chat: this.id, after: seq - 1, limit: 1 }), event = page.events.find((ev) => ev.seq === seq);
    return event === void 0 ? null : { event, asOf: page.seq };
  }
  /** An event the watch delivers, in order. `asOf`: the chat's seq when this view of it was read. */
  deliver(ev, asOf) {
    let out = { ...ev, chat: this.id };
    this.list?.apply(ev, asOf), ev.type === "message" && ev.user !== void 0 && this.typists.remove(ev.user), this.emit("event", out), this.host.delivered(out);
  }
};

// ../sdk/ts/src/backoff.ts
var DEFAULT_BACKOFF = { baseMs: 500, capMs: 2e4 }, MAX_EXPONENT = 31;
function backoffCeiling(attempt, opts) {
  let n = Math.min(Math.max(0, Math.floor(attempt)), MAX_EXPONENT);
  return Math.min(opts.capMs, opts.baseMs * 2 ** n);
}
function fullJitter(attempt, opts, random = Math.random) {
  let r = Math.min(Math.max(random(), 0), 1);
  return Math.floor(r * backoffCeiling(attempt, opts));
}
var Backoff = class {
  constructor(opts = DEFAULT_BACKOFF, random = Math.random) {
    this.opts = opts;
    this.random = random;
  }
  opts;
  random;
  attempt = 0;
  /** The delay before the next retry; each call widens the window for the one after. */
  next() {
    let delay = fullJitter(this.attempt, this.opts, this.random);
    return this.attempt = Math.min(this.attempt + 1, MAX_EXPONENT), delay;
  }
  /** How many delays were handed out since the last reset. */
  get attempts() {
    return this.attempt;
  }
  /** Starts over from the base window, after a connection that worked. */
  reset() {
    this.attempt = 0;
  }
};

// ../sdk/ts/src/codes.ts
var CloseCode = {
  /** A frame over the server's frame limit. */
  FrameTooLarge: 1009,
  /** Frames that are not JSON objects of this protocol. */
  BadProtocol: 4e3,
  /** No valid `hello`: bad, expired or missing token, or hello timeout. */
  Unauthenticated: 4001,
  /** Slow consumer: the connection's outbound queue passed its limit. */
  SlowConsumer: 4008,
  /** Going away: drain or rebalance. */
  GoingAway: 4012,
  /** Too many requests for too long. */
  TooManyRequests: 4029
};
function closePolicy(code) {
  switch (code) {
    case CloseCode.Unauthenticated:
      return "refresh_token";
    case CloseCode.TooManyRequests:
      return "reconnect_slow";
    // The outbound queue overflowed, most likely on a large fetch reply or replay. The same requests on
    // the next link would overflow it again: come back later each time, and ask for less.
    case CloseCode.SlowConsumer:
      return "reconnect_smaller";
    // 4000 means one of us broke the protocol; backoff keeps a buggy loop from hammering the server.
    // 4012, 1006 (network), 1009 and anything unknown: the next connection may well be fine.
    default:
      return "reconnect";
  }
}

// ../sdk/ts/src/liveness.ts
var Liveness = class {
  /**
   * Starts watching: the first ping goes out after `intervalMs` of silence.
   * @param intervalMs silence after which the client pings.
   * @param timeoutMs how long after a ping the link may stay silent before it counts as lost.
   */
  constructor(host, intervalMs, timeoutMs) {
    this.host = host;
    this.intervalMs = intervalMs;
    this.timeoutMs = timeoutMs;
    this.arm(intervalMs);
  }
  host;
  intervalMs;
  timeoutMs;
  /** When the last frame from the server arrived (ms since the epoch). */
  lastHeard = Date.now();
  /** When the ping now waiting for an answer was written; null when none waits. */
  probeAt = null;
  /** When the armed timer is due, to notice that it fired late. */
  due = 0;
  /** Set once a late deadline was given its grace, so a stall delays the verdict once, not forever. */
  graced = !1;
  cancel = null;
  stopped = !1;
  /** A frame arrived: the server is there. Cheap, as it runs for every frame: no timer is touched unless a ping waits. */
  heard() {
    this.stopped || (this.lastHeard = Date.now(), this.probeAt !== null && (this.probeAt = null, this.arm(this.intervalMs)));
  }
  /** A request timed out: ping now, unless a ping already waits for an answer. */
  probe() {
    this.stopped || this.probeAt !== null || this.sendProbe();
  }
  /** True while a ping waits for an answer. */
  get probing() {
    return this.probeAt !== null;
  }
  /** Stops the timers for good (the link is gone). */
  stop() {
    this.stopped = !0, this.cancel?.(), this.cancel = null;
  }
  arm(ms) {
    this.cancel?.(), this.due = Date.now() + ms, this.cancel = this.host.schedule(() => this.fire(), ms);
  }
  fire() {
    if (this.cancel = null, this.stopped) return;
    let now = Date.now();
    if (this.probeAt === null) {
      let quiet = now - this.lastHeard;
      quiet < this.intervalMs ? this.arm(this.intervalMs - quiet) : this.sendProbe();
      return;
    }
    if (now - this.due > 1e3 && !this.graced) {
      this.graced = !0, this.arm(1e3);
      return;
    }
    this.stopped = !0, this.host.lost("ping timeout");
  }
  sendProbe() {
    this.probeAt = Date.now(), this.graced = !1, this.arm(this.timeoutMs), this.host.ping();
  }
};

// ../sdk/ts/src/transport.ts
function resolveWebSocket(given) {
  if (given !== void 0) return given;
  let g = globalThis.WebSocket;
  if (g === void 0)
    throw new TypeError(
      'herald: no global WebSocket in this runtime; pass one in the options, e.g. `WebSocket` from the "ws" package'
    );
  return g;
}
var HERALD_WS_PATH = "/v1/ws";
function endpointUrl(url, workspace) {
  let u;
  try {
    u = new URL(url);
  } catch {
    throw new TypeError(`herald: \`url\` is not a URL: "${url}"; herald's endpoint looks like wss://chat.example.com${HERALD_WS_PATH}`);
  }
  if (u.protocol !== "ws:" && u.protocol !== "wss:") {
    let like = u.protocol === "https:" ? "wss:" : "ws:";
    throw new TypeError(
      `herald: \`url\` must be a WebSocket URL (ws:// or wss://), not ${u.protocol}//; herald's endpoint is ${like}//${u.host}${HERALD_WS_PATH}`
    );
  }
  let named = u.searchParams.get("ws");
  if (named !== null && named !== workspace)
    throw new TypeError(`herald: url names workspace "${named}" but the options say "${workspace}"`);
  return u.searchParams.set("ws", workspace), u.toString();
}
var Link = class {
  socket;
  live = !0;
  wasOpened = !1;
  /** What the runtime said about a failure: `ws` names it ("connect ECONNREFUSED ..."); browsers say nothing. */
  errorDetail = "";
  /** Opens a socket to `url`; may throw synchronously for a malformed URL. */
  constructor(ctor, url, handlers) {
    this.socket = new ctor(url), this.socket.onopen = () => {
      this.wasOpened = !0, this.live && handlers.onOpen();
    }, this.socket.onmessage = (ev) => {
      this.live && typeof ev.data == "string" && handlers.onFrame(ev.data);
    }, this.socket.onclose = (ev) => {
      this.live && (this.live = !1, handlers.onClose(typeof ev.code == "number" ? ev.code : 1006, ev.reason || this.errorDetail));
    }, this.socket.onerror = (ev) => {
      let detail = ev?.message ?? ev?.error?.message;
      typeof detail == "string" && (this.errorDetail = detail.slice(0, 200));
    };
  }
  /** True once the socket opened: a link that never did points at the URL or the network, not herald. */
  get opened() {
    return this.wasOpened;
  }
  /** True while frames can be written. */
  get open() {
    return this.live && this.socket.readyState === 1;
  }
  /** Writes one text frame; returns false when the socket cannot take it. */
  send(text) {
    if (!this.open) return !1;
    try {
      return this.socket.send(text), !0;
    } catch {
      return !1;
    }
  }
  /**
   * Stops reporting and closes the socket. Used for every close the client decides on (a dead link, a
   * drain, `close()`), because a dead link's close handshake may never finish and the client must not
   * wait for it before reconnecting.
   */
  abandon(reason) {
    if (this.live) {
      this.live = !1;
      try {
        this.socket.close(1e3, reason.slice(0, 120));
      } catch {
      }
    }
  }
};

// ../sdk/ts/src/nodes.ts
var Nodes = class {
  /** The URLs as given, for the application to compare with its own list. */
  given;
  /** The same with `?ws=WORKSPACE`, what sockets are opened to. */
  endpoints;
  index = 0;
  /**
   * Validates every URL (see `endpointUrl`); throws `TypeError` naming the bad one. `urls` must be
   * non-empty and without repeats (options.ts checks both).
   */
  constructor(urls, workspace) {
    if (this.given = [...urls], this.endpoints = urls.map((u) => endpointUrl(u, workspace)), new Set(this.endpoints).size !== this.endpoints.length)
      throw new TypeError("herald: `url` lists the same endpoint twice");
  }
  /** The URL (as given) of the current or next attempt. */
  get url() {
    return this.given[this.index];
  }
  /** The endpoint (with `?ws=`) of the current or next attempt. */
  get endpoint() {
    return this.endpoints[this.index];
  }
  /** How many URLs there are. */
  get count() {
    return this.given.length;
  }
  /**
   * The link to the current node was lost, or an attempt to it failed: the next attempt goes to the next
   * URL in the list, and this one comes round again only after every other was tried.
   */
  failed() {
    this.index = (this.index + 1) % this.given.length;
  }
  /**
   * What to tell a developer whose client cannot open a socket: the URLs, the runtime's words about the
   * last failure (at `lastEndpoint`) and the likely causes.
   */
  unreachableMessage(attempts, lastEndpoint, lastReason) {
    let u = new URL(lastEndpoint), hints = [];
    /\b404\b/.test(lastReason) && hints.push("the server answered the upgrade with 404: nothing serves WebSockets at that path"), u.pathname.endsWith(HERALD_WS_PATH) || hints.push(`the path is "${u.pathname}", and herald serves WebSockets at ${HERALD_WS_PATH}`);
    let refused = /ECONNREFUSED/.test(lastReason);
    refused && hints.push(`nothing listens on ${u.host}: a wrong port, or the server is down`), hints.push(
      `check \`url\`: herald's endpoint is ${u.protocol}//HOST:PORT${HERALD_WS_PATH} (a proxy in front must pass WebSocket upgrades)` + (refused ? "" : ", or the server is down")
    );
    let one = this.endpoints.length === 1, what = one ? lastEndpoint : `any of ${this.endpoints.join(", ")}`, detail = lastReason || "no detail from the runtime; browsers give none";
    return `herald: ${attempts} attempts in a row to open ${what} failed before the WebSocket opened (last: ${one ? "" : `${lastEndpoint}: `}${detail}). ${hints.join("; ")}. Still retrying.`;
  }
};

// ../sdk/ts/src/pushes.ts
function isSeq3(v) {
  return typeof v == "number" && Number.isInteger(v) && v >= 0;
}
function routePush(push, to) {
  switch (push.ev) {
    case "event":
    case "notify": {
      if (typeof push.chat != "string" || !isSeq3(push.seq) || push.seq === 0) {
        to.error(new HeraldError("protocol", `herald: a ${push.ev} push without a chat or seq`));
        return;
      }
      let chat = to.chat(push.chat);
      if (chat === void 0) return;
      push.ev === "event" ? chat.onEventPush(push) : chat.onNotify(push);
      return;
    }
    case "typing": {
      if (typeof push.chat != "string" || typeof push.user != "string") return;
      to.chat(push.chat)?.onTypingPush(push.user);
      return;
    }
    case "presence": {
      if (typeof push.chat != "string") return;
      to.chat(push.chat)?.onPresencePush(push);
      return;
    }
    case "inbox":
      to.inbox.onPush(push);
      return;
    case "append": {
      if (typeof push.chat != "string" || !isSeq3(push.target) || typeof push.text != "string" || !isSeq3(push.at)) return;
      to.chat(push.chat)?.onAppendPush(push);
      return;
    }
    default:
      return;
  }
}

// ../sdk/ts/src/requests.ts
function overLimit(s, limit) {
  return s.length * 3 <= limit ? !1 : new TextEncoder().encode(s).length > limit;
}
function isObject3(v) {
  return typeof v == "object" && v !== null && !Array.isArray(v);
}
var Requests = class {
  /**
   * @param maxFrameBytes frames over this are refused locally (`too_large`): the server would close the
   *   link with 1009, and a retried send would do that again on every link.
   * @param writeFailed called when a link refuses a frame; the client treats that link as lost.
   * @param timedOut called after a request written on `link` got no reply in time (its promise already
   *   rejected with `timeout`); the client probes that link. Not called for parked requests.
   */
  constructor(maxFrameBytes, writeFailed, timedOut = () => {
  }) {
    this.maxFrameBytes = maxFrameBytes;
    this.writeFailed = writeFailed;
    this.timedOut = timedOut;
  }
  maxFrameBytes;
  writeFailed;
  timedOut;
  /** Ids are unique per client, not per link, so a late reply from an old link can never match. */
  nextId = 1;
  pending = /* @__PURE__ */ new Map();
  parked = [];
  /** Writes `{"id", "op", ...args}` on `link`; resolves with the reply's `ok`, rejects with its `err`. */
  call(link, op, args, timeoutMs) {
    return new Promise((resolve, reject) => {
      let id = this.nextId++, text = JSON.stringify({ id, op, ...args });
      if (overLimit(text, this.maxFrameBytes)) {
        reject(new HeraldError("too_large", `herald: ${op} frame is over ${this.maxFrameBytes} bytes`, { op }));
        return;
      }
      let timer = setTimeout(() => {
        this.pending.delete(id), reject(new HeraldError("timeout", `herald: no reply to ${op} within ${timeoutMs} ms`, { op })), this.timedOut(link, op);
      }, timeoutMs);
      this.pending.set(id, { op, link, resolve, reject, timer }), link.send(text) || this.writeFailed(link);
    });
  }
  /** Parks a request until `flush` gets a greeted link, or rejects with `timeout` at `deadline`. */
  park(op, args, deadline) {
    return new Promise((resolve, reject) => this.parkEntry(op, args, deadline, resolve, reject));
  }
  /**
   * Writes the parked requests on `link`, in the order they were made, each with what is left of its
   * deadline. `isCurrent` is checked before each: a write can fail and drop the link mid-way, and the
   * rest then wait for the next link.
   */
  flush(link, isCurrent) {
    let parked = this.parked;
    this.parked = [];
    for (let p of parked) {
      if (clearTimeout(p.timer), !isCurrent()) {
        this.parkEntry(p.op, p.args, p.deadline, p.resolve, p.reject);
        continue;
      }
      this.call(link, p.op, p.args, Math.max(1, p.deadline - Date.now())).then(p.resolve, p.reject);
    }
  }
  /** Settles the request a reply answers; a reply to nothing (timed out already) is ignored. */
  settle(msg) {
    let p = this.pending.get(msg.id);
    p !== void 0 && (clearTimeout(p.timer), this.pending.delete(msg.id), msg.err !== void 0 ? p.reject(HeraldError.fromWire(isObject3(msg.err) ? msg.err : { code: "internal" }, p.op)) : p.resolve(msg.ok ?? {}));
  }
  /** Rejects every request written on `link` with `err`'s code: their outcome is unknown. */
  failLink(link, err) {
    for (let [id, p] of this.pending)
      p.link === link && (clearTimeout(p.timer), this.pending.delete(id), p.reject(new HeraldError(err.code, `${err.message} (${p.op} outcome unknown)`, { op: p.op, closeCode: err.closeCode })));
  }
  /** Rejects every parked request with `err`'s code (the client stopped or closed). */
  failParked(err) {
    let parked = this.parked;
    this.parked = [];
    for (let p of parked)
      clearTimeout(p.timer), p.reject(new HeraldError(err.code, err.message, { op: p.op, closeCode: err.closeCode }));
  }
  parkEntry(op, args, deadline, resolve, reject) {
    let p = {
      op,
      args,
      deadline,
      resolve,
      reject,
      timer: setTimeout(() => {
        this.parked = this.parked.filter((x) => x !== p), reject(new HeraldError("timeout", `herald: not connected in time for ${op}`, { op }));
      }, Math.max(0, deadline - Date.now()))
    };
    this.parked.push(p);
  }
};

// ../sdk/ts/src/token.ts
function jwtExp(token) {
  let parts = token.split(".");
  if (!(parts.length < 2))
    try {
      let payload = JSON.parse(base64UrlDecode(parts[1]));
      if (payload !== null && typeof payload == "object") {
        let exp = payload.exp;
        if (typeof exp == "number" && Number.isFinite(exp)) return exp;
      }
    } catch {
    }
}
function base64UrlDecode(s) {
  let b64 = s.replace(/-/g, "+").replace(/_/g, "/"), padded = b64 + "=".repeat((4 - b64.length % 4) % 4), binary = atob(padded), bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return new TextDecoder().decode(bytes);
}
var UnusableToken = class extends HeraldError {
  constructor(message) {
    super("token", message);
  }
};
function tokenProblem(value, given) {
  let expected = "expected the JWT string itself (`eyJ...`)", passField = "not the token: pass its `token` field";
  if (typeof value == "string") {
    let text = value.trim();
    if (text.length === 0) return `herald: ${given} an empty string; ${expected}`;
    if (text.startsWith("{")) {
      let body = parseJson(text);
      return hasToken(body) ? `herald: ${given} a JSON body ({"token": "..."}), ${passField} (\`(await res.json()).token\`, not \`res.text()\`)` : `herald: ${given} ${body === void 0 ? 'text that starts with "{"' : `a JSON body${fields(body)}`}, not a token; ${expected}`;
    }
    return text.length > 1 && text.startsWith('"') && text.endsWith('"') ? `herald: ${given} the token inside JSON quotes; ${expected}, without quotes (e.g. \`await res.json()\`, not \`res.text()\`)` : null;
  }
  return value == null ? `herald: ${given} ${String(value)}; ${expected} (or a promise of it)` : hasToken(value) ? `herald: ${given} an object with a \`token\` field, ${passField} (\`body.token\`, not \`body\`)` : Array.isArray(value) ? `herald: ${given} an array; ${expected}` : typeof value == "object" ? `herald: ${given} an object${fields(value)}; ${expected}` : `herald: ${given} a ${typeof value}; ${expected}`;
}
function parseJson(text) {
  try {
    return JSON.parse(text);
  } catch {
    return;
  }
}
function hasToken(v) {
  return typeof v == "object" && v !== null && typeof v.token == "string";
}
function fields(v) {
  if (typeof v != "object" || v === null || Array.isArray(v)) return "";
  let keys = Object.keys(v);
  return keys.length === 0 ? "" : ` (fields: ${keys.slice(0, 5).join(", ")}${keys.length > 5 ? ", ..." : ""})`;
}
var TokenSource = class {
  constructor(source, marginMs, now = () => Date.now()) {
    this.source = source;
    this.marginMs = marginMs;
    this.now = now;
    typeof source == "string" && (this.cached = source);
  }
  source;
  marginMs;
  now;
  cached;
  /** True when a rejected token can be replaced by asking the provider again. */
  get canRefresh() {
    return typeof this.source == "function";
  }
  /**
   * The token to use for the next `hello`, calling the provider when the cached one will not do. Rejects
   * with `HeraldError` code `token`: an `UnusableToken` for a value that cannot be one.
   */
  async get() {
    if (typeof this.source == "string") return this.source;
    if (this.cached !== void 0 && !this.nearExpiry(this.cached)) return this.cached;
    let token;
    try {
      token = await this.source();
    } catch (cause) {
      throw new HeraldError("token", "the token provider failed", { cause });
    }
    let problem = tokenProblem(token, "the token function returned");
    if (problem !== null) throw new UnusableToken(problem);
    return this.cached = token, token;
  }
  /** Forgets the cached token so the next `get` calls the provider (after a 4001). */
  invalidate() {
    typeof this.source == "function" && (this.cached = void 0);
  }
  nearExpiry(token) {
    let exp = jwtExp(token);
    return exp !== void 0 && exp * 1e3 - this.now() <= this.marginMs;
  }
};
function refusedTokenMessage(reason, canRefresh) {
  return `herald: ${reason.trim() === "" ? "the server refused the token without saying why" : `the server refused the token: ${reason}`} (${canRefresh ? "a fresh one from the token function was refused too, so the client stopped" : "a fixed token cannot be refreshed, so the client stopped; pass a function that fetches a fresh one"})`;
}

// ../sdk/ts/src/connection.ts
var TRANSITIONS = {
  disconnected: ["connecting", "closed"],
  connecting: ["connected", "disconnected", "closed"],
  connected: ["connecting", "disconnected", "closed"],
  closed: []
}, MAX_RECONNECT_AFTER_MS = 5 * 6e4, STABLE_CONNECTION_MS = 1e4, UNREACHABLE_AFTER = 3;
function schedule(fn, ms) {
  let t = setTimeout(fn, ms);
  return () => clearTimeout(t);
}
function isObject4(v) {
  return typeof v == "object" && v !== null && !Array.isArray(v);
}
var Connection = class {
  /**
   * @param pageSize the `limit` of the fetches chats make themselves: one per client, not per chat, since
   *   a 4008 is about this connection's outbound queue, which every chat's replies share.
   */
  constructor(s, pageSize, host) {
    this.s = s;
    this.pageSize = pageSize;
    this.host = host;
    this.ctor = resolveWebSocket(s.WebSocket), this.nodes = new Nodes(s.url, s.workspace), this.tokens = new TokenSource(s.token, s.tokenRefreshMarginMs), this.backoff = new Backoff(s.backoff, s.random), this.requests = new Requests(
      s.maxFrameBytes,
      (link) => this.lost(link, 1006, "write failed"),
      (link, op) => {
        link === this.link && op !== "ping" && op !== "hello" && this.liveness?.probe();
      }
    );
  }
  s;
  pageSize;
  host;
  ctor;
  /** The node URLs and which one the next attempt uses. */
  nodes;
  tokens;
  backoff;
  /** Request ids, replies, timeouts, and requests parked while connecting. */
  requests;
  current = "disconnected";
  /** The link of the current attempt or connection; null while waiting to reconnect or stopped. */
  link = null;
  helloOk = null;
  /** Whether the greeted link is still there; null while not connected. */
  liveness = null;
  connectedAt = 0;
  connectWaiters = [];
  /** Bumped when an attempt starts or the client stops, so a token fetched for an old attempt is dropped. */
  generation = 0;
  /** Attempts in a row whose socket never opened; reset when one opens. */
  failedOpens = 0;
  /** Set after a rejected token was replaced; a second rejection then stops the client. */
  authRetried = !1;
  /** When a `reconnect` push asked us to come back (absolute ms), until the next attempt uses it. */
  reconnectAt = null;
  cancelReconnect = null;
  cancelConnectTimeout = null;
  cancelDrain = null;
  get state() {
    return this.current;
  }
  /** The URL (as given in the options) of the current connection, or of the attempt in progress or next. */
  get url() {
    return this.nodes.url;
  }
  /** The `hello` reply of the current connection, or null. */
  get session() {
    return this.helloOk;
  }
  /** True while requests go out on a live, greeted link. */
  get isConnected() {
    return this.current === "connected" && this.link !== null;
  }
  /** See `HeraldClient.connect`. */
  connect() {
    if (this.current === "closed") return Promise.reject(new HeraldError("closed", "herald: the client is closed"));
    if (this.current === "connected" && this.helloOk !== null) return Promise.resolve(this.helloOk);
    let p = new Promise((resolve, reject) => this.connectWaiters.push({ resolve, reject }));
    return this.current === "disconnected" && (this.authRetried = !1, this.failedOpens = 0, this.backoff.reset(), this.setState("connecting"), this.startAttempt()), p;
  }
  /** See `HeraldClient.disconnect`. */
  disconnect() {
    if (this.current === "disconnected" || this.current === "closed") return;
    let err = new HeraldError("disconnected", "herald: disconnect() was called");
    this.link !== null && this.detach(this.link, "client disconnect", err), this.stop(1e3, "client disconnect", null);
  }
  /**
   * Closes for good with `err`: the link and timers go, then `shutdown` ends what the host holds, then
   * waiting callers reject, and the state becomes `closed` last.
   */
  close(err, shutdown) {
    this.current !== "closed" && (this.link !== null && this.detach(this.link, "client close", err), this.generation++, this.clearTimers(), shutdown(), this.failWaiting(err), this.setState("closed"));
  }
  /**
   * A request: written now when connected, else parked until the link is greeted. The timeout covers
   * both the wait and the reply.
   */
  request(op, args) {
    return this.current === "closed" ? Promise.reject(new HeraldError("closed", "herald: the client is closed", { op })) : this.current === "disconnected" ? Promise.reject(new HeraldError("disconnected", "herald: not connected; call connect() first", { op })) : this.isConnected ? this.requests.call(this.link, op, args, this.s.requestTimeoutMs) : this.requests.park(op, args, Date.now() + this.s.requestTimeoutMs);
  }
  /** A send for the outbox: written only on a greeted link, since the outbox keeps its own queue. */
  sendRequest(args) {
    return this.isConnected ? this.requests.call(this.link, "send", args, this.s.requestTimeoutMs) : Promise.reject(new HeraldError("disconnected", "herald: not connected", { op: "send" }));
  }
  // ---- state --------------------------------------------------------------------------------
  setState(to) {
    let from = this.current;
    if (from !== to) {
      if (!TRANSITIONS[from].includes(to)) throw new Error(`herald: no transition ${from} -> ${to}`);
      this.current = to, this.host.emit("state", { from, to });
    }
  }
  // ---- connecting ---------------------------------------------------------------------------
  async startAttempt() {
    let gen = ++this.generation, token;
    try {
      token = await this.tokens.get();
    } catch (err) {
      if (gen !== this.generation || this.current !== "connecting") return;
      if (err instanceof UnusableToken) {
        this.stop(1006, "no usable token", err);
        return;
      }
      let e = err instanceof HeraldError ? err : new HeraldError("token", String(err), { cause: err });
      this.host.emit("error", e), this.retryLater(1006, "token provider failed", this.backoff.next(), this.nodes.url);
      return;
    }
    if (gen !== this.generation || this.current !== "connecting") return;
    let link, url = this.nodes.url;
    try {
      link = new Link(this.ctor, this.nodes.endpoint, {
        onOpen: () => this.onOpen(link, token),
        onFrame: (text) => this.onFrame(link, text),
        onClose: (code, reason) => this.lost(link, code, reason)
      });
    } catch (err) {
      this.host.emit("error", new HeraldError("internal", `herald: cannot open a WebSocket: ${String(err)}`, { cause: err })), this.nodes.failed(), this.retryLater(1006, "socket failed to open", this.backoff.next(), url);
      return;
    }
    this.link = link, this.cancelConnectTimeout = schedule(() => {
      this.cancelConnectTimeout = null, this.lost(link, 1006, "connect timeout");
    }, this.s.connectTimeoutMs);
  }
  onOpen(link, token) {
    link === this.link && (this.failedOpens = 0, this.requests.call(link, "hello", { token }, this.s.connectTimeoutMs).then(
      (ok) => this.onHello(link, ok),
      (err) => {
        link === this.link && (err.code === "unauthenticated" ? this.lost(link, CloseCode.Unauthenticated, err.message) : this.lost(link, 1006, `hello failed: ${err.code}`));
      }
    ));
  }
  onHello(link, ok) {
    if (link !== this.link) return;
    this.cancelConnectTimeout?.(), this.cancelConnectTimeout = null, this.helloOk = ok, this.connectedAt = Date.now(), this.authRetried = !1, this.setState("connected"), this.host.emit("connected", ok);
    let waiters = this.connectWaiters;
    this.connectWaiters = [];
    for (let w of waiters) w.resolve(ok);
    if (link !== this.link) return;
    this.watchLiveness(link);
    let isCurrent = () => link === this.link;
    this.host.resume(isCurrent), isCurrent() && this.requests.flush(link, isCurrent);
  }
  // ---- watchdog -----------------------------------------------------------------------------
  /**
   * Browsers hide WebSocket-level pings, so a half-open TCP link (a laptop lid closed, a NAT that
   * forgot us) or a frozen server process looks healthy until the OS gives up, minutes later. The
   * client pings on its own schedule when the link is quiet and drops a link that stays silent past a
   * ping (liveness.ts): within `pingIntervalMs + pingTimeoutMs` of the server's last frame.
   */
  watchLiveness(link) {
    this.liveness?.stop(), this.liveness = new Liveness(
      {
        // The reply settles in requests.ts like any other; its absence is judged by the watcher, so
        // the promise's own timeout (the same length) is ignored.
        ping: () => {
          this.requests.call(link, "ping", {}, this.s.pingTimeoutMs).catch(() => {
          });
        },
        lost: (reason) => this.lost(link, 1006, reason),
        schedule
      },
      this.s.pingIntervalMs,
      this.s.pingTimeoutMs
    );
  }
  // ---- losing a link ------------------------------------------------------------------------
  /** Tears a link down: stop its timers, fail the requests written on it, suspend what used it. */
  detach(link, reason, err) {
    link === this.link && (this.link = null, this.helloOk = null, link.abandon(reason), this.cancelConnectTimeout?.(), this.cancelConnectTimeout = null, this.liveness?.stop(), this.liveness = null, this.cancelDrain?.(), this.cancelDrain = null, this.requests.failLink(link, err), this.host.suspend());
  }
  /** The current link closed or was found dead: apply the close code's policy. */
  lost(link, code, reason) {
    if (link !== this.link) return;
    let lived = this.current === "connected" ? Date.now() - this.connectedAt : 0, url = this.nodes.url, endpoint = this.nodes.endpoint;
    if (this.detach(link, reason, new HeraldError("disconnected", `herald: link closed (${code}${reason ? ` ${reason}` : ""})`, { closeCode: code })), this.nodes.failed(), !link.opened && ++this.failedOpens === UNREACHABLE_AFTER) {
      let message = this.nodes.unreachableMessage(UNREACHABLE_AFTER, endpoint, reason);
      this.host.emit("error", new HeraldError("unreachable", message, { closeCode: code }));
    }
    let policy = closePolicy(code);
    if (policy === "reconnect_smaller" ? this.pageSize.shrink() : lived >= STABLE_CONNECTION_MS && this.backoff.reset(), policy === "refresh_token") {
      if (!this.tokens.canRefresh || this.authRetried) {
        let err = new HeraldError("unauthenticated", refusedTokenMessage(reason, this.tokens.canRefresh), { closeCode: code });
        this.stop(code, reason, err, url);
        return;
      }
      this.authRetried = !0, this.tokens.invalidate(), this.retryLater(code, reason, this.backoff.next(), url);
      return;
    }
    let delay;
    this.reconnectAt !== null ? (delay = Math.max(0, this.reconnectAt - Date.now()), this.reconnectAt = null) : policy === "reconnect_slow" ? delay = this.s.throttledReconnectFloorMs + this.backoff.next() : delay = this.backoff.next(), this.retryLater(code, reason, delay, url);
  }
  /** Reports the end of a link or attempt (at `url`) and schedules the next attempt after `delay`. */
  retryLater(code, reason, delay, url) {
    this.host.emit("disconnected", { code, reason, reconnectInMs: delay, url }), !(this.current !== "connecting" && this.current !== "connected") && (this.setState("connecting"), this.cancelReconnect?.(), this.cancelReconnect = schedule(() => {
      this.cancelReconnect = null, this.current === "connecting" && this.startAttempt();
    }, delay));
  }
  /** Stops reconnecting: state `disconnected`, waiting callers rejected. */
  stop(code, reason, err, url = this.nodes.url) {
    this.generation++, this.clearTimers(), this.host.emit("disconnected", { code, reason, reconnectInMs: null, url }), err !== null && this.host.emit("error", err), !(this.current === "closed" || this.current === "disconnected") && (this.setState("disconnected"), this.failWaiting(err ?? new HeraldError("disconnected", `herald: disconnected (${reason})`, { closeCode: code })));
  }
  clearTimers() {
    this.cancelReconnect?.(), this.cancelReconnect = null, this.cancelConnectTimeout?.(), this.cancelConnectTimeout = null, this.liveness?.stop(), this.liveness = null, this.cancelDrain?.(), this.cancelDrain = null, this.reconnectAt = null;
  }
  failWaiting(err) {
    let waiters = this.connectWaiters;
    this.connectWaiters = [];
    for (let w of waiters) w.reject(err);
    this.requests.failParked(err);
  }
  // ---- frames from the server ---------------------------------------------------------------
  onFrame(link, text) {
    if (link !== this.link) return;
    this.liveness?.heard();
    let msg;
    try {
      msg = JSON.parse(text);
    } catch {
      this.host.emit("error", new HeraldError("protocol", "herald: the server sent a frame that is not JSON"));
      return;
    }
    if (!isObject4(msg)) {
      this.host.emit("error", new HeraldError("protocol", "herald: the server sent a frame that is not an object"));
      return;
    }
    if (typeof msg.id == "number") {
      this.requests.settle(msg);
      return;
    }
    let push = msg;
    push.ev === "reconnect" ? this.onReconnectPush(link, push) : this.host.pushed(push);
  }
  /** The server is about to close this link (draining, rebalancing) and says when to come back. */
  onReconnectPush(link, push) {
    let after = isSeq3(push.after_ms) ? Math.min(push.after_ms, MAX_RECONNECT_AFTER_MS) : 0;
    this.reconnectAt = Date.now() + after, this.cancelDrain?.(), this.cancelDrain = schedule(() => {
      this.cancelDrain = null, this.lost(link, CloseCode.GoingAway, push.reason ?? "reconnect requested");
    }, after);
  }
};

// ../sdk/ts/src/inbox.ts
var MAX_INBOX_LIMIT = 200, TRANSIENT3 = /* @__PURE__ */ new Set(["throttled", "unavailable", "timeout", "internal"]), DEFAULT_RETRY_MS3 = 1e3;
function isCount(v) {
  return typeof v == "number" && Number.isInteger(v) && v >= 0;
}
function byActivity(a, b) {
  return a.ts !== b.ts ? b.ts - a.ts : a.chat < b.chat ? -1 : a.chat > b.chat ? 1 : 0;
}
var Inbox = class extends Emitter {
  /** @internal Created by `HeraldClient`. */
  constructor(host) {
    super();
    this.host = host;
  }
  host;
  items = /* @__PURE__ */ new Map();
  wanted = !1;
  limit;
  /** True while the first page's request is out on the current link. */
  syncing = !1;
  held = [];
  cursor;
  hasMore = !1;
  epoch = 0;
  cancelRetry = null;
  waiters = [];
  /** The chats, latest activity first. */
  get entries() {
    return [...this.items.values()].sort(byActivity);
  }
  /** The entry of `chat`, if listed. */
  get(chat) {
    return this.items.get(chat);
  }
  /** Unread messages over every listed chat. */
  get unread() {
    let n = 0;
    for (let it of this.items.values()) n += it.unread;
    return n;
  }
  /** 1.2: unread thread replies over every listed chat. */
  get threads() {
    let n = 0;
    for (let it of this.items.values()) n += it.threads;
    return n;
  }
  /** 1.2: unread mentions of this user over every listed chat. */
  get mentions() {
    let n = 0;
    for (let it of this.items.values()) n += it.mentions;
    return n;
  }
  /** True when the server has chats past the pages loaded (`loadMore` gets them). */
  get more() {
    return this.hasMore;
  }
  /** True once started and until `stop`. */
  get started() {
    return this.wanted;
  }
  /**
   * Loads the first page with live updates and keeps the entries current from then on, through
   * reconnects. Resolves with the entries once the first page is in; calling it again while started
   * only waits for the current sync.
   */
  start(opts = {}) {
    if (opts.limit !== void 0 && (!Number.isInteger(opts.limit) || opts.limit < 1 || opts.limit > MAX_INBOX_LIMIT))
      return Promise.reject(new TypeError(`herald: inbox \`limit\` must be an integer from 1 to ${MAX_INBOX_LIMIT}`));
    let p = new Promise((resolve, reject) => this.waiters.push({ resolve, reject }));
    return this.wanted ? (!this.syncing && this.host.connected && this.cancelRetry === null && this.settle(), p) : (this.wanted = !0, this.limit = opts.limit, this.host.connected && this.sync(), p);
  }
  /**
   * Loads the next page (when `more`), merging it into the entries. Resolves with whether still more
   * remain. A page's entry never replaces a newer one (a higher seq) that a push already brought.
   */
  async loadMore() {
    if (!this.hasMore || this.cursor === void 0) return !1;
    let epoch = this.epoch, args = { cursor: this.cursor };
    this.limit !== void 0 && (args.limit = this.limit);
    let page = await this.host.request("inbox", args);
    return epoch !== this.epoch ? this.hasMore : (this.merge(page.chats), this.hasMore = page.more === !0, this.cursor = typeof page.cursor == "string" ? page.cursor : void 0, this.emit("change", this.entries), this.hasMore);
  }
  /**
   * Stops following: entries are dropped and later pushes ignored. The server keeps pushing on this link
   * until it closes (the protocol has no way to take `live` back); they are only ignored.
   */
  stop() {
    this.wanted && (this.wanted = !1, this.reset(), this.rejectWaiters(new HeraldError("closed", "herald: the inbox was stopped", { op: "inbox" })), this.emit("change", []));
  }
  // ---- called by the client -------------------------------------------------------------------
  /** @internal A new link is greeted: pushes come only after a new live request, so sync again. */
  linkUp() {
    this.wanted && this.sync();
  }
  /** @internal The link dropped: the entries stay on show until the next link's first page. */
  linkDown() {
    this.epoch++, this.syncing = !1, this.held = [], this.cancelTimer();
  }
  /** @internal The client is closed for good. */
  shutdown(err) {
    this.wanted = !1, this.reset(), this.rejectWaiters(err);
  }
  /** @internal An `inbox` push. */
  onPush(push) {
    if (this.wanted && typeof push.chat == "string") {
      if (this.syncing) {
        this.held.push(push);
        return;
      }
      this.applyPush(push) && this.emit("change", this.entries);
    }
  }
  // ---- internals --------------------------------------------------------------------------------
  async sync() {
    this.cancelTimer();
    let epoch = ++this.epoch;
    this.syncing = !0, this.held = [];
    let args = { live: !0 };
    this.limit !== void 0 && (args.limit = this.limit);
    let page;
    try {
      page = await this.host.request("inbox", args);
    } catch (err) {
      if (epoch !== this.epoch) return;
      this.syncing = !1;
      let e = err instanceof HeraldError ? err : new HeraldError("internal", String(err), { op: "inbox" });
      if (e.code === "disconnected" || e.code === "closed") return;
      if (TRANSIENT3.has(e.code)) {
        this.cancelRetry = this.host.schedule(() => {
          this.cancelRetry = null, this.wanted && this.host.connected && this.sync();
        }, e.retryAfterMs ?? DEFAULT_RETRY_MS3);
        return;
      }
      this.wanted = !1, this.reset(), this.emit("error", e), this.rejectWaiters(e);
      return;
    }
    if (epoch !== this.epoch) return;
    this.syncing = !1, this.items.clear(), this.merge(Array.isArray(page.chats) ? page.chats : []), this.hasMore = page.more === !0, this.cursor = typeof page.cursor == "string" ? page.cursor : void 0;
    let held = this.held;
    this.held = [];
    for (let push of held) this.applyPush(push);
    this.emit("change", this.entries), this.settle();
  }
  /** Adds or refreshes entries from a page; an entry already at a higher seq is kept. */
  merge(chats) {
    for (let c of chats) {
      let e = c;
      if (e === null || typeof e != "object" || typeof e.chat != "string" || !isCount(e.seq)) continue;
      let held = this.items.get(e.chat);
      held !== void 0 && held.seq > e.seq || this.items.set(e.chat, {
        chat: e.chat,
        seq: e.seq,
        ts: typeof e.ts == "number" ? e.ts : 0,
        unread: isCount(e.unread) ? e.unread : 0,
        threads: isCount(e.threads) ? e.threads : 0,
        mentions: isCount(e.mentions) ? e.mentions : 0,
        read: isCount(e.read) ? e.read : 0,
        last: e.last ?? null,
        ...e.profile !== null && typeof e.profile == "object" ? { profile: e.profile } : {}
      });
    }
  }
  /** Folds a push in; returns whether anything changed. */
  applyPush(push) {
    if (push.left === !0) return this.items.delete(push.chat);
    if (!isCount(push.seq) || !isCount(push.unread)) return !1;
    let held = this.items.get(push.chat), threads = isCount(push.threads) ? push.threads : held?.threads ?? 0, mentions = isCount(push.mentions) ? push.mentions : held?.mentions ?? 0;
    if (held !== void 0)
      return push.seq < held.seq || push.seq === held.seq && push.unread === held.unread && push.ts === held.ts && threads === held.threads && mentions === held.mentions ? !1 : (this.items.set(push.chat, {
        ...held,
        seq: push.seq,
        ts: typeof push.ts == "number" ? push.ts : held.ts,
        unread: push.unread,
        threads,
        mentions
      }), !0);
    let ts = typeof push.ts == "number" ? push.ts : 0;
    return this.items.set(push.chat, { chat: push.chat, seq: push.seq, ts, unread: push.unread, threads, mentions }), !0;
  }
  settle() {
    let waiters = this.waiters;
    this.waiters = [];
    let entries = this.entries;
    for (let w of waiters) w.resolve(entries);
  }
  rejectWaiters(err) {
    let waiters = this.waiters;
    this.waiters = [];
    for (let w of waiters) w.reject(err);
  }
  reset() {
    this.epoch++, this.cancelTimer(), this.items.clear(), this.held = [], this.syncing = !1, this.cursor = void 0, this.hasMore = !1;
  }
  cancelTimer() {
    this.cancelRetry?.(), this.cancelRetry = null;
  }
};

// ../sdk/ts/src/options.ts
var MAX_FETCH_LIMIT = 500, DEFAULT_FRAME_BYTES = 64 * 1024;
function resolveOptions(opts) {
  let url = urlList(opts.url);
  if (!/^[A-Za-z0-9_.:-]{1,128}$/.test(opts.workspace ?? ""))
    throw new TypeError("herald: `workspace` must be 1 to 128 characters of A-Z a-z 0-9 _ . : -");
  if (typeof opts.token != "function") {
    let given = opts.token;
    if (typeof given != "string" && (typeof given != "object" || given === null))
      throw new TypeError("herald: `token` must be a string or a function returning one");
    let problem = tokenProblem(given, "the `token` option is");
    if (problem !== null) throw new TypeError(problem);
  }
  let backoff = { ...DEFAULT_BACKOFF, ...opts.backoff }, s = {
    url,
    workspace: opts.workspace,
    token: opts.token,
    WebSocket: opts.WebSocket,
    requestTimeoutMs: positive("requestTimeoutMs", opts.requestTimeoutMs, 1e4),
    // 5 s + 5 s: a frozen node is noticed within 10 s of its last frame (it was 25 s + 10 s when the
    // client pinged on the server's heartbeat), and no live server is taken for dead on a link that is
    // merely slow. A live herald writes pushes in order while a request runs, and reads one request at a
    // time, so a ping waits at most behind a request in progress; herald bounds a stalled store write by
    // 3 s (its PostgreSQL batch timeout) before it moves on, inside the 5 s. The 10 s of silence that
    // make a link lost are as long as a request may wait for its reply (requestTimeoutMs). A ping every
    // 5 s of quiet is one small frame each way.
    pingIntervalMs: positive("pingIntervalMs", opts.pingIntervalMs, 5e3),
    pingTimeoutMs: positive("pingTimeoutMs", opts.pingTimeoutMs, 5e3),
    // TCP, TLS, the upgrade and `hello`: a few round trips, seconds on a poor mobile link, and a node
    // that just restarted greets thousands of clients at once; cutting those short would add attempts
    // to its load. A frozen node costs this only when every other node failed too (rotation, nodes.ts).
    connectTimeoutMs: positive("connectTimeoutMs", opts.connectTimeoutMs, 1e4),
    backoff: { baseMs: positive("backoff.baseMs", backoff.baseMs, 500), capMs: positive("backoff.capMs", backoff.capMs, 2e4) },
    throttledReconnectFloorMs: nonNegative("throttledReconnectFloorMs", opts.throttledReconnectFloorMs, 1e4),
    maxQueue: positive("maxQueue", opts.maxQueue, 100),
    sendRetries: nonNegative("sendRetries", opts.sendRetries, 10),
    // Long enough to ride out a reconnect (backoff tops out at 20 s) and a server restart; short enough
    // that a user learns within a minute that a message did not go, and can send it again.
    sendTimeoutMs: positive("sendTimeoutMs", opts.sendTimeoutMs, 6e4),
    tokenRefreshMarginMs: nonNegative("tokenRefreshMarginMs", opts.tokenRefreshMarginMs, 3e4),
    maxFrameBytes: positive("maxFrameBytes", opts.maxFrameBytes, DEFAULT_FRAME_BYTES),
    fetchPageSize: Math.min(positive("fetchPageSize", opts.fetchPageSize, MAX_FETCH_LIMIT), MAX_FETCH_LIMIT),
    maxBufferedEvents: positive("maxBufferedEvents", opts.maxBufferedEvents, 1e3),
    random: opts.random ?? Math.random,
    fetch: opts.fetch
  };
  if (s.backoff.capMs < s.backoff.baseMs) throw new TypeError("herald: `backoff.capMs` must be >= `backoff.baseMs`");
  return s;
}
function urlList(url) {
  if (typeof url == "string") {
    if (url.length === 0) throw new TypeError("herald: `url` is required");
    return [url];
  }
  if (!Array.isArray(url)) throw new TypeError("herald: `url` is required: a URL, or a list of them");
  if (url.length === 0) throw new TypeError("herald: `url` lists no URL");
  for (let u of url)
    if (typeof u != "string" || u.length === 0) throw new TypeError("herald: every entry of `url` must be a non-empty string");
  if (new Set(url).size !== url.length) throw new TypeError("herald: `url` lists the same URL twice");
  return [...url];
}
function positive(name, v, dflt) {
  if (v === void 0) return dflt;
  if (!Number.isFinite(v) || v <= 0) throw new TypeError(`herald: \`${name}\` must be a positive number`);
  return v;
}
function nonNegative(name, v, dflt) {
  if (v === void 0) return dflt;
  if (!Number.isFinite(v) || v < 0) throw new TypeError(`herald: \`${name}\` must be zero or more`);
  return v;
}

// ../sdk/ts/src/outbox.ts
var RETRYABLE = /* @__PURE__ */ new Set(["unavailable", "timeout", "internal"]), DEFAULT_RETRY_MS4 = 1e3, MAX_WINDOW = 32, Outbox = class {
  constructor(host, maxQueue, maxRetries, newClientId3, sendTimeoutMs) {
    this.host = host;
    this.maxQueue = maxQueue;
    this.maxRetries = maxRetries;
    this.newClientId = newClientId3;
    this.sendTimeoutMs = sendTimeoutMs;
  }
  host;
  maxQueue;
  maxRetries;
  newClientId;
  sendTimeoutMs;
  /** Entries not yet written (offline, outside the window, or after a failed try), in enqueue order. */
  waiting = [];
  /** Entries written and awaiting their reply. */
  inflight = /* @__PURE__ */ new Set();
  /** Entries sleeping until a retry timer fires, with the timer's cancel function. */
  delayed = /* @__PURE__ */ new Map();
  nextOrder = 0;
  closedWith = null;
  /** How many sends may be in flight now. */
  window = MAX_WINDOW;
  /** Set while the server asked us to wait (`throttled`); cancels the timer that lifts it. */
  cancelPause = null;
  /** Sends not yet written (the bounded part). */
  get unsentCount() {
    return this.waiting.length + this.delayed.size;
  }
  /** Every send not yet acknowledged. */
  get size() {
    return this.waiting.length + this.inflight.size + this.delayed.size;
  }
  /**
   * Queues a message. Rejects with `queue_full` when `maxQueue` sends already wait unsent: offline, that
   * bound is all that stops an application from piling up memory it cannot send. Sends in flight do not
   * count; there are at most 32 of them.
   */
  enqueue(chat, body, clientId, extra = {}) {
    return this.closedWith !== null ? Promise.reject(this.closedWith) : this.unsentCount >= this.maxQueue ? Promise.reject(
      new HeraldError("queue_full", `herald: ${this.unsentCount} sends already wait to be sent (maxQueue)`, { op: "send" })
    ) : new Promise((resolve, reject) => {
      let entry = {
        order: this.nextOrder++,
        chat,
        body,
        clientId: clientId ?? this.newClientId(),
        extra,
        retries: 0,
        resolve: (ok) => {
          entry.cancelDeadline(), resolve(ok);
        },
        reject: (err) => {
          entry.cancelDeadline(), reject(err);
        },
        cancelDeadline: () => {
        },
        expired: !1
      };
      entry.cancelDeadline = this.host.schedule(() => this.expire(entry), this.sendTimeoutMs), this.waiting.push(entry), this.flush();
    });
  }
  /**
   * The send's deadline passed: an unwritten one (waiting, or sleeping before a retry) rejects with
   * `timeout` now and is never written; one in flight is left to its reply.
   */
  expire(entry) {
    let err = new HeraldError(
      "timeout",
      `herald: send not stored within ${this.sendTimeoutMs} ms (sendTimeoutMs)${this.host.connected ? "" : "; the client is not connected"}`,
      { op: "send" }
    ), waitingAt = this.waiting.indexOf(entry);
    if (waitingAt >= 0) {
      this.waiting.splice(waitingAt, 1), entry.reject(err);
      return;
    }
    let cancelRetry = this.delayed.get(entry);
    if (cancelRetry !== void 0) {
      cancelRetry(), this.delayed.delete(entry), entry.reject(err), this.flush();
      return;
    }
    this.inflight.has(entry) && (entry.expired = !0);
  }
  /**
   * Writes waiting sends, in order, while the link is up, the window has room and no throttle holds. A send
   * to a chat with an earlier send sleeping before its retry stays back: written now, it would be stored
   * before that one (the server holds back sends written behind a refused one, but only until the refused
   * one comes again, and this one would come first).
   */
  flush() {
    let asleep = /* @__PURE__ */ new Map();
    for (let e of this.delayed.keys()) asleep.set(e.chat, Math.min(e.order, asleep.get(e.chat) ?? e.order));
    let i = 0;
    for (; this.host.connected && this.cancelPause === null && this.inflight.size < this.window && i < this.waiting.length; ) {
      let entry = this.waiting[i];
      if ((asleep.get(entry.chat) ?? 1 / 0) < entry.order) {
        i++;
        continue;
      }
      this.waiting.splice(i, 1), this.dispatch(entry);
    }
  }
  /** Rejects everything with `err` and refuses further sends (the client was closed). */
  close(err) {
    this.closedWith = err, this.cancelPause?.(), this.cancelPause = null;
    let all = [...this.waiting, ...this.delayed.keys()];
    for (let cancel of this.delayed.values()) cancel();
    this.waiting = [], this.delayed.clear();
    for (let e of all) e.reject(err);
  }
  dispatch(entry) {
    this.inflight.add(entry), this.host.sendRequest({ chat: entry.chat, body: entry.body, client_id: entry.clientId, ...entry.extra }).then(
      (ok) => {
        this.inflight.delete(entry), this.window = Math.min(MAX_WINDOW, this.window + 1), entry.resolve(ok), this.flush();
      },
      (err) => {
        this.inflight.delete(entry), this.failed(entry, err), this.flush();
      }
    );
  }
  failed(entry, err) {
    let e = err instanceof HeraldError ? err : new HeraldError("internal", String(err), { op: "send" });
    if (this.closedWith !== null) {
      entry.reject(this.closedWith);
      return;
    }
    if (entry.expired) {
      let unknown = e.code === "disconnected" || e.code === "timeout";
      entry.reject(
        unknown ? new HeraldError("timeout", `herald: send not stored within ${this.sendTimeoutMs} ms (sendTimeoutMs); its last try's outcome is unknown`, { op: "send" }) : e
      );
      return;
    }
    if (e.code === "disconnected") {
      this.requeue(entry);
      return;
    }
    if (e.code === "throttled") {
      this.cancelPause === null && (this.window = Math.max(1, Math.floor(this.window / 2))), this.requeue(entry), this.pause(e.retryAfterMs ?? DEFAULT_RETRY_MS4);
      return;
    }
    if (RETRYABLE.has(e.code) && entry.retries < this.maxRetries) {
      entry.retries++;
      let cancel = this.host.schedule(() => {
        this.delayed.delete(entry), this.requeue(entry), this.flush();
      }, e.retryAfterMs ?? DEFAULT_RETRY_MS4);
      this.delayed.set(entry, cancel);
      return;
    }
    entry.reject(e);
  }
  /** Stops writing for `ms` (a later throttle may extend it). */
  pause(ms) {
    this.cancelPause?.(), this.cancelPause = this.host.schedule(() => {
      this.cancelPause = null, this.flush();
    }, ms);
  }
  /** Puts an entry back at its original place among the waiting ones. */
  requeue(entry) {
    let i = this.waiting.length;
    for (; i > 0 && this.waiting[i - 1].order > entry.order; ) i--;
    this.waiting.splice(i, 0, entry);
  }
};
function newClientId(random = Math.random) {
  let bytes = new Uint8Array(16), c = globalThis.crypto;
  if (c?.getRandomValues !== void 0)
    c.getRandomValues(bytes);
  else
    for (let i = 0; i < bytes.length; i++) bytes[i] = Math.floor(random() * 256);
  let hex = "";
  for (let b of bytes) hex += b.toString(16).padStart(2, "0");
  return `c-${hex}`;
}

// ../sdk/ts/src/page-size.ts
var PageSize = class {
  /**
   * @param max the configured page size (`fetchPageSize`), which is also where growth stops.
   * @param now the clock, in milliseconds.
   */
  constructor(max, now = Date.now) {
    this.max = max;
    this.now = now;
    this.size = max;
  }
  max;
  now;
  size;
  /** When the size last changed (shrunk or grew); growth waits `GROW_INTERVAL_MS` after it. */
  changedAt = Number.NEGATIVE_INFINITY;
  /** The `limit` to ask for now. */
  get current() {
    return this.size;
  }
  /** The connection was closed as a slow consumer: ask for half as much, down to the floor. */
  shrink() {
    let floor = Math.min(10, this.max);
    this.size = Math.max(floor, Math.floor(this.size / 2)), this.changedAt = this.now();
  }
  /** A fetch of the current size came back: grow one step, if the last change is old enough. */
  grow() {
    if (this.size >= this.max) return;
    let now = this.now();
    now - this.changedAt < 1e4 || (this.size = Math.min(this.max, this.size + Math.max(1, Math.ceil(this.size * 0.25))), this.changedAt = now);
  }
};

// ../sdk/ts/src/client.ts
var ID_PATTERN = /^[A-Za-z0-9_.:-]{1,128}$/, HeraldClient = class extends Emitter {
  s;
  /** The link, its state machine and reconnects, the requests on it. */
  conn;
  /**
   * The `limit` of the fetches chats make themselves. One per client, not per chat: a 4008 is about this
   * connection's outbound queue, which every chat's replies share.
   */
  pageSize;
  outbox;
  chats = /* @__PURE__ */ new Map();
  chatHost;
  inboxState;
  /** Validates the options; throws `TypeError` for unusable ones (no WebSocket, bad workspace, ...). */
  constructor(options) {
    super(), this.s = resolveOptions(options), this.pageSize = new PageSize(this.s.fetchPageSize), this.conn = new Connection(this.s, this.pageSize, {
      emit: (name, payload) => this.emit(name, payload),
      resume: (isCurrent) => this.linkUp(isCurrent),
      suspend: () => this.linkDown(),
      pushed: (push) => routePush(push, {
        chat: (id) => this.chats.get(id),
        inbox: this.inboxState,
        error: (err) => this.emit("error", err)
      })
    });
    let conn = this.conn;
    this.outbox = new Outbox(
      {
        get connected() {
          return conn.isConnected;
        },
        sendRequest: (args) => conn.sendRequest(args),
        schedule
      },
      this.s.maxQueue,
      this.s.sendRetries,
      () => newClientId(this.s.random),
      this.s.sendTimeoutMs
    ), this.chatHost = {
      get connected() {
        return conn.isConnected;
      },
      request: (op, args) => conn.request(op, args),
      send: (chat, body, clientId, extra) => this.outbox.enqueue(chat, body, clientId, extra),
      delivered: (ev) => this.emit("event", ev),
      schedule,
      pageSize: this.pageSize,
      maxBufferedEvents: this.s.maxBufferedEvents,
      get user() {
        return conn.session?.user ?? null;
      },
      fetch: this.s.fetch
    }, this.inboxState = new Inbox({
      get connected() {
        return conn.isConnected;
      },
      request: (op, args) => conn.request(op, args),
      schedule
    });
  }
  /** The current state. */
  get state() {
    return this.conn.state;
  }
  /**
   * The URL (as given in the options) of the current connection, or of the attempt in progress or next:
   * with several URLs, which node the client is on. Changes after a lost link or a failed attempt.
   */
  get url() {
    return this.conn.url;
  }
  /** The `hello` reply of the current connection (user, node, session, heartbeat), or null. */
  get session() {
    return this.conn.session;
  }
  /**
   * This user's inbox: chats with unread counts, latest activity first. `start()` it to load it and keep
   * it live through reconnects. One per client.
   */
  get inbox() {
    return this.inboxState;
  }
  /**
   * The bare `inbox` request: one page of this user's chats (`limit` default 50, at most 200; `cursor`
   * from the previous page). With `live: true` this connection also gets `inbox` pushes until it closes,
   * which only `client.inbox` reads; prefer it.
   */
  fetchInbox(args = {}) {
    return this.conn.request("inbox", args);
  }
  /**
   * 1.2: the threads this user follows, latest reply first: in one chat (`chat`) or in all of theirs.
   * `limit` defaults to 20, at most 100; `cursor` from the previous page when it said `more`. Each entry
   * has the root and latest reply as `fetch` shows them, and this user's `read` and `unread` in it.
   */
  threads(args = {}) {
    return this.conn.request("threads", args);
  }
  /**
   * 1.2: one page of the messages matching `query`, newest first, each a `message` event as `fetch`
   * shows it with its `chat`: in every chat this user is a member of now, or in `chat` alone. Each
   * whitespace-separated term must occur somewhere in a word of the message's text, case folded (`서버`
   * finds `서버가`). `limit` defaults to 20, at most 100; pass the reply's `cursor` while `more`.
   * Throws `TypeError` for an empty query or one over 200 characters.
   */
  search(query, opts = {}) {
    return this.conn.request("search", searchArgs(query, opts));
  }
  /**
   * 1.2: every result of `query`, newest first, fetched page by page as the loop asks (`limit` per
   * page), up to `max` results. A failed page ends the loop with its `HeraldError`.
   *
   *     for await (const hit of client.searchAll('invoice', { max: 200 })) show(hit.chat, hit);
   */
  searchAll(query, opts = {}) {
    return searchPages((args) => this.conn.request("search", args), query, opts);
  }
  /** Sends not yet acknowledged (waiting, written or sleeping before a retry). */
  get unacknowledgedSends() {
    return this.outbox.size;
  }
  /**
   * Starts connecting (if not already) and resolves once connected. It keeps retrying with backoff
   * through failures; it rejects only when the client stops: a token refused again after a refresh, or a
   * fixed token refused (`unauthenticated`, its message the server's reason), a token function that
   * gives no usable token (`token`: nothing, a non-string, or a JSON body instead of its `token` field),
   * `disconnect()` or `close()`. When three attempts in a row fail before a socket opens (a wrong `url`,
   * or the server is down), an `error` event with code `unreachable` says what to check, and the
   * attempts go on.
   */
  connect() {
    return this.conn.connect();
  }
  /**
   * Drops the link and stops reconnecting. Watches and unsent messages are kept and resume on the next
   * `connect()`; requests waiting for the link reject with `disconnected`.
   */
  disconnect() {
    this.conn.disconnect();
  }
  /** Closes the client for good: every pending promise rejects with `closed`, timers stop. */
  close() {
    if (this.conn.state === "closed") return;
    let err = new HeraldError("closed", "herald: the client was closed");
    this.conn.close(err, () => {
      this.outbox.close(err);
      for (let chat of this.chats.values()) chat.shutdown(err);
      this.inboxState.shutdown(err);
    });
  }
  /**
   * The handle of chat `id`; the same object for the same id, so its listeners and watch survive
   * reconnects. Handles are kept for the client's lifetime and hold no buffers unless watched.
   */
  chat(id) {
    if (!ID_PATTERN.test(id)) throw new TypeError("herald: chat ids are 1 to 128 characters of A-Z a-z 0-9 _ . : -");
    let chat = this.chats.get(id);
    return chat === void 0 && (chat = new Chat(id, this.chatHost), this.chats.set(id, chat)), chat;
  }
  // ---- links coming and going --------------------------------------------------------------
  /** A greeted link: watches first (so resumed history arrives early), then sends, then the inbox. */
  linkUp(isCurrent) {
    for (let chat of this.chats.values()) {
      if (!isCurrent()) return;
      chat.linkUp();
    }
    this.outbox.flush(), isCurrent() && this.inboxState.linkUp();
  }
  /** The link is gone: watched chats keep their place and wait; the inbox's live pushes ended with it. */
  linkDown() {
    for (let chat of this.chats.values()) chat.linkDown();
    this.inboxState.linkDown();
  }
};

// src/files.ts
var INLINE_IMAGE_TYPES = /* @__PURE__ */ new Set(["image/png", "image/jpeg", "image/gif", "image/webp"]);
function sizeText(size) {
  return size < 1024 ? `${size} B` : size < 1024 * 1024 ? `${(size / 1024).toFixed(1)} KB` : `${(size / (1024 * 1024)).toFixed(1)} MB`;
}
function safeUrl(url) {
  try {
    let u = new URL(url, location.href);
    return u.protocol === "http:" || u.protocol === "https:";
  } catch {
    return !1;
  }
}
function filesKey(files) {
  return (files ?? []).map((f) => `${f.id} ${f.url}`).join(`
`);
}
function drawFiles(el2, files, loaded) {
  let items = (files ?? []).filter((f) => safeUrl(f.url)).map((f) => fileElement(f, loaded));
  el2.replaceChildren(...items), el2.hidden = items.length === 0;
}
function fileElement(f, loaded) {
  let a = document.createElement("a");
  if (a.href = f.url, a.dataset.fileId = f.id, a.title = `${f.name} (${sizeText(f.size)})`, INLINE_IMAGE_TYPES.has(f.type.split(";")[0].trim().toLowerCase())) {
    a.className = "file-image", a.target = "_blank", a.rel = "noopener";
    let img = document.createElement("img");
    return img.addEventListener("load", loaded, { once: !0 }), img.src = f.url, img.alt = f.name, a.append(img), a;
  }
  a.className = "file-link", a.download = f.name;
  let name = document.createElement("span");
  name.className = "file-name", name.textContent = f.name;
  let size = document.createElement("span");
  return size.className = "file-size", size.textContent = sizeText(f.size), a.append(name, size), a;
}

// src/attachments.ts
var MAX_FILES = 10, Attachments = class {
  constructor(els, upload, notice2) {
    this.els = els;
    this.upload = upload;
    this.notice = notice2;
    els.list.replaceChildren(), els.list.hidden = !0, els.button.disabled = !1, els.button.onclick = () => els.input.click(), els.input.value = "", els.input.onchange = () => {
      this.add([...els.input.files ?? []]), els.input.value = "";
    };
    let zone = els.dropZone;
    zone.ondragover = (e) => {
      e.dataTransfer?.types.includes("Files") && (e.preventDefault(), e.dataTransfer.dropEffect = "copy", zone.classList.add("dropping"));
    }, zone.ondragleave = (e) => {
      (e.relatedTarget === null || !zone.contains(e.relatedTarget)) && zone.classList.remove("dropping");
    }, zone.ondrop = (e) => {
      zone.classList.remove("dropping");
      let files = [...e.dataTransfer?.files ?? []];
      files.length !== 0 && (e.preventDefault(), this.add(files));
    };
  }
  els;
  upload;
  notice;
  items = [];
  /** How many files will go with the next message (uploading or ready). */
  get count() {
    return this.items.length;
  }
  /** Starts uploading `files`, each as a chip; beyond MAX_FILES for one message, says so. */
  add(files) {
    let room = MAX_FILES - this.items.length;
    files.length > room && this.notice(`a message carries at most ${MAX_FILES} files`);
    for (let file of files.slice(0, Math.max(0, room))) this.items.push(this.start(file));
    this.els.list.hidden = this.items.length === 0;
  }
  /**
   * The chips' files for a send: waits for their uploads, empties the list, and resolves with the ids
   * of those uploaded (a failed one was already told in the notice).
   */
  async take() {
    let items = this.items;
    this.items = [], this.els.list.hidden = !0;
    for (let item of items) item.li.remove();
    return (await Promise.all(items.map((i) => i.removed ? null : i.done))).filter((id) => id !== null);
  }
  start(file) {
    let li = document.createElement("li");
    li.dataset.name = file.name, li.dataset.state = "uploading";
    let name = document.createElement("span");
    name.className = "name", name.textContent = file.name;
    let status = document.createElement("span");
    status.className = "status", status.textContent = "uploading…";
    let remove = document.createElement("button");
    remove.type = "button", remove.className = "link", remove.textContent = "✕", remove.setAttribute("aria-label", `remove ${file.name}`), li.append(name, status, remove), this.els.list.append(li);
    let item = { li, removed: !1, done: Promise.resolve(null) };
    return remove.onclick = () => {
      item.removed = !0, this.items = this.items.filter((i) => i !== item), li.remove(), this.els.list.hidden = this.items.length === 0;
    }, item.done = this.upload(file, (sent, total) => {
      total > 0 && sent < total && (status.textContent = `uploading… ${Math.floor(sent / total * 100)}%`);
    }).then(
      ({ id }) => (li.dataset.state = "ready", status.textContent = sizeText(file.size), id),
      (e) => (li.dataset.state = "failed", status.textContent = "failed", this.notice(`upload of ${file.name} failed: ${e instanceof Error ? e.message : String(e)}`), null)
    ), item;
  }
};

// src/dev.ts
async function devToken(workspace, user) {
  let res = await fetch("/v1/dev/token", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ workspace, user })
  });
  if (!res.ok) throw new Error(`dev token refused: HTTP ${res.status} ${await res.text()}`);
  let { token } = await res.json();
  if (typeof token != "string") throw new Error("dev token: the answer has no token");
  return token;
}
function wsUrl() {
  return `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/v1/ws`;
}
function newClientId2() {
  if (typeof crypto.randomUUID == "function") return `demo-${crypto.randomUUID()}`;
  let bytes = crypto.getRandomValues(new Uint8Array(16));
  return `demo-${Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}

// src/chats.ts
var ChatList = class {
  constructor(el2, open) {
    this.el = el2;
    this.open = open;
    el2.replaceChildren();
  }
  el;
  open;
  /** chat -> its name (null: none set), from profiles newer than the inbox page's. */
  names = /* @__PURE__ */ new Map();
  items = [];
  current = "";
  /** The name `chat` goes by on the page: its profile's name, else its id. */
  nameOf(chat) {
    let known = this.names.get(chat);
    return known !== void 0 ? known ?? chat : this.items.find((i) => i.chat === chat)?.profile?.name ?? chat;
  }
  /** A newer profile name of `chat` (the open one's, from its profile events); null: none set. */
  setName(chat, name) {
    this.names.set(chat, name), this.redraw();
  }
  /** Redraws the list: `items` as the inbox orders them, `current` marked. */
  draw(items, current) {
    this.items = items, this.current = current, this.redraw();
  }
  redraw() {
    let rows = this.items.map((item) => {
      let li = document.createElement("li");
      li.dataset.chat = item.chat, item.chat === this.current && li.setAttribute("aria-current", "true");
      let name = document.createElement("button");
      name.type = "button", name.className = "chat-name", name.textContent = this.nameOf(item.chat), name.textContent !== item.chat && (name.dataset.nameSet = "true"), name.title = item.chat, name.addEventListener("click", () => this.open(item.chat));
      let mentions = badge("mentions", `@${item.mentions}`, item.mentions, `${item.mentions} mention${item.mentions === 1 ? "" : "s"} of you`);
      mentions.dataset.mentions = String(item.mentions);
      let unread = badge("unread", String(item.unread), item.unread, `${item.unread} unread`);
      unread.dataset.unread = String(item.unread);
      let threads = badge("threads", `↳${item.threads}`, item.threads, `${item.threads} new repl${item.threads === 1 ? "y" : "ies"} in threads you follow`);
      return threads.dataset.threads = String(item.threads), li.append(name, mentions, unread, threads), li;
    });
    this.el.replaceChildren(...rows);
  }
};
function badge(className, text, n, title) {
  let b = document.createElement("span");
  return b.className = className, b.textContent = text, b.hidden = n === 0, b.title = title, b;
}

// src/text.ts
var MENTION = /(?:^|[\s(])@([A-Za-z0-9_.:@+-]*[A-Za-z0-9_@+-])/g;
function mentionsIn(text) {
  let users = [];
  for (let m of text.matchAll(MENTION)) {
    let user = m[1];
    user.length <= 128 && !users.includes(user) && users.push(user);
  }
  return users.slice(0, 50);
}
function messageText(body) {
  return typeof body == "object" && body !== null && typeof body.text == "string" ? body.text : JSON.stringify(body);
}
function escape(s) {
  return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}
function drawText(el2, text, mentions, me) {
  if (mentions === void 0 || mentions.length === 0) {
    el2.textContent = text;
    return;
  }
  let names = [...mentions].sort((a, b) => b.length - a.length).map(escape), re = new RegExp(`@(${names.join("|")})(?![A-Za-z0-9_@+-])`, "g"), parts = [], at = 0;
  for (let m of text.matchAll(re)) {
    parts.push(document.createTextNode(text.slice(at, m.index)));
    let mark = document.createElement("mark");
    mark.className = m[1] === me ? "mention me" : "mention", mark.dataset.user = m[1], mark.textContent = m[0], parts.push(mark), at = m.index + m[0].length;
  }
  parts.push(document.createTextNode(text.slice(at))), el2.replaceChildren(...parts);
}

// src/panels.ts
var MEMBERS_PAGE = 50;
function toggle(panel, show) {
  if (show) for (let p of document.querySelectorAll(".panel")) p.hidden = !0;
  panel.hidden = !show;
}
var MembersPanel = class {
  constructor(els, me, page, failed2) {
    this.els = els;
    this.me = me;
    this.page = page;
    this.failed = failed2;
    els.list.replaceChildren(), els.more.hidden = !0, els.more.onclick = () => {
      this.load(this.cursor);
    }, toggle(els.panel, !1);
  }
  els;
  me;
  page;
  failed;
  cursor;
  loading = !1;
  /** Opens the panel with the first page, fresh; closes it if open. */
  toggle() {
    if (!this.els.panel.hidden) {
      toggle(this.els.panel, !1);
      return;
    }
    this.els.list.replaceChildren(), toggle(this.els.panel, !0), this.load(void 0);
  }
  async load(cursor) {
    if (!this.loading) {
      this.loading = !0;
      try {
        let ok = await this.page(cursor), items = ok.members.map(({ user }) => {
          let li = document.createElement("li");
          li.dataset.user = user;
          let name = document.createElement("span");
          if (name.textContent = user, li.append(name), user === this.me) {
            let you = document.createElement("span");
            you.className = "label", you.textContent = "you", li.append(you);
          }
          return li;
        });
        this.els.list.append(...items), this.cursor = ok.more ? ok.cursor : void 0, this.els.more.hidden = this.cursor === void 0;
      } catch (e) {
        this.failed(e);
      } finally {
        this.loading = !1;
      }
    }
  }
}, PinsPanel = class {
  constructor(els, pins, reveal, failed2) {
    this.els = els;
    this.pins = pins;
    this.reveal = reveal;
    this.failed = failed2;
    els.list.replaceChildren(), this.drawCount(0), toggle(els.panel, !1);
  }
  els;
  pins;
  reveal;
  failed;
  timer = null;
  toggle() {
    toggle(this.els.panel, this.els.panel.hidden), this.els.panel.hidden || this.refresh();
  }
  /** Asks for the pins again soon: a burst of pin events costs one request. */
  refresh() {
    this.timer === null && (this.timer = setTimeout(() => {
      this.timer = null, this.pins().then((ok) => this.draw(ok), this.failed);
    }, 100));
  }
  stop() {
    this.timer !== null && clearTimeout(this.timer), this.timer = null;
  }
  draw({ pins }) {
    this.drawCount(pins.length);
    let items = pins.map(({ message, user }) => {
      let li = document.createElement("li");
      li.dataset.seq = String(message.seq);
      let who = document.createElement("span");
      who.className = "who", who.textContent = message.user ?? "system";
      let text = document.createElement("span");
      return text.className = "text", text.textContent = messageText(message.body), li.append(who, text), li.title = `pinned by ${user}`, li.addEventListener("click", () => {
        toggle(this.els.panel, !1), this.reveal(message.seq);
      }), li;
    });
    this.els.list.replaceChildren(...items);
  }
  drawCount(n) {
    this.els.count.dataset.count = String(n), this.els.count.textContent = String(n);
  }
};

// src/search.ts
var SNIPPET_LEAD = 30, SNIPPET_CHARS = 140, SearchPanel = class {
  constructor(els, calls) {
    this.els = els;
    this.calls = calls;
    els.more.onclick = () => {
      this.load(this.generation);
    };
  }
  els;
  calls;
  query = "";
  cursor;
  shown = 0;
  /** Bumped by every new search, so a late page of an older one is dropped. */
  generation = 0;
  /** Searches `query` afresh and opens the panel (hiding the others). */
  run(query) {
    this.query = query, this.cursor = void 0, this.shown = 0, this.generation++;
    for (let p of document.querySelectorAll(".panel")) p.hidden = !0;
    this.els.panel.hidden = !1, this.els.list.replaceChildren(), this.els.more.hidden = !0, this.els.status.textContent = "searching…", this.load(this.generation);
  }
  close() {
    this.els.panel.hidden = !0;
  }
  async load(generation) {
    let page;
    try {
      page = await this.calls.search(this.query, this.cursor);
    } catch (e) {
      generation === this.generation && (this.els.status.textContent = `search failed: ${e instanceof Error ? e.message : String(e)}`);
      return;
    }
    generation === this.generation && (this.els.list.append(...page.results.map((r) => this.item(r))), this.shown += page.results.length, this.cursor = page.more ? page.cursor : void 0, this.els.more.hidden = this.cursor === void 0, this.els.status.textContent = this.shown === 0 ? "no messages" : `${this.shown}${this.cursor !== void 0 ? "+" : ""} message${this.shown === 1 ? "" : "s"}`);
  }
  item(r) {
    let li = document.createElement("li");
    li.dataset.chat = r.chat, li.dataset.seq = String(r.seq), li.tabIndex = 0;
    let head = document.createElement("div");
    head.className = "head";
    let chat = span("chat", this.calls.nameOf(r.chat)), who = span("who", r.user ?? "system"), time = document.createElement("time");
    time.dateTime = new Date(r.ts).toISOString(), time.textContent = new Date(r.ts).toLocaleString(), head.append(chat, who, time);
    let snippet = span("snippet", "");
    drawSnippet(snippet, messageText(r.body), this.query.split(/\s+/).filter((t) => t !== "")), li.append(head, snippet);
    let open = () => this.calls.open(r);
    return li.addEventListener("click", open), li.addEventListener("keydown", (e) => {
      e.key === "Enter" && open();
    }), li;
  }
};
function drawSnippet(el2, text, terms) {
  let lower = text.toLowerCase(), wanted = terms.map((t) => t.toLowerCase()).filter((t) => t !== ""), first = Math.min(...wanted.map((t) => lower.indexOf(t)).filter((i) => i >= 0), text.length), start = first > SNIPPET_LEAD ? first - SNIPPET_LEAD : 0, end = Math.min(text.length, start + SNIPPET_CHARS), parts = [];
  start > 0 && parts.push(document.createTextNode("…"));
  let at = start;
  for (; at < end; ) {
    let hit = -1, len = 0;
    for (let t of wanted) {
      let i = lower.indexOf(t, at);
      i >= 0 && i < end && (hit < 0 || i < hit || i === hit && t.length > len) && (hit = i, len = t.length);
    }
    if (hit < 0) {
      parts.push(document.createTextNode(text.slice(at, end)));
      break;
    }
    hit > at && parts.push(document.createTextNode(text.slice(at, hit)));
    let mark = document.createElement("mark");
    mark.textContent = text.slice(hit, Math.min(hit + len, end)), parts.push(mark), at = hit + len;
  }
  end < text.length && parts.push(document.createTextNode("…")), el2.replaceChildren(...parts);
}
function span(className, text) {
  let s = document.createElement("span");
  return s.className = className, s.textContent = text, s;
}

// src/row.ts
var REACTIONS = [
  // Plain symbols rather than emoji pictures, so they draw with the fonts every system has.
  { emoji: "+1", label: "+1" },
  { emoji: "heart", label: "♥" },
  { emoji: "star", label: "★" }
];
function el(tag, className, text = "") {
  let e = document.createElement(tag);
  return e.className = className, e.textContent = text, e;
}
function button(className, text, onClick) {
  let b = el("button", className, text);
  return b.type = "button", b.addEventListener("click", onClick), b;
}
var MessageRow = class {
  constructor(message, ctx) {
    this.ctx = ctx;
    this.message = message;
    let user = message.user ?? "system", li = el("li", message.type === "system" ? "msg system" : user === ctx.me ? "msg mine" : "msg");
    li.dataset.seq = String(message.seq), li.dataset.user = user, message.client_id !== void 0 && (li.dataset.clientId = message.client_id);
    let head = el("div", "head"), time = el("time", "");
    time.dateTime = new Date(message.ts).toISOString(), time.textContent = new Date(message.ts).toLocaleTimeString(), this.pinnedEl = el("span", "pinned-mark", "Pinned"), head.append(el("span", "who", user), time, this.pinnedEl, el("span", "seq detail", `#${message.seq}`)), this.quoteEl = el("span", "quote"), this.textEl = el("span", "text"), this.writingEl = el("span", "writing", "writing…"), this.filesEl = el("div", "files");
    let foot = el("div", "foot");
    this.reactionsEl = el("span", "reactions"), this.threadEl = el("span", "thread-links"), this.pinEl = el("span", "pin-links"), this.readsEl = el("span", "reads"), this.ownEl = el("span", "own"), foot.append(this.reactionsEl, this.threadEl, this.pinEl, this.readsEl, this.ownEl), li.append(head, this.quoteEl, this.textEl, this.filesEl, this.writingEl, foot), this.el = li, this.draw(message, "added");
  }
  ctx;
  el;
  /** Where the view draws "read by ..."; empty in a thread. */
  readsEl;
  pinnedEl;
  quoteEl;
  textEl;
  writingEl;
  filesEl;
  /** What `filesEl` shows, so that a redraw for a reaction does not reload the images. */
  filesShown = null;
  reactionsEl;
  threadEl;
  pinEl;
  ownEl;
  message;
  get seq() {
    return this.message.seq;
  }
  get user() {
    return this.message.user ?? "system";
  }
  /** Redraws from the message's latest state; `kind` is the list's change (an edit closes the edit form). */
  draw(message, kind) {
    this.message = message;
    let { el: li, ctx } = this;
    (kind === "edited" || kind === "deleted") && li.querySelector("form.edit-form")?.remove();
    let editing = li.querySelector("form.edit-form") !== null;
    this.textEl.hidden = editing, message.deleted ? (li.dataset.deleted = "true", this.textEl.textContent = "message deleted") : drawText(this.textEl, messageText(message.body), message.mentions, ctx.me), message.edited !== void 0 && !message.deleted && message.stream === void 0 ? (li.dataset.edited = String(message.edited), this.textEl.dataset.mark = "edited") : (delete li.dataset.edited, delete this.textEl.dataset.mark);
    let files = message.deleted ? void 0 : message.files;
    filesKey(files) !== this.filesShown && (this.filesShown = filesKey(files), drawFiles(this.filesEl, files, () => ctx.imageLoaded?.())), message.stream !== void 0 && (li.dataset.stream = message.stream), this.writingEl.hidden = message.stream !== "open" || message.deleted;
    let quoted = message.quote === void 0 ? void 0 : ctx.lookup(message.quote);
    this.quoteEl.hidden = message.quote === void 0, message.quote !== void 0 && (this.quoteEl.dataset.quote = String(message.quote), this.quoteEl.textContent = quoted === void 0 ? "an earlier message" : `${quoted.user ?? "system"}: ${quoted.deleted ? "message deleted" : messageText(quoted.body)}`), message.pinned ? li.dataset.pinned = "true" : delete li.dataset.pinned, this.pinnedEl.hidden = !message.pinned, this.drawReactions(), this.drawThread();
    let canAct = message.type === "message" && !message.deleted;
    if (canAct) {
      let pin = button("pin", message.pinned ? "Unpin" : "Pin", () => ctx.actions.pin(message.seq, !message.pinned));
      pin.setAttribute("aria-pressed", String(message.pinned)), this.pinEl.replaceChildren(pin, button("quote-it", "Quote", () => ctx.actions.quote(message.seq)));
    } else
      this.pinEl.replaceChildren();
    let own = canAct && message.user === ctx.me && message.stream !== "open";
    this.ownEl.replaceChildren(
      ...own ? [button("edit", "Edit", () => this.startEdit()), button("delete", "Delete", () => ctx.actions.delete(message.seq))] : []
    );
  }
  /** The offered reactions always, then any other emoji someone used, each with the list's count. */
  drawReactions() {
    let { message, ctx } = this;
    if (message.deleted) {
      this.reactionsEl.replaceChildren();
      return;
    }
    let counts2 = message.reactions ?? {}, mine = ctx.myReactions(message.seq), emojis = REACTIONS.map((r) => r.emoji);
    for (let e of Object.keys(counts2)) emojis.includes(e) || emojis.push(e);
    let buttons = emojis.map((emoji) => {
      let count = counts2[emoji] ?? 0, on = mine.has(emoji), label = REACTIONS.find((r) => r.emoji === emoji)?.label ?? emoji, b = button("react", count > 0 ? `${label} ${count}` : label, () => ctx.actions.react(message.seq, emoji, !on));
      return b.dataset.emoji = emoji, b.dataset.count = String(count), b.setAttribute("aria-pressed", String(on)), b.title = count === 1 ? "1 person" : count > 1 ? `${count} people` : `react with ${label}`, b;
    });
    this.reactionsEl.replaceChildren(...buttons);
  }
  /** In the chat: "N replies" (opens the thread) or a Reply button that starts one. */
  drawThread() {
    let { message, ctx } = this;
    if (ctx.inThread || message.type !== "message" || message.thread !== void 0) {
      this.threadEl.replaceChildren();
      return;
    }
    let count = message.replies?.count ?? 0, parts = [];
    if (count > 0) {
      let b = button("replies", count === 1 ? "1 reply" : `${count} replies`, () => ctx.actions.openThread(message.seq));
      b.dataset.replies = String(count), parts.push(b);
    }
    message.deleted || parts.push(button("reply", "Reply", () => ctx.actions.openThread(message.seq))), this.threadEl.replaceChildren(...parts);
  }
  /** Swaps the text for a one-line form; Enter saves through the actions, Escape gives up. */
  startEdit() {
    if (this.el.querySelector("form.edit-form") !== null) return;
    let form = el("form", "edit-form"), input = el("input", "edit-text");
    input.value = messageText(this.message.body), input.maxLength = 4e3, form.append(input);
    let close = () => {
      form.remove(), this.textEl.hidden = !1;
    };
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      let text = input.value.trim(), before = messageText(this.message.body);
      close(), text !== "" && text !== before && this.ctx.actions.edit(this.message.seq, text);
    }), input.addEventListener("keydown", (e) => {
      e.key === "Escape" && (e.preventDefault(), close());
    }), this.textEl.hidden = !0, this.textEl.after(form), input.focus();
  }
};

// src/thread.ts
var ThreadView = class {
  constructor(els, context, list, calls) {
    this.els = els;
    this.list = list;
    this.calls = calls;
    this.ctx = { ...context, inThread: !0 }, els.form.onsubmit = (e) => {
      e.preventDefault();
      let text = els.text.value.trim();
      this.root === null || text === "" || (calls.reply(this.root, text), els.text.value = "");
    }, this.close();
  }
  els;
  list;
  calls;
  root = null;
  rootRow = null;
  rows = /* @__PURE__ */ new Map();
  ctx;
  /** Shows the thread under `root`, with the replies held now, then those the server has. */
  open(root) {
    let message = this.list.get(root);
    if (message !== void 0) {
      this.close(), this.root = root, this.els.panel.dataset.root = String(root), this.rootRow = new MessageRow(message, this.ctx), this.els.root.replaceChildren(this.rootRow.el);
      for (let reply of this.list.thread(root)) this.add(reply);
      this.els.panel.hidden = !1, this.els.text.focus(), this.markRead(), this.calls.load(root).then(
        () => {
          if (this.root === root) {
            for (let reply of this.list.thread(root)) this.rows.has(reply.seq) || this.add(reply);
            this.markRead();
          }
        },
        () => {
        }
        // the replies held are shown; the chat's notice says what failed
      );
    }
  }
  close() {
    this.root = null, this.rootRow = null, this.rows.clear(), this.els.root.replaceChildren(), this.els.messages.replaceChildren(), this.els.panel.hidden = !0, delete this.els.panel.dataset.root;
  }
  /** A message of the chat was added or changed: redraws it if it is this thread's root or one of its replies. */
  showMessage({ kind, message }) {
    if (this.root === null) return;
    if (message.seq === this.root) {
      this.rootRow?.draw(message, kind);
      return;
    }
    if (message.thread !== this.root) return;
    let row = this.rows.get(message.seq);
    row !== void 0 ? row.draw(message, kind) : kind === "added" && (this.add(message), this.markRead());
  }
  /** This user's reactions on `seq` changed. */
  redrawReactions(seq) {
    (seq === this.root ? this.rootRow : this.rows.get(seq))?.drawReactions();
  }
  /** Inserts a reply in seq order (replies loaded late may be older than those shown). */
  add(reply) {
    let row = new MessageRow(reply, this.ctx);
    this.rows.set(reply.seq, row);
    let next = [...this.els.messages.children].find((li) => Number(li.dataset.seq) > reply.seq);
    this.els.messages.insertBefore(row.el, next ?? null), row.el.scrollIntoView({ block: "nearest" });
  }
  markRead() {
    if (this.root === null || document.visibilityState !== "visible") return;
    let last = Math.max(0, ...this.rows.keys());
    last > 0 && this.calls.read(this.root, last);
  }
};

// src/view.ts
var MAX_NAMED_READERS = 3, STICKY_SCROLL_PX = 40, ChatView = class {
  constructor(els, me, actions, lookup) {
    this.els = els;
    this.me = me;
    this.rowContext = {
      me,
      actions,
      inThread: !1,
      lookup,
      myReactions: (seq) => this.mine.get(seq) ?? /* @__PURE__ */ new Set(),
      imageLoaded: () => this.scrollToEnd(this.following)
    };
    let box = els.messages.parentElement;
    box !== null && (box.onscroll = () => this.following = this.atBottom()), els.messages.replaceChildren(), els.pending.replaceChildren(), els.members.textContent = "-", els.readers.replaceChildren(), this.setTyping([]), this.setPresent(null);
  }
  els;
  me;
  /** Rows by seq: the guard that no event is ever shown twice. */
  rows = /* @__PURE__ */ new Map();
  /** Message rows by seq, in seq order (Map keeps insertion order and messages arrive in order). */
  shown = /* @__PURE__ */ new Map();
  /** target seq -> the emoji this user has on it now, from this user's reaction events. */
  mine = /* @__PURE__ */ new Map();
  /** user -> read position. */
  readPos = /* @__PURE__ */ new Map();
  /** Sends not yet stored, by client_id. */
  pendingRows = /* @__PURE__ */ new Map();
  /** The members count as of `membersAt`; join and leave events after that seq adjust it. */
  members = null;
  membersAt = 0;
  /** The highest seq of a message (thread replies too) or system event: what reading up to now means. */
  latestReadable = 0;
  /**
   * The latest run of joins (or leaves) with nothing between them: drawn as one line on its first row
   * ("ann, bob and 53 others joined"), the run's other rows kept (each seq has its row) but hidden.
   */
  run = null;
  /** What every row (here and in the thread panel) needs besides its message. */
  rowContext;
  /** The chat was scrolled to its end when last scrolled (by the user or by following new rows). */
  following = !0;
  /** The seq to report as read when the user has seen everything shown. */
  get readableSeq() {
    return this.latestReadable;
  }
  /** This user's read position as the server has stored it (from `read` events), 0 when none. */
  get myReadSeq() {
    return this.readPos.get(this.me) ?? 0;
  }
  /**
   * The `join` reply's count, true at `seq`. Events replayed from before it are already counted in it;
   * only join and leave events after it move the count.
   */
  setMembers(count, seq) {
    this.members = count, this.membersAt = seq, this.els.members.textContent = String(count);
  }
  /**
   * Folds one delivered event into the page; answers the target whose reactions by this user changed
   * (so the thread panel can redraw it too), or null.
   */
  apply(ev) {
    if (this.rows.has(ev.seq)) return null;
    switch (ev.type) {
      case "join":
      case "leave":
        return this.addPeopleNote(ev), this.members !== null && ev.seq > this.membersAt && (this.members = Math.max(0, this.members + (ev.type === "join" ? 1 : -1)), this.membersAt = ev.seq, this.els.members.textContent = String(this.members)), null;
      case "profile":
        return this.addNote(ev, profileNote(ev.user, ev.body?.name)), null;
      case "reaction":
        return this.applyReaction(ev);
      case "read":
        return this.applyRead(ev), null;
      default:
        return null;
    }
  }
  /** A message was added to the chat's message list or changed. */
  showMessage({ kind, message }) {
    if (kind === "added" && (this.latestReadable = Math.max(this.latestReadable, message.seq)), message.thread !== void 0) return;
    let row = this.shown.get(message.seq);
    if (row !== void 0) {
      let stick = this.atBottom();
      row.draw(message, kind), this.scrollToEnd(stick);
    } else kind === "added" && !this.rows.has(message.seq) && this.addMessage(message);
  }
  /** Others typing now. */
  setTyping(users) {
    let el2 = this.els.typing;
    el2.dataset.users = users.join(","), el2.hidden = users.length === 0, users.length === 0 ? el2.textContent = "" : users.length === 1 ? el2.textContent = `${users[0]} is typing…` : users.length <= MAX_NAMED_READERS ? el2.textContent = `${users.slice(0, -1).join(", ")} and ${users[users.length - 1]} are typing…` : el2.textContent = `${users.length} people are typing…`;
  }
  /** Who is here; null before the first answer. */
  setPresent(state) {
    let el2 = this.els.present;
    if (state === null) {
      el2.dataset.count = "", el2.replaceChildren(document.createTextNode("-"));
      return;
    }
    el2.dataset.count = String(state.count);
    let chips = state.users.map((user) => {
      let chip = span2("person", user);
      return chip.dataset.user = user, chip;
    }), rest = state.count - state.users.length;
    el2.replaceChildren(...chips, ...rest > 0 ? [span2("label", `+${rest}`)] : []);
  }
  /** Shows a send that is queued or in flight. */
  addPending(clientId, text) {
    let li = document.createElement("li");
    li.dataset.clientId = clientId, li.append(span2("who", this.me), span2("text", text), span2("status", "sending…")), this.pendingRows.set(clientId, li), this.els.pending.append(li), this.scrollToEnd(!0);
  }
  /** The send was stored as `seq`; its row goes once the event itself is shown. */
  sent(clientId, seq) {
    this.rows.has(seq) && this.dropPending(clientId);
  }
  /** The send gave up; its row stays, marked, so the user sees what was not stored. */
  failPending(clientId, reason) {
    let li = this.pendingRows.get(clientId);
    if (li === void 0) return;
    li.dataset.failed = "true";
    let status = li.querySelector(".status");
    status !== null && (status.textContent = `not sent: ${reason}`);
  }
  /** Scrolls `seq`'s row into view and outlines it for a moment (a pinned message picked from the list). */
  reveal(seq) {
    let row = this.shown.get(seq);
    return row === void 0 ? !1 : (row.el.scrollIntoView({ block: "center" }), row.el.classList.add("flash"), setTimeout(() => row.el.classList.remove("flash"), 1500), !0);
  }
  // ---- messages ---------------------------------------------------------------------------------
  addMessage(message) {
    let stick = this.atBottom(), row = new MessageRow(message, this.rowContext);
    this.rows.set(message.seq, row.el), this.shown.set(message.seq, row), this.drawReads(row), this.els.messages.append(row.el), message.user === this.me && message.client_id !== void 0 && this.dropPending(message.client_id), this.scrollToEnd(stick);
  }
  addNote(ev, text) {
    let stick = this.atBottom(), li = document.createElement("li");
    return li.className = "note", li.dataset.seq = String(ev.seq), li.dataset.type = ev.type, li.textContent = text, this.rows.set(ev.seq, li), this.els.messages.append(li), this.scrollToEnd(stick), li;
  }
  /** A join or leave: its own line, or one more name on the line of the run it continues. */
  addPeopleNote(ev) {
    let user = ev.user ?? "someone", verb = ev.type === "join" ? "joined" : "left", run = this.run, continues = run !== null && run.type === ev.type && this.els.messages.lastElementChild === run.last, li = this.addNote(ev, `${user} ${verb}`);
    if (!continues) {
      this.run = { type: ev.type, head: li, last: li, users: [user] };
      return;
    }
    li.hidden = !0, run.last = li, run.users.push(user);
    let [first, second] = run.users, others = run.users.length - 2;
    run.head.textContent = others === 0 ? `${first} and ${second} ${verb}` : `${first}, ${second} and ${others} other${others === 1 ? "" : "s"} ${verb}`;
  }
  dropPending(clientId) {
    this.pendingRows.get(clientId)?.remove(), this.pendingRows.delete(clientId);
  }
  // ---- reactions: the counts are the list's; which ones are this user's, the events' ------------
  applyReaction(ev) {
    let body = ev.body;
    if (body === null || typeof body.target != "number" || typeof body.emoji != "string" || ev.user !== this.me) return null;
    let set = this.mine.get(body.target);
    return set === void 0 && (set = /* @__PURE__ */ new Set(), this.mine.set(body.target, set)), body.on === !1 ? set.delete(body.emoji) : set.add(body.emoji), this.shown.get(body.target)?.drawReactions(), body.target;
  }
  // ---- read markers -----------------------------------------------------------------------------
  applyRead(ev) {
    let body = ev.body;
    if (body === null || typeof body.seq != "number" || body.thread !== void 0 || ev.user === void 0) return;
    let before = this.readPos.get(ev.user) ?? 0;
    if (!(body.seq <= before)) {
      this.readPos.set(ev.user, body.seq);
      for (let m of this.shown.values()) m.seq > before && m.seq <= body.seq && this.drawReads(m);
      this.drawReaders();
    }
  }
  /** "read by N" under a message: members other than its author who have read at least that far. */
  drawReads(m) {
    let readers = [];
    for (let [user, pos] of this.readPos) user !== m.user && pos >= m.seq && readers.push(user);
    readers.sort();
    let el2 = m.readsEl;
    el2.dataset.readCount = String(readers.length), el2.title = readers.join(", "), readers.length === 0 ? el2.textContent = "" : readers.length <= MAX_NAMED_READERS ? el2.textContent = `✓ seen by ${readers.join(", ")}` : el2.textContent = `✓ seen by ${readers.length}`;
  }
  /** Each member's read position, as chips in the details. */
  drawReaders() {
    let chips = [...this.readPos].sort(([a], [b]) => a < b ? -1 : a > b ? 1 : 0).map(([user, pos]) => {
      let chip = span2("reader", `${user} #${pos}`);
      return chip.dataset.user = user, chip.dataset.seq = String(pos), chip;
    });
    this.els.readers.replaceChildren(...chips);
  }
  // ---- scrolling --------------------------------------------------------------------------------
  atBottom() {
    let box = this.els.messages.parentElement;
    return box === null ? !0 : box.scrollHeight - box.scrollTop - box.clientHeight < STICKY_SCROLL_PX;
  }
  /** Follows new rows only when the user was already at the bottom, so reading history is not yanked. */
  scrollToEnd(stick) {
    let box = this.els.messages.parentElement;
    stick && box !== null && (box.scrollTop = box.scrollHeight);
  }
};
function profileNote(user, name) {
  let change = typeof name == "string" ? `renamed the chat to "${name}"` : name === null ? "took the chat's name away" : "changed the chat";
  return `${user ?? "The app"} ${change}`;
}
function span2(className, text) {
  let s = document.createElement("span");
  return s.className = className, s.textContent = text, s;
}

// src/demo.ts
var ID_PATTERN2 = /^[A-Za-z0-9_.:-]{1,128}$/, HISTORY_EVENTS = 500, READ_DEBOUNCE_MS = 250, REVEAL_WAIT_MS = 5e3, params = new URLSearchParams(location.search), WORKSPACE = params.get("ws") ?? "demo";
function $(id) {
  let el2 = document.getElementById(id);
  if (el2 === null) throw new Error(`demo.html lacks #${id}`);
  return el2;
}
var ui = {
  joinForm: $("join-form"),
  name: $("name"),
  chat: $("chat"),
  details: $("details-toggle"),
  title: $("chat-title"),
  rename: $("rename"),
  renameForm: $("rename-form"),
  renameText: $("rename-text"),
  renameCancel: $("rename-cancel"),
  conn: $("conn"),
  connDetail: $("conn-detail"),
  watch: $("watch"),
  members: $("members"),
  membersButton: $("members-button"),
  membersPanel: $("members-panel"),
  memberList: $("member-list"),
  membersMore: $("members-more"),
  membersClose: $("members-close"),
  pinsButton: $("pins-button"),
  pinCount: $("pin-count"),
  pinsPanel: $("pins-panel"),
  pinList: $("pin-list"),
  pinsClose: $("pins-close"),
  readers: $("readers"),
  typing: $("typing"),
  present: $("present"),
  chats: $("chats"),
  messages: $("messages"),
  pending: $("pending"),
  sendForm: $("send-form"),
  text: $("text"),
  quoting: $("quoting"),
  quotingText: $("quoting-text"),
  quotingCancel: $("quoting-cancel"),
  send: $("send"),
  chatPane: $("chat-pane"),
  attach: $("attach"),
  fileInput: $("file-input"),
  attachments: $("attachments"),
  searchForm: $("search-form"),
  searchText: $("search-text"),
  searchGo: $("search-go"),
  searchPanel: $("search-panel"),
  searchResults: $("search-results"),
  searchStatus: $("search-status"),
  searchMore: $("search-more"),
  searchClose: $("search-close"),
  threadPanel: $("thread-panel"),
  threadRoot: $("thread-root"),
  threadMessages: $("thread-messages"),
  threadForm: $("thread-form"),
  threadText: $("thread-text"),
  threadClose: $("thread-close"),
  notice: $("notice")
}, CONNECTION_WORDS = {
  connected: "online",
  connecting: "connecting…",
  disconnected: "offline",
  closed: "offline"
};
function errorText(e) {
  return e instanceof HeraldError ? `${e.code}: ${e.message}` : String(e);
}
function notice(text) {
  ui.notice.textContent = text, ui.notice.hidden = text === "";
}
function showConnection(state, detail) {
  ui.conn.dataset.state = state, ui.conn.textContent = CONNECTION_WORDS[state] ?? state, ui.connDetail.textContent = detail;
}
var Session = class {
  constructor(user, chatId) {
    this.user = user;
    this.chatId = chatId;
    this.client = new HeraldClient({ url: wsUrl(), workspace: WORKSPACE, token: () => devToken(WORKSPACE, user) }), this.chat = this.client.chat(chatId), this.list = this.chat.messages(), this.view = new ChatView(
      { messages: ui.messages, pending: ui.pending, members: ui.members, readers: ui.readers, typing: ui.typing, present: ui.present },
      user,
      {
        react: (target, emoji, on) => this.chat.react(target, emoji, on).catch(failed("reaction")),
        edit: (target, text) => this.chat.edit(target, { text }, { mentions: mentionsIn(text) }).catch(failed("edit")),
        delete: (target) => this.chat.delete(target).catch(failed("delete")),
        pin: (target, on) => this.chat.pin(target, on).catch(failed(on ? "pin" : "unpin")),
        openThread: (root) => this.thread.open(root),
        quote: (target) => this.quote(target)
      },
      (seq) => this.list.get(seq)
    ), this.thread = new ThreadView(
      { panel: ui.threadPanel, root: ui.threadRoot, messages: ui.threadMessages, form: ui.threadForm, text: ui.threadText },
      this.view.rowContext,
      this.list,
      {
        reply: (root, text) => this.reply(root, text),
        load: async (root) => {
          for await (let ev of this.chat.history(0, { thread: root })) this.list.load([ev]);
        },
        read: (root, seq) => {
          this.chat.read(seq, { thread: root }).catch(() => {
          });
        }
      }
    ), this.members = new MembersPanel(
      { panel: ui.membersPanel, list: ui.memberList, more: ui.membersMore },
      user,
      (cursor) => this.chat.members({ limit: MEMBERS_PAGE, ...cursor !== void 0 ? { cursor } : {} }),
      failed("members")
    ), this.pins = new PinsPanel(
      { panel: ui.pinsPanel, list: ui.pinList, count: ui.pinCount },
      () => this.chat.pins(),
      (seq) => {
        this.view.reveal(seq) || notice("that message is older than what the page shows");
      },
      failed("pinned messages")
    ), this.attachments = new Attachments(
      { list: ui.attachments, input: ui.fileInput, button: ui.attach, dropZone: ui.chatPane },
      (file, onProgress) => this.chat.upload(file, { onProgress }),
      notice
    ), ui.membersButton.onclick = () => this.members.toggle(), ui.pinsButton.onclick = () => this.pins.toggle(), showTitle(chatId, null), closeRename(), this.quote(null), this.list.on("change", (change) => {
      this.view.showMessage(change), this.thread.showMessage(change);
    }), this.list.on("profile", (profile) => {
      showTitle(chatId, profile.name), chatList.setName(chatId, profile.name);
    }), this.chat.on("typing", ({ users }) => this.view.setTyping(users)), this.chat.on("presence", (state) => this.view.setPresent(state)), this.client.inbox.on("change", (items) => chatList.draw(items, chatId)), this.client.on("state", ({ to }) => {
      showConnection(to, to === "connecting" ? ui.connDetail.textContent ?? "" : ""), to === "connected" && this.scheduleRead();
    }), this.client.on("disconnected", ({ code, reason, reconnectInMs }) => {
      let why = `link closed (${code}${reason ? ` ${reason}` : ""})`, next = reconnectInMs === null ? "stopped" : `retrying in ${(reconnectInMs / 1e3).toFixed(1)} s`;
      showConnection(this.client.state, `${why}, ${next}`);
    }), this.client.on("error", (e) => notice(`${e.code}: ${e.message}`)), this.chat.on("state", ({ to }) => {
      ui.watch.dataset.state = to, ui.watch.textContent = to;
    }), this.chat.on("error", (e) => notice(`${e.code}: ${e.message}`)), this.chat.on("event", (ev) => {
      let reacted = this.view.apply(ev);
      reacted !== null && this.thread.redrawReactions(reacted), (ev.type === "pin" || ev.type === "delete") && this.pins.refresh(), (ev.type === "message" || ev.type === "system") && this.scheduleRead();
    }), showConnection(this.client.state, "");
  }
  user;
  chatId;
  client;
  chat;
  list;
  view;
  thread;
  members;
  pins;
  attachments;
  /** The message the next send quotes, if the user picked one. */
  quoting = null;
  ended = !1;
  readTimer = null;
  reading = !1;
  /** Connects, joins, and watches from a little before the join so the chat has some history. */
  async start() {
    await this.client.connect();
    let joined = await this.chat.join();
    if (!this.ended) {
      this.view.setMembers(joined.members, joined.seq);
      for (let b of [ui.rename, ui.membersButton, ui.pinsButton, ui.searchGo]) b.disabled = !1;
      ui.searchText.disabled = !1, this.client.inbox.start().catch((e) => notice(`chat list: ${errorText(e)}`)), await this.chat.watch({ after: Math.max(0, joined.seq - HISTORY_EVENTS), presence: !0 }), this.pins.refresh();
    }
  }
  /** The user typed in the message box; the SDK sends at most one `typing` every 2 s. */
  typed() {
    this.chat.notifyTyping();
  }
  /**
   * Queues a message, mentioning each @name typed. The SDK keeps it through link drops and stores it
   * once; the row shows until then.
   */
  send(text) {
    let clientId = newClientId2(), quote = this.quoting ?? void 0;
    this.quote(null);
    let withFiles = this.attachments.count, filesNote = withFiles === 0 ? "" : `(+${withFiles} file${withFiles === 1 ? "" : "s"})`;
    this.view.addPending(clientId, [text, filesNote].filter((part) => part !== "").join(" ")), (withFiles === 0 ? Promise.resolve([]) : this.attachments.take()).then((ids) => {
      if (withFiles > 0 && ids.length === 0 && text === "") throw new Error("no file uploaded");
      return this.chat.send(
        { text },
        { clientId, mentions: mentionsIn(text), ...quote !== void 0 ? { quote } : {}, ...ids.length > 0 ? { files: ids } : {} }
      );
    }).then(
      ({ seq }) => this.view.sent(clientId, seq),
      (e) => this.view.failPending(clientId, e instanceof HeraldError ? e.code : String(e))
    );
  }
  /** True when a send now would carry something: text, or files picked. */
  canSend(text) {
    return text !== "" || this.attachments.count > 0;
  }
  /**
   * Shows a search result of this chat: its message scrolled to and outlined, or for a thread reply its
   * thread opened; waits for the watch to deliver it when the chat was just opened.
   */
  show(result) {
    let target = result.thread ?? result.seq, reveal = () => {
      result.thread !== void 0 ? this.thread.open(result.thread) : this.view.reveal(result.seq) || notice("that message is older than what the page shows");
    };
    if (this.list.get(target) !== void 0) {
      reveal();
      return;
    }
    let off = this.list.on("change", ({ message }) => {
      message.seq === target && (off(), clearTimeout(timer), reveal());
    }), timer = setTimeout(() => {
      off(), this.ended || notice("that message is older than what the page shows");
    }, REVEAL_WAIT_MS);
  }
  /** Quotes `target` in the next message sent from the message box (null: none), shown above the box. */
  quote(target) {
    let message = target === null ? void 0 : this.list.get(target);
    this.quoting = message === void 0 ? null : message.seq, ui.quoting.hidden = message === void 0, ui.quotingText.textContent = message === void 0 ? "" : `${message.user ?? "system"}: ${messageText(message.body)}`, message !== void 0 && ui.text.focus();
  }
  /** Sends a reply in the thread under `root`; it shows in the thread once the chat delivers it. */
  reply(root, text) {
    this.chat.send({ text }, { clientId: newClientId2(), thread: root, mentions: mentionsIn(text) }).catch(failed("reply"));
  }
  /** Names the chat (an empty name clears it: the chat goes by its id again). */
  rename(name) {
    this.chat.profile({ name: name === "" ? null : name }).catch(failed("rename"));
  }
  end() {
    this.ended = !0, this.readTimer !== null && clearTimeout(this.readTimer), this.pins.stop(), this.client.close();
  }
  /** Reports the read position soon, if the page is seen and there is something new to report. */
  scheduleRead() {
    this.readTimer !== null || this.ended || (this.readTimer = setTimeout(() => {
      this.readTimer = null, this.readNow();
    }, READ_DEBOUNCE_MS));
  }
  /**
   * Reads up to the latest message shown. Only while connected (a read parked while offline would just
   * time out), only while the page is visible (a hidden tab has not read anything), and never up to a
   * `read` event's own seq, which would make every read cause another.
   */
  async readNow() {
    if (this.ended || this.reading || this.client.state !== "connected" || document.visibilityState !== "visible") return;
    let target = this.view.readableSeq;
    if (!(target <= this.view.myReadSeq)) {
      this.reading = !0;
      try {
        await this.chat.read(target);
      } catch {
        return;
      } finally {
        this.reading = !1;
      }
      this.view.readableSeq > target && this.scheduleRead();
    }
  }
};
function failed(what) {
  return (e) => notice(`${what} failed: ${errorText(e)}`);
}
function showTitle(chatId, name) {
  ui.title.textContent = name ?? chatId, ui.title.dataset.chat = chatId, ui.title.title = chatId, name !== null ? ui.title.dataset.named = "true" : delete ui.title.dataset.named;
}
function closeRename() {
  ui.renameForm.hidden = !0, ui.rename.hidden = !1;
}
var session = null, revealAfterJoin = null, chatList = new ChatList(ui.chats, (chat) => {
  ui.chat.value = chat, ui.joinForm.requestSubmit();
}), search = new SearchPanel(
  { panel: ui.searchPanel, list: ui.searchResults, status: ui.searchStatus, more: ui.searchMore },
  {
    search: (query, cursor) => session === null ? Promise.reject(new Error("join a chat first")) : session.client.search(query, cursor !== void 0 ? { cursor } : {}),
    nameOf: (chat) => chatList.nameOf(chat),
    open: (result) => {
      if (search.close(), session !== null && session.chatId === result.chat) {
        session.show(result);
        return;
      }
      revealAfterJoin = result, ui.chat.value = result.chat, ui.joinForm.requestSubmit();
    }
  }
);
ui.name.value = params.get("name") ?? `user${Math.floor(Math.random() * 1e4)}`;
ui.chat.value = params.get("chat") ?? "general";
showConnection("disconnected", "");
ui.details.addEventListener("change", () => document.body.classList.toggle("details", ui.details.checked));
ui.rename.addEventListener("click", () => {
  session !== null && (ui.renameText.value = session.list.profile?.name ?? "", ui.rename.hidden = !0, ui.renameForm.hidden = !1, ui.renameText.focus());
});
ui.renameCancel.addEventListener("click", closeRename);
ui.renameForm.addEventListener("submit", (e) => {
  e.preventDefault(), closeRename(), session?.rename(ui.renameText.value.trim());
});
ui.quotingCancel.addEventListener("click", () => session?.quote(null));
document.addEventListener("keydown", (e) => {
  if (!(e.key !== "Escape" || e.defaultPrevented)) {
    ui.threadPanel.hidden || session?.thread.close();
    for (let panel of [ui.membersPanel, ui.pinsPanel, ui.searchPanel]) panel.hidden = !0;
  }
});
ui.membersClose.addEventListener("click", () => ui.membersPanel.hidden = !0);
ui.searchClose.addEventListener("click", () => search.close());
ui.searchForm.addEventListener("submit", (e) => {
  e.preventDefault();
  let query = ui.searchText.value.trim();
  session === null || query === "" || search.run(query);
});
ui.pinsClose.addEventListener("click", () => ui.pinsPanel.hidden = !0);
ui.threadClose.addEventListener("click", () => session?.thread.close());
ui.joinForm.addEventListener("submit", (e) => {
  e.preventDefault();
  let name = ui.name.value.trim(), chatId = ui.chat.value.trim();
  if (!ID_PATTERN2.test(name) || !ID_PATTERN2.test(chatId)) {
    notice("name and chat: 1 to 128 characters of A-Z a-z 0-9 _ . : -");
    return;
  }
  notice(""), session?.end();
  let s = new Session(name, chatId);
  session = s, document.title = `${name} in ${chatId} - herald`, ui.send.disabled = !1;
  let reveal = revealAfterJoin?.chat === chatId ? revealAfterJoin : null;
  revealAfterJoin = null, s.start().then(
    () => {
      reveal !== null && session === s && s.show(reveal);
    },
    (err) => {
      session === s && notice(`could not enter the chat: ${err instanceof HeraldError ? `${err.code}: ${err.message}` : String(err)}`);
    }
  );
});
ui.sendForm.addEventListener("submit", (e) => {
  e.preventDefault();
  let text = ui.text.value.trim();
  session === null || !session.canSend(text) || (session.send(text), ui.text.value = "");
});
ui.text.addEventListener("input", () => {
  ui.text.value !== "" && session?.typed();
});
document.addEventListener("visibilitychange", () => session?.scheduleRead());
