//! What the page shows of one chat: the message list with reactions, read markers, edits and deletes,
//! the members count, each reader's position, who is typing, who is here, and the sends that are not
//! acknowledged yet.
//!
//! Owns: folding delivered events into that state and keeping the DOM in step with it. Does not own:
//! the connection or any request (demo.ts); it learns of events through `apply`, which the SDK calls
//! once per event, in seq order, and of messages through `showMessage`, from the SDK's message list
//! (which applies edits and deletes), and of typing and presence through `setTyping` and `setPresent`.
//!
//! Element hooks (the end-to-end test relies on them):
//!   #messages > li[data-seq]             one per stored message or join/leave/system event, never twice
//!   li.msg[data-user]                    a message; .text its text; data-edited, data-deleted when so
//!   button.edit, button.delete           on one's own messages; form.edit-form > input.edit-text to edit
//!   #typing[data-users]                  "alice is typing…", hidden when nobody is
//!   #present[data-count] > [data-user]   who is here (watching the chat now)
//!   button.react[data-emoji]             a reaction toggle; data-count, aria-pressed (mine)
//!   .reads[data-read-count]              members other than the author whose read position is >= seq
//!   #pending > li[data-client-id]        a send not yet stored; data-failed when it gave up
//!   #members                             the members count; #readers each member's read position

import type { ChatEvent, Message, MessageChange, PresenceState } from '../../sdk/ts/src/index.ts';

/** The reactions offered on every message: the wire value and how it is drawn. */
export const REACTIONS: ReadonlyArray<{ emoji: string; label: string }> = [
  // Plain symbols rather than emoji pictures, so they draw with the fonts every system has.
  { emoji: '+1', label: '+1' },
  { emoji: 'heart', label: '♥' },
  { emoji: 'star', label: '★' },
];

/** The elements a view draws into. */
export interface ViewElements {
  messages: HTMLOListElement;
  pending: HTMLOListElement;
  members: HTMLElement;
  readers: HTMLElement;
  typing: HTMLElement;
  present: HTMLElement;
}

/** Calls the view makes back into the page. */
export interface ViewActions {
  /** The user clicked a reaction: add it (`on`) or take it back. */
  react(target: number, emoji: string, on: boolean): void;
  /** The user saved a new text for their message `target`. */
  edit(target: number, text: string): void;
  /** The user deleted their message `target`. */
  delete(target: number): void;
}

/** A message on the page. */
interface Shown {
  seq: number;
  user: string;
  el: HTMLLIElement;
  textEl: HTMLElement;
  reactionsEl: HTMLElement;
  readsEl: HTMLElement;
  /** Edit and delete buttons (one's own messages only, until deleted). */
  ownEl: HTMLElement | null;
}

/** A read marker names readers one by one up to this many, then only counts them. */
const MAX_NAMED_READERS = 3;

/** Scrolled within this many pixels of the bottom counts as "at the bottom", which keeps following. */
const STICKY_SCROLL_PX = 40;

/** The state of one chat as seen by user `me`, drawn into `els`. */
export class ChatView {
  /** Rows by seq: the guard that no event is ever shown twice. */
  private readonly rows = new Map<number, HTMLLIElement>();
  /** Messages by seq, in seq order (Map keeps insertion order and events arrive in order). */
  private readonly shown = new Map<number, Shown>();
  /** target seq -> emoji -> users with that reaction on. Sets, so a repeated "on" counts once. */
  private readonly reactions = new Map<number, Map<string, Set<string>>>();
  /** user -> read position. */
  private readonly readPos = new Map<string, number>();
  /** Sends not yet stored, by client_id. */
  private readonly pendingRows = new Map<string, HTMLLIElement>();
  /** The members count as of `membersAt`; join and leave events after that seq adjust it. */
  private members: number | null = null;
  private membersAt = 0;
  /** The highest seq of a message or system event: what reading the chat up to now means. */
  private latestReadable = 0;

  constructor(
    private readonly els: ViewElements,
    private readonly me: string,
    private readonly actions: ViewActions,
  ) {
    els.messages.replaceChildren();
    els.pending.replaceChildren();
    els.members.textContent = '-';
    els.readers.replaceChildren();
    this.setTyping([]);
    this.setPresent(null);
  }

  /** The seq to report as read when the user has seen everything shown. */
  get readableSeq(): number {
    return this.latestReadable;
  }

