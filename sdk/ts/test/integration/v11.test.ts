//! Integration tests of protocol 1.1 against a real herald: edits and deletes, typing, presence and the
//! inbox, each as a user of the SDK sees them. Skipped unless HERALD_BIN names the binary:
//!
//!     HERALD_BIN=../../target/release/herald npm run test:integration

import { describe, expect, it } from 'vitest';
import type { HeraldClient } from '../../src/client.js';
import type { InboxItem } from '../../src/inbox.js';
import type { HeraldEvent } from '../../src/types.js';
import { Herald, HERALD_BIN, sleep, TcpProxy, until, stopAfterEach } from './harness.js';

const WS = 'acme';

/** Stops what a test started, in reverse order, whatever the outcome. */
const defer = stopAfterEach();

async function startHerald(): Promise<Herald> {
  const h = await Herald.start();
  defer(() => h.dispose());
  return h;
}

/** A connected client for `user`; `url` through a proxy when given. */
async function user(herald: Herald, name: string, url?: string): Promise<HeraldClient> {
  const c = await herald.client(WS, name, url === undefined ? {} : { url, backoff: { baseMs: 100, capMs: 1000 } });
  defer(() => c.close());
  await c.connect();
  return c;
}

async function proxyTo(herald: Herald): Promise<TcpProxy> {
  const p = await TcpProxy.start(herald.port);
  defer(() => p.close());
  return p;
}

const brief = (items: InboxItem[]) => items.map((i) => `${i.chat}:${i.unread}`);

/** alice and bob both in a, b and c; bob writes a1, then `inC` messages in c, then b1 (the latest). */
async function inThreeChats(alice: HeraldClient, bob: HeraldClient, inC: number): Promise<void> {
  for (const c of ['a', 'b', 'c']) {
    await alice.chat(c).join();
    await bob.chat(c).join();
  }
  // A few ms between the chats' last messages: the inbox orders by the latest event's ms, and two sends
  // in one ms tie (in name order).
  await bob.chat('a').send({ text: 'a1' });
  await sleep(3);
  for (let i = 1; i <= inC; i++) await bob.chat('c').send({ text: `c${i}` });
  await sleep(3);
  await bob.chat('b').send({ text: 'b1' });
}

