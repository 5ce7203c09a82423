//! End-to-end test of the admin page's support panels: a real herald started with secrets, Debian's
//! Chromium driven by playwright-core, and what a support person does, each step checked twice: what
//! the page shows, and what the server then answers (through the server API, or a chat client's
//! WebSocket in the browser).
//!
//! Owns: the steps find a chat by the start of its id; see its profile, members and latest events (user
//! content drawn as text, never markup); delete a message; ban, unban, mute and unmute a member; find a
//! user and see their chats; revoke their tokens; download their export and read its lines; erase them,
//! refused while the confirmation does not name them. Leaves web/test-artifacts/admin-support.png and
//! admin-support-herald.log behind, also when it fails.
//!
//!     HERALD_BIN=/path/to/herald npm test     default: ../target/release/herald from web/
//!     CHROMIUM_BIN=/path/to/chromium          default: /usr/bin/chromium (Debian's package)

import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { ARTIFACTS, startChromium, startHerald, until, within } from './support.mjs';

const API_KEY = 'support-test-api-key-0123456789abcdef012';
const JWT_SECRET = 'support-test-jwt-secret-0123456789abcdef';
const WS = 'acme';
const UI_TIMEOUT_MS = 15_000;
const TEST_TIMEOUT_MS = 180_000;

/** User content that would run or draw as markup if the page ever used innerHTML with it. */
const HOSTILE = '<img src=x onerror="window.pwned=1">';
const ROOM_NAME = 'Support <b>room</b>';