  /** This user's read position as the server has stored it (from `read` events), 0 when none. */
  get myReadSeq(): number {
    return this.readPos.get(this.me) ?? 0;
  }

  /**
   * The `join` reply's count, true at `seq`. Events replayed from before it are already counted in it;
   * only join and leave events after it move the count.
   */
  setMembers(count: number, seq: number): void {
    this.members = count;
    this.membersAt = seq;
    this.els.members.textContent = String(count);
  }

  /** Folds one delivered event into the page. */
  apply(ev: ChatEvent): void {
    if (this.rows.has(ev.seq)) return; // the SDK delivers once; this keeps the page honest regardless
    switch (ev.type) {
      case 'message':
      case 'system':
      case 'edit':
      case 'delete':
        break; // drawn from the SDK's message list, through showMessage
      case 'join':
      case 'leave':
        this.addNote(ev, `${ev.user ?? 'someone'} ${ev.type === 'join' ? 'joined' : 'left'}`);
        if (this.members !== null && ev.seq > this.membersAt) {
          this.members = Math.max(0, this.members + (ev.type === 'join' ? 1 : -1));
          this.membersAt = ev.seq;
          this.els.members.textContent = String(this.members);
        }
        break;
      case 'reaction':
        this.applyReaction(ev);
        break;
      case 'read':
        this.applyRead(ev);
        break;
      default:
        break; // a type this page does not know: nothing to draw
    }
  }

  /** A message was added to the chat's message list, edited or deleted. */
  showMessage({ kind, message }: MessageChange): void {
    if (kind === 'added') {
      if (!this.rows.has(message.seq)) this.addMessage(message);
      return;
    }
    const shown = this.shown.get(message.seq);
    if (shown !== undefined) this.drawBody(shown, message);
  }

  /** Others typing now. */
  setTyping(users: string[]): void {
    const el = this.els.typing;
    el.dataset.users = users.join(',');
    el.hidden = users.length === 0;
    if (users.length === 0) el.textContent = '';
    else if (users.length === 1) el.textContent = `${users[0]} is typing…`;
    else if (users.length <= MAX_NAMED_READERS) el.textContent = `${users.slice(0, -1).join(', ')} and ${users[users.length - 1]} are typing…`;
    else el.textContent = `${users.length} people are typing…`;
  }

  /** Who is here; null before the first answer. */
  setPresent(state: PresenceState | null): void {
    const el = this.els.present;
    if (state === null) {
      el.dataset.count = '';
      el.replaceChildren(document.createTextNode('-'));
      return;
    }
    el.dataset.count = String(state.count);
    const chips = state.users.map((user) => {
      const chip = span('person', user);
      chip.dataset.user = user;
      return chip;
    });
    // Past 100 the server lists only some: say how many more there are.
    const rest = state.count - state.users.length;
    el.replaceChildren(...chips, ...(rest > 0 ? [span('label', `+${rest}`)] : []));
  }

  /** Shows a send that is queued or in flight. */
  addPending(clientId: string, text: string): void {
    const li = document.createElement('li');
    li.dataset.clientId = clientId;
    li.append(span('who', this.me), span('text', text), span('status', 'sending…'));
    this.pendingRows.set(clientId, li);
    this.els.pending.append(li);
    this.scrollToEnd(true);
  }

  /** The send was stored as `seq`; its row goes once the event itself is shown. */
  sent(clientId: string, seq: number): void {
    if (this.rows.has(seq)) this.dropPending(clientId);
  }

  /** The send gave up; its row stays, marked, so the user sees what was not stored. */
  failPending(clientId: string, reason: string): void {
    const li = this.pendingRows.get(clientId);
    if (li === undefined) return;
    li.dataset.failed = 'true';
    const status = li.querySelector('.status');
    if (status !== null) status.textContent = `not sent: ${reason}`;
  }

  // ---- messages ---------------------------------------------------------------------------------

