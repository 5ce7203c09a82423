//! The demo page's script, served by herald in development mode at /demo.js: pick a name and a chat,
//! then chat through `@herald/client`.
//!
//! Owns: the page's controls, one session per Join (a `HeraldClient` with a dev token, the chat's join,
//! watch with presence, sends with mentions and files, thread replies, edits, deletes, reactions, pins,
//! the chat's name, typing and read position, and the user's inbox), the search box (a result opens its
//! chat at its message), the connection state shown in words, and the details toggle (protocol words:
//! seqs, the watch state, why a link closed). Does not own: drawing the chat (view.ts, row.ts, files.ts),
//! a thread (thread.ts), the members and pins panels (panels.ts), the chat list (chats.ts), the files
//! picked for the next message (attachments.ts) or the search results (search.ts), or anything about the
//! protocol: uploads, reconnects, resuming, gap repair, idempotent sends,
//! applying edits, streamed text, reply and reaction counts, expiring typing and resyncing presence and
//! the inbox are the SDK's, which is the point of the page.

import { HeraldClient, HeraldError, type Chat, type ClientState, type MessageList, type SearchResult } from '../../sdk/ts/src/index.ts';
import { Attachments } from './attachments.ts';
import { devToken, newClientId, wsUrl } from './dev.ts';
import { ChatList } from './chats.ts';
import { MEMBERS_PAGE, MembersPanel, PinsPanel } from './panels.ts';
import { mentionsIn, messageText } from './text.ts';
import { SearchPanel } from './search.ts';
import { ThreadView } from './thread.ts';
import { ChatView } from './view.ts';

/** Ids are 1 to 128 of these characters (docs/protocol.md, "Words"). */
const ID_PATTERN = /^[A-Za-z0-9_.:-]{1,128}$/;

/**
 * How many events before the join to replay on entering a chat. Enough history for a demo without
 * replaying a long-lived chat into the DOM; reactions and reads older than this are not counted.
 */
const HISTORY_EVENTS = 500;

/**
 * Reading is reported at most this often: every `read` stores an event that every member receives, so
 * a burst of incoming messages should cost one read, not one each.
 */
const READ_DEBOUNCE_MS = 250;

/**
 * How long a search result's message may take to arrive in a chat just opened (the watch replays the
 * chat's recent history after its reply); past it, the message is older than what the page loads.
 */
const REVEAL_WAIT_MS = 5_000;

const params = new URLSearchParams(location.search);
/** `?ws=` picks the workspace; dev tokens are issued for any. */
const WORKSPACE = params.get('ws') ?? 'demo';

function $<T extends HTMLElement>(id: string): T {
  const el = document.getElementById(id);
  if (el === null) throw new Error(`demo.html lacks #${id}`);
  return el as T;
}

const ui = {
  joinForm: $<HTMLFormElement>('join-form'),
  name: $<HTMLInputElement>('name'),
  chat: $<HTMLInputElement>('chat'),
  details: $<HTMLInputElement>('details-toggle'),
  title: $('chat-title'),
  rename: $<HTMLButtonElement>('rename'),
  renameForm: $<HTMLFormElement>('rename-form'),
  renameText: $<HTMLInputElement>('rename-text'),
  renameCancel: $<HTMLButtonElement>('rename-cancel'),
  conn: $('conn'),
  connDetail: $('conn-detail'),
  watch: $('watch'),
  members: $('members'),
  membersButton: $<HTMLButtonElement>('members-button'),
  membersPanel: $('members-panel'),
  memberList: $('member-list'),
  membersMore: $<HTMLButtonElement>('members-more'),
  membersClose: $<HTMLButtonElement>('members-close'),
  pinsButton: $<HTMLButtonElement>('pins-button'),
  pinCount: $('pin-count'),
  pinsPanel: $('pins-panel'),
  pinList: $('pin-list'),
  pinsClose: $<HTMLButtonElement>('pins-close'),
  readers: $('readers'),
  typing: $('typing'),
  present: $('present'),
  chats: $('chats'),
  messages: $<HTMLOListElement>('messages'),
  pending: $<HTMLOListElement>('pending'),
  sendForm: $<HTMLFormElement>('send-form'),
  text: $<HTMLInputElement>('text'),
  quoting: $('quoting'),
  quotingText: $('quoting-text'),
  quotingCancel: $<HTMLButtonElement>('quoting-cancel'),
  send: $<HTMLButtonElement>('send'),
  chatPane: $('chat-pane'),
  attach: $<HTMLButtonElement>('attach'),
  fileInput: $<HTMLInputElement>('file-input'),
  attachments: $('attachments'),
  searchForm: $<HTMLFormElement>('search-form'),
  searchText: $<HTMLInputElement>('search-text'),
  searchGo: $<HTMLButtonElement>('search-go'),
  searchPanel: $('search-panel'),
  searchResults: $('search-results'),
  searchStatus: $('search-status'),
  searchMore: $<HTMLButtonElement>('search-more'),
  searchClose: $<HTMLButtonElement>('search-close'),
  threadPanel: $('thread-panel'),
  threadRoot: $('thread-root'),
  threadMessages: $<HTMLOListElement>('thread-messages'),
  threadForm: $<HTMLFormElement>('thread-form'),
  threadText: $<HTMLInputElement>('thread-text'),
  threadClose: $<HTMLButtonElement>('thread-close'),
  notice: $('notice'),
};

