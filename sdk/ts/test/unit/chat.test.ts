import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { WatchState } from '../../src/chat.js';
import type { ChatEvent, FetchOk } from '../../src/types.js';
import type { Frame } from '../fake/fake-herald.js';
import { connected, setup, tick } from './helpers.js';

beforeEach(() => {
  vi.useFakeTimers({ now: 1_000_000_000_000 });
});
afterEach(() => {
  vi.useRealTimers();
});

/** A connected client watching `general` from seq 0, with manual pushes. */
async function watching(opts: Parameters<typeof setup>[0] = {}) {
  const { server, client } = setup(opts);
  server.autoPush = false;
  await connected(client);
  const chat = client.chat('general');
  const seen: number[] = [];
  chat.on('event', (ev) => seen.push(ev.seq));
  await chat.watch();
  return { server, client, chat, seen, conn: server.last };
}

function storeMessages(server: ReturnType<typeof setup>['server'], n: number): void {
  for (let i = 0; i < n; i++) server.store('general', 'message', { n: i }, 'bob');
}

describe('gap repair', () => {
  it('push seq 1, 2, 5: fetches 3..4 and delivers 1..5 once, in order', async () => {
    const { server, client, seen, conn } = await watching();
    storeMessages(server, 5);
    for (const seq of [1, 2, 5]) server.pushSeq(conn, 'general', seq);
    await tick();
    expect(seen).toEqual([1, 2, 3, 4, 5]);
    const fetches = conn.sent('fetch');
    expect(fetches).toHaveLength(1);
    expect(fetches[0]).toMatchObject({ chat: 'general', after: 2, limit: 500 });
    // Late duplicates are dropped at once, without starting a repair.
    const states: string[] = [];
    client.chat('general').on('state', (s) => states.push(s.to));
    for (const seq of [3, 4, 5]) server.pushSeq(conn, 'general', seq);
    await tick();
    expect(seen).toEqual([1, 2, 3, 4, 5]);
    expect(states).toEqual([]);
    expect(client.chat('general').state).toBe('live');
    client.close();
  });

  it('holds pushes that arrive while the fetch runs, and still delivers each once', async () => {
    const { server, client, seen, conn } = await watching();
    storeMessages(server, 5);
    let held: Frame | null = null;
    server.intercept = (_c, f) => {
      if (f.op !== 'fetch' || held !== null) return false;
      held = f;
      return true;
    };
    for (const seq of [1, 2, 5]) server.pushSeq(conn, 'general', seq);
    await tick();
    expect(seen).toEqual([1, 2]);
    expect(client.chat('general').state).toBe('repairing');
    // More events arrive, in order, while the fetch is out.
    storeMessages(server, 2);
    for (const seq of [6, 7]) server.pushSeq(conn, 'general', seq);
    await tick();
    expect(seen).toEqual([1, 2]);
    // Now answer the fetch (it sees all 7 stored events).
    server.intercept = null;
    server.receive(conn, held!);
    await tick();
    expect(seen).toEqual([1, 2, 3, 4, 5, 6, 7]);
    expect(client.chat('general').state).toBe('live');
    client.close();
  });

  it('does not deliver twice when a fetch page overlaps what was delivered', async () => {
    const { server, client, seen, conn } = await watching();
    storeMessages(server, 4);
    server.intercept = (c, f) => {
      if (f.op !== 'fetch') return false;
      // A sloppy server answers from seq 1 whatever `after` says.
      c.serverSend({ id: f.id, ok: { events: server.events('general'), seq: 4, more: false } });
      return true;
    };
    for (const seq of [1, 2, 4]) server.pushSeq(conn, 'general', seq);
    await tick();
    expect(seen).toEqual([1, 2, 3, 4]);
    client.close();
  });

  it('pages through a long gap with limit 500, following more', async () => {
    const { server, client, seen, conn } = await watching();
    storeMessages(server, 1200);
    server.pushSeq(conn, 'general', 1);
    server.pushSeq(conn, 'general', 1200);
    await tick();
    expect(conn.sent('fetch').map((f) => f.after)).toEqual([1, 501, 1001]);
    expect(seen).toEqual(Array.from({ length: 1200 }, (_, i) => i + 1));
    client.close();
  });

  it('pages through short pages (more: true, fewer events than limit) until it holds every event once, in order', async () => {
    const { server, client, seen, conn } = await watching();
    // Bodies from empty to 1.5 KiB under a 2 KB reply budget: pages of 1 to a dozen events, never 500.
    server.fetchBytes = 2_000;
    for (let i = 0; i < 300; i++) server.store('general', 'message', { text: 'x'.repeat((i * 397) % 1500) }, 'bob');
    // Live events arrive in the middle of the repair, ahead of what it has fetched so far.
    let fetches = 0;
    server.intercept = (c, f) => {
      if (f.op === 'fetch' && ++fetches === 3) {
        storeMessages(server, 5);
        for (const seq of [301, 302, 303, 304, 305]) server.pushSeq(c, 'general', seq);
      }
      return false;
    };
    server.pushSeq(conn, 'general', 300);
    await tick();
    expect(seen).toEqual(Array.from({ length: 305 }, (_, i) => i + 1));
    expect(client.chat('general').state).toBe('live');

    const pages = conn.sent('fetch').map((f) => ({ after: f.after as number, limit: f.limit as number, ok: conn.okFor(f) as FetchOk }));
    expect(pages.length).toBeGreaterThan(30);
    for (const [i, p] of pages.entries()) {
      const next = pages[i + 1];
      const lastSeq = p.ok.events[p.ok.events.length - 1]!.seq;
      if (next === undefined) {
        // The last page reached the stored events; 301..305 came as pushes, held until their turn.
        expect(lastSeq).toBeGreaterThanOrEqual(300);
      } else {
        // A short page with `more` is not the end: the next page starts after its last event.
        expect(p.ok.events.length).toBeLessThan(p.limit);
        expect(p.ok.more).toBe(true);
        expect(next.after).toBe(lastSeq);
      }
    }
    client.close();
  });

  it('finishes a catch-up of more pages than 500-event pages would need (one event per page)', async () => {
    const { server, client, seen, conn } = await watching();
    server.fetchBytes = 1; // every reply holds one event
    const total = 10_050;
    storeMessages(server, total);
    conn.serverSend({ ev: 'notify', chat: 'general', seq: total });
    await tick();
    expect(seen.length).toBe(total);
    expect(seen[total - 1]).toBe(total);
    expect(conn.sent('fetch')).toHaveLength(total);
    expect(client.chat('general').state).toBe('live');
    client.close();
  });

  it('keeps paging while a reply says more, even when its seq does not reach past its events', async () => {
    const { server, client, seen, conn } = await watching();
    storeMessages(server, 6);
    // The chat's seq read before its events, say: the reply claims seq 2 yet holds 1..3 and says more.
    server.intercept = (c, f) => {
      if (f.op !== 'fetch' || f.after !== 0) return false;
      c.serverSend({ id: f.id, ok: { events: server.events('general').slice(0, 3), seq: 2, more: true } });
      return true;
    };
    conn.serverSend({ ev: 'notify', chat: 'general', seq: 2 });
    await tick();
    expect(conn.sent('fetch').map((f) => f.after)).toEqual([0, 3]);
    expect(seen).toEqual([1, 2, 3, 4, 5, 6]);
    client.close();
  });

  it('retries a throttled repair fetch after retry_after_ms', async () => {
    const { server, client, seen, conn } = await watching();
    storeMessages(server, 3);
    let refused = 0;
    server.intercept = (c, f) => {
      if (f.op !== 'fetch' || refused > 0) return false;
      refused++;
      c.serverSend({ id: f.id, err: { code: 'throttled', message: 'later', retry_after_ms: 400 } });
      return true;
    };
    server.pushSeq(conn, 'general', 3);
    await tick(399);
    expect(seen).toEqual([]);
    await tick(1);
    expect(seen).toEqual([1, 2, 3]);
    client.close();
  });
});