  private addMessage(ev: Message): void {
    const stick = this.atBottom();
    const user = ev.user ?? 'system';
    const li = document.createElement('li');
    li.className = ev.type === 'system' ? 'msg system' : user === this.me ? 'msg mine' : 'msg';
    li.dataset.seq = String(ev.seq);
    li.dataset.user = user;
    if (ev.client_id !== undefined) li.dataset.clientId = ev.client_id;

    const head = document.createElement('div');
    head.className = 'head';
    const time = document.createElement('time');
    time.dateTime = new Date(ev.ts).toISOString();
    time.textContent = new Date(ev.ts).toLocaleTimeString();
    head.append(span('who', user), span('seq', `#${ev.seq}`), time);

    const foot = document.createElement('div');
    foot.className = 'foot';
    const reactionsEl = span('reactions', '');
    const readsEl = span('reads', '');
    foot.append(reactionsEl, readsEl);
    let ownEl: HTMLElement | null = null;
    if (ev.type === 'message' && ev.user === this.me) {
      ownEl = span('own', '');
      ownEl.append(
        button('edit', 'edit', () => this.startEdit(shown)),
        button('delete', 'delete', () => this.actions.delete(ev.seq)),
      );
      foot.append(ownEl);
    }

    const textEl = span('text', '');
    li.append(head, textEl, foot);
    const shown: Shown = { seq: ev.seq, user, el: li, textEl, reactionsEl, readsEl, ownEl };
    this.drawBody(shown, ev);
    this.rows.set(ev.seq, li);
    this.shown.set(ev.seq, shown);
    this.latestReadable = Math.max(this.latestReadable, ev.seq);
    this.drawReactions(shown);
    this.drawReads(shown);
    this.els.messages.append(li);

    if (user === this.me && ev.client_id !== undefined) this.dropPending(ev.client_id);
    this.scrollToEnd(stick);
  }

  /** The text of a message as it is now: edited, or gone. */
  private drawBody(m: Shown, message: Message): void {
    m.el.querySelector('form.edit-form')?.remove();
    m.textEl.hidden = false;
    if (message.deleted) {
      m.el.dataset.deleted = 'true';
      m.textEl.textContent = 'message deleted';
      m.ownEl?.remove();
      m.ownEl = null;
    } else {
      m.textEl.textContent = messageText(message.body);
    }
    if (message.edited !== undefined && !message.deleted) {
      m.el.dataset.edited = String(message.edited);
      m.textEl.title = `edited (#${message.edited})`;
      m.textEl.dataset.mark = 'edited';
    } else {
      // A deleted message was perhaps edited first; nothing of that is left to mark.
      m.textEl.removeAttribute('title');
      delete m.textEl.dataset.mark;
    }
  }