/** The connection's state in a person's words (the state itself stays in `data-state`). */
const CONNECTION_WORDS: Record<ClientState, string> = {
  connected: 'online',
  connecting: 'connecting…',
  disconnected: 'offline',
  closed: 'offline',
};

function errorText(e: unknown): string {
  return e instanceof HeraldError ? `${e.code}: ${e.message}` : String(e);
}

function notice(text: string): void {
  ui.notice.textContent = text;
  ui.notice.hidden = text === '';
}

function showConnection(state: ClientState, detail: string): void {
  ui.conn.dataset.state = state;
  ui.conn.textContent = CONNECTION_WORDS[state] ?? state;
  ui.connDetail.textContent = detail;
}

/** One user in one chat, from Join until the next Join. */
class Session {
  readonly client: HeraldClient;
  readonly chat: Chat;
  readonly list: MessageList;
  readonly view: ChatView;
  readonly thread: ThreadView;
  readonly members: MembersPanel;
  readonly pins: PinsPanel;
  readonly attachments: Attachments;
  /** The message the next send quotes, if the user picked one. */
  private quoting: number | null = null;
  private ended = false;
  private readTimer: ReturnType<typeof setTimeout> | null = null;
  private reading = false;

  constructor(
    readonly user: string,
    readonly chatId: string,
  ) {
    this.client = new HeraldClient({ url: wsUrl(), workspace: WORKSPACE, token: () => devToken(WORKSPACE, user) });
    this.chat = this.client.chat(chatId);
    // Messages come from the SDK's list, which applies edits, deletes, streamed text, reply counts, pins
    // and reaction counts to what is shown.
    this.list = this.chat.messages();
    this.view = new ChatView(
      { messages: ui.messages, pending: ui.pending, members: ui.members, readers: ui.readers, typing: ui.typing, present: ui.present },
      user,
      {
        react: (target, emoji, on) => this.chat.react(target, emoji, on).catch(failed('reaction')),
        edit: (target, text) => this.chat.edit(target, { text }, { mentions: mentionsIn(text) }).catch(failed('edit')),
        delete: (target) => this.chat.delete(target).catch(failed('delete')),
        pin: (target, on) => this.chat.pin(target, on).catch(failed(on ? 'pin' : 'unpin')),
        openThread: (root) => this.thread.open(root),
        quote: (target) => this.quote(target),
      },
      (seq) => this.list.get(seq),
    );
    this.thread = new ThreadView(
      { panel: ui.threadPanel, root: ui.threadRoot, messages: ui.threadMessages, form: ui.threadForm, text: ui.threadText },
      this.view.rowContext,
      this.list,
      {
        reply: (root, text) => this.reply(root, text),
        load: async (root) => {
          for await (const ev of this.chat.history(0, { thread: root })) this.list.load([ev]);
        },
        read: (root, seq) => void this.chat.read(seq, { thread: root }).catch(() => {}),
      },
    );
    this.members = new MembersPanel(
      { panel: ui.membersPanel, list: ui.memberList, more: ui.membersMore },
      user,
      (cursor) => this.chat.members({ limit: MEMBERS_PAGE, ...(cursor !== undefined ? { cursor } : {}) }),
      failed('members'),
    );
    this.pins = new PinsPanel(
      { panel: ui.pinsPanel, list: ui.pinList, count: ui.pinCount },
      () => this.chat.pins(),
      (seq) => {
        if (!this.view.reveal(seq)) notice('that message is older than what the page shows');
      },
      failed('pinned messages'),
    );
    this.attachments = new Attachments(
      { list: ui.attachments, input: ui.fileInput, button: ui.attach, dropZone: ui.chatPane },
      (file, onProgress) => this.chat.upload(file, { onProgress }),
      notice,
    );
    ui.membersButton.onclick = () => this.members.toggle();
    ui.pinsButton.onclick = () => this.pins.toggle();
    showTitle(chatId, null);
    closeRename();
    this.quote(null);

    this.list.on('change', (change) => {
      this.view.showMessage(change);
      this.thread.showMessage(change);
    });
    this.list.on('profile', (profile) => {
      showTitle(chatId, profile.name);
      chatList.setName(chatId, profile.name);
    });
    this.chat.on('typing', ({ users }) => this.view.setTyping(users));
    this.chat.on('presence', (state) => this.view.setPresent(state));
    this.client.inbox.on('change', (items) => chatList.draw(items, chatId));

    this.client.on('state', ({ to }) => {
      // Keep why the last link ended (in the details) while reconnecting; the SDK tells it just before this.
      showConnection(to, to === 'connecting' ? ui.connDetail.textContent ?? '' : '');
      if (to === 'connected') this.scheduleRead();
    });
    this.client.on('disconnected', ({ code, reason, reconnectInMs }) => {
      const why = `link closed (${code}${reason ? ` ${reason}` : ''})`;
      const next = reconnectInMs === null ? 'stopped' : `retrying in ${(reconnectInMs / 1000).toFixed(1)} s`;
      showConnection(this.client.state, `${why}, ${next}`);
    });
    this.client.on('error', (e) => notice(`${e.code}: ${e.message}`));
    this.chat.on('state', ({ to }) => {
      ui.watch.dataset.state = to;
      ui.watch.textContent = to;
    });
    this.chat.on('error', (e) => notice(`${e.code}: ${e.message}`));
    this.chat.on('event', (ev) => {
      const reacted = this.view.apply(ev);
      if (reacted !== null) this.thread.redrawReactions(reacted);
      if (ev.type === 'pin' || ev.type === 'delete') this.pins.refresh();
      if (ev.type === 'message' || ev.type === 'system') this.scheduleRead();
    });
    showConnection(this.client.state, '');
  }

