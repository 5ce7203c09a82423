//! The SDK against a hot chat: a server whose hot-chat threshold is set low pushes a coalesced `notify`
//! instead of each event, and every watcher still delivers every event, once, in seq order, by fetching
//! what each notify announces page by page (`more`) to the end. Skipped unless HERALD_BIN names the binary.

import { describe, expect, it } from 'vitest';
import type { HeraldClient } from '../../src/client.js';
import type { ChatEvent } from '../../src/types.js';
import { Herald, HERALD_BIN, stopAfterEach, until } from './harness.js';

const WS = 'acme';
const WATCHERS = 8;
const MESSAGES = 300;

const defer = stopAfterEach();

describe.skipIf(HERALD_BIN === '')('a hot chat', () => {
  it('its watchers get every event, in order, once, by notify and paged fetches', async () => {
    // 8 watchers: hot from the 3rd event of a second; pages of 10 events, so each repair takes several.
    const herald = await Herald.start(['--hot-chat-deliveries', String(2 * WATCHERS)]);
    defer(() => herald.dispose());
    const track = (c: HeraldClient) => {
      defer(() => c.close());
      return c;
    };
    const sender = track(await herald.client(WS, 'sender'));
    await sender.connect();
    const schat = sender.chat('live');
    await schat.join();

    const seen: ChatEvent[][] = [];
    let repairs = 0;
    for (let i = 0; i < WATCHERS; i++) {
      const c = track(await herald.client(WS, `w${i}`, { fetchPageSize: 10 }));
      await c.connect();
      const chat = c.chat('live');
      const mine: ChatEvent[] = [];
      seen.push(mine);
      chat.on('event', (ev) => mine.push(ev));
      chat.on('state', ({ to }) => {
        if (to === 'repairing') repairs++;
      });
      await chat.join();
      await chat.watch();
    }
    // The watchers' own joins came before their watches' starts, except the later ones': count messages only.
    for (let i = 0; i < MESSAGES; i += 25) {
      const batch = [];
      for (let j = i; j < Math.min(MESSAGES, i + 25); j++) batch.push(schat.send({ n: j }));
      await Promise.all(batch);
    }

    const messages = (evs: ChatEvent[]) => evs.filter((e) => e.type === 'message');
    await until('every watcher has every message', () => seen.every((evs) => messages(evs).length >= MESSAGES), {
      timeoutMs: 60_000,
    });
    for (const evs of seen) {
      const ns = messages(evs).map((m) => (m.body as { n: number }).n);
      expect(ns).toEqual(Array.from({ length: MESSAGES }, (_, i) => i));
      const seqs = evs.map((e) => e.seq);
      for (let i = 1; i < seqs.length; i++) expect(seqs[i]).toBe(seqs[i - 1]! + 1);
    }
    // The chat was hot: watchers repaired by fetching rather than reading every push.
    expect(repairs).toBeGreaterThanOrEqual(WATCHERS);
    const metrics = await (await fetch(`${herald.http}/metrics`)).text();
    const notifies = metrics.split('\n').find((l) => l.startsWith('herald_hub_notifies_total'));
    expect(Number(notifies?.split(' ').pop() ?? 0)).toBeGreaterThan(0);
  });
});
