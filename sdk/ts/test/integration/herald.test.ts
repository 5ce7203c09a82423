//! Integration tests against a real herald server. Skipped unless HERALD_BIN names the binary:
//!
//!     HERALD_BIN=../../target/release/herald npm run test:integration

import { afterEach, describe, expect, it } from 'vitest';
import { HeraldClient } from '../../src/client.js';
import type { ChatEvent, HeraldEvent } from '../../src/types.js';
import { Herald, HERALD_BIN, NodeWebSocket, sleep, TcpProxy, until } from './harness.js';

const WS = 'acme';

/** Things a test started, stopped in reverse order whatever the outcome. */
let cleanups: Array<() => unknown> = [];
afterEach(async () => {
  const list = cleanups.reverse();
  cleanups = [];
  for (const fn of list) {
    try {
      await fn();
    } catch {
      // keep stopping the rest
    }
  }
});

async function startHerald(): Promise<Herald> {
  const h = await Herald.start();
  cleanups.push(() => h.dispose());
  return h;
}

function track(client: HeraldClient): HeraldClient {
  cleanups.push(() => client.close());
  return client;
}

describe.skipIf(HERALD_BIN === '')('herald integration', () => {
  it('a watcher whose connection is cut while 300 messages are sent receives all 300, in order, once', async () => {
    const herald = await startHerald();
    const proxy = await TcpProxy.start(herald.port);
    cleanups.push(() => proxy.close());

    // A short backoff window keeps the test quick; the policy under test is the same.
    const watcher = track(await herald.client(WS, 'alice', { url: proxy.ws, backoff: { baseMs: 100, capMs: 1000 } }));
    const sender = track(await herald.client(WS, 'bob'));
    await Promise.all([watcher.connect(), sender.connect()]);

    const seen: ChatEvent[] = [];
    const wchat = watcher.chat('general');
    wchat.on('event', (ev) => seen.push(ev));
    await wchat.join();
    await sender.chat('general').join();
    await wchat.watch();
    let drops = 0;
    watcher.on('disconnected', () => drops++);

    const schat = sender.chat('general');
    const sendRange = async (from: number, to: number) => {
      // Batches stay inside the server's per-connection burst; throttled sends are retried anyway.
      for (let i = from; i < to; i += 25) {
        const batch = [];
        for (let j = i; j < Math.min(to, i + 25); j++) batch.push(schat.send({ n: j }));
        await Promise.all(batch);
      }
    };

    await sendRange(0, 100);
    proxy.blocked = true;
    proxy.sever();
    await until('the watcher notices the cut', () => watcher.state === 'connecting');
    await sendRange(100, 300);
    proxy.blocked = false;

    const messages = () => seen.filter((e) => e.type === 'message');
    await until('300 messages at the watcher', () => messages().length >= 300, { timeoutMs: 60_000 });
    await sleep(300); // let any duplicate that would arrive late arrive
    const msgs = messages();
    expect(drops).toBeGreaterThanOrEqual(1);
    expect(msgs).toHaveLength(300);
    expect(new Set(msgs.map((m) => (m.body as { n: number }).n))).toEqual(new Set(Array.from({ length: 300 }, (_, i) => i)));
    // Every event of the chat after the watch began, each once, in seq order with no gap.
    const seqs = seen.map((e) => e.seq);
    for (let i = 1; i < seqs.length; i++) expect(seqs[i]).toBe(seqs[i - 1]! + 1);
  });

  it('a send retried across a reconnect is stored once', async () => {
    const herald = await startHerald();
    const proxy = await TcpProxy.start(herald.port);
    cleanups.push(() => proxy.close());
    const client = track(await herald.client(WS, 'carol', { url: proxy.ws, backoff: { baseMs: 100, capMs: 1000 } }));
    await client.connect();
    const chat = client.chat('general');
    await chat.join();
    let drops = 0;
    client.on('disconnected', () => drops++);

    // The server gets the send and stores it, but its reply never reaches the client.
    proxy.deaf = true;
    const sent = chat.send({ text: 'exactly once' });
    const path = `/v1/workspaces/${WS}/chats/general/events?after=0&limit=500`;
    const stored = async () =>
      (await herald.api<{ events: HeraldEvent[] }>('GET', path)).events.filter(
        (e) => e.type === 'message' && (e.body as { text?: string }).text === 'exactly once',
      );
    await until('the server to store the message', async () => (await stored()).length > 0);
    const [first] = await stored();
    expect(first?.client_id).toBeTruthy();

    // Now the link drops; the client reconnects and sends again with the same client_id.
    proxy.sever();
    proxy.deaf = false;
    const { seq } = await sent;
    expect(drops).toBeGreaterThanOrEqual(1);
    expect(seq).toBe(first!.seq);
    const after = await stored();
    expect(after).toHaveLength(1);
    expect(after[0]!.client_id).toBe(first!.client_id);
  });

  it('a burst of 1,000 clients whose server restarts reconnect spread over time, not at once', async () => {
    const CLIENTS = 1000;
    const herald = await startHerald();
    const tokens: string[] = [];
    for (let i = 0; i < CLIENTS; i += 50) {
      const batch = [];
      for (let j = i; j < Math.min(CLIENTS, i + 50); j++) batch.push(herald.token(WS, `u${j}`));
      tokens.push(...(await Promise.all(batch)));
    }
    const clients = tokens.map((token) => track(new HeraldClient({ url: herald.ws, workspace: WS, token, WebSocket: NodeWebSocket })));
    for (let i = 0; i < CLIENTS; i += 100) await Promise.all(clients.slice(i, i + 100).map((c) => c.connect()));

    let restartAt = 0;
    const back: number[] = [];
    for (const c of clients) {
      c.on('connected', () => {
        if (restartAt > 0) back.push(Date.now() - restartAt);
      });
    }

    restartAt = Date.now();
    await herald.stop('SIGTERM', 90_000);
    await herald.spawn();
    await until(`all ${CLIENTS} clients back`, () => back.length >= CLIENTS && clients.every((c) => c.state === 'connected'), {
      timeoutMs: 120_000,
      intervalMs: 100,
    });

    back.sort((a, b) => a - b);
    const WINDOW_MS = 200;
    let densest = 0;
    for (let i = 0, j = 0; j < back.length; j++) {
      while (back[j]! - back[i]! > WINDOW_MS) i++;
      densest = Math.max(densest, j - i + 1);
    }
    const p = (q: number) => back[Math.min(back.length - 1, Math.floor(q * back.length))]!;
    console.log(
      `reconnects after restart: first ${back[0]} ms, p10 ${p(0.1)} ms, p50 ${p(0.5)} ms, p90 ${p(0.9)} ms, last ${back[back.length - 1]} ms; ` +
        `densest ${WINDOW_MS} ms window holds ${densest}`,
    );
    // A herd would land within one window; spread reconnects leave no window with half of them.
    expect(densest).toBeLessThan(CLIENTS / 2);
    expect(p(0.9) - p(0.1)).toBeGreaterThan(WINDOW_MS);
  });
});
