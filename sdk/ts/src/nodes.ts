//! The node URLs a client may connect to, which one the next attempt uses, and what to say when none opens.
//!
//! Owns: the list of endpoints (each validated and given `?ws=`, see transport.ts), the rotation rule
//! (after a lost link or a failed attempt, the next node; the one that failed comes round again only after
//! every other), and the `unreachable` message. Does not own: when to attempt or how long to wait between
//! attempts (connection.ts, backoff.ts).
//!
//! Why rotate on every loss, not only on some: the client cannot tell a frozen node from a network blip
//! when it decides, and a frozen node's kernel still accepts TCP connections, so going back to it first
//! costs a whole connect timeout. Another node of the cell serves the same chats from the same store; a
//! resumed watch loses nothing by moving. With one URL (a load balancer in front) rotation does nothing.

import { endpointUrl, HERALD_WS_PATH } from './transport.js';

/** The node URLs of one client, in the order the application gave them. */
export class Nodes {
  /** The URLs as given, for the application to compare with its own list. */
  private readonly given: readonly string[];
  /** The same with `?ws=WORKSPACE`, what sockets are opened to. */
  private readonly endpoints: readonly string[];
  private index = 0;

  /**
   * Validates every URL (see `endpointUrl`); throws `TypeError` naming the bad one. `urls` must be
   * non-empty and without repeats (options.ts checks both).
   */
  constructor(urls: readonly string[], workspace: string) {
    this.given = [...urls];
    this.endpoints = urls.map((u) => endpointUrl(u, workspace));
    if (new Set(this.endpoints).size !== this.endpoints.length) {
      throw new TypeError('herald: `url` lists the same endpoint twice');
    }
  }

  /** The URL (as given) of the current or next attempt. */
  get url(): string {
    return this.given[this.index]!;
  }

  /** The endpoint (with `?ws=`) of the current or next attempt. */
  get endpoint(): string {
    return this.endpoints[this.index]!;
  }

  /** How many URLs there are. */
  get count(): number {
    return this.given.length;
  }

  /**
   * The link to the current node was lost, or an attempt to it failed: the next attempt goes to the next
   * URL in the list, and this one comes round again only after every other was tried.
   */
  failed(): void {
    this.index = (this.index + 1) % this.given.length;
  }

  /**
   * What to tell a developer whose client cannot open a socket: the URLs, the runtime's words about the
   * last failure (at `lastEndpoint`) and the likely causes.
   */
  unreachableMessage(attempts: number, lastEndpoint: string, lastReason: string): string {
    const u = new URL(lastEndpoint);
    const hints: string[] = [];
    if (/\b404\b/.test(lastReason)) hints.push('the server answered the upgrade with 404: nothing serves WebSockets at that path');
    if (!u.pathname.endsWith(HERALD_WS_PATH)) hints.push(`the path is "${u.pathname}", and herald serves WebSockets at ${HERALD_WS_PATH}`);
    const refused = /ECONNREFUSED/.test(lastReason);
    if (refused) hints.push(`nothing listens on ${u.host}: a wrong port, or the server is down`);
    hints.push(
      `check \`url\`: herald's endpoint is ${u.protocol}//HOST:PORT${HERALD_WS_PATH} (a proxy in front must pass WebSocket upgrades)` +
        (refused ? '' : ', or the server is down'),
    );
    const one = this.endpoints.length === 1;
    const what = one ? lastEndpoint : `any of ${this.endpoints.join(', ')}`;
    const detail = lastReason || 'no detail from the runtime; browsers give none';
    return (
      `herald: ${attempts} attempts in a row to open ${what} failed before the WebSocket opened ` +
      `(last: ${one ? '' : `${lastEndpoint}: `}${detail}). ${hints.join('; ')}. Still retrying.`
    );
  }
}
