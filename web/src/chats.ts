//! The page's chat list: this user's chats from the SDK's inbox, latest activity first, each under its
//! name (the chat's profile name, else its id), with its unread count, its unread mentions of this user
//! and the new replies in threads this user follows as badges, the open one marked; clicking one opens
//! it.
//!
//! Owns: drawing the list and the names it knows. Does not own: the inbox (the SDK keeps it live and
//! resyncs it after reconnects) or opening a chat (demo.ts, through `open`).
//!
//! Names: an inbox page carries each chat's profile, but live pushes do not, so a chat renamed while
//! listed keeps its old name here until the next page (after a reconnect), unless it is the open chat,
//! whose profile events demo.ts passes to `setName`.
//!
//! Element hooks (the end-to-end test relies on them):
//!   #chats > li[data-chat]                  one per chat; aria-current="true" on the open one
//!   li[data-chat] .chat-name                the name shown; data-name-set when the profile names it
//!   li[data-chat] .unread[data-unread]      the unread count; hidden at 0
//!   li[data-chat] .mentions[data-mentions]  unread messages that mention this user; hidden at 0
//!   li[data-chat] .threads[data-threads]    unread replies in the threads this user follows; hidden at 0

import type { InboxItem } from '../../sdk/ts/src/index.ts';

/** Draws inbox entries into `el`. */
export class ChatList {
  /** chat -> its name (null: none set), from profiles newer than the inbox page's. */
  private readonly names = new Map<string, string | null>();
  private items: InboxItem[] = [];
  private current = '';

  constructor(
    private readonly el: HTMLElement,
    private readonly open: (chat: string) => void,
  ) {
    el.replaceChildren();
  }

  /** The name `chat` goes by on the page: its profile's name, else its id. */
  nameOf(chat: string): string {
    const known = this.names.get(chat);
    if (known !== undefined) return known ?? chat;
    return this.items.find((i) => i.chat === chat)?.profile?.name ?? chat;
  }

  /** A newer profile name of `chat` (the open one's, from its profile events); null: none set. */
  setName(chat: string, name: string | null): void {
    this.names.set(chat, name);
    this.redraw();
  }

  /** Redraws the list: `items` as the inbox orders them, `current` marked. */
  draw(items: InboxItem[], current: string): void {
    this.items = items;
    this.current = current;
    this.redraw();
  }

  private redraw(): void {
    const rows = this.items.map((item) => {
      const li = document.createElement('li');
      li.dataset.chat = item.chat;
      if (item.chat === this.current) li.setAttribute('aria-current', 'true');
      const name = document.createElement('button');
      name.type = 'button';
      name.className = 'chat-name';
      name.textContent = this.nameOf(item.chat);
      if (name.textContent !== item.chat) name.dataset.nameSet = 'true';
      name.title = item.chat;
      name.addEventListener('click', () => this.open(item.chat));
      const mentions = badge('mentions', `@${item.mentions}`, item.mentions, `${item.mentions} mention${item.mentions === 1 ? '' : 's'} of you`);
      mentions.dataset.mentions = String(item.mentions);
      const unread = badge('unread', String(item.unread), item.unread, `${item.unread} unread`);
      unread.dataset.unread = String(item.unread);
      const threads = badge('threads', `↳${item.threads}`, item.threads, `${item.threads} new repl${item.threads === 1 ? 'y' : 'ies'} in threads you follow`);
      threads.dataset.threads = String(item.threads);
      li.append(name, mentions, unread, threads);
      return li;
    });
    this.el.replaceChildren(...rows);
  }
}

function badge(className: string, text: string, n: number, title: string): HTMLSpanElement {
  const b = document.createElement('span');
  b.className = className;
  b.textContent = text;
  b.hidden = n === 0;
  b.title = title;
  return b;
}
