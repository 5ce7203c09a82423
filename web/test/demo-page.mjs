//! What the demo page's test does with a page: open it as someone at a window size, read what it shows
//! (messages, badges, who is here), act as a person would (type and send, open a chat, pick a file,
//! search), take the side-by-side screenshot, and start the stream bot of examples/stream-bot as
//! herald's webhook receiver; and a small PNG made on the spot for the upload.
//!
//! Owns: the page's element hooks as the test reads them (see web/src/*.ts for the list). Does not own:
//! starting herald or Chromium (support.mjs) or what is asserted (e2e.test.mjs).

import { spawn } from 'node:child_process';
import { resolve } from 'node:path';
import { deflateSync } from 'node:zlib';
import { until, webDir, within } from './support.mjs';

// Bounds on every wait, so a broken build fails in minutes with a message, never hangs.
export const UI_TIMEOUT_MS = 20_000;

/** Where the bot's script is. */
export const BOT_SCRIPT = resolve(webDir, '../examples/stream-bot/bot.mjs');

/**
 * Opens the demo in its own browser context (`viewport`: `{ width, height, mobile }`) and joins `chat`
 * as `name`.
 */
export async function openAs(browser, base, name, chat, viewport, pageErrors, consoleLog) {
  const context = await browser.newContext({
    viewport: { width: viewport.width, height: viewport.height },
    isMobile: viewport.mobile,
    hasTouch: viewport.mobile,
  });
  const page = await context.newPage();
  page.setDefaultTimeout(UI_TIMEOUT_MS);
  page.on('pageerror', (e) => pageErrors.push(`${name}: ${e.message}`));
  // Console output is kept for reading after a failure, not asserted on: an offline browser rightly logs
  // failed WebSocket connects as errors.
  page.on('console', (m) => consoleLog.push(`${new Date().toISOString()} ${name} ${m.type()}: ${m.text()}`));
  await page.goto(`${base}/`);
  await page.fill('#name', name);
  await page.fill('#chat', chat);
  await page.click('#join');
  await page.waitForSelector('#conn[data-state="connected"]');
  await waitLive(page);
  return { name, context, page };
}

/** The watch state is a protocol word, shown only in the details: waited for without being seen. */
export function waitLive(page) {
  return page.waitForSelector('#watch[data-state="live"]', { state: 'attached' });
}

/** The messages a page shows, in page order (thread replies are not among them). */
export function messages(page) {
  return page.$$eval('#messages li.msg', (els) =>
    els.map((el) => ({ seq: Number(el.dataset.seq), user: el.dataset.user, text: el.querySelector('.text')?.textContent })),
  );
}

/** Every row's seq, messages and notes alike. */
export function rowSeqs(page) {
  return page.$$eval('#messages > li[data-seq]', (els) => els.map((el) => Number(el.dataset.seq)));
}

/** Types `text` into the message box and presses Enter, as a person does. */
export async function send(who, text) {
  await who.page.fill('#text', text);
  await who.page.press('#text', 'Enter');
}

/** Opens `chat` from `who`'s chat list (a Join under the same name) and waits for it to be live. */
export async function openChat(who, chat) {
  await who.page.click(`#chats li[data-chat="${chat}"] .chat-name`);
  await who.page.waitForSelector(`#chats li[data-chat="${chat}"][aria-current="true"]`);
  await waitLive(who.page);
}

/** Joins `chat` through the form, as `who`. */
export async function joinChat(who, chat) {
  await who.page.fill('#chat', chat);
  await who.page.click('#join');
  await who.page.waitForSelector(`#chats li[data-chat="${chat}"][aria-current="true"]`);
  await waitLive(who.page);
}

/** A badge of `chat` in `who`'s chat list (`unread` or `mentions`), as a number (0 when not listed). */
export async function badge(who, chat, kind = 'unread') {
  const v = await who.page.getAttribute(`#chats li[data-chat="${chat}"] .${kind}`, `data-${kind}`, { timeout: 1000 }).catch(() => null);
  return v === null ? 0 : Number(v);
}

/** The chat ids of `who`'s chat list, in order. */
export function chatIds(who) {
  return who.page.$$eval('#chats li', (els) => els.map((el) => el.dataset.chat));
}

/** Who `who`'s page shows as here. */
export function present(who) {
  return who.page.$$eval('#present [data-user]', (els) => els.map((el) => el.dataset.user));
}

export function connState(who) {
  return who.page.getAttribute('#conn', 'data-state');
}

/** Waits until `who` shows exactly these message texts, in this order. */
export async function waitForTexts(who, texts, ms = UI_TIMEOUT_MS) {
  await until(
    ms,
    `${who.name} shows ${JSON.stringify(texts)}`,
    async () => JSON.stringify((await messages(who.page)).map((m) => m.text)) === JSON.stringify(texts),
    async () => `It shows ${JSON.stringify((await messages(who.page)).map((m) => m.text))}; connection ${await connState(who)}.`,
  );
}

/** Waits until `who` shows a message with this text; resolves with its seq. */
export async function seqWhenShown(who, text) {
  let seq = 0;
  await until(UI_TIMEOUT_MS, `${who.name} shows "${text}"`, async () => {
    seq = (await messages(who.page)).find((m) => m.text === text)?.seq ?? 0;
    return seq > 0;
  });
  return seq;
}