describe('admin page support panels in Chromium', { timeout: TEST_TIMEOUT_MS }, () => {
  const heraldLog = [];
  const pageErrors = [];
  let herald = null;
  let chrome = null;
  let admin = null;
  let shot = false;

  /** A server API call; the status and the parsed answer. */
  async function api(method, path, body) {
    const res = await fetch(`${herald.base}${path}`, {
      method,
      headers: { authorization: `Bearer ${API_KEY}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    let json = null;
    try {
      json = JSON.parse(text);
    } catch {
      json = text;
    }
    return { status: res.status, json };
  }

  async function ok(method, path, body) {
    const r = await api(method, path, body);
    assert.equal(r.status, 200, `${method} ${path}: ${JSON.stringify(r.json)}`);
    return r.json;
  }

  const chatPath = (chat) => `/v1/workspaces/${WS}/chats/${chat}`;

  /** A token for `user`. */
  async function token(user) {
    return (await ok('POST', '/v1/tokens', { workspace: WS, user })).token;
  }

  /**
   * Says hello with `tok` from a browser page, then sends each request in turn; resolves with the
   * replies (each `ok` or `err`), or with `{closed: code}` last if the server closed first.
   */
  async function wsAsk(page, tok, requests) {
    const wsUrl = `${herald.base.replace('http://', 'ws://')}/v1/ws?ws=${WS}`;
    return page.evaluate(
      ({ wsUrl, tok, requests }) =>
        new Promise((resolve) => {
          const replies = [];
          const queue = [{ op: 'hello', token: tok }, ...requests].map((r, i) => ({ id: i + 1, ...r }));
          const ws = new WebSocket(wsUrl);
          const next = () => {
            const r = queue.shift();
            if (r === undefined) {
              ws.close();
              resolve(replies);
            } else ws.send(JSON.stringify(r));
          };
          ws.onopen = next;
          ws.onmessage = (m) => {
            const f = JSON.parse(m.data);
            if (f.ev !== undefined) return;
            replies.push(f);
            next();
          };
          ws.onclose = (e) => {
            if (queue.length > 0 || replies.length === 0) resolve([...replies, { closed: e.code }]);
          };
        }),
      { wsUrl, tok, requests },
    );
  }

  before(async () => {
    herald = await startHerald({
      args: ['--node', 'support-test-node'],
      env: { HERALD_API_KEY: API_KEY, HERALD_JWT_SECRET: JWT_SECRET },
      log: heraldLog,
      logName: 'admin-support-herald.log',
    });
    chrome = await startChromium();
  });

  after(async () => {
    try {
      if (admin !== null && !shot) {
        await within(UI_TIMEOUT_MS, 'screenshot', admin.screenshot({ path: join(ARTIFACTS, 'admin-support.png'), fullPage: true })).catch((e) =>
          console.error(`screenshot failed: ${e.message}`),
        );
      }
    } finally {
      if (chrome !== null) await chrome.stop();
      if (herald !== null) await herald.stop();
      if (existsSync(ARTIFACTS)) writeFileSync(join(ARTIFACTS, 'admin-support-herald.log'), heraldLog.join(''));
    }
  });

  test('finds chats and users, moderates, revokes, exports and erases', { timeout: TEST_TIMEOUT_MS }, async () => {
    // Two chats that start with "support-", one that does not; alice and bob in the room.
    await ok('PUT', chatPath('support-room'), { open: true, name: ROOM_NAME, data: { tier: 'gold' } });
    await ok('PUT', chatPath('support-other'), { open: true });
    await ok('PUT', chatPath('unrelated'), { open: true });
    for (const [chat, user] of [['support-room', 'alice'], ['support-room', 'bob'], ['support-other', 'alice']]) {
      await ok('PUT', `${chatPath(chat)}/members/${user}`);
    }
    const post = async (chat, user, body) => (await ok('POST', `${chatPath(chat)}/events`, { type: 'message', user, body })).seq;
    const hostileSeq = await post('support-room', 'alice', HOSTILE);
    const helloSeq = await post('support-room', 'alice', 'hello from alice');
    await post('support-room', 'bob', 'bob says hi');
    const otherSeq = await post('support-other', 'alice', 'alice elsewhere');

    const context = await chrome.browser.newContext({ viewport: { width: 1100, height: 1400 }, acceptDownloads: true });
    admin = await context.newPage();
    admin.setDefaultTimeout(UI_TIMEOUT_MS);
    admin.on('pageerror', (e) => pageErrors.push(e.message));
    admin.on('dialog', (d) => void d.accept());
    await admin.goto(`${herald.base}/admin`);
    await admin.fill('#key', API_KEY);
    await admin.press('#key', 'Enter');
    await admin.waitForSelector('#dash:not([hidden])');
    const text = (sel) => admin.textContent(sel);
    const notice = async (sel, re) => {
      await admin.waitForFunction(({ sel, src }) => new RegExp(src).test(document.querySelector(sel)?.textContent ?? ''), { sel, src: re.source });
    };

    // Find a chat by the start of its id, with the keyboard.
    await admin.fill('#support-ws', WS);
    await admin.fill('#chat-prefix', 'support-');
    await admin.press('#chat-prefix', 'Enter');
    await admin.waitForSelector('#chat-results button.chat-result');
    const found = await admin.$$eval('#chat-results button.chat-result', (bs) => bs.map((b) => b.dataset.chat));
    assert.deepEqual(found, ['support-other', 'support-room']);
    assert.equal(await admin.evaluate(() => document.activeElement?.dataset.chat), 'support-other', 'the first result has the focus');
    assert.match(await text('#chat-results button[data-chat="support-room"]'), /Support <b>room<\/b>.*2 member/);

    // Its profile, members and latest events; user content shown as text.
    await admin.click('#chat-results button[data-chat="support-room"]');
    await admin.waitForSelector('#chat-detail:not([hidden])');
    assert.equal(await text('#chat-id'), 'support-room');
    assert.equal(await text('#chat-name'), ROOM_NAME);
    assert.equal(await text('#chat-data'), '{"tier":"gold"}');
    assert.equal(await text('#chat-members-count'), '2');
    assert.deepEqual(await admin.$$eval('#chat-members tr', (rows) => rows.map((r) => r.dataset.user)), ['alice', 'bob']);
    const bodyOf = (seq) => text(`#chat-events tr[data-seq="${seq}"] td.body`);
    assert.equal(await bodyOf(hostileSeq), HOSTILE);
    assert.equal(await admin.locator('#support b, #support img').count(), 0, 'no user content became markup');
    assert.equal(await admin.evaluate(() => window.pwned), undefined);

    // Delete a message.
    await admin.click(`#chat-events tr[data-seq="${helloSeq}"] button.delete-event`);
    await admin.waitForSelector(`#chat-events tr[data-seq="${helloSeq}"][data-deleted="true"]`);
    await notice('#chat-notice', new RegExp(`Message ${helloSeq} deleted`));
    assert.equal(await admin.locator(`#chat-events tr[data-seq="${helloSeq}"] button.delete-event`).count(), 0);
    const events = (await ok('GET', `${chatPath('support-room')}/events?after=0&limit=100`)).events;
    const deleted = events.find((e) => e.seq === helloSeq);
    assert.equal(deleted.deleted, true);
    assert.equal(deleted.body, null);

    // Ban bob from his row: he is removed, and cannot be added back until unbanned.
    await admin.click('#chat-members tr[data-user="bob"] button[data-action="ban"]');
    await notice('#chat-notice', /bob banned from support-room/);
    await admin.waitForSelector('#chat-members tr[data-user="bob"]', { state: 'detached' });
    const members = async () => (await ok('GET', `${chatPath('support-room')}/members`)).members.map((m) => m.user);
    assert.deepEqual(await members(), ['alice']);
    assert.equal((await api('PUT', `${chatPath('support-room')}/members/bob`)).status, 403);
    // Unban him by id (he is no longer a member row).
    await admin.fill('#member-user', 'bob');
    await admin.click('#member-form button[data-action="unban"]');
    await notice('#chat-notice', /bob unbanned in support-room/);
    await ok('PUT', `${chatPath('support-room')}/members/bob`);
    assert.deepEqual(await members(), ['alice', 'bob']);

    // Mute alice: her sends are refused; unmute: accepted again.
    const clientContext = await chrome.browser.newContext();
    const client = await clientContext.newPage();
    await client.goto(`${herald.base}/healthz`);
    const aliceToken = await token('alice');
    await admin.click('#chat-reload');
    await admin.waitForSelector('#chat-members tr[data-user="bob"]');
    await admin.click('#chat-members tr[data-user="alice"] button[data-action="mute"]');
    await notice('#chat-notice', /alice muted in support-room/);
    let replies = await wsAsk(client, aliceToken, [{ op: 'send', chat: 'support-room', body: 'while muted' }]);
    assert.equal(replies[1]?.err?.code, 'forbidden', JSON.stringify(replies));
    await admin.click('#chat-members tr[data-user="alice"] button[data-action="unmute"]');
    await notice('#chat-notice', /alice unmuted in support-room/);
    replies = await wsAsk(client, aliceToken, [{ op: 'send', chat: 'support-room', body: 'after the mute' }]);
    assert.ok(replies[1]?.ok?.seq > 0, JSON.stringify(replies));

    // Find a user: their chats.
    await admin.fill('#user-id', 'alice');
    await admin.press('#user-id', 'Enter');
    await admin.waitForSelector('#user-detail:not([hidden])');
    assert.equal(await text('#user-name'), 'alice');
    const userChats = await admin.$$eval('#user-chats tr', (rows) => rows.map((r) => r.dataset.chat).sort());
    assert.deepEqual(userChats, ['support-other', 'support-room']);
    assert.equal(await text('#user-chats tr[data-chat="support-room"] td:nth-child(2)'), ROOM_NAME);

    // Revoke: a token issued before is refused from now on.
    await new Promise((r) => setTimeout(r, 1100)); // tokens carry iat in whole seconds
    await admin.click('#user-revoke');
    await notice('#user-notice', /alice's tokens are revoked/);
    replies = await wsAsk(client, aliceToken, []);
    assert.ok(replies[0]?.err?.code === 'unauthenticated' || replies[0]?.closed === 4001, JSON.stringify(replies));

    // Export: the downloaded file's lines are alice's memberships, then her messages oldest first.
    const [download] = await Promise.all([admin.waitForEvent('download'), admin.click('#user-export')]);
    assert.match(download.suggestedFilename(), /^acme-alice-export\.ndjson$/);
    const chunks = [];
    for await (const c of await download.createReadStream()) chunks.push(c);
    const lines = Buffer.concat(chunks).toString('utf8').split('\n').filter((l) => l !== '').map((l) => JSON.parse(l));
    const memberLines = lines.filter((l) => l.kind === 'member');
    assert.deepEqual(memberLines.map((l) => l.chat), ['support-other', 'support-room']);
    const messageLines = lines.slice(memberLines.length);
    assert.ok(messageLines.every((l) => l.kind === 'message' && l.event.user === 'alice'), JSON.stringify(messageLines));
    const sent = (chat, seq) => messageLines.some((l) => l.chat === chat && l.event.seq === seq);
    assert.ok(sent('support-room', hostileSeq) && sent('support-room', helloSeq) && sent('support-other', otherSeq), JSON.stringify(messageLines));
    assert.equal(messageLines.length, 4);
    assert.equal(messageLines.at(-1).event.body, 'after the mute');
    assert.equal(messageLines.find((l) => l.event.seq === helloSeq).event.deleted, true);
    const ts = messageLines.map((l) => l.event.ts);
    assert.deepEqual(ts, [...ts].sort((a, b) => a - b), 'oldest first');
    await notice('#user-notice', /Exported 2 membership\(s\) and 4 message\(s\) of alice/);

    // Erase: refused while the confirmation is not the user id; done once it is.
    await admin.fill('#erase-confirm', 'alic');
    assert.equal(await admin.isDisabled('#user-erase'), true);
    await admin.press('#erase-confirm', 'Enter');
    await admin.fill('#erase-confirm', 'Alice');
    assert.equal(await admin.isDisabled('#user-erase'), true);
    await admin.press('#erase-confirm', 'Enter');
    const stillThere = (await ok('GET', `${chatPath('support-other')}/events?after=0&limit=100`)).events.find((e) => e.seq === otherSeq);
    assert.equal(stillThere.body, 'alice elsewhere', 'a wrong confirmation erases nothing');
    assert.deepEqual(await members(), ['alice', 'bob']);
    await admin.fill('#erase-confirm', 'alice');
    assert.equal(await admin.isDisabled('#user-erase'), false);
    await admin.click('#user-erase');
    await notice('#user-notice', /alice is erased: 3 message\(s\) erased/);
    await admin.waitForSelector('#user-no-chats:not([hidden])');
    assert.equal(await admin.locator('#user-chats tr').count(), 0);
    const erased = (await ok('GET', `${chatPath('support-other')}/events?after=0&limit=100`)).events.find((e) => e.seq === otherSeq);
    assert.equal(erased.deleted, true);
    assert.deepEqual(await members(), ['bob']);

    await admin.screenshot({ path: join(ARTIFACTS, 'admin-support.png'), fullPage: true });
    shot = true;
    assert.deepEqual(pageErrors, [], 'uncaught errors in the admin page');
    await clientContext.close();
  });
});
