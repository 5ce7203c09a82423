//! End-to-end test of the demo page: a real herald in development mode, Debian's Chromium driven by
//! playwright-core, two people (two browser contexts) in one chat, once at a desktop's window size and
//! once at a phone's (390x844).
//!
//! Owns: starting and stopping herald, the stream bot and the browser for this test, and what a user of
//! the page must see: each other's messages, reactions and read markers, and after one of them drops off
//! the network and comes back, every message exactly once and in order; then (protocol 1.1) who is here,
//! "X is typing", edits and deletes of one's own messages, and the chat list with live unread badges;
//! then (protocol 1.2) the chat's name and its renaming, the members panel page by page, a thread reply
//! seen by the other with the root's reply count, a quote, a mention badge and the mention highlighted,
//! a badge for new replies in a followed thread, a pin, reaction counts, and a bot's reply streamed word
//! by word; then (1.2's files and search) an image picked by one person shown inline on the other's page
//! (its bytes decoded) and a text file as a download link, and a search that finds a word inside a longer
//! word and opens the chat at that message; and that the page fits the window and shows a person's
//! words, the protocol's only in the details. Leaves in web/test-artifacts, also when it fails: e2e-<size>.png (both pages side by side;
//! -thread with a thread open, -mention with a mention badge, -stream mid-stream), herald-<size>.log,
//! bot-<size>.log and console-<size>.log.
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
import { ARTIFACTS, freePort, startChromium, startHerald, until } from './support.mjs';
import {
  UI_TIMEOUT_MS,
  attach,
  badge,
  chatIds,
  connState,
  joinChat,
  messages,
  openAs,
  openChat,
  present,
  rowSeqs,
  screenshotAll,
  search,
  send,
  seqWhenShown,
  shownImages,
  startBot,
  tinyPng,
  waitForTexts,
} from './demo-page.mjs';

/**
 * The server's heartbeat for this run. The SDK pings at the server's heartbeat and gives a ping 10 s,
 * so a link the browser black-holes (rather than closes) when offline is found dead within ~11 s
 * instead of ~35 s with the default 25 s heartbeat.
 */
const HEARTBEAT_MS = 1000;

/** Going offline is noticed at once (socket closed) or by the ping watchdog (heartbeat + 10 s). */
const OFFLINE_NOTICED_MS = 30_000;
/** Coming back waits out the reconnect backoff, which grows while offline (full jitter, cap 20 s). */
const RECONNECT_TIMEOUT_MS = 45_000;
const TEST_TIMEOUT_MS = 150_000;
const SUITE_TIMEOUT_MS = 600_000;

const CHAT = 'general';
/** The bot's user id, and the hook secret herald signs its webhook requests to the bot with. */
const BOT = 'helper';
const HOOK_SECRET = 'e2e-test-hook-secret-0123456789abcdef0123';

/** The window sizes every test runs at: a desktop's, and a phone's (CSS pixels, with touch). */
const VIEWPORTS = [
  { label: 'desktop', width: 1000, height: 860, mobile: false },
  { label: 'phone', width: 390, height: 844, mobile: true },
];

function seqOf(list, text) {
  const m = list.find((x) => x.text === text);
  assert.ok(m, `no message "${text}"`);
  return m.seq;
}

/** The text a person sees on `who`'s page (what is hidden, as the details are, is not in it). */
function visibleText(who) {
  return who.page.evaluate(() => document.body.innerText);
}

