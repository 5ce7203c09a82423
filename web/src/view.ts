//! What the page shows of one chat: the messages (each a row.ts row, replies counted on their root),
//! read markers, the members count, who is typing, who is here, joins and leaves and renames as notes,
//! and the sends that are not acknowledged yet.
//!
//! Owns: folding delivered events into that state and keeping the DOM in step with it. Does not own:
//! the connection or any request (demo.ts), a message's own drawing (row.ts), or the thread panel
//! (thread.ts). It learns of events through `apply`, which the SDK calls once per event, in seq order;
//! of messages through `showMessage`, from the SDK's message list (which applies edits, deletes, streamed
//! text, reply counts, pins and reaction counts); of typing and presence through `setTyping` and
//! `setPresent`.
//!
//! Element hooks (the end-to-end test relies on them; a row's own are in row.ts):
//!   #messages > li[data-seq]             one per message (not thread replies) or note, never twice
//!   li.note[data-type]                   a join, leave or rename, in words
//!   #typing[data-users]                  "alice is typing…", hidden when nobody is
//!   #present[data-count] > [data-user]   who is here (watching the chat now)
//!   .reads[data-read-count]              members other than the author whose read position is >= seq
//!   #pending > li[data-client-id]        a send not yet stored; data-failed when it gave up
//!   #members                             the members count; #readers [data-user][data-seq] each member's
//!                                        read position (shown with "details" on)

import type { ChatEvent, Message, MessageChange, PresenceState } from '../../sdk/ts/src/index.ts';
import { MessageRow, type RowActions, type RowContext } from './row.ts';

/** The elements a view draws into. */
export interface ViewElements {
  messages: HTMLOListElement;
  pending: HTMLOListElement;
  members: HTMLElement;
  readers: HTMLElement;
  typing: HTMLElement;
  present: HTMLElement;
}

/** A read marker names readers one by one up to this many, then only counts them. */
const MAX_NAMED_READERS = 3;

/** Scrolled within this many pixels of the bottom counts as "at the bottom", which keeps following. */
const STICKY_SCROLL_PX = 40;

/** The state of one chat as seen by user `me`, drawn into `els`. */
export class ChatView {
  /** Rows by seq: the guard that no event is ever shown twice. */
  private readonly rows = new Map<number, HTMLLIElement>();
  /** Message rows by seq, in seq order (Map keeps insertion order and messages arrive in order). */
  private readonly shown = new Map<number, MessageRow>();
  /** target seq -> the emoji this user has on it now, from this user's reaction events. */
  private readonly mine = new Map<number, Set<string>>();
  /** user -> read position. */
  private readonly readPos = new Map<string, number>();
  /** Sends not yet stored, by client_id. */
  private readonly pendingRows = new Map<string, HTMLLIElement>();
  /** The members count as of `membersAt`; join and leave events after that seq adjust it. */
  private members: number | null = null;
  private membersAt = 0;
  /** The highest seq of a message (thread replies too) or system event: what reading up to now means. */
  private latestReadable = 0;
  /**
   * The latest run of joins (or leaves) with nothing between them: drawn as one line on its first row
   * ("ann, bob and 53 others joined"), the run's other rows kept (each seq has its row) but hidden.
   */
  private run: { type: string; head: HTMLLIElement; last: HTMLLIElement; users: string[] } | null = null;
  /** What every row (here and in the thread panel) needs besides its message. */
  readonly rowContext: RowContext;
  /** The chat was scrolled to its end when last scrolled (by the user or by following new rows). */
  private following = true;

