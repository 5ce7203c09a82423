//! The chat's two side panels: its members (the `members` op, a page at a time, "Show more" for the
//! next) and its pinned messages (the `pins` op, latest pin first; picking one shows it in the chat).
//!
//! Owns: drawing the panels and paging. Does not own: the requests (given as functions by demo.ts) or
//! when the pins change (demo.ts calls `refresh` on pin and delete events).
//!
//! Element hooks (the end-to-end test relies on them):
//!   #members-panel #member-list > li[data-user]   one per member loaded; #members-more while more
//!   #pin-count[data-count]                        how many messages are pinned
//!   #pins-panel #pin-list > li[data-seq]          a pinned message (data-seq: the message's seq)

import type { MembersOk, PinsOk } from '../../sdk/ts/src/index.ts';
import { messageText } from './text.ts';

/** Members asked for per page: enough for most chats at once, small enough to draw at once. */
export const MEMBERS_PAGE = 50;

/** Opens and closes a panel with its button; only one panel shows at a time. */
function toggle(panel: HTMLElement, show: boolean): void {
  if (show) for (const p of document.querySelectorAll<HTMLElement>('.panel')) p.hidden = true;
  panel.hidden = !show;
}

/** The members panel. */
export class MembersPanel {
  private cursor: string | undefined;
  private loading = false;

  constructor(
    private readonly els: { panel: HTMLElement; list: HTMLElement; more: HTMLButtonElement },
    private readonly me: string,
    private readonly page: (cursor: string | undefined) => Promise<MembersOk>,
    private readonly failed: (e: unknown) => void,
  ) {
    els.list.replaceChildren();
    els.more.hidden = true;
    els.more.onclick = () => void this.load(this.cursor);
    toggle(els.panel, false);
  }

  /** Opens the panel with the first page, fresh; closes it if open. */
  toggle(): void {
    if (!this.els.panel.hidden) {
      toggle(this.els.panel, false);
      return;
    }
    this.els.list.replaceChildren();
    toggle(this.els.panel, true);
    void this.load(undefined);
  }

  private async load(cursor: string | undefined): Promise<void> {
    if (this.loading) return;
    this.loading = true;
    try {
      const ok = await this.page(cursor);
      const items = ok.members.map(({ user }) => {
        const li = document.createElement('li');
        li.dataset.user = user;
        const name = document.createElement('span');
        name.textContent = user;
        li.append(name);
        if (user === this.me) {
          const you = document.createElement('span');
          you.className = 'label';
          you.textContent = 'you';
          li.append(you);
        }
        return li;
      });
      this.els.list.append(...items);
      this.cursor = ok.more ? ok.cursor : undefined;
      this.els.more.hidden = this.cursor === undefined;
    } catch (e) {
      this.failed(e);
    } finally {
      this.loading = false;
    }
  }
}

/** The pinned messages: a count in the chat's head, a list in a panel. */
export class PinsPanel {
  private timer: ReturnType<typeof setTimeout> | null = null;

  constructor(
    private readonly els: { panel: HTMLElement; list: HTMLElement; count: HTMLElement },
    private readonly pins: () => Promise<PinsOk>,
    private readonly reveal: (seq: number) => void,
    private readonly failed: (e: unknown) => void,
  ) {
    els.list.replaceChildren();
    this.drawCount(0);
    toggle(els.panel, false);
  }

  toggle(): void {
    toggle(this.els.panel, this.els.panel.hidden);
    if (!this.els.panel.hidden) this.refresh();
  }

  /** Asks for the pins again soon: a burst of pin events costs one request. */
  refresh(): void {
    if (this.timer !== null) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      this.pins().then((ok) => this.draw(ok), this.failed);
    }, 100);
  }

  stop(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
  }

  private draw({ pins }: PinsOk): void {
    this.drawCount(pins.length);
    const items = pins.map(({ message, user }) => {
      const li = document.createElement('li');
      li.dataset.seq = String(message.seq);
      const who = document.createElement('span');
      who.className = 'who';
      who.textContent = message.user ?? 'system';
      const text = document.createElement('span');
      text.className = 'text';
      text.textContent = messageText(message.body);
      li.append(who, text);
      li.title = `pinned by ${user}`;
      li.addEventListener('click', () => {
        toggle(this.els.panel, false);
        this.reveal(message.seq);
      });
      return li;
    });
    this.els.list.replaceChildren(...items);
  }

  private drawCount(n: number): void {
    this.els.count.dataset.count = String(n);
    this.els.count.textContent = String(n);
  }
}