for (const viewport of VIEWPORTS.filter((v) => (process.env.E2E_ONLY ?? v.label) === v.label)) {
  const size = `${viewport.width}x${viewport.height}`;
  describe(`demo page in Chromium at ${viewport.label} size (${size})`, { timeout: SUITE_TIMEOUT_MS }, () => {
    const heraldLog = [];
    const pageErrors = [];
    const consoleLog = [];
    let herald = null;
    let bot = null;
    let chrome = null;
    let browser = null;
    let alice = null;
    let bob = null;
    const shot = (suffix) =>
      screenshotAll(browser, [alice, bob], viewport, join(ARTIFACTS, `e2e-${viewport.label}${suffix}.png`)).catch((e) =>
        console.error(`screenshot failed: ${e.message}`),
      );

    before(async () => {
      // herald's webhook is the bot's ear: every stored event goes to it, signed with the hook secret.
      const botPort = await freePort();
      herald = await startHerald({
        args: ['--heartbeat-ms', String(HEARTBEAT_MS), '--webhook-url', `http://127.0.0.1:${botPort}/hook`, '--hook-secret', HOOK_SECRET],
        log: heraldLog,
        logName: `herald-${viewport.label}.log`,
      });
      assert.ok(herald.apiKey, 'herald in development mode prints its api key');
      bot = await startBot({ port: botPort, herald: herald.base, apiKey: herald.apiKey, hookSecret: HOOK_SECRET, user: BOT });
      chrome = await startChromium();
      browser = chrome.browser;
      alice = await openAs(browser, herald.base, 'alice', CHAT, viewport, pageErrors, consoleLog);
      bob = await openAs(browser, herald.base, 'bob', CHAT, viewport, pageErrors, consoleLog);
    });

    after(async () => {
      try {
        if (browser !== null && alice !== null && bob !== null) await shot('');
      } finally {
        if (chrome !== null) await chrome.stop();
        if (bot !== null) await bot.stop();
        if (herald !== null) await herald.stop();
        if (existsSync(ARTIFACTS)) {
          writeFileSync(join(ARTIFACTS, `herald-${viewport.label}.log`), heraldLog.join(''));
          writeFileSync(join(ARTIFACTS, `bot-${viewport.label}.log`), bot?.log.join('') ?? '');
          writeFileSync(join(ARTIFACTS, `console-${viewport.label}.log`), consoleLog.map((l) => `${l}\n`).join(''));
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
        JSON.stringify(await chatIds(bob)) === '["random","general"]',
      );
      assert.equal(await badge(bob, 'general'), 0);
      assert.deepEqual(pageErrors, [], 'uncaught errors in the pages');
    });

    test('the chat list follows unread counts live: new messages, a delete, a read', { timeout: TEST_TIMEOUT_MS }, async () => {
      await send(alice, 'are you there?');
      await send(alice, 'bob?');
      await until(UI_TIMEOUT_MS, 'bob sees 2 unread in general, now the latest chat', async () =>
        (await badge(bob, 'general')) === 2 &&
        JSON.stringify(await chatIds(bob)) === '["general","random"]',
      );
      assert.equal(await bob.page.isVisible('#chats li[data-chat="general"] .unread'), true);
      // Deleting one of them takes it off bob's count.
      const bobQ = seqOf(await messages(alice.page), 'bob?');
      await alice.page.locator(`#messages li[data-seq="${bobQ}"] button.delete`).click();
      await until(UI_TIMEOUT_MS, 'a deleted message is not counted', async () => (await badge(bob, 'general')) === 1);
      // Opening general reads it: the badge goes.
      await openChat(bob, 'general');
      await until(UI_TIMEOUT_MS, "bob's badge clears once he has read general", async () => (await badge(bob, 'general')) === 0);
      assert.equal(await bob.page.isHidden('#chats li[data-chat="general"] .unread'), true);
      await until(UI_TIMEOUT_MS, 'alice sees bob here again', async () => JSON.stringify(await present(alice)) === '["alice","bob"]');
      assert.deepEqual(pageErrors, [], 'uncaught errors in the pages');
    });

    // ---- protocol 1.2: conversations ------------------------------------------------------------

    test('the chat has a name anyone can change, and a members panel a page at a time', { timeout: TEST_TIMEOUT_MS }, async () => {
      for (const who of [alice, bob]) assert.equal(await who.page.textContent('#chat-title'), CHAT, 'a chat with no name goes by its id');
      await alice.page.click('#rename');
      await alice.page.fill('#rename-text', 'Team room');
      await alice.page.press('#rename-text', 'Enter');
      for (const who of [alice, bob]) {
        await until(UI_TIMEOUT_MS, `${who.name} sees the chat named "Team room", at the top and in the chat list`, async () =>
          (await who.page.textContent('#chat-title')) === 'Team room' &&
          (await who.page.textContent(`#chats li[data-chat="${CHAT}"] .chat-name`)) === 'Team room',
        );
      }
      assert.equal(await bob.page.textContent('#messages li.note[data-type="profile"]'), 'alice renamed the chat to "Team room"');

      // The members panel lists the members by name, the reader as "you".
      const listed = (who) => who.page.$$eval('#member-list li[data-user]', (els) => els.map((el) => el.dataset.user));
      await alice.page.click('#members-button');
      await until(UI_TIMEOUT_MS, 'alice sees the 2 members listed', async () => JSON.stringify(await listed(alice)) === '["alice","bob"]');
      assert.match(await alice.page.textContent('#member-list li[data-user="alice"]'), /you/);
      assert.equal(await alice.page.isHidden('#members-more'), true, 'one page holds them all');
      await alice.page.click('#members-close');

      // The app's backend adds 55 people (the server API): the count follows live, the panel pages by 50.
      const added = Array.from({ length: 55 }, (_, i) => `member${String(i + 1).padStart(2, '0')}`);
      for (const user of added) {
        const res = await fetch(`${herald.base}/v1/workspaces/demo/chats/${CHAT}/members/${user}`, {
          method: 'PUT',
          headers: { authorization: `Bearer ${herald.apiKey}` },
        });
        assert.ok(res.ok, `adding ${user}: HTTP ${res.status} ${await res.text()}`);
      }
      for (const who of [alice, bob]) {
        await until(UI_TIMEOUT_MS, `${who.name} sees 57 members`, async () => (await who.page.textContent('#members')) === '57');
      }
      // The 55 joins in a row read as one line.
      const joinLines = await bob.page.$$eval('#messages li.note[data-type="join"]', (els) => els.filter((el) => !el.hidden).map((el) => el.textContent));
      assert.equal(joinLines[joinLines.length - 1], 'member01, member02 and 53 others joined');
      await bob.page.click('#members-button');
      await until(UI_TIMEOUT_MS, 'bob sees the first 50 members and "Show more"', async () =>
        (await listed(bob)).length === 50 && (await bob.page.isVisible('#members-more')),
      );
      await bob.page.click('#members-more');
      await until(UI_TIMEOUT_MS, 'bob sees all 57', async () => (await listed(bob)).length === 57);
      const all = await listed(bob);
      assert.deepEqual(all, ['alice', 'bob', ...added].sort(), 'every member once, sorted by id');
      assert.equal(await bob.page.isHidden('#members-more'), true);
      await bob.page.click('#members-close');
      assert.deepEqual(pageErrors, [], 'uncaught errors in the pages');
    });

    test('a reply in a thread: the other person sees it, and the root its reply count; a quote', { timeout: TEST_TIMEOUT_MS }, async () => {
      await send(alice, 'lunch today?');
      const root = await seqWhenShown(bob, 'lunch today?');
      const rootRow = (who) => who.page.locator(`#messages li[data-seq="${root}"]`);
      const threadTexts = (who) => who.page.$$eval('#thread-messages li.msg .text', (els) => els.map((el) => el.textContent));

      await rootRow(bob).locator('button.reply').click();
      await bob.page.waitForSelector(`#thread-panel[data-root="${root}"]`);
      assert.equal(await bob.page.textContent('#thread-root li.msg .text'), 'lunch today?');
      await bob.page.fill('#thread-text', 'noon works');
      await bob.page.press('#thread-text', 'Enter');
      await until(UI_TIMEOUT_MS, 'bob sees his reply in the thread', async () => JSON.stringify(await threadTexts(bob)) === '["noon works"]');

      const replies = (who) => rootRow(who).locator('button.replies');
      await until(UI_TIMEOUT_MS, 'alice sees "1 reply" on her message', async () =>
        (await replies(alice).count()) === 1 && (await replies(alice).getAttribute('data-replies')) === '1',
      );
      assert.equal(await replies(alice).textContent(), '1 reply');
      assert.ok(!(await messages(alice.page)).some((m) => m.text === 'noon works'), 'a reply is in its thread, not in the chat');

      // Alice opens the thread from the count, sees bob's reply, and answers; bob sees it live.
      await replies(alice).click();
      await until(UI_TIMEOUT_MS, "alice sees bob's reply in the thread", async () => JSON.stringify(await threadTexts(alice)) === '["noon works"]');
      await alice.page.fill('#thread-text', 'see you then');
      await alice.page.press('#thread-text', 'Enter');
      await until(UI_TIMEOUT_MS, "bob sees alice's reply in the open thread", async () =>
        JSON.stringify(await threadTexts(bob)) === '["noon works","see you then"]',
      );
      for (const who of [alice, bob]) {
        await until(UI_TIMEOUT_MS, `${who.name} sees "2 replies"`, async () => (await replies(who).getAttribute('data-replies').catch(() => null)) === '2');
      }
      await shot('-thread');
      for (const who of [alice, bob]) {
        await who.page.click('#thread-close');
        assert.equal(await who.page.isHidden('#thread-panel'), true);
      }

      // A quote: bob quotes alice's message in his next one; both see what it quotes.
      await rootRow(bob).locator('button.quote-it').click();
      assert.equal(await bob.page.textContent('#quoting-text'), 'alice: lunch today?');
      await send(bob, 'count me in');
      assert.equal(await bob.page.isHidden('#quoting'), true, 'the quote goes with the message sent');
      const quoting = await seqWhenShown(alice, 'count me in');
      for (const who of [alice, bob]) {
        const quote = who.page.locator(`#messages li[data-seq="${quoting}"] .quote`);
        await until(UI_TIMEOUT_MS, `${who.name} sees the quote`, async () => (await quote.getAttribute('data-quote')) === String(root));
        assert.equal(await quote.textContent(), 'alice: lunch today?');
      }
      assert.deepEqual(pageErrors, [], 'uncaught errors in the pages');
    });

    test('a mention: highlighted, and a badge in the chat list until read; new replies in a followed thread too', { timeout: TEST_TIMEOUT_MS }, async () => {
      await joinChat(bob, 'random');
      await until(UI_TIMEOUT_MS, "bob's list names general by its name", async () =>
        (await bob.page.textContent(`#chats li[data-chat="${CHAT}"] .chat-name`)) === 'Team room',
      );
      const text = '@bob can you review this?';
      await send(alice, text);
      const seq = await seqWhenShown(alice, text);
      await alice.page.waitForSelector(`#messages li[data-seq="${seq}"] .text mark.mention[data-user="bob"]`);
      assert.equal(await alice.page.locator(`#messages li[data-seq="${seq}"] mark.mention.me`).count(), 0, "alice is not the one mentioned");

      await until(UI_TIMEOUT_MS, 'bob sees a mention badge on general', async () => (await badge(bob, CHAT, 'mentions')) === 1);
      assert.equal(await bob.page.isVisible(`#chats li[data-chat="${CHAT}"] .mentions`), true);
      assert.equal(await bob.page.textContent(`#chats li[data-chat="${CHAT}"] .mentions`), '@1');
      await shot('-mention');

      // A new reply in a thread bob follows (he replied in it) shows too, apart from the chat's unread.
      const root = seqOf(await messages(alice.page), 'lunch today?');
      await alice.page.locator(`#messages li[data-seq="${root}"] button.replies`).click();
      await alice.page.fill('#thread-text', 'bring an umbrella');
      await alice.page.press('#thread-text', 'Enter');
      await until(UI_TIMEOUT_MS, 'bob sees a new reply in a thread he follows', async () => (await badge(bob, CHAT, 'threads')) === 1);
      await alice.page.click('#thread-close');

      await openChat(bob, CHAT);
      await bob.page.waitForSelector(`#messages li[data-seq="${seq}"] .text mark.mention.me[data-user="bob"]`);
      await until(UI_TIMEOUT_MS, 'the badge goes once bob has read general', async () => (await badge(bob, CHAT, 'mentions')) === 0);
      assert.equal(await bob.page.isHidden(`#chats li[data-chat="${CHAT}"] .mentions`), true);
      // Reading the chat leaves the thread unread, until bob opens the thread.
      assert.equal(await badge(bob, CHAT, 'threads'), 1);
      await bob.page.locator(`#messages li[data-seq="${root}"] button.replies`).click();
      await until(UI_TIMEOUT_MS, 'the thread badge goes once bob has read the thread', async () => (await badge(bob, CHAT, 'threads')) === 0);
      await bob.page.click('#thread-close');
      assert.deepEqual(pageErrors, [], 'uncaught errors in the pages');
    });

    test('a pin, and reaction counts kept by the message list', { timeout: TEST_TIMEOUT_MS }, async () => {
      const seq = seqOf(await messages(alice.page), 'lunch today?');
      const row = (who) => who.page.locator(`#messages li[data-seq="${seq}"]`);
      await row(alice).locator('button.pin').click();
      for (const who of [alice, bob]) {
        await until(UI_TIMEOUT_MS, `${who.name} sees the message pinned`, async () =>
          (await row(who).getAttribute('data-pinned')) === 'true' && (await who.page.getAttribute('#pin-count', 'data-count')) === '1',
        );
      }
      assert.equal(await row(bob).locator('.pinned-mark').isVisible(), true);
      await bob.page.click('#pins-button');
      await bob.page.waitForSelector(`#pin-list li[data-seq="${seq}"]`);
      assert.match(await bob.page.textContent(`#pin-list li[data-seq="${seq}"]`), /alice.*lunch today\?/);
      await bob.page.click(`#pin-list li[data-seq="${seq}"]`);
      assert.equal(await bob.page.isHidden('#pins-panel'), true, 'picking a pin closes the list and shows the message');

      // Counts: two hearts and a star, on both pages.
      const react = (who, emoji) => row(who).locator(`button.react[data-emoji="${emoji}"]`);
      await react(bob, 'heart').click();
      await react(alice, 'heart').click();
      await react(bob, 'star').click();
      const counts = async (who) => [await react(who, 'heart').getAttribute('data-count'), await react(who, 'star').getAttribute('data-count')];
      for (const who of [alice, bob]) {
        await until(UI_TIMEOUT_MS, `${who.name} sees 2 hearts and 1 star`, async () => JSON.stringify(await counts(who)) === '["2","1"]');
      }
      // A fresh page (bob opens the chat again) counts each once: the replayed stored view and the
      // reaction events after it are not added up twice.
      await joinChat(bob, CHAT);
      await until(UI_TIMEOUT_MS, 'bob, back in the chat, sees the same counts', async () => JSON.stringify(await counts(bob)) === '["2","1"]');
      assert.equal(await row(bob).getAttribute('data-pinned'), 'true');

      await row(alice).locator('button.pin').click(); // now "Unpin"
      for (const who of [alice, bob]) {
        await until(UI_TIMEOUT_MS, `${who.name} sees it unpinned`, async () =>
          (await row(who).getAttribute('data-pinned')) === null && (await who.page.getAttribute('#pin-count', 'data-count')) === '0',
        );
      }
      assert.deepEqual(pageErrors, [], 'uncaught errors in the pages');
    });

    test("a bot's reply streams in, word by word, then is done", { timeout: TEST_TIMEOUT_MS }, async () => {
      await send(alice, `@${BOT} what is herald?`);
      const reply = (who) => who.page.locator(`#messages li.msg[data-user="${BOT}"]`);
      await until(UI_TIMEOUT_MS, "bob sees the bot's reply begin", async () => (await reply(bob).count()) === 1, async () => `bot log: ${bot.log.join('')}`);
      // What bob's page shows while the stream is open: each text seen, in order.
      const seen = [];
      let shotTaken = false;
      await until(UI_TIMEOUT_MS, 'the reply is done', async () => {
        const [state, text] = await reply(bob).evaluate((el) => [el.dataset.stream, el.querySelector('.text')?.textContent ?? '']);
        if (state === 'open' && seen[seen.length - 1] !== text) seen.push(text);
        if (state === 'open' && seen.length === 2 && !shotTaken) {
          shotTaken = true;
          await shot('-stream'); // half written, with "writing…"
        }
        return state === 'done';
      });
      const final = await reply(bob).locator('.text').textContent();
      assert.match(final, /^Hi alice, this is helper\. You asked: "what is herald\?"\. I answer word by word/);
      assert.ok(seen.length >= 3, `bob saw the text grow: ${JSON.stringify(seen)}`);
      for (const [i, text] of seen.entries()) {
        assert.ok(final.startsWith(text), `"${text}" is how the reply begins`);
        if (i > 0) assert.ok(text.length > seen[i - 1].length, 'it only grows');
      }
      assert.equal(await reply(bob).locator('.writing').isHidden(), true, 'no "writing…" once done');
      await until(UI_TIMEOUT_MS, 'alice sees the same reply', async () => (await reply(alice).locator('.text').textContent()) === final);
      assert.deepEqual(pageErrors, [], 'uncaught errors in the pages');
    });

    // ---- protocol 1.2: files and search ---------------------------------------------------------

    test('a picked image shows inline on the other page (its bytes load), a text file as a download link', { timeout: TEST_TIMEOUT_MS }, async () => {
      const png = tinyPng(4, 3);
      await attach(alice, [
        { name: 'stripes.png', mimeType: 'image/png', buffer: png },
        { name: 'notes.txt', mimeType: 'text/plain', buffer: Buffer.from('hello, files\n') },
      ]);
      await until(UI_TIMEOUT_MS, "alice's two files are uploaded", async () =>
        (await alice.page.$$eval('#attachments li[data-state="ready"]', (els) => els.length)) === 2,
      );
      await send(alice, 'a picture and notes');
      const seq = await seqWhenShown(bob, 'a picture and notes');
      // The bytes really load: a browser gives an <img> a natural size only for an image it decoded.
      await until(UI_TIMEOUT_MS, 'bob sees the image, loaded', async () =>
        (await shownImages(bob)).some((i) => i.seq === seq && i.loaded),
      );
      const [img] = (await shownImages(bob)).filter((i) => i.seq === seq);
      assert.deepEqual(img, { seq, alt: 'stripes.png', loaded: true, width: 4, height: 3 });
      const link = bob.page.locator(`#messages li[data-seq="${seq}"] .files a.file-link`);
      assert.equal(await link.locator('.file-name').textContent(), 'notes.txt');
      assert.equal(await link.locator('.file-size').textContent(), '13 B');
      const href = await link.getAttribute('href');
      const res = await fetch(href);
      assert.equal(res.status, 200);
      assert.equal(await res.text(), 'hello, files\n');
      assert.match(res.headers.get('content-disposition') ?? '', /^attachment/, 'a text file downloads, never runs as a page');
      await until(UI_TIMEOUT_MS, 'alice sees her image too', async () => (await shownImages(alice)).some((i) => i.seq === seq && i.loaded));
      assert.equal(await alice.page.isHidden('#attachments'), true, 'the files went with the message');
      await shot('-files');
      assert.deepEqual(pageErrors, [], 'uncaught errors in the pages');
    });

    test('the search box finds a message by a word inside a longer word, and opens its chat at it', { timeout: TEST_TIMEOUT_MS }, async (t) => {
      // bob writes in general while alice is in another chat; she searches part of a word.
      await joinChat(alice, 'random');
      t.after(async () => {
        // Whatever happened, the next test finds alice in general with no panel open.
        await alice.page.keyboard.press('Escape');
        if ((await alice.page.getAttribute(`#chats li[data-chat="${CHAT}"]`, 'aria-current').catch(() => null)) !== 'true') await openChat(alice, CHAT);
      });
      await send(bob, '서버가 준비됐어요');
      const found = await seqWhenShown(bob, '서버가 준비됐어요');
      let results = [];
      await until(UI_TIMEOUT_MS, 'alice finds it by "서버"', async () => {
        results = await search(alice, '서버');
        return results.length > 0;
      });
      assert.deepEqual(results, [{ chat: CHAT, seq: found, who: 'bob', chatName: 'Team room', snippet: '서버가 준비됐어요', marked: ['서버'] }]);
      await shot('-search');
      await alice.page.click(`#search-results > li[data-seq="${found}"]`);
      await alice.page.waitForSelector(`#chats li[data-chat="${CHAT}"][aria-current="true"]`);
      await until(UI_TIMEOUT_MS, 'alice sees the message she picked, outlined', async () =>
        alice.page.locator(`#messages li[data-seq="${found}"].flash`).isVisible(),
      );
      assert.equal(await alice.page.isHidden('#search-panel'), true);
      assert.deepEqual(pageErrors, [], 'uncaught errors in the pages');
    });

    test("the page fits the window and speaks a person's words; the protocol's only in the details", { timeout: TEST_TIMEOUT_MS }, async () => {
      for (const who of [alice, bob]) {
        const box = await who.page.evaluate(() => {
          const rect = (id) => {
            const r = document.getElementById(id).getBoundingClientRect();
            return { left: r.left, right: r.right, top: r.top, bottom: r.bottom };
          };
          return { width: innerWidth, height: innerHeight, scrollWidth: document.documentElement.scrollWidth, text: rect('text'), send: rect('send') };
        });
        assert.ok(box.scrollWidth <= box.width, `${who.name}: nothing wider than the window (${box.scrollWidth} > ${box.width})`);
        for (const id of ['text', 'send']) {
          const r = box[id];
          assert.ok(r.left >= 0 && r.right <= box.width && r.top >= 0 && r.bottom <= box.height, `${who.name}: #${id} on screen: ${JSON.stringify(r)}`);
        }
        const words = await visibleText(who);
        for (const protocol of [/#\d/, /✓#/, /\blive\b/, /\bwatch\b/i, /\bseq\b/]) assert.doesNotMatch(words, protocol, `${who.name} sees protocol words`);
        assert.match(words, /\bonline\b/);

        await who.page.check('#details-toggle');
        const details = await visibleText(who);
        assert.match(details, /\bwatch\s+live\b/);
        assert.match(details, /#\d+/);
        await who.page.uncheck('#details-toggle');
      }
      assert.deepEqual(pageErrors, [], 'uncaught errors in the pages');
    });
  });
}
