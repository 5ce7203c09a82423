//! The admin page's support panels: find a chat by the start of its id and see its profile, members and
//! latest events, delete a message, ban, unban, mute and unmute a user in it; find a user and see their
//! chats, revoke their tokens, download their data export, and erase them once the person has typed
//! the user id.
//!
//! Owns: those panels' state and drawing. Everything is a server API call with the key (api.ts), and
//! every text that comes from users (ids, names, bodies) is drawn with textContent, never as markup.
//! Does not own: the key (admin.ts), or what the server does (the routes' own documentation).
//!
//! Element hooks (web/test/admin.test.mjs relies on them):
//!   #support-ws                                  the workspace every panel works in
//!   #chat-prefix, #chat-find                     find chats; #chat-results li > button.chat-result[data-chat]
//!   #chat-detail                                 #chat-id, #chat-name, #chat-image, #chat-data, #chat-open,
//!                                                #chat-members-count, #chat-seq
//!   #chat-members tr[data-user]                  button[data-action=ban|unban|mute|unmute]
//!   #member-user, #member-form button[data-action]  the same for any user id
//!   #chat-events tr[data-seq][data-type]         data-deleted; td.body; button.delete-event
//!   #chat-notice, #chat-error                    what the last action did or why it failed
//!   #user-id, #user-find, #user-detail           #user-chats tr[data-chat] > button.open-chat
//!   #user-revoke, #user-export, #user-download   the export's file (a.download) once made
//!   #erase-confirm, #user-erase                  enabled only when the text is the user id
//!   #user-notice, #user-error

import { Refused, call, request } from './api.ts';

/** Chats listed per search; members and events shown per chat; chats shown per user. */
const CHATS_PAGE = 20;
const MEMBERS_SHOWN = 100;
const EVENTS_SHOWN = 50;
const USER_CHATS_SHOWN = 200;

/** A chat as the server API answers it. */
interface ChatView {
  chat: string;
  seq: number;
  members: number;
  open: boolean;
  name?: string | null;
  image?: string | null;
  data?: unknown;
}

interface ChatsOk {
  chats: ChatView[];
  more: boolean;
  cursor?: string;
}

interface MembersOk {
  members: Array<{ user: string; read: number }>;
  count: number;
  more: boolean;
}

interface StoredEvent {
  seq: number;
  type: string;
  user?: string;
  ts: number;
  body: unknown;
  deleted?: boolean;
  edited?: number;
}

interface InboxOk {
  chats: Array<{ chat: string; read: number; unread: number; profile?: { name?: string | null } }>;
  more: boolean;
}

/** What moderation buttons do: the route and the words said after. */
const ACTIONS: Record<string, { method: 'PUT' | 'DELETE'; route: 'bans' | 'mutes'; done: string }> = {
  ban: { method: 'PUT', route: 'bans', done: 'banned from' },
  unban: { method: 'DELETE', route: 'bans', done: 'unbanned in' },
  mute: { method: 'PUT', route: 'mutes', done: 'muted in' },
  unmute: { method: 'DELETE', route: 'mutes', done: 'unmuted in' },
};

function $<T extends HTMLElement>(id: string): T {
  const el = document.getElementById(id);
  if (el === null) throw new Error(`admin.html lacks #${id}`);
  return el as T;
}

function show(el: HTMLElement, text: string | null): void {
  el.hidden = text === null;
  el.textContent = text ?? '';
}

function cell(text: string, className?: string): HTMLTableCellElement {
  const td = document.createElement('td');
  td.textContent = text;
  if (className !== undefined) td.className = className;
  return td;
}

function button(text: string, className: string, onClick: () => void): HTMLButtonElement {
  const b = document.createElement('button');
  b.type = 'button';
  b.className = className;
  b.textContent = text;
  b.addEventListener('click', onClick);
  return b;
}

