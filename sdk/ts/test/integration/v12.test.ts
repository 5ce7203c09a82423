//! Integration tests of protocol 1.2's conversations against a real herald: profiles and members, a
//! thread reply with its root's count, a mention in the other user's inbox, pins, reaction counts and a
//! stream (also one whose watcher's link drops mid-stream), each as a second user's SDK shows them.
//! Skipped unless HERALD_BIN names the binary:
//!
//!     HERALD_BIN=../../target/release/herald npm run test:integration

import { describe, expect, it } from 'vitest';
import type { HeraldClient } from '../../src/client.js';
import type { MessageChange } from '../../src/messages.js';
import { Herald, HERALD_BIN, stopAfterEach, TcpProxy, until } from './harness.js';

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

/** alice and bob, both members of `general`; bob watches it with a message list. */
async function pair() {
  const herald = await startHerald();
  const alice = await user(herald, 'alice');
  const bob = await user(herald, 'bob');
  const achat = alice.chat('general');
  const bchat = bob.chat('general');
  await achat.join();
  await bchat.join();
  const list = bchat.messages();
  await bchat.watch();
  return { herald, alice, bob, achat, bchat, list };
}

const textOf = (body: unknown) => (body as { text?: string } | null)?.text;

describe.skipIf(HERALD_BIN === '')('herald protocol 1.2', () => {
  it("says it speaks 1.2; a profile shows in a watcher's list and a later join, and members page", async () => {
    const { herald, alice, achat, bchat, list } = await pair();
    expect(alice.session?.protocol).toBe('1.2');
    const { seq } = await achat.profile({ name: 'General', data: { topic: 'everything' } });
    expect(seq).toBeGreaterThan(0);
    await until("bob's list shows the profile", () => list.profile?.name === 'General');
    expect(list.profile).toEqual({ name: 'General', image: null, data: { topic: 'everything' } });
    await expect(achat.profile({ name: 'General' })).resolves.toEqual({ seq });

    const carol = await user(herald, 'carol');
    const joined = await carol.chat('general').join();
    expect(joined.profile).toEqual({ name: 'General', image: null, data: { topic: 'everything' } });
    const first = await bchat.members({ limit: 2 });
    expect(first).toMatchObject({ members: [{ user: 'alice' }, { user: 'bob' }], count: 3, more: true });
    const next = await bchat.members({ limit: 2, cursor: first.cursor! });
    expect(next).toMatchObject({ members: [{ user: 'carol' }], count: 3, more: false });
  });

  it("a thread reply reaches the other user in the root's thread view, counted in the root's replies", async () => {
    const { alice, achat, bchat, list } = await pair();
    const root = await bchat.send({ text: 'lunch?' });
    const reply = await achat.send({ text: 'noon' }, { thread: root.seq, quote: root.seq });
    await until('bob sees the reply', () => list.thread(root.seq).length === 1);
    expect(list.thread(root.seq)[0]).toMatchObject({ seq: reply.seq, thread: root.seq, quote: root.seq, user: 'alice' });
    expect(list.messages.map((m) => m.seq)).toEqual([root.seq]);
    expect(list.get(root.seq)?.replies).toEqual({ count: 1, last: reply.seq });
    // The stored view agrees, and bob follows the thread he started.
    const page = await bchat.fetch(root.seq - 1, 1);
    expect(page.events[0]?.replies).toEqual({ count: 1, last: reply.seq });
    const threads = await bchat.threads();
    expect(threads.threads).toMatchObject([{ chat: 'general', root: { seq: root.seq }, last: { seq: reply.seq }, unread: 1 }]);
    await achat.delete(reply.seq);
    await until("bob's root counts no replies", () => list.get(root.seq)?.replies === undefined);
    void alice;
  });

  it("a mention is counted in the other user's inbox, live", async () => {
    const { alice, bob, achat, bchat } = await pair();
    await bob.inbox.start();
    await achat.send({ text: 'hi @bob' }, { mentions: ['bob'] });
    await until("bob's inbox counts the mention", () => bob.inbox.get('general')?.mentions === 1);
    expect(bob.inbox.get('general')).toMatchObject({ unread: 1, mentions: 1 });
    const root = await bchat.send({ text: 'a thread' });
    await achat.send({ text: 'in it' }, { thread: root.seq });
    await until("bob's inbox counts the thread reply", () => bob.inbox.get('general')?.threads === 1);
    expect(bob.inbox.get('general')?.unread).toBe(1);
    void alice;
  });

  it('a pin shows in the list and in pins; a delete unpins', async () => {
    const { achat, bchat, list } = await pair();
    const { seq } = await achat.send({ text: 'rules' });
    const pin = await bchat.pin(seq);
    await until('bob sees the pin', () => list.get(seq)?.pinned === true);
    await expect(bchat.pin(seq)).resolves.toEqual(pin);
    const pins = await achat.pins();
    expect(pins.pins).toMatchObject([{ seq: pin.seq, user: 'bob', message: { seq, pinned: true } }]);
    await achat.delete(seq);
    await until('the delete unpins', () => list.get(seq)?.pinned === false);
    expect((await achat.pins()).pins).toEqual([]);
  });

  it('reaction counts follow reactions on and off, and agree with the stored view and reactions', async () => {
    const { achat, bchat, list } = await pair();
    const { seq } = await achat.send({ text: 'ship it' });
    await achat.react(seq, '+1');
    await bchat.react(seq, '+1');
    await bchat.react(seq, 'heart');
    await until('bob sees three reactions', () => list.get(seq)?.reactions?.heart === 1 && list.get(seq)?.reactions?.['+1'] === 2);
    await bchat.react(seq, 'heart', false);
    await until('the heart is taken back', () => list.get(seq)?.reactions?.heart === undefined);
    expect(list.get(seq)?.reactions).toEqual({ '+1': 2 });
    const page = await bchat.fetch(seq - 1, 1);
    expect(page.events[0]?.reactions).toEqual({ '+1': 2 });
    await expect(bchat.reactions(seq)).resolves.toEqual({ reactions: { '+1': ['alice', 'bob'] } });
  });

  it("a stream (send stream:true, appends, done) reaches a watcher with the sender's final text", async () => {
    const { achat, list } = await pair();
    const kinds: MessageChange['kind'][] = [];
    list.on('change', (c) => kinds.push(c.kind));
    const { seq } = await achat.send({ text: '' }, { stream: true });
    await until('bob sees the stream open', () => list.get(seq)?.stream === 'open');
    const chunks = ['Once ', 'upon ', 'a tïme, ', 'an assistant 🤖 ', 'wrote'];
    for (const chunk of chunks) await achat.append(seq, chunk);
    await achat.append(seq, '.', { done: true });
    await until('bob sees the stream done', () => list.get(seq)?.stream === 'done');
    const final = `${chunks.join('')}.`;
    expect(textOf(list.get(seq)?.body)).toBe(final);
    const page = await achat.fetch(seq - 1, 1);
    expect(page.events[0]).toMatchObject({ body: { text: final }, stream: 'done' });
    // The text grew chunk by chunk before the end (pushes may merge chunks, never drop them).
    expect(kinds[0]).toBe('added');
    expect(kinds).toContain('appended');
    expect(kinds.at(-1)).toBe('edited');
    await expect(achat.append(seq, 'more')).rejects.toMatchObject({ code: 'bad_request' });
  });

  it("a watcher whose link drops mid-stream reads the message again at the next chunk, and ends with the sender's text", async () => {
    const herald = await startHerald();
    const proxy = await TcpProxy.start(herald.port);
    defer(() => proxy.close());
    const alice = await user(herald, 'alice');
    const bob = await user(herald, 'bob', proxy.ws);
    const achat = alice.chat('general');
    const bchat = bob.chat('general');
    await achat.join();
    await bchat.join();
    const list = bchat.messages();
    await bchat.watch();
    const { seq } = await achat.send({ text: 'Hel' }, { stream: true });
    await achat.append(seq, 'lo');
    await until('bob sees the first chunk', () => textOf(list.get(seq)?.body) === 'Hello');

    proxy.blocked = true;
    proxy.sever();
    await until('bob notices the cut', () => bob.state === 'connecting');
    await achat.append(seq, ', wo'); // never pushed to bob
    proxy.blocked = false;
    await until('bob is back and watching', () => bob.state === 'connected' && bchat.state === 'live', { timeoutMs: 15_000 });
    // Its `at` (9) is past bob's text (5): bob's list fetches the message and takes its stored text.
    await achat.append(seq, 'rld');
    await until('bob has the whole text so far, the stream still open', () => textOf(list.get(seq)?.body) === 'Hello, world');
    expect(list.get(seq)?.stream).toBe('open');
    await achat.append(seq, '!', { done: true });
    await until('bob sees the stream done', () => list.get(seq)?.stream === 'done');
    expect(textOf(list.get(seq)?.body)).toBe('Hello, world!');
  });
});
