import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { WatchState } from '../../src/chat.js';
import type { ChatEvent } from '../../src/types.js';
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
    await expect(chat.read(2)).resolves.toEqual({ seq: 3 });
    const page = await chat.fetch(0, 2);
    expect(page.events.map((e) => e.type)).toEqual(['message', 'reaction']);
    expect(page).toMatchObject({ seq: 3, more: true });
    expect(server.last.sent('react')[0]).toMatchObject({ target: 1, emoji: '+1', on: true });
    client.close();
  });
});