/** A JSON value as one line of text: strings as they are, anything else as JSON. */
function asText(v: unknown): string {
  if (v === null || v === undefined) return '';
  return typeof v === 'string' ? v : JSON.stringify(v);
}

const enc = encodeURIComponent;

/** The support panels; `key()` is the signed-in key (null when signed out), `refused` signs out. */
export class Support {
  private readonly ui = {
    ws: $<HTMLInputElement>('support-ws'),
    wsForm: $<HTMLFormElement>('ws-form'),
    chatFind: $<HTMLFormElement>('chat-find'),
    chatPrefix: $<HTMLInputElement>('chat-prefix'),
    chatError: $('chat-error'),
    chatNotice: $('chat-notice'),
    chatResults: $('chat-results'),
    chatNone: $('chat-none'),
    chatMore: $<HTMLButtonElement>('chat-more'),
    chatDetail: $('chat-detail'),
    chatId: $('chat-id'),
    chatName: $('chat-name'),
    chatImage: $('chat-image'),
    chatData: $('chat-data'),
    chatOpen: $('chat-open'),
    chatMembersCount: $('chat-members-count'),
    chatSeq: $('chat-seq'),
    chatMembers: $('chat-members'),
    chatMembersMore: $('chat-members-more'),
    memberForm: $<HTMLFormElement>('member-form'),
    memberUser: $<HTMLInputElement>('member-user'),
    chatEvents: $('chat-events'),
    chatReload: $<HTMLButtonElement>('chat-reload'),
    userFind: $<HTMLFormElement>('user-find'),
    userId: $<HTMLInputElement>('user-id'),
    userError: $('user-error'),
    userNotice: $('user-notice'),
    userDetail: $('user-detail'),
    userName: $('user-name'),
    userChats: $('user-chats'),
    userNoChats: $('user-no-chats'),
    userChatsMore: $('user-chats-more'),
    userRevoke: $<HTMLButtonElement>('user-revoke'),
    userExport: $<HTMLButtonElement>('user-export'),
    userDownload: $<HTMLAnchorElement>('user-download'),
    eraseForm: $<HTMLFormElement>('erase-form'),
    eraseConfirm: $<HTMLInputElement>('erase-confirm'),
    userErase: $<HTMLButtonElement>('user-erase'),
  };
  /** The search shown: its workspace and prefix, and where its next page starts. */
  private search: { ws: string; prefix: string; cursor: string | null } | null = null;
  /** The chat shown, and the user shown, each with its workspace. */
  private chat: { ws: string; chat: string } | null = null;
  private user: { ws: string; user: string } | null = null;
  private downloadUrl: string | null = null;

  constructor(
    private readonly key: () => string | null,
    private readonly refused: (why: string) => void,
  ) {
    const u = this.ui;
    u.wsForm.addEventListener('submit', (e) => {
      e.preventDefault();
      u.chatPrefix.focus();
    });
    u.chatFind.addEventListener('submit', (e) => {
      e.preventDefault();
      void this.findChats(false);
    });
    u.chatMore.addEventListener('click', () => void this.findChats(true));
    u.chatReload.addEventListener('click', () => this.chat !== null && void this.openChat(this.chat.ws, this.chat.chat));
    u.memberForm.addEventListener('submit', (e) => e.preventDefault());
    for (const b of u.memberForm.querySelectorAll<HTMLButtonElement>('button[data-action]')) {
      b.addEventListener('click', () => {
        const user = u.memberUser.value.trim();
        if (user === '') {
          show(u.chatError, 'Type the user id first.');
          u.memberUser.focus();
          return;
        }
        void this.moderate(b.dataset.action ?? '', user);
      });
    }
    u.userFind.addEventListener('submit', (e) => {
      e.preventDefault();
      const ws = this.workspace();
      const user = u.userId.value.trim();
      if (ws !== null && user !== '') void this.openUser(ws, user);
    });
    u.userRevoke.addEventListener('click', () => void this.revoke());
    u.userExport.addEventListener('click', () => void this.exportUser());
    u.eraseConfirm.addEventListener('input', () => this.checkConfirmation());
    u.eraseForm.addEventListener('submit', (e) => {
      e.preventDefault();
      void this.erase();
    });
  }

