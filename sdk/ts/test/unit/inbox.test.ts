import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { InboxItem } from '../../src/inbox.js';
import type { Frame } from '../fake/fake-herald.js';
import { clientOn, connected, setup, tick } from './helpers.js';

beforeEach(() => {
  vi.useFakeTimers({ now: 1_000_000_000_000 });
});
afterEach(() => {
  vi.useRealTimers();
});

/** Alice in three chats with messages from bob (bob's `b3` is the latest activity), and bob's client. */
async function world() {
  const { server, client: alice } = setup({ token: 'user:alice' });
  const bob = clientOn(server, 'bob');
  await connected(alice);
  await connected(bob);
  for (const c of ['a', 'b', 'c']) {
    await alice.chat(c).join();
    await bob.chat(c).join();
  }
  await bob.chat('a').send({ text: 'a1' });
  await bob.chat('c').send({ text: 'c1' });
  await bob.chat('c').send({ text: 'c2' });
  await bob.chat('b').send({ text: 'b3' });
  return { server, alice, bob };
}

const brief = (items: InboxItem[]) => items.map((i) => `${i.chat}:${i.unread}`);

describe('inbox', () => {
  it('lists chats with unread counts, latest activity first, and follows new messages, reads and leaves live', async () => {
    const { server, alice, bob } = await world();
    const changes: string[][] = [];
    alice.inbox.on('change', (items) => changes.push(brief(items)));
    const first = await alice.inbox.start();
    expect(brief(first)).toEqual(['b:1', 'c:2', 'a:1']);
    expect(server.sockets.find((s) => s.user === 'alice')!.sent('inbox')[0]).toMatchObject({ live: true });
    expect(alice.inbox.get('c')).toMatchObject({ read: 0, last: { body: { text: 'c2' } } });
    expect(alice.inbox.unread).toBe(4);

    await bob.chat('a').send({ text: 'a2' });
    await tick();
    expect(brief(alice.inbox.entries)).toEqual(['a:2', 'b:1', 'c:2']);

    const { seq } = await bob.chat('c').send({ text: 'c3' });
    await alice.chat('c').read(seq);
    await tick();
    expect(brief(alice.inbox.entries)).toEqual(['c:0', 'a:2', 'b:1']);

    // A deleted message no longer counts (the server's count, pushed as it changes).
    await bob.chat('a').delete(server.events('a').find((e) => (e.body as { text?: string }).text === 'a2')!.seq);
    await tick();
    expect(alice.inbox.get('a')?.unread).toBe(1);

    await alice.chat('b').leave();
    await tick();
    expect(alice.inbox.get('b')).toBeUndefined();
    expect(changes.at(-1)).toEqual(brief(alice.inbox.entries));
    alice.close();
    bob.close();
  });

  it('resyncs from the first page after a reconnect, so what changed meanwhile shows', async () => {
    const { server, alice, bob } = await world();
    await alice.inbox.start();
    server.refuse = true;
    server.sockets.find((s) => s.user === 'alice' && s.isOpen)!.serverClose(1006);
    await tick();
    // While this device is away: bob writes in a; alice, on another device, reads c and joins a new chat.
    await bob.chat('a').send({ text: 'while away' });
    server.refuse = false;
    const phone = clientOn(server, 'alice');
    await connected(phone);
    await phone.chat('c').read(server.events('c').length);
    await phone.chat('new').join();
    await bob.chat('new').join();
    await bob.chat('new').send({ text: 'welcome' });
    phone.close();
    await tick(30_000);
    expect(alice.state).toBe('connected');
    const sent = server.sockets.filter((s) => s.user === 'alice').at(-1)!.sent('inbox');
    expect(sent).toHaveLength(1);
    expect(sent[0]).toMatchObject({ live: true });
    // Alice's read stored an event in c, which makes c more recent than bob's message in a.
    expect(brief(alice.inbox.entries)).toEqual(['new:1', 'c:0', 'a:2', 'b:1']);
    alice.close();
    bob.close();
  });

  it('keeps a push that arrives before the reply is read, and applies it on top', async () => {
    const { server, alice, bob } = await world();
    let held: Frame | null = null;
    server.intercept = (_c, f) => {
      if (f.op !== 'inbox') return false;
      held = f;
      return true;
    };
    const started = alice.inbox.start();
    await tick();
    server.intercept = null;
    const conn = server.sockets.find((s) => s.user === 'alice')!;
    const page = server.inbox('alice');
    conn.serverSend({ id: held!.id, ok: { chats: page, more: false } });
    conn.serverSend({ ev: 'inbox', chat: 'a', seq: 99, ts: 2_000_000_000_000, unread: 7 });
    await tick();
    expect(brief(await started)).toEqual(['a:7', 'b:1', 'c:2']);
    // An older push than the entry shows is ignored.
    conn.serverSend({ ev: 'inbox', chat: 'a', seq: 50, ts: 1, unread: 1 });
    await tick();
    expect(alice.inbox.get('a')).toMatchObject({ seq: 99, unread: 7 });
    alice.close();
    bob.close();
  });

  it('pages with the cursor and merges later pages without losing newer entries', async () => {
    const { server, alice, bob } = await world();
    expect(brief(await alice.inbox.start({ limit: 2 }))).toEqual(['b:1', 'c:2']);
    expect(alice.inbox.more).toBe(true);
    expect(await alice.inbox.loadMore()).toBe(false);
    expect(brief(alice.inbox.entries)).toEqual(['b:1', 'c:2', 'a:1']);
    expect(server.sockets.find((s) => s.user === 'alice')!.sent('inbox')[1]).toMatchObject({ cursor: '2', limit: 2 });
    expect(await alice.inbox.loadMore()).toBe(false);
    alice.close();
    bob.close();
  });

  it('gives up with an error event on a refusal that retrying cannot fix, and retries a throttle', async () => {
    const { server, client } = setup();
    await connected(client);
    let refusals = 0;
    server.intercept = (conn, f) => {
      if (f.op !== 'inbox') return false;
      refusals++;
      const err = refusals === 1 ? { code: 'throttled', message: 'slow down', retry_after_ms: 300 } : { code: 'bad_request', message: 'unknown op inbox' };
      conn.serverSend({ id: f.id, err });
      return true;
    };
    const errors: string[] = [];
    client.inbox.on('error', (e) => errors.push(e.code));
    const started = client.inbox.start();
    const settled = started.catch((e: unknown) => e);
    await tick(299);
    expect(refusals).toBe(1);
    await tick(1);
    expect(refusals).toBe(2);
    await expect(settled).resolves.toMatchObject({ code: 'bad_request' });
    expect(errors).toEqual(['bad_request']);
    expect(client.inbox.started).toBe(false);
    client.close();
  });
});
