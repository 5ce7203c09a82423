//! The search panel: the messages of this user's chats that match the search box (the SDK's
//! `client.search`), newest first, each as its chat, its sender and a snippet of its text with the
//! words found marked; "Show more" for the next page; picking one opens that chat at that message.
//!
//! Owns: drawing results and snippets (text only: a message is user data), paging. Does not own: the
//! request or opening a chat (given by demo.ts), nor what matches (herald's: each word anywhere in a word
//! of the text, so "서버" finds "서버가").
//!
//! Element hooks (the end-to-end test relies on them):
//!   #search-panel #search-results > li[data-chat][data-seq]   one per result; click opens it
//!     .chat, .who, .snippet (mark inside: the words searched)
//!   #search-status                                            "3 messages", "no messages", "searching…"
//!   #search-more                                              while more pages remain

import type { SearchOk, SearchResult } from '../../sdk/ts/src/index.ts';
import { messageText } from './text.ts';

/** Characters of text shown before the first word found, so the snippet starts near it. */
const SNIPPET_LEAD = 30;
/** Characters a snippet shows at most. */
const SNIPPET_CHARS = 140;

/** The elements the panel draws into. */
export interface SearchElements {
  panel: HTMLElement;
  list: HTMLElement;
  status: HTMLElement;
  more: HTMLButtonElement;
}

/** What the panel asks of the page. */
export interface SearchCalls {
  /** One page of results for `query` (after `cursor`). */
  search(query: string, cursor: string | undefined): Promise<SearchOk>;
  /** The name a chat goes by on the page. */
  nameOf(chat: string): string;
  /** Opens a result's chat at its message. */
  open(result: SearchResult): void;
}

export class SearchPanel {
  private query = '';
  private cursor: string | undefined;
  private shown = 0;
  /** Bumped by every new search, so a late page of an older one is dropped. */
  private generation = 0;

  constructor(
    private readonly els: SearchElements,
    private readonly calls: SearchCalls,
  ) {
    els.more.onclick = () => void this.load(this.generation);
  }

  /** Searches `query` afresh and opens the panel (hiding the others). */
  run(query: string): void {
    this.query = query;
    this.cursor = undefined;
    this.shown = 0;
    this.generation++;
    for (const p of document.querySelectorAll<HTMLElement>('.panel')) p.hidden = true;
    this.els.panel.hidden = false;
    this.els.list.replaceChildren();
    this.els.more.hidden = true;
    this.els.status.textContent = 'searching…';
    void this.load(this.generation);
  }

  close(): void {
    this.els.panel.hidden = true;
  }

  private async load(generation: number): Promise<void> {
    let page: SearchOk;
    try {
      page = await this.calls.search(this.query, this.cursor);
    } catch (e) {
      if (generation === this.generation) this.els.status.textContent = `search failed: ${e instanceof Error ? e.message : String(e)}`;
      return;
    }
    if (generation !== this.generation) return;
    this.els.list.append(...page.results.map((r) => this.item(r)));
    this.shown += page.results.length;
    this.cursor = page.more ? page.cursor : undefined;
    this.els.more.hidden = this.cursor === undefined;
    this.els.status.textContent =
      this.shown === 0 ? 'no messages' : `${this.shown}${this.cursor !== undefined ? '+' : ''} message${this.shown === 1 ? '' : 's'}`;
  }

  private item(r: SearchResult): HTMLLIElement {
    const li = document.createElement('li');
    li.dataset.chat = r.chat;
    li.dataset.seq = String(r.seq);
    li.tabIndex = 0;
    const head = document.createElement('div');
    head.className = 'head';
    const chat = span('chat', this.calls.nameOf(r.chat));
    const who = span('who', r.user ?? 'system');
    const time = document.createElement('time');
    time.dateTime = new Date(r.ts).toISOString();
    time.textContent = new Date(r.ts).toLocaleString();
    head.append(chat, who, time);
    const snippet = span('snippet', '');
    drawSnippet(snippet, messageText(r.body), this.query.split(/\s+/).filter((t) => t !== ''));
    li.append(head, snippet);
    const open = () => this.calls.open(r);
    li.addEventListener('click', open);
    li.addEventListener('keydown', (e) => {
      if (e.key === 'Enter') open();
    });
    return li;
  }
}

/**
 * Fills `el` with a part of `text` near the first of `terms` found, each term found marked. Matching
 * here lower-cases only, which is enough to mark what herald's case folding found.
 */
export function drawSnippet(el: HTMLElement, text: string, terms: string[]): void {
  const lower = text.toLowerCase();
  const wanted = terms.map((t) => t.toLowerCase()).filter((t) => t !== '');
  const first = Math.min(...wanted.map((t) => lower.indexOf(t)).filter((i) => i >= 0), text.length);
  const start = first > SNIPPET_LEAD ? first - SNIPPET_LEAD : 0;
  const end = Math.min(text.length, start + SNIPPET_CHARS);
  const parts: Node[] = [];
  if (start > 0) parts.push(document.createTextNode('…'));
  let at = start;
  while (at < end) {
    // The nearest term at or after `at`, longest first where two start together.
    let hit = -1;
    let len = 0;
    for (const t of wanted) {
      const i = lower.indexOf(t, at);
      if (i >= 0 && i < end && (hit < 0 || i < hit || (i === hit && t.length > len))) {
        hit = i;
        len = t.length;
      }
    }
    if (hit < 0) {
      parts.push(document.createTextNode(text.slice(at, end)));
      break;
    }
    if (hit > at) parts.push(document.createTextNode(text.slice(at, hit)));
    const mark = document.createElement('mark');
    mark.textContent = text.slice(hit, Math.min(hit + len, end));
    parts.push(mark);
    at = hit + len;
  }
  if (end < text.length) parts.push(document.createTextNode('…'));
  el.replaceChildren(...parts);
}

function span(className: string, text: string): HTMLSpanElement {
  const s = document.createElement('span');
  s.className = className;
  s.textContent = text;
  return s;
}