  /** Forgets everything shown (on sign-out). */
  reset(): void {
    const u = this.ui;
    this.search = this.chat = this.user = null;
    u.chatResults.replaceChildren();
    u.chatMore.hidden = u.chatNone.hidden = u.chatDetail.hidden = u.userDetail.hidden = true;
    for (const el of [u.chatError, u.chatNotice, u.userError, u.userNotice]) show(el, null);
    this.dropDownload();
  }

  private workspace(): string | null {
    const ws = this.ui.ws.value.trim();
    if (ws === '') {
      show(this.ui.chatError, 'Type the workspace first.');
      this.ui.ws.focus();
      return null;
    }
    return ws;
  }

  /** Runs a call with the key; a refused key signs out, any other failure is shown in `errorEl`. */
  private async guarded<T>(errorEl: HTMLElement, what: string, f: (key: string) => Promise<T>): Promise<T | null> {
    const key = this.key();
    if (key === null) return null;
    try {
      const out = await f(key);
      show(errorEl, null);
      return out;
    } catch (e) {
      if (e instanceof Refused) this.refused(e.message);
      else show(errorEl, `${what} failed: ${(e as Error).message}`);
      return null;
    }
  }

  private async findChats(more: boolean): Promise<void> {
    const u = this.ui;
    if (!more) {
      const ws = this.workspace();
      const prefix = u.chatPrefix.value.trim();
      if (ws === null || prefix === '') return;
      this.search = { ws, prefix, cursor: null };
      u.chatResults.replaceChildren();
    }
    const s = this.search;
    if (s === null) return;
    const cursor = s.cursor === null ? '' : `&cursor=${enc(s.cursor)}`;
    const page = await this.guarded(u.chatError, 'Finding chats', (key) =>
      call<ChatsOk>(key, 'GET', `/v1/workspaces/${enc(s.ws)}/chats?prefix=${enc(s.prefix)}&limit=${CHATS_PAGE}${cursor}`),
    );
    if (page === null || this.search !== s) return;
    s.cursor = page.cursor ?? null;
    for (const c of page.chats) {
      const li = document.createElement('li');
      const label = c.name ? `${c.chat} (${c.name})` : c.chat;
      const b = button(`${label}: ${c.members} member(s)`, 'secondary chat-result', () => void this.openChat(s.ws, c.chat));
      b.dataset.chat = c.chat;
      li.append(b);
      u.chatResults.append(li);
    }
    u.chatNone.hidden = u.chatResults.childElementCount !== 0;
    u.chatMore.hidden = !page.more;
    u.chatResults.querySelector<HTMLButtonElement>('button')?.focus();
  }

