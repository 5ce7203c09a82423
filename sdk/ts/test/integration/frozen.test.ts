//! A node of a real cell frozen with SIGSTOP: its clients notice within the documented bound and go on
//! at the other node, missing nothing. The cell is two herald nodes sharing a PostgreSQL shard and a
//! nats-server (cell.ts). Skipped without HERALD_BIN, nats-server or PostgreSQL (it says which).
//!
//!     HERALD_BIN=../../target/debug/herald npx vitest run --config vitest.integration.config.ts frozen

import { describe, expect, it } from 'vitest';
import type { DisconnectInfo } from '../../src/client.js';
import type { ChatEvent } from '../../src/types.js';
import { Cell, cellMissing } from './cell.js';
import { HERALD_BIN, stopAfterEach, until } from './harness.js';

const WS = 'acme';

/**
 * The documented bound (README, "When a node freezes"): a link silent for `pingIntervalMs +
 * pingTimeoutMs` (5 s + 5 s by default) after the server's last frame is lost, plus at most 1 s when the
 * client's own event loop stalled past the deadline.
 */
const DETECTION_BOUND_MS = 10_000 + 1_000;

const defer = stopAfterEach();
const missing = HERALD_BIN === '' ? null : cellMissing();
if (missing !== null) console.warn(`frozen.test.ts skipped: ${missing}`);

describe.skipIf(HERALD_BIN === '' || missing !== null)('a frozen node of a cell', () => {
  it('its client notices within the bound, resumes at the other node and gets every event once, in order; a new client skips it after a connect timeout', async () => {
    const cell = await Cell.start(2);
    defer(() => cell.stop());
    const [a, b] = cell.nodes as [NonNullable<(typeof cell.nodes)[0]>, NonNullable<(typeof cell.nodes)[1]>];

    // alice may use either node and starts on a; bob uses b alone.
    const alice = await a.client(WS, 'alice', { url: [a.ws, b.ws] });
    defer(() => alice.close());
    const bob = await b.client(WS, 'bob');
    defer(() => bob.close());
    await Promise.all([alice.connect(), bob.connect()]);
    expect(alice.url).toBe(a.ws);
    expect(alice.session?.node).toBe('node-0');

    const chat = alice.chat('general');
    const seen: ChatEvent[] = [];
    chat.on('event', (ev) => seen.push(ev));
    await chat.join();
    const bchat = bob.chat('general');
    await bchat.join();
    await chat.watch();
    const messages = () => seen.filter((e) => e.type === 'message').map((e) => (e.body as { text: string }).text);
    await bchat.send({ text: 'before' }); // through b, over NATS to a, to alice
    await until('alice gets "before" through node a', () => messages().includes('before'));

    const drops: Array<DisconnectInfo & { at: number }> = [];
    alice.on('disconnected', (d) => drops.push({ ...d, at: Date.now() }));
    a.freeze();
    const frozenAt = Date.now();
    await bchat.send({ text: 'while a is frozen' }); // stored through b; a cannot push it

    await until('alice to drop the frozen link', () => drops.length > 0, { timeoutMs: 30_000 });
    const detectMs = drops[0]!.at - frozenAt;
    console.log(`frozen node: alice noticed the frozen link after ${detectMs} ms (${drops[0]!.reason}; bound ${DETECTION_BOUND_MS} ms)`);
    expect(drops[0]).toMatchObject({ reason: 'ping timeout', url: a.ws });
    expect(detectMs).toBeLessThanOrEqual(DETECTION_BOUND_MS);

    await until('alice connected again', () => alice.state === 'connected', { timeoutMs: 15_000 });
    const movedMs = Date.now() - frozenAt;
    console.log(`frozen node: alice connected to ${alice.session?.node} ${movedMs} ms after the freeze`);
    expect(alice.url).toBe(b.ws);
    expect(alice.session?.node).toBe('node-1');

    await bchat.send({ text: 'after' });
    await until('alice gets "after" through node b', () => messages().includes('after'));
    expect(messages()).toEqual(['before', 'while a is frozen', 'after']);
    // Every event of the watch, once each and in seq order: no gap and no repeat across the move.
    const seqs = seen.map((e) => e.seq);
    expect(seqs).toEqual(Array.from({ length: seqs.length }, (_, i) => seqs[0]! + i));

    // A new client that tries the frozen node first: a's kernel accepts the TCP connection and nothing
    // answers the upgrade; the attempt times out, counts as failed, and the next URL serves.
    const carol = await b.client(WS, 'carol', { url: [a.ws, b.ws], connectTimeoutMs: 2_000 });
    defer(() => carol.close());
    const carolDrops: DisconnectInfo[] = [];
    carol.on('disconnected', (d) => carolDrops.push(d));
    const started = Date.now();
    await carol.connect();
    console.log(`frozen node: a new client connected to ${carol.session?.node} ${Date.now() - started} ms after trying the frozen node first`);
    expect(carolDrops).toMatchObject([{ reason: 'connect timeout', url: a.ws }]);
    expect(carol.url).toBe(b.ws);

    a.thaw();
  });
});
