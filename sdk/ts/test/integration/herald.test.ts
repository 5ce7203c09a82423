//! Integration tests against a real herald server. Skipped unless HERALD_BIN names the binary:
//!
//!     HERALD_BIN=../../target/release/herald npm run test:integration

import { describe, expect, it } from 'vitest';
import { HeraldClient } from '../../src/client.js';
import type { ChatEvent, HeraldEvent } from '../../src/types.js';
import WebSocket from 'ws';
import { Herald, HERALD_BIN, NodeWebSocket, sleep, TcpProxy, until, stopAfterEach } from './harness.js';

const WS = 'acme';

/** Stops what a test started, in reverse order, whatever the outcome. */
const defer = stopAfterEach();

/** The most values of sorted `xs` within any span of `windowMs`. */
function densestWindow(xs: number[], windowMs: number): number {
  let best = 0;
  for (let i = 0, j = 0; j < xs.length; j++) {
    while (xs[j]! - xs[i]! > windowMs) i++;
    best = Math.max(best, j - i + 1);
  }
  return best;
}

/** "p10 .. p50 .. p90 .. max" of sorted `xs`, in ms. */
function summary(xs: number[]): string {
  const q = (f: number) => xs[Math.min(xs.length - 1, Math.floor(f * xs.length))];
  return `min ${xs[0]} ms, p10 ${q(0.1)}, p50 ${q(0.5)}, p90 ${q(0.9)}, max ${xs[xs.length - 1]} ms`;
}

async function startHerald(): Promise<Herald> {
  const h = await Herald.start();
  defer(() => h.dispose());
  return h;
}

function track(client: HeraldClient): HeraldClient {
  defer(() => client.close());
  return client;
}

/** What herald answers a bare `hello` with `token` on `url`: its error message (the reason it refuses). */
async function helloRefusal(url: string, token: string): Promise<string> {
  const ws = new WebSocket(url);
  try {
    return await new Promise<string>((resolve, reject) => {
      ws.once('open', () => ws.send(JSON.stringify({ id: 1, op: 'hello', token })));
      ws.on('message', (data) => {
        const reply = JSON.parse(String(data)) as { id?: number; err?: { message?: string } };
        if (reply.id !== 1) return;
        if (reply.err?.message === undefined) reject(new Error(`hello was not refused: ${String(data)}`));
        else resolve(reply.err.message);
      });
      ws.once('error', reject);
    });
  } finally {
    ws.close();
  }
}