  /** Shows a chat: its profile, its first members and its latest events. */
  async openChat(ws: string, chat: string): Promise<void> {
    const u = this.ui;
    const base = `/v1/workspaces/${enc(ws)}/chats/${enc(chat)}`;
    const got = await this.guarded(u.chatError, `Reading chat ${chat}`, async (key) => {
      const view = await call<ChatView>(key, 'GET', base);
      const members = await call<MembersOk>(key, 'GET', `${base}/members?limit=${MEMBERS_SHOWN}`);
      const after = Math.max(0, view.seq - EVENTS_SHOWN);
      const events = await call<{ events: StoredEvent[] }>(key, 'GET', `${base}/events?after=${after}&limit=${EVENTS_SHOWN}`);
      return { view, members, events: events.events };
    });
    if (got === null) return;
    const wasShown = this.chat?.ws === ws && this.chat.chat === chat;
    this.chat = { ws, chat };
    const { view, members, events } = got;
    u.chatDetail.hidden = false;
    u.chatId.textContent = view.chat;
    u.chatName.textContent = view.name ?? '(none)';
    u.chatImage.textContent = view.image ?? '(none)';
    u.chatData.textContent = view.data === undefined || view.data === null ? '(none)' : JSON.stringify(view.data);
    u.chatOpen.textContent = view.open ? 'yes: anyone may join' : 'no: members are added by the server';
    u.chatMembersCount.textContent = String(members.count);
    u.chatSeq.textContent = String(view.seq);
    u.chatMembers.replaceChildren(
      ...members.members.map((m) => {
        const tr = document.createElement('tr');
        tr.dataset.user = m.user;
        const actions = cell('', 'actions');
        for (const action of Object.keys(ACTIONS)) {
          const b = button(action[0]?.toUpperCase() + action.slice(1), 'secondary', () => void this.moderate(action, m.user));
          b.dataset.action = action;
          b.setAttribute('aria-label', `${action} ${m.user}`);
          actions.append(b);
        }
        tr.append(cell(m.user), cell(String(m.read), 'num'), actions);
        return tr;
      }),
    );
    u.chatMembersMore.hidden = !members.more;
    u.chatEvents.replaceChildren(...events.map((e) => this.eventRow(e)));
    if (!wasShown) show(u.chatNotice, null);
  }

  private eventRow(e: StoredEvent): HTMLTableRowElement {
    const tr = document.createElement('tr');
    tr.dataset.seq = String(e.seq);
    tr.dataset.type = e.type;
    if (e.deleted) tr.dataset.deleted = 'true';
    const body = e.deleted ? '(deleted)' : asText(e.body) + (e.edited !== undefined ? ' (edited)' : '');
    const actions = cell('', 'actions');
    if (e.type === 'message' && !e.deleted) {
      const b = button('Delete', 'secondary delete-event', () => void this.deleteEvent(e.seq));
      b.setAttribute('aria-label', `delete message ${e.seq}`);
      actions.append(b);
    }
    tr.append(cell(String(e.seq), 'num'), cell(e.type), cell(e.user ?? ''), cell(new Date(e.ts).toLocaleString()), cell(body, 'body'), actions);
    return tr;
  }

  private async deleteEvent(seq: number): Promise<void> {
    const c = this.chat;
    if (c === null || !confirm(`Delete message ${seq} of ${c.chat}? Its body is erased for everyone.`)) return;
    const done = await this.guarded(this.ui.chatError, `Deleting message ${seq}`, (key) =>
      call<{ seq: number }>(key, 'DELETE', `/v1/workspaces/${enc(c.ws)}/chats/${enc(c.chat)}/events/${seq}`),
    );
    if (done === null) return;
    await this.openChat(c.ws, c.chat);
    show(this.ui.chatNotice, `Message ${seq} deleted.`);
  }

  private async moderate(action: string, user: string): Promise<void> {
    const c = this.chat;
    const a = ACTIONS[action];
    if (c === null || a === undefined) return;
    const done = await this.guarded(this.ui.chatError, `${action} ${user}`, (key) =>
      call<unknown>(key, a.method, `/v1/workspaces/${enc(c.ws)}/chats/${enc(c.chat)}/${a.route}/${enc(user)}`),
    );
    if (done === null) return;
    await this.openChat(c.ws, c.chat);
    show(this.ui.chatNotice, `${user} ${a.done} ${c.chat}.`);
  }