  /** Swaps a message's text for a one-line form; Enter saves through the SDK, Escape gives up. */
  private startEdit(m: Shown): void {
    if (m.el.querySelector('form.edit-form') !== null) return;
    const form = document.createElement('form');
    form.className = 'edit-form';
    const input = document.createElement('input');
    input.className = 'edit-text';
    input.value = m.textEl.textContent ?? '';
    input.maxLength = 4000;
    form.append(input);
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      const text = input.value.trim();
      form.remove();
      m.textEl.hidden = false;
      if (text !== '' && text !== m.textEl.textContent) this.actions.edit(m.seq, text);
    });
    input.addEventListener('keydown', (e) => {
      if (e.key !== 'Escape') return;
      form.remove();
      m.textEl.hidden = false;
    });
    m.textEl.hidden = true;
    m.textEl.after(form);
    input.focus();
  }

  private addNote(ev: ChatEvent, text: string): void {
    const stick = this.atBottom();
    const li = document.createElement('li');
    li.className = 'note';
    li.dataset.seq = String(ev.seq);
    li.dataset.type = ev.type;
    li.textContent = `#${ev.seq} ${text}`;
    this.rows.set(ev.seq, li);
    this.els.messages.append(li);
    this.scrollToEnd(stick);
  }

  private dropPending(clientId: string): void {
    this.pendingRows.get(clientId)?.remove();
    this.pendingRows.delete(clientId);
  }

  // ---- reactions --------------------------------------------------------------------------------

  private applyReaction(ev: ChatEvent): void {
    const body = ev.body as { target?: unknown; emoji?: unknown; on?: unknown } | null;
    if (body === null || typeof body.target !== 'number' || typeof body.emoji !== 'string' || ev.user === undefined) return;
    let byEmoji = this.reactions.get(body.target);
    if (byEmoji === undefined) {
      byEmoji = new Map();
      this.reactions.set(body.target, byEmoji);
    }
    let users = byEmoji.get(body.emoji);
    if (users === undefined) {
      users = new Set();
      byEmoji.set(body.emoji, users);
    }
    if (body.on === false) users.delete(ev.user);
    else users.add(ev.user);
    // A reaction to a message before the page's history window has nothing to draw on.
    const shown = this.shown.get(body.target);
    if (shown !== undefined) this.drawReactions(shown);
  }

  /** The offered reactions always, then any other emoji someone used, each with its count. */
  private drawReactions(m: Shown): void {
    const byEmoji = this.reactions.get(m.seq);
    const emojis = REACTIONS.map((r) => r.emoji);
    for (const e of byEmoji?.keys() ?? []) if (!emojis.includes(e)) emojis.push(e);
    const buttons = emojis.map((emoji) => {
      const users = byEmoji?.get(emoji);
      const count = users?.size ?? 0;
      const mine = users?.has(this.me) ?? false;
      const b = document.createElement('button');
      b.type = 'button';
      b.className = 'react';
      b.dataset.emoji = emoji;
      b.dataset.count = String(count);
      b.setAttribute('aria-pressed', String(mine));
      b.title = count > 0 ? [...(users ?? [])].join(', ') : `react with ${emoji}`;
      const label = REACTIONS.find((r) => r.emoji === emoji)?.label ?? emoji;
      b.textContent = count > 0 ? `${label} ${count}` : label;
      b.addEventListener('click', () => this.actions.react(m.seq, emoji, !mine));
      return b;
    });
    m.reactionsEl.replaceChildren(...buttons);
  }

  // ---- read markers -----------------------------------------------------------------------------

  private applyRead(ev: ChatEvent): void {
    const body = ev.body as { seq?: unknown } | null;
    if (body === null || typeof body.seq !== 'number' || ev.user === undefined) return;
    const before = this.readPos.get(ev.user) ?? 0;
    if (body.seq <= before) return; // positions only move forward
    this.readPos.set(ev.user, body.seq);
    // Only messages between the old and the new position change their count.
    for (const m of this.shown.values()) if (m.seq > before && m.seq <= body.seq) this.drawReads(m);
    this.drawReaders();
  }

  /** "read by N" under a message: members other than its author who have read at least that far. */
  private drawReads(m: Shown): void {
    const readers: string[] = [];
    for (const [user, pos] of this.readPos) if (user !== m.user && pos >= m.seq) readers.push(user);
    readers.sort();
    m.readsEl.dataset.readCount = String(readers.length);
    m.readsEl.title = readers.join(', ');
    if (readers.length === 0) m.readsEl.textContent = '';
    else if (readers.length <= MAX_NAMED_READERS) m.readsEl.textContent = `✓ read by ${readers.join(', ')}`;
    else m.readsEl.textContent = `✓ read by ${readers.length}`;
  }

  /** Each member's read position, as chips in the header. */
  private drawReaders(): void {
    const chips = [...this.readPos].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([user, pos]) => {
      const chip = span('reader', `${user} ✓#${pos}`);
      chip.dataset.user = user;
      chip.dataset.seq = String(pos);
      return chip;
    });
    this.els.readers.replaceChildren(...chips);
  }

  // ---- scrolling --------------------------------------------------------------------------------

  private atBottom(): boolean {
    const box = this.els.messages.parentElement;
    if (box === null) return true;
    return box.scrollHeight - box.scrollTop - box.clientHeight < STICKY_SCROLL_PX;
  }

  /** Follows new rows only when the user was already at the bottom, so reading history is not yanked. */
  private scrollToEnd(stick: boolean): void {
    const box = this.els.messages.parentElement;
    if (stick && box !== null) box.scrollTop = box.scrollHeight;
  }
}

/** A message body's text: `{text}` as this page sends it, anything else as JSON. */
function messageText(body: unknown): string {
  if (typeof body === 'object' && body !== null && typeof (body as { text?: unknown }).text === 'string') {
    return (body as { text: string }).text;
  }
  return JSON.stringify(body);
}

function button(className: string, text: string, onClick: () => void): HTMLButtonElement {
  const b = document.createElement('button');
  b.type = 'button';
  b.className = className;
  b.textContent = text;
  b.addEventListener('click', onClick);
  return b;
}

function span(className: string, text: string): HTMLSpanElement {
  const s = document.createElement('span');
  s.className = className;
  s.textContent = text;
  return s;
}