describe.skipIf(HERALD_BIN === '')('herald integration', () => {
  it('a sender far past its request rate: 300 sends at once land once each, in the order sent', async () => {
    // A small bucket that refills fast: sends are refused `throttled` while later ones, already written,
    // would find a token again.
    const herald = await Herald.start(['--rate', '1000', '--burst', '10']);
    defer(() => herald.dispose());
    const watcher = track(await herald.client(WS, 'alice'));
    const sender = track(await herald.client(WS, 'bob', { maxQueue: 400 }));
    await Promise.all([watcher.connect(), sender.connect()]);
    const seen: ChatEvent[] = [];
    const wchat = watcher.chat('general');
    wchat.on('event', (ev) => seen.push(ev));
    await wchat.join();
    await wchat.watch();
    const schat = sender.chat('general');
    await schat.join();

    const acks = await Promise.all(Array.from({ length: 300 }, (_, n) => schat.send({ n })));
    const messages = () => seen.filter((e) => e.type === 'message');
    await until('300 messages at the watcher', () => messages().length >= 300, { timeoutMs: 30_000 });
    await sleep(200);
    const ns = messages().map((m) => (m.body as { n: number }).n);
    expect(ns).toEqual(Array.from({ length: 300 }, (_, i) => i));
    // Each caller's seq is its message's place in the chat.
    for (let n = 1; n < acks.length; n++) expect(acks[n]!.seq).toBe(acks[n - 1]!.seq + 1);
    const metrics = await (await fetch(`${herald.http}/metrics`)).text();
    const counter = (name: string) =>
      metrics
        .split('\n')
        .filter((l) => l.startsWith(name))
        .reduce((sum, l) => sum + Number(l.split(' ').pop()), 0);
    // The bucket did refuse sends (how many of the sends behind them it held back varies with timing).
    expect(counter('herald_requests_total{op="any",outcome="throttled"}')).toBeGreaterThan(0);
  });

  it('a watcher whose connection is cut while 300 messages are sent receives all 300, in order, once', async () => {
    const herald = await startHerald();
    const proxy = await TcpProxy.start(herald.port);
    defer(() => proxy.close());

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
    expect(msgs.map((m) => (m.body as { n: number }).n)).toEqual(Array.from({ length: 300 }, (_, i) => i));
    // Every event of the chat after the watch began, each once, in seq order with no gap.
    const seqs = seen.map((e) => e.seq);
    for (let i = 1; i < seqs.length; i++) expect(seqs[i]).toBe(seqs[i - 1]! + 1);
  });

  it("a refused token: connect() rejects with herald's own reason; a JSON body is caught before it is sent", async () => {
    const herald = await startHerald();
    const said = await helloRefusal(`${herald.ws}?ws=${WS}`, 'not-a-jwt');
    const refused = track(new HeraldClient({ url: herald.ws, workspace: WS, token: async () => 'not-a-jwt', WebSocket: NodeWebSocket }));
    const err = (await refused.connect().catch((e: unknown) => e)) as Error;
    expect(err).toMatchObject({ code: 'unauthenticated' });
    expect(err.message).toContain(`the server refused the token: ${said}`);
    expect(refused.state).toBe('disconnected');

    // The whole answer of POST /v1/tokens instead of its `token` field.
    const body = JSON.stringify({ token: await herald.token(WS, 'alice') });
    const mistaken = track(new HeraldClient({ url: herald.ws, workspace: WS, token: async () => body, WebSocket: NodeWebSocket }));
    await expect(mistaken.connect()).rejects.toMatchObject({ code: 'token', message: expect.stringMatching(/pass its `token` field/) });
  });

  it('a send retried across a reconnect is stored once', async () => {
    const herald = await startHerald();
    const proxy = await TcpProxy.start(herald.port);
    defer(() => proxy.close());
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

  it('a burst of 1,000 clients whose server restarts reconnect spread over time, not at once', { timeout: 300_000 }, async () => {
    const CLIENTS = 1000;
    const herald = await startHerald();
    const tokens: string[] = [];
    for (let i = 0; i < CLIENTS; i += 50) {
      const batch = [];
      for (let j = i; j < Math.min(CLIENTS, i + 50); j++) batch.push(herald.token(WS, `u${j}`));
      tokens.push(...(await Promise.all(batch)));
    }

    // When each client first tries to come back, and when it is back, in ms after the SIGTERM. The
    // attempt is what the client decides (after_ms, backoff); the reconnect also carries the time both
    // processes took to accept it, which would blur a herd into something that looks spread.
    let restartAt = 0;
    const firstAttempt: number[] = new Array<number>(CLIENTS).fill(-1);
    const back: number[] = [];
    const clients = tokens.map((token, i) => {
      class Recorded extends WebSocket {
        constructor(url: string) {
          super(url);
          if (restartAt > 0 && firstAttempt[i] === -1) firstAttempt[i] = Date.now() - restartAt;
        }
      }
      const c = track(new HeraldClient({ url: herald.ws, workspace: WS, token, WebSocket: Recorded as unknown as typeof NodeWebSocket }));
      c.on('connected', () => {
        if (restartAt > 0) back.push(Date.now() - restartAt);
      });
      return c;
    });
    for (let i = 0; i < CLIENTS; i += 100) await Promise.all(clients.slice(i, i + 100).map((c) => c.connect()));

    restartAt = Date.now();
    const exitMs = await herald.stop('SIGTERM', 90_000);
    await herald.spawn();
    const listening = Date.now() - restartAt;
    await until(`all ${CLIENTS} clients back`, () => clients.every((c) => c.state === 'connected') && back.length >= CLIENTS, {
      timeoutMs: 120_000,
      intervalMs: 100,
    });

    const attempts = firstAttempt.filter((t) => t >= 0).sort((a, b) => a - b);
    expect(attempts).toHaveLength(CLIENTS);
    const WINDOW_MS = 100;
    const densest = densestWindow(attempts, WINDOW_MS);
    back.sort((a, b) => a - b);
    console.log(
      `herald exited ${exitMs} ms after SIGTERM and served again at ${listening} ms. First attempts: ${summary(attempts)}; ` +
        `densest ${WINDOW_MS} ms window holds ${densest}. Reconnected: ${summary(back)}`,
    );
    // A herd tries within one window; spread clients leave no window with half of them.
    expect(densest).toBeLessThan(CLIENTS / 2);
    // A node alone is restarted in place: its clients are back soon after it serves again, not
    // spread over the whole drain window (10 s) after the SIGTERM.
    const p90 = back[Math.floor(back.length * 0.9)]!;
    expect(p90 - listening).toBeLessThan(3_000);
  });
});