describe('notify', () => {
  it('fetches what a notify announces beyond the last delivered seq', async () => {
    const { server, client, seen, conn } = await watching();
    storeMessages(server, 4);
    conn.serverSend({ ev: 'notify', chat: 'general', seq: 4 });
    await tick();
    expect(seen).toEqual([1, 2, 3, 4]);
    expect(conn.sent('fetch')).toHaveLength(1);
    expect(conn.sent('fetch')[0]).toMatchObject({ after: 0 });
    client.close();
  });

  it('ignores a notify at or below what it already has', async () => {
    const { server, client, seen, conn } = await watching();
    storeMessages(server, 2);
    for (const seq of [1, 2]) server.pushSeq(conn, 'general', seq);
    conn.serverSend({ ev: 'notify', chat: 'general', seq: 2 });
    conn.serverSend({ ev: 'notify', chat: 'general', seq: 1 });
    await tick();
    expect(seen).toEqual([1, 2]);
    expect(conn.sent('fetch')).toHaveLength(0);
    client.close();
  });

  it('ignores pushes for chats it does not watch', async () => {
    const { server, client, seen, conn } = await watching();
    server.store('other', 'message', {}, 'bob');
    server.pushSeq(conn, 'other', 1);
    conn.serverSend({ ev: 'notify', chat: 'other', seq: 1 });
    await tick();
    expect(seen).toEqual([]);
    expect(conn.sent('fetch')).toHaveLength(0);
    client.close();
  });
});

