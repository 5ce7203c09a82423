//! Glue between the client and a WebSocket implementation: one `Link` per connection attempt.
//!
//! Owns: finding a WebSocket constructor (the caller's, or the platform's), building the endpoint URL,
//! and turning socket callbacks into three calls (open, frame, close) that stop for good once the link is
//! abandoned. Does not own: the protocol spoken over the link (connection.ts).

/**
 * The part of the WebSocket API this client uses. The browser's `WebSocket`, Node 22's global one and
 * the `ws` package's class all fit it. Handler events are typed loosely on purpose: each implementation
 * declares its own event classes, and this client reads only `data`, `code` and `reason`.
 */
export interface WebSocketLike {
  readonly readyState: number;
  onopen: ((ev: any) => void) | null;
  onmessage: ((ev: any) => void) | null;
  onclose: ((ev: any) => void) | null;
  onerror: ((ev: any) => void) | null;
  send(data: string): void;
  close(code?: number, reason?: string): void;
}

/** A WebSocket class: `new WebSocket(url)`. */
export type WebSocketConstructor = new (url: string) => WebSocketLike;

/** `readyState` of an open socket, the same number in every implementation. */
const OPEN = 1;

/**
 * The code this client closes with. Browsers accept only 1000 or 3000-4999 from scripts, and the
 * client's reasons (ping timeout, a drain) are told to the application through its own events, so a
 * plain normal closure is enough on the wire.
 */
const CLIENT_CLOSE_CODE = 1000;

/** Close code reported when a socket vanished without a close frame (browsers' and `ws`'s value). */
export const ABNORMAL_CLOSURE = 1006;

/** The caller's WebSocket class, else the platform's; throws when neither exists (Node 20 without `ws`). */
export function resolveWebSocket(given: WebSocketConstructor | undefined): WebSocketConstructor {
  if (given !== undefined) return given;
  const g = (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
  if (g === undefined) {
    throw new TypeError(
      'herald: no global WebSocket in this runtime; pass one in the options, e.g. `WebSocket` from the "ws" package',
    );
  }
  return g;
}

/** The path herald serves WebSockets at (docs/protocol.md). A proxy in front may map another one. */
export const HERALD_WS_PATH = '/v1/ws';

/**
 * The endpoint with `?ws=WORKSPACE` set. The query lets a load balancer keep a workspace's users
 * together (docs/protocol.md); a URL that already names another workspace is a configuration mistake, and the
 * server would refuse its `hello` with 4001 forever, so it is refused here at once.
 *
 * Only `ws:` and `wss:` URLs are taken. Some WebSocket implementations also take `http:` and `https:`,
 * but a page's own address passed by mistake is the usual way one gets here, and naming the scheme
 * keeps `ws` versus `wss` (plain versus TLS) the caller's visible choice.
 */
export function endpointUrl(url: string, workspace: string): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new TypeError(`herald: \`url\` is not a URL: "${url}"; herald's endpoint looks like wss://chat.example.com${HERALD_WS_PATH}`);
  }
  if (u.protocol !== 'ws:' && u.protocol !== 'wss:') {
    const like = u.protocol === 'https:' ? 'wss:' : 'ws:';
    throw new TypeError(
      `herald: \`url\` must be a WebSocket URL (ws:// or wss://), not ${u.protocol}//; herald's endpoint is ` +
        `${like}//${u.host}${HERALD_WS_PATH}`,
    );
  }
  const named = u.searchParams.get('ws');
  if (named !== null && named !== workspace) {
    throw new TypeError(`herald: url names workspace "${named}" but the options say "${workspace}"`);
  }
  u.searchParams.set('ws', workspace);
  return u.toString();
}

/** What a link reports. None of these runs after `abandon`. */
export interface LinkHandlers {
  /** The socket opened. */
  onOpen(): void;
  /** A text frame arrived. */
  onFrame(text: string): void;
  /** The socket closed (or failed to open) with this code and reason. */
  onClose(code: number, reason: string): void;
}

/** One WebSocket connection attempt. */
export class Link {
  private readonly socket: WebSocketLike;
  private live = true;
  private wasOpened = false;
  /** What the runtime said about a failure: `ws` names it ("connect ECONNREFUSED ..."); browsers say nothing. */
  private errorDetail = '';

  /** Opens a socket to `url`; may throw synchronously for a malformed URL. */
  constructor(ctor: WebSocketConstructor, url: string, handlers: LinkHandlers) {
    this.socket = new ctor(url);
    this.socket.onopen = () => {
      this.wasOpened = true;
      if (this.live) handlers.onOpen();
    };
    this.socket.onmessage = (ev: { data?: unknown }) => {
      // herald sends text frames only; a binary frame is ignored rather than guessed at.
      if (this.live && typeof ev.data === 'string') handlers.onFrame(ev.data);
    };
    this.socket.onclose = (ev: { code?: number; reason?: string }) => {
      if (!this.live) return;
      this.live = false;
      handlers.onClose(typeof ev.code === 'number' ? ev.code : ABNORMAL_CLOSURE, ev.reason || this.errorDetail);
    };
    // A close event follows every error; an error's detail, where the runtime gives one (`ws` does,
    // browsers do not), becomes the close's reason when the close has none.
    this.socket.onerror = (ev: { message?: unknown; error?: { message?: unknown } } | undefined) => {
      const detail = ev?.message ?? ev?.error?.message;
      if (typeof detail === 'string') this.errorDetail = detail.slice(0, 200);
    };
  }

  /** True once the socket opened: a link that never did points at the URL or the network, not herald. */
  get opened(): boolean {
    return this.wasOpened;
  }

  /** True while frames can be written. */
  get open(): boolean {
    return this.live && this.socket.readyState === OPEN;
  }

  /** Writes one text frame; returns false when the socket cannot take it. */
  send(text: string): boolean {
    if (!this.open) return false;
    try {
      this.socket.send(text);
      return true;
    } catch {
      return false;
    }
  }

  /**
   * Stops reporting and closes the socket. Used for every close the client decides on (a dead link, a
   * drain, `close()`), because a dead link's close handshake may never finish and the client must not
   * wait for it before reconnecting.
   */
  abandon(reason: string): void {
    if (!this.live) return;
    this.live = false;
    try {
      // Browsers limit the reason to 123 bytes; ours are short ASCII.
      this.socket.close(CLIENT_CLOSE_CODE, reason.slice(0, 120));
    } catch {
      // Already closing or never opened: nothing left to release.
    }
  }
}
