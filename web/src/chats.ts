//! The page's chat list: this user's chats from the SDK's inbox, latest activity first, each with its
//! unread count as a badge, the open one marked; clicking one opens it.
//!
//! Owns: drawing the list. Does not own: the inbox (the SDK keeps it live and resyncs it after
//! reconnects) or opening a chat (demo.ts, through `open`).
//!
//! Element hooks (the end-to-end test relies on them):
//!   #chats > li[data-chat]               one per chat; aria-current="true" on the open one
//!   li[data-chat] .unread[data-unread]   the unread count; hidden at 0

import type { InboxItem } from '../../sdk/ts/src/index.ts';

/** Draws inbox entries into `el`. */
export class ChatList {
  constructor(
    private readonly el: HTMLElement,
    private readonly open: (chat: string) => void,
  ) {
    el.replaceChildren();
  }

  /** Redraws the list: `items` as the inbox orders them, `current` marked. */
  draw(items: InboxItem[], current: string): void {
    const rows = items.map((item) => {
      const li = document.createElement('li');
      li.dataset.chat = item.chat;
      if (item.chat === current) li.setAttribute('aria-current', 'true');
      const name = document.createElement('button');
      name.type = 'button';
      name.className = 'chat-name';
      name.textContent = item.chat;
      name.addEventListener('click', () => this.open(item.chat));
      const badge = document.createElement('span');
      badge.className = 'unread';
      badge.dataset.unread = String(item.unread);
      badge.textContent = String(item.unread);
      badge.hidden = item.unread === 0;
      badge.title = `${item.unread} unread`;
      li.append(name, badge);
      return li;
    });
    this.el.replaceChildren(...rows);
  }
}