  constructor(
    private readonly els: ViewElements,
    private readonly me: string,
    actions: RowActions,
    lookup: (seq: number) => Message | undefined,
  ) {
    this.rowContext = {
      me,
      actions,
      inThread: false,
      lookup,
      myReactions: (seq) => this.mine.get(seq) ?? new Set(),
      imageLoaded: () => this.scrollToEnd(this.following),
    };
    // Whether the user is at the end of the chat, kept as they scroll: an image that loads after its row
    // was drawn makes the chat taller without a scroll, and the chat should still show its end then.
    const box = els.messages.parentElement;
    if (box !== null) box.onscroll = () => (this.following = this.atBottom());
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

  /**
   * Folds one delivered event into the page; answers the target whose reactions by this user changed
   * (so the thread panel can redraw it too), or null.
   */
  apply(ev: ChatEvent): number | null {
    if (this.rows.has(ev.seq)) return null; // the SDK delivers once; this keeps the page honest regardless
    switch (ev.type) {
      case 'join':
      case 'leave':
        this.addPeopleNote(ev);
        if (this.members !== null && ev.seq > this.membersAt) {
          this.members = Math.max(0, this.members + (ev.type === 'join' ? 1 : -1));
          this.membersAt = ev.seq;
          this.els.members.textContent = String(this.members);
        }
        return null;
      case 'profile':
        this.addNote(ev, profileNote(ev.user, (ev.body as { name?: unknown } | null)?.name));
        return null;
      case 'reaction':
        return this.applyReaction(ev);
      case 'read':
        this.applyRead(ev);
        return null;
      default:
        // message, system, edit, delete, pin: drawn from the SDK's message list, through showMessage
        return null;
    }
  }

  /** A message was added to the chat's message list or changed. */
  showMessage({ kind, message }: MessageChange): void {
    if (kind === 'added') this.latestReadable = Math.max(this.latestReadable, message.seq);
    if (message.thread !== undefined) return; // a reply: the thread panel's; its root shows the count
    const row = this.shown.get(message.seq);
    if (row !== undefined) {
      const stick = this.atBottom(); // a streamed reply grows at the bottom: keep following it
      row.draw(message, kind);
      this.scrollToEnd(stick);
    } else if (kind === 'added' && !this.rows.has(message.seq)) this.addMessage(message);
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

  /** Scrolls `seq`'s row into view and outlines it for a moment (a pinned message picked from the list). */
  reveal(seq: number): boolean {
    const row = this.shown.get(seq);
    if (row === undefined) return false;
    row.el.scrollIntoView({ block: 'center' });
    row.el.classList.add('flash');
    setTimeout(() => row.el.classList.remove('flash'), 1500);
    return true;
  }

  // ---- messages ---------------------------------------------------------------------------------

  private addMessage(message: Message): void {
    const stick = this.atBottom();
    const row = new MessageRow(message, this.rowContext);
    this.rows.set(message.seq, row.el);
    this.shown.set(message.seq, row);
    this.drawReads(row);
    this.els.messages.append(row.el);
    if (message.user === this.me && message.client_id !== undefined) this.dropPending(message.client_id);
    this.scrollToEnd(stick);
  }

  private addNote(ev: ChatEvent, text: string): HTMLLIElement {
    const stick = this.atBottom();
    const li = document.createElement('li');
    li.className = 'note';
    li.dataset.seq = String(ev.seq);
    li.dataset.type = ev.type;
    li.textContent = text;
    this.rows.set(ev.seq, li);
    this.els.messages.append(li);
    this.scrollToEnd(stick);
    return li;
  }

  /** A join or leave: its own line, or one more name on the line of the run it continues. */
  private addPeopleNote(ev: ChatEvent): void {
    const user = ev.user ?? 'someone';
    const verb = ev.type === 'join' ? 'joined' : 'left';
    const run = this.run;
    // A run goes on only while its last row is still the chat's last: a message or another note ends it.
    const continues = run !== null && run.type === ev.type && this.els.messages.lastElementChild === run.last;
    const li = this.addNote(ev, `${user} ${verb}`);
    if (!continues) {
      this.run = { type: ev.type, head: li, last: li, users: [user] };
      return;
    }
    li.hidden = true;
    run.last = li;
    run.users.push(user);
    const [first, second] = run.users;
    const others = run.users.length - 2;
    run.head.textContent =
      others === 0 ? `${first} and ${second} ${verb}` : `${first}, ${second} and ${others} other${others === 1 ? '' : 's'} ${verb}`;
  }

  private dropPending(clientId: string): void {
    this.pendingRows.get(clientId)?.remove();
    this.pendingRows.delete(clientId);
  }

  // ---- reactions: the counts are the list's; which ones are this user's, the events' ------------

  private applyReaction(ev: ChatEvent): number | null {
    const body = ev.body as { target?: unknown; emoji?: unknown; on?: unknown } | null;
    if (body === null || typeof body.target !== 'number' || typeof body.emoji !== 'string' || ev.user !== this.me) return null;
    let set = this.mine.get(body.target);
    if (set === undefined) {
      set = new Set();
      this.mine.set(body.target, set);
    }
    if (body.on === false) set.delete(body.emoji);
    else set.add(body.emoji);
    this.shown.get(body.target)?.drawReactions();
    return body.target;
  }

  // ---- read markers -----------------------------------------------------------------------------

  private applyRead(ev: ChatEvent): void {
    const body = ev.body as { seq?: unknown; thread?: unknown } | null;
    // A read in a thread is that thread's position, not the chat's.
    if (body === null || typeof body.seq !== 'number' || body.thread !== undefined || ev.user === undefined) return;
    const before = this.readPos.get(ev.user) ?? 0;
    if (body.seq <= before) return; // positions only move forward
    this.readPos.set(ev.user, body.seq);
    // Only messages between the old and the new position change their count.
    for (const m of this.shown.values()) if (m.seq > before && m.seq <= body.seq) this.drawReads(m);
    this.drawReaders();
  }

  /** "read by N" under a message: members other than its author who have read at least that far. */
  private drawReads(m: MessageRow): void {
    const readers: string[] = [];
    for (const [user, pos] of this.readPos) if (user !== m.user && pos >= m.seq) readers.push(user);
    readers.sort();
    const el = m.readsEl;
    el.dataset.readCount = String(readers.length);
    el.title = readers.join(', ');
    if (readers.length === 0) el.textContent = '';
    else if (readers.length <= MAX_NAMED_READERS) el.textContent = `✓ seen by ${readers.join(', ')}`;
    else el.textContent = `✓ seen by ${readers.length}`;
  }

  /** Each member's read position, as chips in the details. */
  private drawReaders(): void {
    const chips = [...this.readPos].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([user, pos]) => {
      const chip = span('reader', `${user} #${pos}`);
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

/** A `profile` event in words; one without a user came through the server API (the app did it). */
function profileNote(user: string | undefined, name: unknown): string {
  const change = typeof name === 'string' ? `renamed the chat to "${name}"` : name === null ? "took the chat's name away" : 'changed the chat';
  return `${user ?? 'The app'} ${change}`;
}

function span(className: string, text: string): HTMLSpanElement {
  const s = document.createElement('span');
  s.className = className;
  s.textContent = text;
  return s;
}