  /** Connects, joins, and watches from a little before the join so the chat has some history. */
  async start(): Promise<void> {
    await this.client.connect();
    const joined = await this.chat.join();
    if (this.ended) return;
    this.view.setMembers(joined.members, joined.seq);
    for (const b of [ui.rename, ui.membersButton, ui.pinsButton, ui.searchGo]) b.disabled = false;
    ui.searchText.disabled = false;
    // After the join, so the list has the chat just entered.
    this.client.inbox.start().catch((e: unknown) => notice(`chat list: ${errorText(e)}`));
    await this.chat.watch({ after: Math.max(0, joined.seq - HISTORY_EVENTS), presence: true });
    this.pins.refresh();
  }

  /** The user typed in the message box; the SDK sends at most one `typing` every 2 s. */
  typed(): void {
    this.chat.notifyTyping();
  }

  /**
   * Queues a message, mentioning each @name typed. The SDK keeps it through link drops and stores it
   * once; the row shows until then.
   */
  send(text: string): void {
    const clientId = newClientId();
    const quote = this.quoting ?? undefined;
    this.quote(null);
    const withFiles = this.attachments.count;
    const filesNote = withFiles === 0 ? '' : `(+${withFiles} file${withFiles === 1 ? '' : 's'})`;
    this.view.addPending(clientId, [text, filesNote].filter((part) => part !== '').join(' '));
    // The files picked go with this message once uploaded; a message of files alone has empty text.
    const files = withFiles === 0 ? Promise.resolve([]) : this.attachments.take();
    files
      .then((ids) => {
        if (withFiles > 0 && ids.length === 0 && text === '') throw new Error('no file uploaded');
        return this.chat.send(
          { text },
          { clientId, mentions: mentionsIn(text), ...(quote !== undefined ? { quote } : {}), ...(ids.length > 0 ? { files: ids } : {}) },
        );
      })
      .then(
        ({ seq }) => this.view.sent(clientId, seq),
        (e: unknown) => this.view.failPending(clientId, e instanceof HeraldError ? e.code : String(e)),
      );
  }