  /** Shows a user: the chats they are a member of, and what can be done to them. */
  private async openUser(ws: string, user: string): Promise<void> {
    const u = this.ui;
    const inbox = await this.guarded(u.userError, `Reading user ${user}`, (key) =>
      call<InboxOk>(key, 'GET', `/v1/workspaces/${enc(ws)}/users/${enc(user)}/inbox?limit=${USER_CHATS_SHOWN}`),
    );
    if (inbox === null) return;
    if (this.user?.ws !== ws || this.user.user !== user) {
      show(u.userNotice, null);
      this.dropDownload();
      u.eraseConfirm.value = '';
    }
    this.user = { ws, user };
    u.userDetail.hidden = false;
    u.userName.textContent = user;
    u.userChats.replaceChildren(
      ...inbox.chats.map((c) => {
        const tr = document.createElement('tr');
        tr.dataset.chat = c.chat;
        const open = cell('');
        const b = button(c.chat, 'secondary open-chat', () => void this.openChat(ws, c.chat));
        b.setAttribute('aria-label', `open chat ${c.chat}`);
        open.append(b);
        tr.append(open, cell(c.profile?.name ?? ''), cell(String(c.unread), 'num'), cell(String(c.read), 'num'));
        return tr;
      }),
    );
    u.userNoChats.hidden = inbox.chats.length !== 0;
    u.userChatsMore.hidden = !inbox.more;
    this.checkConfirmation();
  }

  private async revoke(): Promise<void> {
    const who = this.user;
    if (who === null) return;
    const done = await this.guarded(this.ui.userError, 'Revoking', (key) =>
      call<unknown>(key, 'POST', `/v1/workspaces/${enc(who.ws)}/users/${enc(who.user)}/revoke`),
    );
    if (done !== null) show(this.ui.userNotice, `${who.user}'s tokens are revoked: their connections close within seconds.`);
  }

  /** Downloads the user's export: read whole here (a support export is small; the server streams it). */
  private async exportUser(): Promise<void> {
    const who = this.user;
    if (who === null) return;
    const u = this.ui;
    u.userExport.disabled = true;
    const text = await this.guarded(u.userError, 'Exporting', async (key) =>
      (await request(key, 'GET', `/v1/workspaces/${enc(who.ws)}/users/${enc(who.user)}/export`)).text(),
    );
    u.userExport.disabled = false;
    if (text === null) return;
    const lines = text.split('\n').filter((l) => l !== '');
    const messages = lines.filter((l) => l.startsWith('{"kind":"message"')).length;
    this.dropDownload();
    this.downloadUrl = URL.createObjectURL(new Blob([text], { type: 'application/x-ndjson' }));
    u.userDownload.href = this.downloadUrl;
    u.userDownload.download = `${who.ws}-${who.user}-export.ndjson`.replace(/[^A-Za-z0-9_.@+-]/g, '_');
    u.userDownload.textContent = `Save the export again (${lines.length} lines)`;
    u.userDownload.hidden = false;
    u.userDownload.click();
    show(u.userNotice, `Exported ${lines.length - messages} membership(s) and ${messages} message(s) of ${who.user}.`);
  }

  private dropDownload(): void {
    if (this.downloadUrl !== null) URL.revokeObjectURL(this.downloadUrl);
    this.downloadUrl = null;
    this.ui.userDownload.hidden = true;
    this.ui.userDownload.removeAttribute('href');
  }

  /** The erase button works only once the confirmation names the user shown. */
  private checkConfirmation(): boolean {
    const ok = this.user !== null && this.ui.eraseConfirm.value === this.user.user;
    this.ui.userErase.disabled = !ok;
    return ok;
  }

  private async erase(): Promise<void> {
    const who = this.user;
    const u = this.ui;
    if (who === null) return;
    if (!this.checkConfirmation()) {
      show(u.userError, `Not erased: the confirmation must be the user id, ${who.user}.`);
      u.eraseConfirm.focus();
      return;
    }
    u.userErase.disabled = true;
    const done = await this.guarded(u.userError, 'Erasing', (key) =>
      call<{ erased: number }>(key, 'DELETE', `/v1/workspaces/${enc(who.ws)}/users/${enc(who.user)}`),
    );
    u.eraseConfirm.value = '';
    if (done === null) {
      this.checkConfirmation();
      return;
    }
    await this.openUser(who.ws, who.user);
    show(u.userNotice, `${who.user} is erased: ${done.erased} message(s) erased, every membership ended.`);
  }
}
