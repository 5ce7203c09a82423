//! Paging through a chat's stored events: `Chat.history`.
//!
//! Owns: asking for page after page by the reply's `more`, starting each after the last event held,
//! dropping overlap, stopping past `until`, and refusing to spin on a `more` that brings nothing.
//! Does not own: the `fetch` request or its page size (chat.ts), nor delivery to watchers: what it
//! yields goes to the caller only.
//!
//! Why by `more`: the server bounds a reply in bytes as well as in count, so neither a short page (done?)
//! nor a full one (more?) says anything.

import type { HistoryOptions } from './chat-options.js';
import { HeraldError } from './errors.js';
import type { FetchOk, HeraldEvent } from './types.js';

/**
 * The events of `chat` after `after`, in seq order, fetched with `fetchPage` until the server says there
 * is no more (or past `opts.until`). Arguments are checked when the first event is asked for, as a
 * generator does everything.
 */
export async function* historyPages(
  chat: string,
  fetchPage: (after: number) => Promise<FetchOk>,
  after: number,
  opts: HistoryOptions,
): AsyncGenerator<HeraldEvent, void, undefined> {
  if (!Number.isInteger(after) || after < 0) throw new TypeError('herald: `after` must be a non-negative integer');
  if (opts.until !== undefined && (!Number.isInteger(opts.until) || opts.until < 0)) {
    throw new TypeError('herald: `until` must be a non-negative integer');
  }
  const until = opts.until ?? Number.POSITIVE_INFINITY;
  let last = after;
  while (last < until) {
    const page = await fetchPage(last);
    const before = last;
    for (const ev of page.events) {
      if (ev.seq <= last) continue; // a page overlapping what was already yielded
      if (ev.seq > until) return;
      last = ev.seq;
      yield ev;
    }
    if (!page.more) return;
    // `more` with nothing new would ask for the same page again at once, and again: stop instead.
    if (last === before) {
      throw new HeraldError('protocol', `herald: chat ${chat}: more announced after ${last} but no events came`, { op: 'fetch' });
    }
  }
}
