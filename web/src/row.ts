//! One message as drawn, in the chat or in a thread: who and when, a pinned mark, what it quotes, its
//! text with mentions highlighted (growing while its sender streams it), its files (images inline,
//! others as download links: files.ts), reaction counts, the thread's
//! reply count and a Reply button (in the chat), Pin and Unpin, Quote, and Edit and Delete on one's own.
//!
//! Owns: building one row and redrawing it from the SDK's `Message` (its latest state: edits, deletes,
//! streamed text, replies, pins and reaction counts applied by the message list). Does not own: which
//! rows exist or in what order (view.ts, thread.ts), read markers (view.ts), or any request (the
//! actions, given by demo.ts).
//!
//! Element hooks (the end-to-end test relies on them):
//!   li.msg[data-seq][data-user]            data-edited, data-deleted, data-pinned, data-stream (open, done)
//!   .text (mark.mention[data-user] inside)  .quote[data-quote] what it quotes; .writing while streaming
//!   .files                                 the message's files (hooks in files.ts)
//!   button.react[data-emoji]               data-count (the list's count), aria-pressed (mine)
//!   button.replies[data-replies]           "N replies": opens the thread; button.reply starts one
//!   button.pin[aria-pressed]               pins and unpins; .pinned-mark shows while pinned
//!   button.quote-it                        quotes the message in the next one sent
//!   button.edit, button.delete             on one's own messages; form.edit-form > input.edit-text

import type { Message } from '../../sdk/ts/src/index.ts';
import { drawFiles, filesKey } from './files.ts';
import { drawText, messageText } from './text.ts';

/** The reactions offered on every message: the wire value and how it is drawn. */
export const REACTIONS: ReadonlyArray<{ emoji: string; label: string }> = [
  // Plain symbols rather than emoji pictures, so they draw with the fonts every system has.
  { emoji: '+1', label: '+1' },
  { emoji: 'heart', label: '♥' },
  { emoji: 'star', label: '★' },
];

/** What a row's buttons do; `target` is the message's seq. */
export interface RowActions {
  react(target: number, emoji: string, on: boolean): void;
  edit(target: number, text: string): void;
  delete(target: number): void;
  pin(target: number, on: boolean): void;
  /** Quotes `target` in the next message sent from the message box. */
  quote(target: number): void;
  /** Opens the thread under `root` (the Reply button and the reply count). */
  openThread(root: number): void;
}

/** What a row needs besides its message. */
export interface RowContext {
  me: string;
  actions: RowActions;
  /** Whether the row is a thread's reply or root in the thread panel (no Reply button, no reply count). */
  inThread: boolean;
  /** A message of the chat by seq, to show what a message quotes. */
  lookup(seq: number): Message | undefined;
  /** The emoji this user has on `seq` now. */
  myReactions(seq: number): ReadonlySet<string>;
  /** An image of a row finished loading (the row grew): the view keeps following the chat's end. */
  imageLoaded?(): void;
}

function el<K extends keyof HTMLElementTagNameMap>(tag: K, className: string, text = ''): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  e.className = className;
  e.textContent = text;
  return e;
}

function button(className: string, text: string, onClick: () => void): HTMLButtonElement {
  const b = el('button', className, text);
  b.type = 'button';
  b.addEventListener('click', onClick);
  return b;
}

/** One message's row. */
export class MessageRow {
  readonly el: HTMLLIElement;
  /** Where the view draws "read by ..."; empty in a thread. */
  readonly readsEl: HTMLElement;
  private readonly pinnedEl: HTMLElement;
  private readonly quoteEl: HTMLElement;
  private readonly textEl: HTMLElement;
  private readonly writingEl: HTMLElement;
  private readonly filesEl: HTMLElement;
  /** What `filesEl` shows, so that a redraw for a reaction does not reload the images. */
  private filesShown: string | null = null;
  private readonly reactionsEl: HTMLElement;
  private readonly threadEl: HTMLElement;
  private readonly pinEl: HTMLElement;
  private readonly ownEl: HTMLElement;
  private message: Message;

  constructor(
    message: Message,
    private readonly ctx: RowContext,
  ) {
    this.message = message;
    const user = message.user ?? 'system';
    const li = el('li', message.type === 'system' ? 'msg system' : user === ctx.me ? 'msg mine' : 'msg');
    li.dataset.seq = String(message.seq);
    li.dataset.user = user;
    if (message.client_id !== undefined) li.dataset.clientId = message.client_id;

    const head = el('div', 'head');
    const time = el('time', '');
    time.dateTime = new Date(message.ts).toISOString();
    time.textContent = new Date(message.ts).toLocaleTimeString();
    this.pinnedEl = el('span', 'pinned-mark', 'Pinned');
    // The seq is the protocol's; it shows with "details" on.
    head.append(el('span', 'who', user), time, this.pinnedEl, el('span', 'seq detail', `#${message.seq}`));

    this.quoteEl = el('span', 'quote');
    this.textEl = el('span', 'text');
    this.writingEl = el('span', 'writing', 'writing…');
    this.filesEl = el('div', 'files');
    const foot = el('div', 'foot');
    this.reactionsEl = el('span', 'reactions');
    this.threadEl = el('span', 'thread-links');
    this.pinEl = el('span', 'pin-links');
    this.readsEl = el('span', 'reads');
    this.ownEl = el('span', 'own');
    foot.append(this.reactionsEl, this.threadEl, this.pinEl, this.readsEl, this.ownEl);
    li.append(head, this.quoteEl, this.textEl, this.filesEl, this.writingEl, foot);
    this.el = li;
    this.draw(message, 'added');
  }