describe('history', () => {
  /** Drains `chat.history(...)` into an array of seqs. */
  async function collect(it: AsyncIterable<{ seq: number }>): Promise<number[]> {
    const out: number[] = [];
    for await (const ev of it) out.push(ev.seq);
    return out;
  }

  it('yields every event after `after` once, in order, through short pages, until more is false', async () => {
    const { server, client } = setup();
    await connected(client);
    server.fetchBytes = 3_000;
    for (let i = 0; i < 120; i++) server.store('general', 'message', { text: 'y'.repeat((i * 611) % 2000) }, 'bob');
    const chat = client.chat('general');
    const p = collect(chat.history(10));
    await tick();
    expect(await p).toEqual(Array.from({ length: 110 }, (_, i) => i + 11));
    const fetches = server.last.sent('fetch');
    expect(fetches.length).toBeGreaterThan(10);
    expect(fetches.every((f) => f.limit === 500)).toBe(true);
    // Each page after the first starts at the previous page's last event.
    for (let i = 1; i < fetches.length; i++) {
      const prev = server.last.okFor(fetches[i - 1]!) as FetchOk;
      expect(fetches[i]!.after).toBe(prev.events[prev.events.length - 1]!.seq);
    }
    expect((server.last.okFor(fetches[fetches.length - 1]!) as FetchOk).more).toBe(false);
    client.close();
  });

  it('stops at until', async () => {
    const { server, client } = setup();
    await connected(client);
    server.fetchBytes = 500;
    storeMessages(server, 40);
    const p = collect(client.chat('general').history(0, { until: 25 }));
    await tick();
    expect(await p).toEqual(Array.from({ length: 25 }, (_, i) => i + 1));
    client.close();
  });

  it('ends with a protocol error, not a loop, when more comes with no new events', async () => {
    const { server, client } = setup();
    await connected(client);
    storeMessages(server, 3);
    server.intercept = (c, f) => {
      if (f.op !== 'fetch') return false;
      c.serverSend({ id: f.id, ok: { events: [], seq: 3, more: true } });
      return true;
    };
    const p = collect(client.chat('general').history(0)).catch((e: unknown) => e);
    await tick();
    expect(await p).toMatchObject({ code: 'protocol' });
    expect(server.last.sent('fetch')).toHaveLength(1);
    client.close();
  });
});

