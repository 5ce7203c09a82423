//! The thread panel: a root message, its replies (oldest first, as the SDK's message list holds them
//! under the root), and a box to reply in the thread. Opening it loads the thread's replies from the
//! server, and reading it reports the user's read position in the thread.
//!
//! Owns: the panel's rows and its reply box. Does not own: the replies' delivery (they are events of
//! the chat, delivered by the chat's watch into the list; `showMessage` hears of them), sending (the
//! `reply` callback, demo.ts) or a row's drawing (row.ts).
//!
//! Element hooks (the end-to-end test relies on them):
//!   #thread-panel[data-root]             the open thread's root seq; hidden when closed
//!   #thread-root > li.msg                the root; #thread-messages > li.msg[data-seq] each reply

import type { Message, MessageChange, MessageList } from '../../sdk/ts/src/index.ts';
import { MessageRow, type RowContext } from './row.ts';

/** The panel's elements. */
export interface ThreadElements {
  panel: HTMLElement;
  root: HTMLElement;
  messages: HTMLOListElement;
  form: HTMLFormElement;
  text: HTMLInputElement;
}

/** What the panel asks of the page. */
export interface ThreadCalls {
  /** Sends `text` as a reply in the thread under `root`. */
  reply(root: number, text: string): void;
  /** Loads the thread's replies into the list (they may predate what the chat's watch replayed). */
  load(root: number): Promise<void>;
  /** Reports that the user has read the thread under `root` up to `seq`. */
  read(root: number, seq: number): void;
}

/** One chat's thread panel; at most one thread open at a time. */
export class ThreadView {
  private root: number | null = null;
  private rootRow: MessageRow | null = null;
  private readonly rows = new Map<number, MessageRow>();
  private readonly ctx: RowContext;

  constructor(
    private readonly els: ThreadElements,
    context: RowContext,
    private readonly list: MessageList,
    private readonly calls: ThreadCalls,
  ) {
    this.ctx = { ...context, inThread: true };
    els.form.onsubmit = (e) => {
      e.preventDefault();
      const text = els.text.value.trim();
      if (this.root === null || text === '') return;
      calls.reply(this.root, text);
      els.text.value = '';
    };
    this.close();
  }

  /** Shows the thread under `root`, with the replies held now, then those the server has. */
  open(root: number): void {
    const message = this.list.get(root);
    if (message === undefined) return;
    this.close();
    this.root = root;
    this.els.panel.dataset.root = String(root);
    this.rootRow = new MessageRow(message, this.ctx);
    this.els.root.replaceChildren(this.rootRow.el);
    for (const reply of this.list.thread(root)) this.add(reply);
    this.els.panel.hidden = false;
    this.els.text.focus();
    this.markRead();
    this.calls.load(root).then(
      () => {
        if (this.root !== root) return;
        for (const reply of this.list.thread(root)) if (!this.rows.has(reply.seq)) this.add(reply);
        this.markRead();
      },
      () => {}, // the replies held are shown; the chat's notice says what failed
    );
  }

  close(): void {
    this.root = null;
    this.rootRow = null;
    this.rows.clear();
    this.els.root.replaceChildren();
    this.els.messages.replaceChildren();
    this.els.panel.hidden = true;
    delete this.els.panel.dataset.root;
  }

  /** A message of the chat was added or changed: redraws it if it is this thread's root or one of its replies. */
  showMessage({ kind, message }: MessageChange): void {
    if (this.root === null) return;
    if (message.seq === this.root) {
      this.rootRow?.draw(message, kind);
      return;
    }
    if (message.thread !== this.root) return;
    const row = this.rows.get(message.seq);
    if (row !== undefined) row.draw(message, kind);
    else if (kind === 'added') {
      this.add(message);
      this.markRead();
    }
  }

  /** This user's reactions on `seq` changed. */
  redrawReactions(seq: number): void {
    (seq === this.root ? this.rootRow : this.rows.get(seq))?.drawReactions();
  }

  /** Inserts a reply in seq order (replies loaded late may be older than those shown). */
  private add(reply: Message): void {
    const row = new MessageRow(reply, this.ctx);
    this.rows.set(reply.seq, row);
    const next = [...this.els.messages.children].find((li) => Number((li as HTMLElement).dataset.seq) > reply.seq);
    this.els.messages.insertBefore(row.el, next ?? null);
    row.el.scrollIntoView({ block: 'nearest' });
  }

  private markRead(): void {
    if (this.root === null || document.visibilityState !== 'visible') return;
    const last = Math.max(0, ...this.rows.keys());
    if (last > 0) this.calls.read(this.root, last);
  }
}