  get seq(): number {
    return this.message.seq;
  }

  get user(): string {
    return this.message.user ?? 'system';
  }

  /** Redraws from the message's latest state; `kind` is the list's change (an edit closes the edit form). */
  draw(message: Message, kind: string): void {
    this.message = message;
    const { el: li, ctx } = this;
    if (kind === 'edited' || kind === 'deleted') li.querySelector('form.edit-form')?.remove();
    const editing = li.querySelector('form.edit-form') !== null;
    this.textEl.hidden = editing;

    if (message.deleted) {
      li.dataset.deleted = 'true';
      this.textEl.textContent = 'message deleted';
    } else {
      drawText(this.textEl, messageText(message.body), message.mentions, ctx.me);
    }
    if (message.edited !== undefined && !message.deleted && message.stream === undefined) {
      li.dataset.edited = String(message.edited);
      this.textEl.dataset.mark = 'edited';
    } else {
      // A deleted message was perhaps edited first; a finished stream's end is an edit, not a correction.
      delete li.dataset.edited;
      delete this.textEl.dataset.mark;
    }
    const files = message.deleted ? undefined : message.files;
    if (filesKey(files) !== this.filesShown) {
      this.filesShown = filesKey(files);
      drawFiles(this.filesEl, files, () => ctx.imageLoaded?.());
    }
    if (message.stream !== undefined) li.dataset.stream = message.stream;
    this.writingEl.hidden = message.stream !== 'open' || message.deleted;

    const quoted = message.quote === undefined ? undefined : ctx.lookup(message.quote);
    this.quoteEl.hidden = message.quote === undefined;
    if (message.quote !== undefined) {
      this.quoteEl.dataset.quote = String(message.quote);
      this.quoteEl.textContent = quoted === undefined ? 'an earlier message' : `${quoted.user ?? 'system'}: ${quoted.deleted ? 'message deleted' : messageText(quoted.body)}`;
    }

    if (message.pinned) li.dataset.pinned = 'true';
    else delete li.dataset.pinned;
    this.pinnedEl.hidden = !message.pinned;

    this.drawReactions();
    this.drawThread();
    const canAct = message.type === 'message' && !message.deleted;
    if (canAct) {
      const pin = button('pin', message.pinned ? 'Unpin' : 'Pin', () => ctx.actions.pin(message.seq, !message.pinned));
      pin.setAttribute('aria-pressed', String(message.pinned));
      this.pinEl.replaceChildren(pin, button('quote-it', 'Quote', () => ctx.actions.quote(message.seq)));
    } else {
      this.pinEl.replaceChildren();
    }
    const own = canAct && message.user === ctx.me && message.stream !== 'open';
    this.ownEl.replaceChildren(
      ...(own ? [button('edit', 'Edit', () => this.startEdit()), button('delete', 'Delete', () => ctx.actions.delete(message.seq))] : []),
    );
  }

  /** The offered reactions always, then any other emoji someone used, each with the list's count. */
  drawReactions(): void {
    const { message, ctx } = this;
    if (message.deleted) {
      this.reactionsEl.replaceChildren();
      return;
    }
    const counts = message.reactions ?? {};
    const mine = ctx.myReactions(message.seq);
    const emojis = REACTIONS.map((r) => r.emoji);
    for (const e of Object.keys(counts)) if (!emojis.includes(e)) emojis.push(e);
    const buttons = emojis.map((emoji) => {
      const count = counts[emoji] ?? 0;
      const on = mine.has(emoji);
      const label = REACTIONS.find((r) => r.emoji === emoji)?.label ?? emoji;
      const b = button('react', count > 0 ? `${label} ${count}` : label, () => ctx.actions.react(message.seq, emoji, !on));
      b.dataset.emoji = emoji;
      b.dataset.count = String(count);
      b.setAttribute('aria-pressed', String(on));
      b.title = count === 1 ? '1 person' : count > 1 ? `${count} people` : `react with ${label}`;
      return b;
    });
    this.reactionsEl.replaceChildren(...buttons);
  }

  /** In the chat: "N replies" (opens the thread) or a Reply button that starts one. */
  private drawThread(): void {
    const { message, ctx } = this;
    if (ctx.inThread || message.type !== 'message' || message.thread !== undefined) {
      this.threadEl.replaceChildren();
      return;
    }
    const count = message.replies?.count ?? 0;
    const parts: HTMLElement[] = [];
    if (count > 0) {
      const b = button('replies', count === 1 ? '1 reply' : `${count} replies`, () => ctx.actions.openThread(message.seq));
      b.dataset.replies = String(count);
      parts.push(b);
    }
    if (!message.deleted) parts.push(button('reply', 'Reply', () => ctx.actions.openThread(message.seq)));
    this.threadEl.replaceChildren(...parts);
  }

  /** Swaps the text for a one-line form; Enter saves through the actions, Escape gives up. */
  private startEdit(): void {
    const li = this.el;
    if (li.querySelector('form.edit-form') !== null) return;
    const form = el('form', 'edit-form');
    const input = el('input', 'edit-text');
    input.value = messageText(this.message.body);
    input.maxLength = 4000;
    form.append(input);
    const close = () => {
      form.remove();
      this.textEl.hidden = false;
    };
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      const text = input.value.trim();
      const before = messageText(this.message.body);
      close();
      if (text !== '' && text !== before) this.ctx.actions.edit(this.message.seq, text);
    });
    input.addEventListener('keydown', (e) => {
      if (e.key !== 'Escape') return;
      e.preventDefault(); // gives up the edit only, not the panel it is in
      close();
    });
    this.textEl.hidden = true;
    this.textEl.after(form);
    input.focus();
  }
}
