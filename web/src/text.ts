//! A message's words on the page: its text from the body, the users a typed text mentions (`@name`),
//! and the text drawn with those mentions highlighted (the reader's own name more so).
//!
//! Owns: turning text into mentions and mentions into marks. Does not own: sending them (demo.ts,
//! thread.ts) or where a message is drawn (row.ts).

/** The most users one message may mention (docs/protocol.md, "Mentions"). */
export const MAX_MENTIONS = 50;

/**
 * `@name` after the start or a space: a user id's characters, not ending in `.` or `:` (read as the
 * sentence's punctuation: "thanks @bob." mentions bob). User ids may hold `@` and `+` (an email).
 */
const MENTION = /(?:^|[\s(])@([A-Za-z0-9_.:@+-]*[A-Za-z0-9_@+-])/g;

/** The users `text` mentions, each once, in order of first mention, at most MAX_MENTIONS. */
export function mentionsIn(text: string): string[] {
  const users: string[] = [];
  for (const m of text.matchAll(MENTION)) {
    const user = m[1]!;
    if (user.length <= 128 && !users.includes(user)) users.push(user);
  }
  return users.slice(0, MAX_MENTIONS);
}

/** A message body's text: `{text}` as this page sends it, anything else as JSON. */
export function messageText(body: unknown): string {
  if (typeof body === 'object' && body !== null && typeof (body as { text?: unknown }).text === 'string') {
    return (body as { text: string }).text;
  }
  return JSON.stringify(body);
}

/** Characters that mean something in a regular expression, escaped. */
function escape(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/**
 * Fills `el` with `text`, each `@user` of `mentions` as `<mark class="mention" data-user>` (with class
 * `me` when it names `me`). Text only, never HTML: a message cannot inject markup.
 */
export function drawText(el: HTMLElement, text: string, mentions: readonly string[] | undefined, me: string): void {
  if (mentions === undefined || mentions.length === 0) {
    el.textContent = text;
    return;
  }
  // Longest first, so "@bob.smith" is not cut at "@bob"; a name must not run on into more id characters.
  const names = [...mentions].sort((a, b) => b.length - a.length).map(escape);
  const re = new RegExp(`@(${names.join('|')})(?![A-Za-z0-9_@+-])`, 'g');
  const parts: Node[] = [];
  let at = 0;
  for (const m of text.matchAll(re)) {
    parts.push(document.createTextNode(text.slice(at, m.index)));
    const mark = document.createElement('mark');
    mark.className = m[1] === me ? 'mention me' : 'mention';
    mark.dataset.user = m[1]!;
    mark.textContent = m[0];
    parts.push(mark);
    at = m.index + m[0].length;
  }
  parts.push(document.createTextNode(text.slice(at)));
  el.replaceChildren(...parts);
}