  /** True when a send now would carry something: text, or files picked. */
  canSend(text: string): boolean {
    return text !== '' || this.attachments.count > 0;
  }

  /**
   * Shows a search result of this chat: its message scrolled to and outlined, or for a thread reply its
   * thread opened; waits for the watch to deliver it when the chat was just opened.
   */
  show(result: SearchResult): void {
    const target = result.thread ?? result.seq;
    const reveal = () => {
      if (result.thread !== undefined) this.thread.open(result.thread);
      else if (!this.view.reveal(result.seq)) notice('that message is older than what the page shows');
    };
    if (this.list.get(target) !== undefined) {
      reveal();
      return;
    }
    // The view draws each message in its own 'change' listener, registered first: it runs before this.
    const off = this.list.on('change', ({ message }) => {
      if (message.seq !== target) return;
      off();
      clearTimeout(timer);
      reveal();
    });
    const timer = setTimeout(() => {
      off();
      if (!this.ended) notice('that message is older than what the page shows');
    }, REVEAL_WAIT_MS);
  }

  /** Quotes `target` in the next message sent from the message box (null: none), shown above the box. */
  quote(target: number | null): void {
    const message = target === null ? undefined : this.list.get(target);
    this.quoting = message === undefined ? null : message.seq;
    ui.quoting.hidden = message === undefined;
    ui.quotingText.textContent = message === undefined ? '' : `${message.user ?? 'system'}: ${messageText(message.body)}`;
    if (message !== undefined) ui.text.focus();
  }

  /** Sends a reply in the thread under `root`; it shows in the thread once the chat delivers it. */
  reply(root: number, text: string): void {
    this.chat.send({ text }, { clientId: newClientId(), thread: root, mentions: mentionsIn(text) }).catch(failed('reply'));
  }

  /** Names the chat (an empty name clears it: the chat goes by its id again). */
  rename(name: string): void {
    this.chat.profile({ name: name === '' ? null : name }).catch(failed('rename'));
  }

  end(): void {
    this.ended = true;
    if (this.readTimer !== null) clearTimeout(this.readTimer);
    this.pins.stop();
    this.client.close();
  }

  /** Reports the read position soon, if the page is seen and there is something new to report. */
  scheduleRead(): void {
    if (this.readTimer !== null || this.ended) return;
    this.readTimer = setTimeout(() => {
      this.readTimer = null;
      void this.readNow();
    }, READ_DEBOUNCE_MS);
  }

  /**
   * Reads up to the latest message shown. Only while connected (a read parked while offline would just
   * time out), only while the page is visible (a hidden tab has not read anything), and never up to a
   * `read` event's own seq, which would make every read cause another.
   */
  private async readNow(): Promise<void> {
    if (this.ended || this.reading || this.client.state !== 'connected' || document.visibilityState !== 'visible') return;
    const target = this.view.readableSeq;
    if (target <= this.view.myReadSeq) return;
    this.reading = true;
    try {
      await this.chat.read(target);
    } catch {
      // Retried on the next message or reconnect; a read position is not worth a notice.
      return;
    } finally {
      this.reading = false;
    }
    // More may have arrived while this read was in flight.
    if (this.view.readableSeq > target) this.scheduleRead();
  }
}

/** A rejection handler that says what failed, in the notice. */
function failed(what: string): (e: unknown) => void {
  return (e) => notice(`${what} failed: ${errorText(e)}`);
}

/** The open chat's name at the top: its profile's name, else its id. */
function showTitle(chatId: string, name: string | null): void {
  ui.title.textContent = name ?? chatId;
  ui.title.dataset.chat = chatId;
  ui.title.title = chatId;
  if (name !== null) ui.title.dataset.named = 'true';
  else delete ui.title.dataset.named;
}