describe('resume after reconnect', () => {
  it('watches again with after = the last delivered seq and delivers the rest once', async () => {
    const { server, client } = setup();
    await connected(client);
    const chat = client.chat('general');
    const seen: ChatEvent[] = [];
    const all: ChatEvent[] = [];
    chat.on('event', (ev) => seen.push(ev));
    client.on('event', (ev) => all.push(ev));
    await chat.watch();
    storeMessages(server, 3); // pushed live
    await tick();
    expect(seen.map((e) => e.seq)).toEqual([1, 2, 3]);

    server.last.serverClose(1006);
    await tick();
    expect(chat.state).toBe('suspended');
    storeMessages(server, 2); // sent while our link is down
    await tick(250);
    expect(client.state).toBe('connected');
    expect(server.last.sent('watch')[0]).toMatchObject({ chat: 'general', after: 3 });
    expect(seen.map((e) => e.seq)).toEqual([1, 2, 3, 4, 5]);
    expect(seen[4]).toMatchObject({ chat: 'general', type: 'message', user: 'bob', body: { n: 1 } });
    expect(all.map((e) => `${e.chat}:${e.seq}`)).toEqual(['general:1', 'general:2', 'general:3', 'general:4', 'general:5']);
    client.close();
  });

  it('walks the watch state machine: unwatched, subscribing, live, repairing, suspended, unwatched', async () => {
    const { server, client } = setup();
    server.autoPush = false;
    const chat = client.chat('general');
    const states: WatchState[] = [];
    chat.on('state', (s) => states.push(s.to));
    const watched = chat.watch(); // before connect: waits, suspended
    await connected(client);
    await watched;
    storeMessages(server, 2);
    server.pushSeq(server.last, 'general', 2);
    await tick();
    server.last.serverClose(4008);
    await tick(250);
    await chat.unwatch();
    expect(states).toEqual(['suspended', 'subscribing', 'live', 'repairing', 'live', 'suspended', 'subscribing', 'live', 'unwatched']);
    expect(server.last.sent('unwatch')).toHaveLength(1);
    client.close();
  });

  it('resumes from an application-given after', async () => {
    const { server, client } = setup();
    storeMessages(server, 5);
    await connected(client);
    const chat = client.chat('general');
    const seen: number[] = [];
    chat.on('event', (ev) => seen.push(ev.seq));
    await chat.watch({ after: 3 });
    await tick();
    expect(server.last.sent('watch')[0]).toMatchObject({ after: 3 });
    expect(seen).toEqual([4, 5]);
    client.close();
  });

  it('stops watching on forbidden and rejects watch()', async () => {
    const { server, client } = setup();
    await connected(client);
    server.intercept = (c, f) => {
      if (f.op !== 'watch') return false;
      c.serverSend({ id: f.id, err: { code: 'forbidden', message: 'members only' } });
      return true;
    };
    const chat = client.chat('secret');
    const errors: string[] = [];
    chat.on('error', (e) => errors.push(e.code));
    await expect(chat.watch()).rejects.toMatchObject({ code: 'forbidden' });
    expect(chat.state).toBe('unwatched');
    expect(errors).toEqual(['forbidden']);
    // Not resumed after a reconnect.
    server.last.serverClose(1006);
    await tick(250);
    expect(server.last.sent('watch')).toHaveLength(0);
    client.close();
  });

  it('unwatch stops delivery; leave does too', async () => {
    const { server, client } = setup();
    await connected(client);
    const chat = client.chat('general');
    const seen: number[] = [];
    chat.on('event', (ev) => seen.push(ev.seq));
    await chat.join(); // seq 1: join
    await chat.watch({ after: 0 });
    await tick();
    expect(seen).toEqual([1]);
    await chat.unwatch();
    server.pushSeq(server.last, 'general', 1);
    storeMessages(server, 1);
    server.pushSeq(server.last, 'general', 2); // the fake does not push after unwatch; force one
    await tick();
    expect(seen).toEqual([1]);
    await chat.watch();
    await chat.leave();
    expect(chat.state).toBe('unwatched');
    client.close();
  });

  it('passes react, read and fetch through as requests', async () => {
    const { server, client } = setup();
    await connected(client);
    const chat = client.chat('general');
    await chat.send('hello');
    await expect(chat.react(1, '+1')).resolves.toEqual({ seq: 2 });
    // `read` answers the position now stored, not the seq of the read event it stored.
    await expect(chat.read(2)).resolves.toEqual({ seq: 2 });
    await expect(chat.read(1)).resolves.toEqual({ seq: 2 });
    const page = await chat.fetch(0, 2);
    expect(page.events.map((e) => e.type)).toEqual(['message', 'reaction']);
    expect(page).toMatchObject({ seq: 3, more: true });
    expect(server.last.sent('react')[0]).toMatchObject({ target: 1, emoji: '+1', on: true });
    client.close();
  });
});
