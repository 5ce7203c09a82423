//! Search (protocol 1.2): the `search` request's arguments, and paging through all its results.
//!
//! Owns: `SearchOptions`, turning them into a request, and `searchPages`, which asks page after page by
//! `cursor` while the server says `more`. Does not own: the request (client.ts and chat.ts send it) or
//! what matches (the server's: every whitespace-separated term anywhere in a word, after Unicode case
//! folding, in the messages of the chats the user is a member of now).

import { HeraldError } from './errors.js';
import type { RequestArgs, SearchOk, SearchResult } from './types.js';

/** Options of `client.search` and `chat.search`. */
export interface SearchOptions {
  /** Only this chat's messages (the user must be a member: `forbidden` otherwise). */
  chat?: string;
  /** Results per page: default 20, at most 100. */
  limit?: number;
  /** Where the previous page ended (its `cursor`), to get the next one. */
  cursor?: string;
}

/** The most characters a query may have (the protocol's bound). */
export const MAX_QUERY_CHARS = 200;

/** The `search` request for `query` and `opts`; throws `TypeError` for a query the server would refuse. */
export function searchArgs(query: string, opts: SearchOptions): RequestArgs['search'] {
  const chars = [...query].length;
  if (query.trim() === '' || chars > MAX_QUERY_CHARS) {
    throw new TypeError(`herald: a search query is 1 to ${MAX_QUERY_CHARS} characters with at least one word`);
  }
  const args: RequestArgs['search'] = { query };
  if (opts.chat !== undefined) args.chat = opts.chat;
  if (opts.limit !== undefined) args.limit = opts.limit;
  if (opts.cursor !== undefined) args.cursor = opts.cursor;
  return args;
}

/**
 * Every result of `query`, newest first, page by page (`limit` per page) until the server says there
 * is no more, or `max` results were yielded. A failed page ends the iteration with its `HeraldError`.
 */
export async function* searchPages(
  request: (args: RequestArgs['search']) => Promise<SearchOk>,
  query: string,
  opts: SearchOptions & { max?: number } = {},
): AsyncGenerator<SearchResult, void, undefined> {
  const max = opts.max ?? Number.POSITIVE_INFINITY;
  let cursor = opts.cursor;
  let yielded = 0;
  for (;;) {
    const page = await request(searchArgs(query, { ...opts, ...(cursor !== undefined ? { cursor } : {}) }));
    for (const r of page.results) {
      if (yielded >= max) return;
      yielded++;
      yield r;
    }
    if (!page.more || yielded >= max) return;
    // `more` without a cursor would ask for the first page again, forever.
    if (page.cursor === undefined || page.cursor === cursor) {
      throw new HeraldError('protocol', 'herald: search said more but gave no new cursor', { op: 'search' });
    }
    cursor = page.cursor;
  }
}
