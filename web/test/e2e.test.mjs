//! End-to-end test of the demo page: a real herald in development mode, Debian's Chromium driven by
//! playwright-core, two people (two browser contexts) in one chat.
//!
//! Owns: starting and stopping herald and the browser for this test, and what a user of the page must
//! see: each other's messages, reactions and read markers, and after one of them drops off the network
//! and comes back, every message exactly once and in order; then (protocol 1.1) who is here, "X is
//! typing", edits and deletes of one's own messages, and the chat list with live unread badges. Leaves web/test-artifacts/e2e.png (both
//! pages side by side), herald.log and the pages' console.log behind, also when it fails.
//!
//!     HERALD_BIN=/path/to/herald npm test     default: ../target/release/herald from web/
//!     CHROMIUM_BIN=/path/to/chromium          default: /usr/bin/chromium (Debian's package)
//!
//! Why Debian's Chromium: Playwright's browser download cannot be fetched here, and playwright-core
//! drives any Chromium over CDP.

import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { ARTIFACTS, startChromium, startHerald, until, within } from './support.mjs';

/**
 * The server's heartbeat for this run. The SDK pings at the server's heartbeat and gives a ping 10 s,
 * so a link the browser black-holes (rather than closes) when offline is found dead within ~11 s
 * instead of ~35 s with the default 25 s heartbeat.
 */
const HEARTBEAT_MS = 1000;

// Bounds on every wait, so a broken build fails in minutes with a message, never hangs.
const UI_TIMEOUT_MS = 20_000;
/** Going offline is noticed at once (socket closed) or by the ping watchdog (heartbeat + 10 s). */
const OFFLINE_NOTICED_MS = 30_000;
/** Coming back waits out the reconnect backoff, which grows while offline (full jitter, cap 20 s). */
const RECONNECT_TIMEOUT_MS = 45_000;
const TEST_TIMEOUT_MS = 150_000;

const CHAT = 'general';

/** Whether the server pushes inbox changes (`inbox` with `live: true`); the live chat-list test needs it. */

// ---- the page -------------------------------------------------------------------------------------

/** Opens the demo in its own browser context and joins `CHAT` as `name`. */
async function openAs(browser, base, name, pageErrors, consoleLog) {
  const context = await browser.newContext({ viewport: { width: 760, height: 1100 } });
  const page = await context.newPage();
  page.setDefaultTimeout(UI_TIMEOUT_MS);
  page.on('pageerror', (e) => pageErrors.push(`${name}: ${e.message}`));
  // Console output is kept for reading after a failure, not asserted on: an offline browser rightly logs
  // failed WebSocket connects as errors.
  page.on('console', (m) => consoleLog.push(`${new Date().toISOString()} ${name} ${m.type()}: ${m.text()}`));
  await page.goto(`${base}/`);
  await page.fill('#name', name);
  await page.fill('#chat', CHAT);
  await page.click('#join');
  await page.waitForSelector('#conn[data-state="connected"]');
  await page.waitForSelector('#watch[data-state="live"]');
  return { name, context, page };
}

/** The messages a page shows, in page order. */
function messages(page) {
  return page.$$eval('#messages li.msg', (els) =>
    els.map((el) => ({ seq: Number(el.dataset.seq), user: el.dataset.user, text: el.querySelector('.text')?.textContent })),
  );
}

/** Every row's seq, messages and join/leave lines alike. */
function rowSeqs(page) {
  return page.$$eval('#messages > li[data-seq]', (els) => els.map((el) => Number(el.dataset.seq)));
}

async function send(who, text) {
  await who.page.fill('#text', text);
  await who.page.press('#text', 'Enter');
}

/** Opens `chat` from `who`'s chat list (a Join under the same name) and waits for it to be live. */
async function openChat(who, chat) {
  await who.page.click(`#chats li[data-chat="${chat}"] .chat-name`);
  await who.page.waitForSelector(`#chats li[data-chat="${chat}"][aria-current="true"]`);
  await who.page.waitForSelector('#watch[data-state="live"]');
}

/** Joins `chat` through the form, as `who`. */
async function joinChat(who, chat) {
  await who.page.fill('#chat', chat);
  await who.page.click('#join');
  await who.page.waitForSelector(`#chats li[data-chat="${chat}"][aria-current="true"]`);
  await who.page.waitForSelector('#watch[data-state="live"]');
}

/** The unread badge of `chat` in `who`'s chat list, as a number (0 when the chat is not listed). */
async function unread(who, chat) {
  const v = await who.page.getAttribute(`#chats li[data-chat="${chat}"] .unread`, 'data-unread', { timeout: 1000 }).catch(() => null);
  return v === null ? 0 : Number(v);
}

