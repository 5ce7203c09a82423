//! End-to-end test of the admin page: a real herald started with secrets (so not in development mode:
//! the page is served in every mode), Debian's Chromium driven by playwright-core.
//!
//! Owns: starting and stopping herald and the browser for this test, and what an operator must see: a
//! wrong api key refused, the right one let in, a connected client counted and its watched chat
//! counted, rates appearing, a webhook whose receiver is down shown failing, and after pressing drain (and confirming), the
//! node shown draining while the client is asked to reconnect and closed with 4012. Leaves
//! web/test-artifacts/admin.png and admin-herald.log behind, also when it fails.
//!
//!     HERALD_BIN=/path/to/herald npm test     default: ../target/release/herald from web/
//!     CHROMIUM_BIN=/path/to/chromium          default: /usr/bin/chromium (Debian's package)

import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { ARTIFACTS, freePort, startChromium, startHerald, until, within } from './support.mjs';

const API_KEY = 'admin-test-api-key-0123456789abcdef0123';
const JWT_SECRET = 'admin-test-jwt-secret-0123456789abcdef01';
const HOOK_SECRET = 'admin-test-hook-secret-0123456789abcdef0';

/** A short drain window, so the client's reconnect push and its close come within test time. */
const DRAIN_WINDOW_MS = 1000;

/** The page refreshes every 2 s; a figure must show within a few refreshes. */
const UI_TIMEOUT_MS = 15_000;
const TEST_TIMEOUT_MS = 120_000;

/**
 * A chat client in its own browser context: a bare WebSocket that says hello, joins and watches
 * `general` of workspace `acme`, and records every push and its close code in `window.seen`.
 */
