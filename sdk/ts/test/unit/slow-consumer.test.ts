import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { DisconnectInfo } from '../../src/client.js';
import { connected, setup, tick } from './helpers.js';

beforeEach(() => {
  vi.useFakeTimers({ now: 1_000_000_000_000 });
});
afterEach(() => {
  vi.useRealTimers();
});

/** Bodies of about 1 KiB: a reply of 37 such events or more does not fit the fake's 40 KB queue. */
const BODY = { text: 'x'.repeat(1000) };

describe('slow consumer (4008)', () => {
  it('backs off longer and fetches less after each 4008 until a page fits, then delivers everything once', async () => {
    // Random just under 1: each delay sits at its window's edge, so the growth is exact.
    const { server, client } = setup({ random: () => 0.999999 });
    for (let i = 0; i < 200; i++) server.store('general', 'message', BODY, 'bob');
    // A queue too small for a 500-event reply of these bodies, and a replay cut short at once: the
    // watcher gets `notify` and must fetch, as from herald after a long absence.
    server.outboxBytes = 40_000;
    server.replayEvents = 0;
    const drops: DisconnectInfo[] = [];
    client.on('disconnected', (d) => drops.push(d));
    await connected(client);
    const chat = client.chat('general');
    const seen: number[] = [];
    chat.on('event', (ev) => seen.push(ev.seq));
    await chat.watch({ after: 0 });
    await tick(60_000);

    expect(seen).toEqual(Array.from({ length: 200 }, (_, i) => i + 1));
    expect(chat.state).toBe('live');
    // Each 4008 halves the page and widens the backoff window; nothing loops at one size or one pace.
    const limits = server.sockets.map((s) => s.sent('fetch').map((f) => f.limit as number));
    expect(limits.slice(0, 4)).toEqual([[500], [250], [125], [62]]);
    expect(drops.map((d) => [d.code, d.reconnectInMs])).toEqual([
      [4008, 499],
      [4008, 999],
      [4008, 1999],
      [4008, 3999],
    ]);
    // 31 events of about 1 KiB fit: the fifth link pages through the rest at that size.
    expect(server.sockets).toHaveLength(5);
    expect(server.slowConsumerCloses).toBe(4);
    expect(limits[4]!.every((l) => l === 31)).toBe(true);
    expect(limits[4]!.length).toBe(Math.ceil(200 / 31));

    // History fetched afterwards asks for the smaller page too.
    const it = chat.history(0, { until: 5 });
    const first = it.next();
    await tick();
    await first;
    expect(server.last.sent('fetch').at(-1)).toMatchObject({ after: 0, limit: 31 });
    await it.return();
    client.close();
  });

  it('does not reset the backoff after a 4008, however long the link lived', async () => {
    const { server, client } = setup({ random: () => 0.999999 });
    const delays: Array<number | null> = [];
    client.on('disconnected', (d) => delays.push(d.reconnectInMs));
    await connected(client);
    for (let i = 0; i < 4; i++) {
      await tick(15_000); // longer than a link needs to count as stable for other close codes
      server.last.serverClose(4008, 'slow consumer');
      await tick();
      await tick(delays.at(-1)!);
      expect(client.state).toBe('connected');
    }
    expect(delays).toEqual([499, 999, 1999, 3999]);
    // A stable link that ends for another reason starts over, as before.
    await tick(15_000);
    server.last.serverClose(1006);
    await tick();
    expect(delays.at(-1)).toBe(499);
    client.close();
  });

  it('never reconnects in a tight loop while every link is cut with 4008', async () => {
    const { server, client } = setup({ random: () => 0.5 });
    for (let i = 0; i < 50; i++) server.store('general', 'message', BODY, 'bob');
    // Nothing fits: even a one-event reply overflows, so every link ends in 4008.
    server.outboxBytes = 500;
    server.replayEvents = 0;
    await connected(client);
    const chat = client.chat('general');
    await chat.watch({ after: 0 });
    await tick(5 * 60_000);
    // Random 0.5 puts each delay mid-window: 250, 500, 1000, 2000, 4000, 8000 ms, then 10 s each (the
    // 20 s cap). Five minutes hold 35 links, where the base window alone would allow 1,200.
    expect(server.sockets).toHaveLength(35);
    const limits = server.sockets.map((s) => s.sent('fetch').map((f) => f.limit as number)[0]);
    expect(limits.slice(0, 7)).toEqual([500, 250, 125, 62, 31, 15, 10]);
    expect(new Set(limits.slice(6))).toEqual(new Set([10]));
    client.close();
  });
});