function closeRename(): void {
  ui.renameForm.hidden = true;
  ui.rename.hidden = false;
}

let session: Session | null = null;

/** A search result picked in another chat: shown once the Join that opens its chat has started. */
let revealAfterJoin: SearchResult | null = null;

/** Opening a chat from the list is a Join with that chat, under the same name. */
const chatList = new ChatList(ui.chats, (chat) => {
  ui.chat.value = chat;
  ui.joinForm.requestSubmit();
});

const search = new SearchPanel(
  { panel: ui.searchPanel, list: ui.searchResults, status: ui.searchStatus, more: ui.searchMore },
  {
    search: (query, cursor) => {
      if (session === null) return Promise.reject(new Error('join a chat first'));
      return session.client.search(query, cursor !== undefined ? { cursor } : {});
    },
    nameOf: (chat) => chatList.nameOf(chat),
    open: (result) => {
      search.close();
      if (session !== null && session.chatId === result.chat) {
        session.show(result);
        return;
      }
      revealAfterJoin = result;
      ui.chat.value = result.chat;
      ui.joinForm.requestSubmit();
    },
  },
);

ui.name.value = params.get('name') ?? `user${Math.floor(Math.random() * 10_000)}`;
ui.chat.value = params.get('chat') ?? 'general';
showConnection('disconnected', '');

ui.details.addEventListener('change', () => document.body.classList.toggle('details', ui.details.checked));

ui.rename.addEventListener('click', () => {
  if (session === null) return;
  ui.renameText.value = session.list.profile?.name ?? '';
  ui.rename.hidden = true;
  ui.renameForm.hidden = false;
  ui.renameText.focus();
});
ui.renameCancel.addEventListener('click', closeRename);
ui.renameForm.addEventListener('submit', (e) => {
  e.preventDefault();
  closeRename();
  session?.rename(ui.renameText.value.trim());
});
ui.quotingCancel.addEventListener('click', () => session?.quote(null));
// Escape closes whatever panel is open (the thread, the members, the pins, the search results).
document.addEventListener('keydown', (e) => {
  if (e.key !== 'Escape' || e.defaultPrevented) return;
  if (!ui.threadPanel.hidden) session?.thread.close();
  for (const panel of [ui.membersPanel, ui.pinsPanel, ui.searchPanel]) panel.hidden = true;
});
ui.membersClose.addEventListener('click', () => (ui.membersPanel.hidden = true));
ui.searchClose.addEventListener('click', () => search.close());
ui.searchForm.addEventListener('submit', (e) => {
  e.preventDefault();
  const query = ui.searchText.value.trim();
  if (session === null || query === '') return;
  search.run(query);
});
ui.pinsClose.addEventListener('click', () => (ui.pinsPanel.hidden = true));
ui.threadClose.addEventListener('click', () => session?.thread.close());

ui.joinForm.addEventListener('submit', (e) => {
  e.preventDefault();
  const name = ui.name.value.trim();
  const chatId = ui.chat.value.trim();
  if (!ID_PATTERN.test(name) || !ID_PATTERN.test(chatId)) {
    notice('name and chat: 1 to 128 characters of A-Z a-z 0-9 _ . : -');
    return;
  }
  notice('');
  session?.end();
  const s = new Session(name, chatId);
  session = s;
  document.title = `${name} in ${chatId} - herald`;
  ui.send.disabled = false;
  const reveal = revealAfterJoin?.chat === chatId ? revealAfterJoin : null;
  revealAfterJoin = null;
  s.start().then(
    () => {
      if (reveal !== null && session === s) s.show(reveal);
    },
    (err: unknown) => {
      if (session === s) notice(`could not enter the chat: ${err instanceof HeraldError ? `${err.code}: ${err.message}` : String(err)}`);
    },
  );
});

ui.sendForm.addEventListener('submit', (e) => {
  e.preventDefault();
  const text = ui.text.value.trim();
  if (session === null || !session.canSend(text)) return;
  session.send(text);
  ui.text.value = '';
});

ui.text.addEventListener('input', () => {
  if (ui.text.value !== '') session?.typed();
});

document.addEventListener('visibilitychange', () => session?.scheduleRead());
