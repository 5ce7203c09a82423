import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { PresenceChange } from '../../src/chat.js';
import type { Frame } from '../fake/fake-herald.js';
import { clientOn, connected, setup, tick } from './helpers.js';

beforeEach(() => {
  vi.useFakeTimers({ now: 1_000_000_000_000 });
});
afterEach(() => {
  vi.useRealTimers();
});

async function alicePresent() {
  const { server, client: alice } = setup({ token: 'user:alice' });
  await connected(alice);
  const chat = alice.chat('general');
  await chat.join();
  const seen: PresenceChange[] = [];
  chat.on('presence', (p) => seen.push(p));
  await chat.watch({ presence: true });
  await tick();
  return { server, alice, chat, seen };
}

async function joinAndWatch(server: Parameters<typeof clientOn>[0], user: string) {
  const c = clientOn(server, user);
  await connected(c);
  await c.chat('general').join();
  await c.chat('general').watch();
  await tick();
  return c;
}

describe('presence', () => {
  it('asks once after the watch, then follows who comes and goes', async () => {
    const { server, alice, chat, seen } = await alicePresent();
    const conn = server.last;
    expect(conn.frames.map((f) => f.op)).toEqual(['hello', 'join', 'watch', 'presence']);
    expect(chat.present).toEqual({ count: 1, users: ['alice'] });
    const bob = await joinAndWatch(server, 'bob');
    expect(chat.present).toEqual({ count: 2, users: ['alice', 'bob'] });
    bob.close();
    await tick();
    expect(chat.present).toEqual({ count: 1, users: ['alice'] });
    expect(seen.map((p) => p.users)).toEqual([['alice'], ['alice', 'bob'], ['alice']]);
    expect(conn.sent('presence')).toHaveLength(1);
    alice.close();
  });

  it('is right again after a reconnect: who left and came while the link was down', async () => {
    const { server, alice, chat } = await alicePresent();
    const bob = await joinAndWatch(server, 'bob');
    expect(chat.present?.users).toEqual(['alice', 'bob']);
    server.refuse = true;
    server.sockets.find((s) => s.user === 'alice' && s.isOpen)!.serverClose(1006);
    await tick();
    // While alice is away bob leaves and carol comes; nobody can tell alice.
    bob.close();
    server.refuse = false;
    const carol = await joinAndWatch(server, 'carol');
    expect(chat.present?.users).toEqual(['alice', 'bob']);
    await tick(30_000);
    expect(alice.state).toBe('connected');
    const ops = server.sockets.filter((s) => s.user === 'alice').at(-1)!.frames.map((f) => f.op);
    expect(ops.indexOf('presence')).toBeGreaterThan(ops.indexOf('watch'));
    expect(chat.present).toEqual({ count: 2, users: ['alice', 'carol'] });
    alice.close();
    carol.close();
  });

  it('applies pushes that arrive while its request is out on top of the reply', async () => {
    const { server, client: alice } = setup({ token: 'user:alice' });
    await connected(alice);
    const chat = alice.chat('general');
    await chat.join();
    let held: Frame | null = null;
    server.intercept = (_c, f) => {
      if (f.op !== 'presence') return false;
      held = f;
      return true;
    };
    await chat.watch({ presence: true });
    await tick();
    const conn = server.last;
    // The reply was computed with alice alone; bob's push is handed over before it is read.
    conn.serverSend({ id: held!.id, ok: { count: 1, users: ['alice'] } });
    conn.serverSend({ ev: 'presence', chat: 'general', user: 'bob', present: true });
    await tick();
    expect(chat.present).toEqual({ count: 2, users: ['alice', 'bob'] });
    alice.close();
  });

  it('follows count-only pushes above 100, and fetches the list again when the count comes back down', async () => {
    const { server, alice, chat } = await alicePresent();
    const conn = server.last;
    conn.serverSend({ ev: 'presence', chat: 'general', count: 150 });
    await tick();
    expect(chat.present?.count).toBe(150);
    expect(conn.sent('presence')).toHaveLength(1);
    conn.serverSend({ ev: 'presence', chat: 'general', count: 1 });
    await tick();
    // Who the one is cannot be told from a count, although the list held has one name: it is fetched.
    expect(conn.sent('presence')).toHaveLength(2);
    expect(chat.present).toEqual({ count: 1, users: ['alice'] });
    alice.close();
  });

  it('costs nothing unless asked for, and ends with the watch', async () => {
    const { server, client } = setup();
    await connected(client);
    const chat = client.chat('general');
    await chat.watch();
    await tick();
    expect(server.last.sent('presence')).toHaveLength(0);
    expect(chat.present).toBeNull();
    await chat.watch({ presence: true }); // asking later, on a live watch, asks at once
    await tick();
    expect(server.last.sent('presence')).toHaveLength(1);
    expect(chat.present).toEqual({ count: 1, users: ['alice'] });
    await chat.unwatch();
    expect(chat.present).toBeNull();
    client.close();
  });
});