async function openClient(browser, base) {
  const res = await fetch(`${base}/v1/tokens`, {
    method: 'POST',
    headers: { authorization: `Bearer ${API_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ workspace: 'acme', user: 'alice' }),
  });
  assert.equal(res.status, 200, 'a token for the client');
  const { token } = await res.json();
  const context = await browser.newContext();
  const page = await context.newPage();
  await page.goto(`${base}/healthz`);
  const wsUrl = `${base.replace('http://', 'ws://')}/v1/ws?ws=acme`;
  await page.evaluate(
    ({ wsUrl, token }) =>
      new Promise((resolveWatch, reject) => {
        const seen = { pushes: [], close: null };
        window.seen = seen;
        const ws = new WebSocket(wsUrl);
        const requests = [
          { id: 1, op: 'hello', token },
          { id: 2, op: 'join', chat: 'general' },
          { id: 3, op: 'watch', chat: 'general' },
        ];
        ws.onopen = () => ws.send(JSON.stringify(requests.shift()));
        ws.onmessage = (m) => {
          const f = JSON.parse(m.data);
          if (f.ev !== undefined) {
            seen.pushes.push(f);
          } else if (f.err !== undefined) {
            reject(new Error(`request ${f.id} failed: ${JSON.stringify(f.err)}`));
          } else if (requests.length > 0) {
            ws.send(JSON.stringify(requests.shift()));
          } else {
            resolveWatch();
          }
        };
        ws.onclose = (e) => {
          seen.close = e.code;
          reject(new Error(`closed ${e.code} before the watch`));
        };
      }),
    { wsUrl, token },
  );
  return { context, page };
}

describe('admin page in Chromium', { timeout: TEST_TIMEOUT_MS }, () => {
  const heraldLog = [];
  const pageErrors = [];
  let herald = null;
  let hookPort = 0;
  let chrome = null;
  let browser = null;
  let admin = null;
  /** Whether the test saved its screenshot of the drained node; otherwise the page as a failure left it is saved. */
  let shot = false;

  before(async () => {
    // A webhook whose receiver is down (nothing listens on its port): the page must say it fails.
    hookPort = await freePort();
    herald = await startHerald({
      args: ['--node', 'admin-test-node', '--drain-window-ms', String(DRAIN_WINDOW_MS), '--webhook-url', `http://127.0.0.1:${hookPort}/hook`],
      env: { HERALD_API_KEY: API_KEY, HERALD_JWT_SECRET: JWT_SECRET, HERALD_HOOK_SECRET: HOOK_SECRET },
      log: heraldLog,
      logName: 'admin-herald.log',
    });
    chrome = await startChromium();
    browser = chrome.browser;
  });

  after(async () => {
    try {
      if (admin !== null && !shot) {
        await within(UI_TIMEOUT_MS, 'screenshot', admin.screenshot({ path: join(ARTIFACTS, 'admin.png'), fullPage: true })).catch((e) =>
          console.error(`screenshot failed: ${e.message}`),
        );
      }
    } finally {
      if (chrome !== null) await chrome.stop();
      if (herald !== null) await herald.stop();
      if (existsSync(ARTIFACTS)) writeFileSync(join(ARTIFACTS, 'admin-herald.log'), heraldLog.join(''));
    }
  });

  test('refuses a wrong key, shows a watching client, and drains the node', { timeout: TEST_TIMEOUT_MS }, async () => {
    const client = await openClient(browser, herald.base);

    const context = await browser.newContext({ viewport: { width: 1000, height: 1000 } });
    admin = await context.newPage();
    admin.setDefaultTimeout(UI_TIMEOUT_MS);
    admin.on('pageerror', (e) => pageErrors.push(e.message));
    await admin.goto(`${herald.base}/admin`);

    // A wrong key: refused, said so, nothing shown, nothing kept.
    await admin.fill('#key', 'not-the-key');
    await admin.click('#sign-in');
    await admin.waitForSelector('#login-error:not([hidden])');
    assert.match(await admin.textContent('#login-error'), /refused/);
    assert.equal(await admin.isVisible('#dash'), false);
    assert.equal(await admin.evaluate(() => sessionStorage.length), 0);

    // The right key: the node, its one connection and its one watched chat.
    await admin.fill('#key', API_KEY);
    await admin.click('#sign-in');
    await admin.waitForSelector('#dash:not([hidden])');
    assert.equal(await admin.isVisible('#login'), false);
    const text = (sel) => admin.textContent(sel);
    await until(UI_TIMEOUT_MS, 'the page shows one connection and one watched chat', async () =>
      (await text('#connections')) === '1' && (await text('#watched-chats')) === '1',
    async () => `connections ${await text('#connections')}, watched chats ${await text('#watched-chats')}`);
    assert.equal(await text('#node-name'), 'admin-test-node');
    assert.equal(await admin.getAttribute('#node-state', 'data-state'), 'serving');
    assert.equal(await admin.getAttribute('#nodes tr[data-this="true"]', 'data-node'), 'admin-test-node');
    assert.equal(await admin.getAttribute('#nodes tr[data-this="true"] td[data-connections]', 'data-connections'), '1');
    assert.ok(Number(await text('#broker-subscriptions')) >= 1, 'the watched chat is subscribed at the broker');
    assert.equal(await admin.isVisible('#no-shards'), true, 'the embedded store has no shards');
    // The client's join is an event the webhook cannot deliver: the section says so, without the URL's path.
    await until(UI_TIMEOUT_MS, 'the webhook shown failing', async () => (await admin.getAttribute('#webhooks', 'data-state')) === 'failing',
      async () => `webhooks: ${await text('#webhooks')}`);
    assert.equal(await text('#webhooks'), `delivering to 127.0.0.1:${hookPort} fails: retrying with growing waits`);
    assert.equal(await text('#webhook-shards'), 'local');
    assert.match(await text('#webhook-error'), /cannot connect to the receiver/);
    assert.notEqual(await text('#webhook-lag'), 'caught up', 'the join is owed');
    // Rates need two refreshes; then they are numbers (0.0 when idle: requests count WebSocket ops, not the page's polls).
    await until(UI_TIMEOUT_MS, 'rates computed between refreshes', async () => /^[0-9.,]+$/.test(await text('#request-rate')) && /^[0-9.,]+$/.test(await text('#push-rate')));

    // The key survives a reload of the tab (session storage), not a sign-out.
    await admin.reload();
    await admin.waitForSelector('#dash:not([hidden])');

    // Drain, confirming the dialog.
    let asked = null;
    admin.once('dialog', async (d) => {
      asked = `${d.type()}: ${d.message()}`;
      await d.accept();
    });
    await admin.click('#drain');
    await admin.waitForSelector('#node-state[data-state="draining"]');
    assert.match(asked ?? '', /^confirm: Drain this node/);
    assert.match(await text('#drain-result'), /1 connection\(s\) asked to reconnect over 1000 ms/);
    assert.equal(await admin.isDisabled('#drain'), true);

    // The client was asked to reconnect, then closed with 4012; the page counts it gone.
    await until(UI_TIMEOUT_MS, 'the client closed with 4012', async () => (await client.page.evaluate(() => window.seen.close)) === 4012);
    const pushes = await client.page.evaluate(() => window.seen.pushes);
    const reconnect = pushes.find((p) => p.ev === 'reconnect');
    assert.ok(reconnect, `a reconnect push: ${JSON.stringify(pushes)}`);
    assert.equal(reconnect.reason, 'drain');
    assert.ok(reconnect.after_ms <= DRAIN_WINDOW_MS, JSON.stringify(reconnect));
    await until(UI_TIMEOUT_MS, 'the page shows no connection left', async () => (await text('#connections')) === '0');
    await admin.screenshot({ path: join(ARTIFACTS, 'admin.png'), fullPage: true });
    shot = true;

    await admin.click('#sign-out');
    await admin.waitForSelector('#login:not([hidden])');
    assert.equal(await admin.evaluate(() => sessionStorage.length), 0);
    assert.deepEqual(pageErrors, [], 'uncaught errors in the admin page');
    await client.context.close();
  });
});