/** Who `who`'s page shows as here. */
function present(who) {
  return who.page.$$eval('#present [data-user]', (els) => els.map((el) => el.dataset.user));
}

/** Waits until `who` shows exactly these message texts, in this order. */
async function waitForTexts(who, texts, ms = UI_TIMEOUT_MS) {
  await until(
    ms,
    `${who.name} shows ${JSON.stringify(texts)}`,
    async () => JSON.stringify((await messages(who.page)).map((m) => m.text)) === JSON.stringify(texts),
    async () => `It shows ${JSON.stringify((await messages(who.page)).map((m) => m.text))}; connection ${await connState(who)}.`,
  );
}

function connState(who) {
  return who.page.getAttribute('#conn', 'data-state');
}

function seqOf(list, text) {
  const m = list.find((x) => x.text === text);
  assert.ok(m, `no message "${text}"`);
  return m.seq;
}

/** Screenshots of both pages, side by side on one image, so one artifact shows what each person saw. */
async function screenshotBoth(browser, people, file) {
  const shots = [];
  for (const p of people) {
    shots.push({ name: p.name, png: (await within(UI_TIMEOUT_MS, `screenshot of ${p.name}`, p.page.screenshot())).toString('base64') });
  }
  const context = await browser.newContext({ viewport: { width: 760 * shots.length + 40, height: 1140 } });
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

// ---- the test -------------------------------------------------------------------------------------

describe('demo page in Chromium', { timeout: TEST_TIMEOUT_MS }, () => {
  const heraldLog = [];
  const pageErrors = [];
  const consoleLog = [];
  let herald = null;
  let chrome = null;
  let browser = null;
  let alice = null;
  let bob = null;

  before(async () => {
    herald = await startHerald({ args: ['--heartbeat-ms', String(HEARTBEAT_MS)], log: heraldLog, logName: 'herald.log' });
    chrome = await startChromium();
    browser = chrome.browser;
    alice = await openAs(browser, herald.base, 'alice', pageErrors, consoleLog);
    bob = await openAs(browser, herald.base, 'bob', pageErrors, consoleLog);
  });

  after(async () => {
    try {
      if (browser !== null && alice !== null && bob !== null) {
        await screenshotBoth(browser, [alice, bob], join(ARTIFACTS, 'e2e.png')).catch((e) => console.error(`screenshot failed: ${e.message}`));
      }
    } finally {
      if (chrome !== null) await chrome.stop();
      if (herald !== null) await herald.stop();
      if (existsSync(ARTIFACTS)) {
        writeFileSync(join(ARTIFACTS, 'herald.log'), heraldLog.join(''));
        writeFileSync(join(ARTIFACTS, 'console.log'), consoleLog.map((l) => `${l}\n`).join(''));
      }
    }
  });

  test('two people see each other: members, messages, reactions, read markers', { timeout: TEST_TIMEOUT_MS }, async () => {
    for (const who of [alice, bob]) {
      await until(UI_TIMEOUT_MS, `${who.name} sees 2 members`, async () => (await who.page.textContent('#members')) === '2');
    }

    await send(alice, 'hello bob');
    await waitForTexts(bob, ['hello bob']);
    await send(bob, 'hi alice');
    await waitForTexts(alice, ['hello bob', 'hi alice']);
    await waitForTexts(bob, ['hello bob', 'hi alice']);

    // Reactions: bob +1s alice's message; alice adds hers and takes it back (the button toggles).
    const hello = seqOf(await messages(alice.page), 'hello bob');
    const plusOne = (who) => who.page.locator(`#messages li[data-seq="${hello}"] button.react[data-emoji="+1"]`);
    await plusOne(bob).click();
    await until(UI_TIMEOUT_MS, 'alice sees a +1 from bob', async () => (await plusOne(alice).getAttribute('data-count')) === '1');
    await plusOne(alice).click();
    await until(UI_TIMEOUT_MS, 'both see two +1s', async () =>
      (await plusOne(alice).getAttribute('data-count')) === '2' && (await plusOne(bob).getAttribute('data-count')) === '2',
    );
    assert.equal(await plusOne(alice).getAttribute('aria-pressed'), 'true');
    await plusOne(alice).click();
    await until(UI_TIMEOUT_MS, 'alice takes her +1 back', async () =>
      (await plusOne(alice).getAttribute('data-count')) === '1' && (await plusOne(bob).getAttribute('data-count')) === '1',
    );
    assert.equal(await plusOne(alice).getAttribute('aria-pressed'), 'false');
    assert.equal(await plusOne(bob).getAttribute('aria-pressed'), 'true');

    // Read markers: each page reads what it shows, so each one's message is marked read by the other.
    const reads = (who, seq) => who.page.getAttribute(`#messages li[data-seq="${seq}"] .reads`, 'data-read-count');
    const hi = seqOf(await messages(bob.page), 'hi alice');
    await until(UI_TIMEOUT_MS, "alice sees bob read alice's message", async () => (await reads(alice, hello)) === '1');
    await until(UI_TIMEOUT_MS, "bob sees alice read bob's message", async () => (await reads(bob, hi)) === '1');
    await until(UI_TIMEOUT_MS, "alice sees bob's read position", async () => Number(await alice.page.getAttribute('#readers [data-user="bob"]', 'data-seq')) >= hi);
  });

  test('a member who goes offline and comes back sees every message once, in order', { timeout: TEST_TIMEOUT_MS }, async (t) => {
    const before = (await messages(alice.page)).map((m) => m.text);

    await bob.context.setOffline(true);
    const cutAt = Date.now();
    await until(OFFLINE_NOTICED_MS, "bob's page notices it is offline", async () => (await connState(bob)) !== 'connected');
    // Chromium's offline emulation may close the socket or black-hole it (then the ping watchdog finds
    // it); either is fine, and which one happened is worth seeing in the output.
    t.diagnostic(`bob noticed after ${Date.now() - cutAt} ms: ${await bob.page.textContent('#conn-detail')}`);

    // Bob writes while offline: the SDK queues it, the page shows it as pending.
    await send(bob, 'written offline');
    await bob.page.waitForSelector('#pending li[data-client-id]');

    const missed = ['missed 1', 'missed 2', 'missed 3', 'missed 4', 'missed 5'];
    for (const [i, text] of missed.entries()) {
      await send(alice, text);
      await waitForTexts(alice, [...before, ...missed.slice(0, i + 1)]);
    }
    // Bob really was cut off: none of it reached him.
    assert.deepEqual((await messages(bob.page)).map((m) => m.text), before);
    assert.notEqual(await connState(bob), 'connected');

    await bob.context.setOffline(false);
    await bob.page.waitForSelector('#conn[data-state="connected"]', { timeout: RECONNECT_TIMEOUT_MS });

    const all = [...before, ...missed, 'written offline'];
    await waitForTexts(bob, all, RECONNECT_TIMEOUT_MS);
    await waitForTexts(alice, all);
    await until(UI_TIMEOUT_MS, "bob's pending send is gone", async () => (await bob.page.$$('#pending li')).length === 0);

    // Once each, in seq order, and the same events with the same seqs on both pages.
    const bobs = await messages(bob.page);
    const alices = await messages(alice.page);
    assert.deepEqual(bobs, alices);
    for (const who of [alice, bob]) {
      const seqs = await rowSeqs(who.page);
      assert.equal(new Set(seqs).size, seqs.length, `${who.name} shows a seq twice: ${seqs}`);
      assert.deepEqual([...seqs].sort((a, b) => a - b), seqs, `${who.name}'s rows are out of seq order: ${seqs}`);
    }
    assert.equal(bobs.find((m) => m.text === 'written offline')?.user, 'bob');

    // Back online, bob's page reports what it has now shown as read, and alice sees it.
    const lastSeq = bobs[bobs.length - 1].seq;
    await until(UI_TIMEOUT_MS, `alice sees bob's read position reach #${lastSeq}`, async () =>
      Number(await alice.page.getAttribute('#readers [data-user="bob"]', 'data-seq')) >= lastSeq,
    );
    const missedSeq = seqOf(alices, 'missed 5');
    await until(UI_TIMEOUT_MS, "alice sees bob read what he missed", async () =>
      (await alice.page.getAttribute(`#messages li[data-seq="${missedSeq}"] .reads`, 'data-read-count')) === '1',
    );
    assert.deepEqual(pageErrors, [], 'uncaught errors in the pages');
  });

  test('who is here, typing, edits and deletes, and the chat list', { timeout: TEST_TIMEOUT_MS }, async () => {
    // Who is here: both pages watch general.
    for (const who of [alice, bob]) {
      await until(UI_TIMEOUT_MS, `${who.name} sees alice and bob here`, async () => JSON.stringify(await present(who)) === '["alice","bob"]');
    }

    // Typing: alice types; bob sees it, and it goes once she sends.
    await alice.page.fill('#text', '');
    await alice.page.type('#text', 'typo here');
    await until(UI_TIMEOUT_MS, 'bob sees "alice is typing"', async () => (await bob.page.getAttribute('#typing', 'data-users')) === 'alice');
    assert.equal(await bob.page.textContent('#typing'), 'alice is typing…');
    assert.equal(await alice.page.getAttribute('#typing', 'data-users'), '', 'one never sees oneself typing');
    await alice.page.press('#text', 'Enter');
    await until(UI_TIMEOUT_MS, 'bob gets the message', async () => (await messages(bob.page)).some((m) => m.text === 'typo here'));
    await until(UI_TIMEOUT_MS, 'bob no longer sees alice typing', async () => (await bob.page.isHidden('#typing')));

    // Edit and delete: only on one's own messages; the other page follows.
    const typo = seqOf(await messages(alice.page), 'typo here');
    const row = (who) => who.page.locator(`#messages li[data-seq="${typo}"]`);
    assert.equal(await row(bob).locator('button.edit').count(), 0, "bob cannot edit alice's message");
    await row(alice).locator('button.edit').click();
    await row(alice).locator('input.edit-text').fill('fixed it');
    await row(alice).locator('input.edit-text').press('Enter');
    for (const who of [alice, bob]) {
      await until(UI_TIMEOUT_MS, `${who.name} sees the edit`, async () =>
        (await row(who).locator('.text').textContent()) === 'fixed it' && (await row(who).getAttribute('data-edited')) !== null,
      );
    }
    await row(alice).locator('button.delete').click();
    for (const who of [alice, bob]) {
      await until(UI_TIMEOUT_MS, `${who.name} sees the delete`, async () => (await row(who).getAttribute('data-deleted')) === 'true');
      assert.equal(await row(who).locator('.text').textContent(), 'message deleted');
      assert.equal(await row(who).locator('.text').getAttribute('data-mark'), null, 'a deleted message is not marked edited');
    }
    assert.equal(await row(alice).locator('button.edit').count(), 0, 'a deleted message cannot be edited');

    // The chat list: bob opens another chat; alice's messages in general count as unread for him, live.
    // First both pages' reads of "typo here" (each page reads 250 ms after a message shows) are stored:
    // a read is an event of general, and one landing after bob's join would rightly put general first.
    for (const [who, other] of [[alice, bob], [bob, alice]]) {
      await until(UI_TIMEOUT_MS, `${who.name} sees ${other.name}'s read reach the message`, async () =>
        Number(await who.page.getAttribute(`#readers [data-user="${other.name}"]`, 'data-seq')) >= typo,
      );
    }
    await joinChat(bob, 'random');
    await until(UI_TIMEOUT_MS, 'alice sees bob leave "here"', async () => JSON.stringify(await present(alice)) === '["alice"]');
    await until(UI_TIMEOUT_MS, "bob's list has both chats, random first", async () =>
      JSON.stringify(await bob.page.$$eval('#chats li', (els) => els.map((el) => el.dataset.chat))) === '["random","general"]',
    );
    assert.equal(await unread(bob, 'general'), 0);
    assert.deepEqual(pageErrors, [], 'uncaught errors in the pages');
  });

  test('the chat list follows unread counts live: new messages, a delete, a read', { timeout: TEST_TIMEOUT_MS }, async () => {
    await send(alice, 'are you there?');
    await send(alice, 'bob?');
    await until(UI_TIMEOUT_MS, 'bob sees 2 unread in general, now the latest chat', async () =>
      (await unread(bob, 'general')) === 2 &&
      JSON.stringify(await bob.page.$$eval('#chats li', (els) => els.map((el) => el.dataset.chat))) === '["general","random"]',
    );
    assert.equal(await bob.page.isVisible('#chats li[data-chat="general"] .unread'), true);
    // Deleting one of them takes it off bob's count.
    const bobQ = seqOf(await messages(alice.page), 'bob?');
    await alice.page.locator(`#messages li[data-seq="${bobQ}"] button.delete`).click();
    await until(UI_TIMEOUT_MS, 'a deleted message is not counted', async () => (await unread(bob, 'general')) === 1);
    // Opening general reads it: the badge goes.
    await openChat(bob, 'general');
    await until(UI_TIMEOUT_MS, "bob's badge clears once he has read general", async () => (await unread(bob, 'general')) === 0);
    assert.equal(await bob.page.isHidden('#chats li[data-chat="general"] .unread'), true);
    await until(UI_TIMEOUT_MS, 'alice sees bob here again', async () => JSON.stringify(await present(alice)) === '["alice","bob"]');
    assert.deepEqual(pageErrors, [], 'uncaught errors in the pages');
  });
});