/** Screenshots of the pages, side by side on one image, so one artifact shows what each person saw. */
export async function screenshotAll(browser, people, viewport, file) {
  const shots = [];
  for (const p of people) {
    shots.push({ name: p.name, png: (await within(UI_TIMEOUT_MS, `screenshot of ${p.name}`, p.page.screenshot())).toString('base64') });
  }
  const context = await browser.newContext({ viewport: { width: (viewport.width + 8) * shots.length + 8, height: viewport.height + 40 } });
  try {
    const page = await context.newPage();
    const cells = shots
      .map((s) => `<figure><figcaption>${s.name}</figcaption><img src="data:image/png;base64,${s.png}"></figure>`)
      .join('');
    await page.setContent(
      `<body style="margin:0;display:flex;gap:8px;padding:8px;background:#888;font:14px sans-serif">${cells}</body>` +
        '<style>figure{margin:0;background:#fff}figcaption{padding:4px 8px;font-weight:bold}img{display:block}</style>',
    );
    await page.screenshot({ path: file, fullPage: true });
  } finally {
    await context.close();
  }
}

/**
 * Starts examples/stream-bot/bot.mjs as user `user` on `port` (herald's --webhook-url points there),
 * with herald's address and api key. Resolves once it listens, with its output so far and `stop`.
 */
export async function startBot({ port, herald, apiKey, hookSecret, user }) {
  const proc = spawn(process.execPath, [BOT_SCRIPT], {
    env: { ...process.env, PORT: String(port), HERALD_URL: herald, HERALD_API_KEY: apiKey, HERALD_HOOK_SECRET: hookSecret, BOT_USER: user },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const log = [];
  proc.stdout.setEncoding('utf8');
  proc.stdout.on('data', (chunk) => log.push(chunk));
  proc.stderr.setEncoding('utf8');
  proc.stderr.on('data', (chunk) => log.push(chunk));
  const exited = new Promise((r) => proc.once('exit', r));
  await until(UI_TIMEOUT_MS, 'the stream bot listening', () => log.join('').includes('listening') || proc.exitCode !== null);
  if (proc.exitCode !== null) throw new Error(`the stream bot exited: ${log.join('')}`);
  const stop = async () => {
    if (proc.exitCode === null && proc.signalCode === null) {
      proc.kill('SIGTERM');
      await exited;
    }
  };
  return { log, stop };
}

/** CRC-32 (ISO-HDLC, PNG's), bit by bit: a few chunks of a tiny image need nothing faster. */
function crc32(bytes) {
  let c = 0xffffffff;
  for (const b of bytes) {
    c ^= b;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0xedb88320 : c >>> 1;
  }
  return (c ^ 0xffffffff) >>> 0;
}

/** One PNG chunk: length, type, data, CRC over type and data. */
function pngChunk(type, data) {
  const head = Buffer.alloc(8);
  head.writeUInt32BE(data.length, 0);
  head.write(type, 4, 'latin1');
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(Buffer.concat([head.subarray(4), data])), 0);
  return Buffer.concat([head, data, crc]);
}

/**
 * A `width` x `height` RGB PNG in stripes of colour, made here so that the test needs no image file:
 * a browser that shows it inline reports its `naturalWidth`, which only real, decodable bytes give.
 */
export function tinyPng(width, height) {
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr.set([8, 2, 0, 0, 0], 8); // 8 bits per sample, RGB, deflate, no filter method, not interlaced
  const rows = [];
  for (let y = 0; y < height; y++) {
    const row = Buffer.alloc(1 + width * 3); // filter byte 0 (none), then the pixels
    for (let x = 0; x < width; x++) row.set(y % 2 === 0 ? [47, 111, 222] : [250, 200, 40], 1 + x * 3);
    rows.push(row);
  }
  const signature = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  return Buffer.concat([signature, pngChunk('IHDR', ihdr), pngChunk('IDAT', deflateSync(Buffer.concat(rows))), pngChunk('IEND', Buffer.alloc(0))]);
}

/** Picks `files` (`{ name, mimeType, buffer }`) with the Attach button's file input, as a person's picker does. */
export async function attach(who, files) {
  await who.page.setInputFiles('#file-input', files);
}

/** The images `who`'s page shows in messages that have loaded: alt and natural size, by message seq. */
export function shownImages(who) {
  return who.page.$$eval('#messages li.msg .files img', (imgs) =>
    imgs.map((img) => ({
      seq: Number(img.closest('li.msg').dataset.seq),
      alt: img.alt,
      loaded: img.complete && img.naturalWidth > 0,
      width: img.naturalWidth,
      height: img.naturalHeight,
    })),
  );
}

/** Searches `query` in `who`'s search box; resolves with the results shown (chat, seq, sender, snippet). */
export async function search(who, query) {
  await who.page.fill('#search-text', query);
  await who.page.press('#search-text', 'Enter');
  await who.page.waitForSelector('#search-panel:not([hidden])');
  await who.page.waitForFunction(() => document.getElementById('search-status')?.textContent !== 'searching…');
  return who.page.$$eval('#search-results > li', (els) =>
    els.map((el) => ({
      chat: el.dataset.chat,
      seq: Number(el.dataset.seq),
      who: el.querySelector('.who')?.textContent,
      chatName: el.querySelector('.chat')?.textContent,
      snippet: el.querySelector('.snippet')?.textContent,
      marked: [...el.querySelectorAll('.snippet mark')].map((m) => m.textContent),
    })),
  );
}