describe.skipIf(HERALD_BIN === '')('herald protocol 1.1', () => {
  it("says it speaks 1.1 or later, and a watcher's message list shows edits and deletes live and in fetched history", async () => {
    const herald = await startHerald();
    const alice = await user(herald, 'alice');
    const bob = await user(herald, 'bob');
    // 1.2 is additive: a 1.2 server speaks 1.1 too (v12.test.ts holds it to '1.2').
    expect(['1.1', '1.2']).toContain(alice.session?.protocol);
    const achat = alice.chat('general');
    const bchat = bob.chat('general');
    await achat.join();
    await bchat.join();
    const list = bchat.messages();
    await bchat.watch();

    const { seq } = await achat.send({ text: 'helo' });
    const edit = await achat.edit(seq, { text: 'hello' });
    await until('bob sees the edit', () => list.get(seq)?.edited === edit.seq);
    expect(list.get(seq)).toMatchObject({ body: { text: 'hello' }, user: 'alice', deleted: false });

    await expect(bchat.edit(seq, { text: 'mine now' })).rejects.toMatchObject({ code: 'forbidden' });
    await expect(bchat.delete(seq)).rejects.toMatchObject({ code: 'forbidden' });

    const other = await achat.send({ text: 'to be deleted' });
    await achat.delete(other.seq);
    await until('bob sees the delete', () => list.get(other.seq)?.deleted === true);
    expect(list.get(other.seq)?.body).toBeNull();
    await expect(achat.edit(other.seq, { text: 'back' })).rejects.toMatchObject({ code: 'not_found' });
    await expect(achat.delete(other.seq)).rejects.toMatchObject({ code: 'not_found' });

    // The stored view, as history and a fresh list see it.
    const fresh = bob.chat('general').messages({ maxMessages: 100 });
    expect(fresh).toBe(list); // one list per chat handle
    const events: HeraldEvent[] = [];
    for await (const ev of bchat.history(0)) events.push(ev);
    expect(events.find((e) => e.seq === seq)).toMatchObject({ type: 'message', body: { text: 'hello' }, edited: edit.seq });
    expect(events.find((e) => e.seq === other.seq)).toMatchObject({ type: 'message', body: null, deleted: true });
    expect(events.find((e) => e.type === 'edit')).toMatchObject({ body: { target: seq, body: { text: 'hello' } } });
  });

  it('shows typing to the other member, sent at most every 2 s, until 5 s after the last push or the message', async () => {
    const herald = await startHerald();
    const alice = await user(herald, 'alice');
    const bob = await user(herald, 'bob');
    const achat = alice.chat('general');
    const bchat = bob.chat('general');
    await achat.join();
    await bchat.join();
    await achat.watch();
    await bchat.watch();
    const changes: string[][] = [];
    bchat.on('typing', ({ users }) => changes.push(users));

    expect(achat.notifyTyping()).toBe(true);
    // Inside the 2 s window: not sent now, but once when the window is over (at 2.25 s).
    expect(achat.notifyTyping()).toBe(false);
    const shown = Date.now();
    await until('bob sees alice typing', () => bchat.typingUsers.includes('alice'), { timeoutMs: 5000 });
    expect(achat.typingUsers).toEqual([]); // never one's own
    await until('alice stops showing as typing', () => bchat.typingUsers.length === 0, { timeoutMs: 10_000 });
    // 5 s after the last push, the trailing one: about 7.25 s.
    const lasted = Date.now() - shown;
    expect(lasted).toBeGreaterThanOrEqual(6750);
    expect(lasted).toBeLessThan(9000);
    expect(changes).toEqual([['alice'], []]);

    // A second typing request inside the server's window is answered ok and not pushed.
    await achat.typing();
    await achat.typing();
    await until('bob sees alice typing again', () => bchat.typingUsers.includes('alice'), { timeoutMs: 5000 });
    await achat.send({ text: 'there' });
    await until("alice's message ends her typing", () => bchat.typingUsers.length === 0, { timeoutMs: 2000 });
    expect(changes).toEqual([['alice'], [], ['alice'], []]);
  });

  it('keeps who is present right through arrivals, departures and a reconnect', async () => {
    const herald = await startHerald();
    const proxy = await proxyTo(herald);
    const alice = await user(herald, 'alice', proxy.ws);
    const achat = alice.chat('general');
    await achat.join();
    await achat.watch({ presence: true });
    await until('alice sees herself present', () => achat.present?.count === 1);
    expect(achat.present?.users).toEqual(['alice']);
    expect(await achat.presence()).toEqual({ count: 1, users: ['alice'] });

    const bob = await user(herald, 'bob');
    await bob.chat('general').join();
    await bob.chat('general').watch();
    await until('alice sees bob arrive', () => achat.present?.users.join() === 'alice,bob');
    expect(achat.present?.count).toBe(2);
    await bob.chat('general').unwatch();
    await until('alice sees bob go', () => achat.present?.users.join() === 'alice');

    // Alice's link is cut; while she is away bob comes back and carol arrives, then carol leaves.
    proxy.blocked = true;
    proxy.sever();
    await until('alice notices the cut', () => alice.state === 'connecting');
    await bob.chat('general').watch();
    const carol = await user(herald, 'carol');
    await carol.chat('general').join();
    await carol.chat('general').watch();
    await carol.chat('general').unwatch();
    proxy.blocked = false;
    await until('alice is back', () => alice.state === 'connected', { timeoutMs: 15_000 });
    await until('alice sees bob present again', () => achat.present?.users.join() === 'alice,bob', { timeoutMs: 10_000 });
    expect(achat.present?.count).toBe(2);
  });

  it('lists the inbox with exact unread counts, latest activity first, and is right again after a reconnect', async () => {
    const herald = await startHerald();
    const proxy = await proxyTo(herald);
    const alice = await user(herald, 'alice', proxy.ws);
    const bob = await user(herald, 'bob');
    await inThreeChats(alice, bob, 2);
    const first = await alice.inbox.start();
    expect(brief(first)).toEqual(['b:1', 'c:2', 'a:1']);
    expect(alice.inbox.get('c')).toMatchObject({ read: 0, last: { type: 'message', user: 'bob', body: { text: 'c2' } } });
    expect(alice.inbox.unread).toBe(4);

    // Cut off while: bob writes two in a and deletes one; alice, on another device, reads c and leaves b.
    proxy.blocked = true;
    proxy.sever();
    await until('alice notices the cut', () => alice.state === 'connecting');
    await bob.chat('a').send({ text: 'a2' });
    const a3 = await bob.chat('a').send({ text: 'a3' });
    await bob.chat('a').delete(a3.seq);
    const phone = await user(herald, 'alice');
    await phone.chat('c').read((await phone.chat('c').fetch(0)).seq);
    await phone.chat('b').leave();
    proxy.blocked = false;
    await until('alice is back', () => alice.state === 'connected', { timeoutMs: 15_000 });
    // The first page again: c's read is its latest event, then a's delete; b is gone.
    await until('the inbox after the reconnect', () => brief(alice.inbox.entries).join() === 'c:0,a:2', { timeoutMs: 10_000 });
    expect(alice.inbox.get('c')?.read).toBeGreaterThan(0);
    expect(alice.inbox.unread).toBe(2);
  });

  it('follows inbox pushes live: new messages, reads, deletes and leaves', async () => {
    const herald = await startHerald();
    const alice = await user(herald, 'alice');
    const bob = await user(herald, 'bob');
    await inThreeChats(alice, bob, 1);
    expect(brief(await alice.inbox.start())).toEqual(['b:1', 'c:1', 'a:1']);

    const a2 = await bob.chat('a').send({ text: 'a2' });
    await until('a is first with 2 unread', () => brief(alice.inbox.entries).join() === 'a:2,b:1,c:1');
    // Read and left on alice's other device: only the server's pushes tell this client.
    const phone = await user(herald, 'alice');
    const c2 = await bob.chat('c').send({ text: 'c2' });
    await phone.chat('c').read(c2.seq);
    await until('c read, and first', () => brief(alice.inbox.entries).join() === 'c:0,a:2,b:1');
    await bob.chat('a').delete(a2.seq);
    await until('the deleted message is not counted', () => alice.inbox.get('a')?.unread === 1);
    await phone.chat('b').leave();
    await until('b is gone', () => alice.inbox.get('b') === undefined);
  });
});
