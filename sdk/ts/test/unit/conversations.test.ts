//! Protocol 1.2's conversations through the SDK against the fake server: each op as a user calls it, and
//! what a watcher's message list and the inbox show (threads and their reply counts, quotes, mentions,
//! pins, reaction counts, streamed text with its repair, the chat's profile).

import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { MessageList, type MessageChange } from '../../src/messages.js';
import type { HeraldEvent } from '../../src/types.js';
import { aliceAndBobInGeneral, clientOn, connected, setup, tick } from './helpers.js';

beforeEach(() => {
  vi.useFakeTimers({ now: 1_000_000_000_000 });
});
afterEach(() => {
  vi.useRealTimers();
});

/** Alice and bob in `general`; bob watches it and keeps its message list and its changes. */
async function pair() {
  const all = await aliceAndBobInGeneral();
  const list = all.bchat.messages();
  const changes: MessageChange[] = [];
  list.on('change', (c) => changes.push(c));
  await all.bchat.watch();
  const close = () => {
    all.alice.close();
    all.bob.close();
  };
  return { ...all, list, changes, close };
}

const text = (list: MessageList, seq: number) => (list.get(seq)?.body as { text?: string } | null)?.text;

describe('chat profiles and members', () => {
  it("sets the profile (null clears a field), shows it in watchers' lists and later joins, and pages members", async () => {
    const { server, achat, bchat, list, close } = await pair();
    const profiles: unknown[] = [];
    list.on('profile', (p) => profiles.push(p));
    const set = await achat.profile({ name: 'General', image: 'https://example.com/g.png', data: { topic: 'all' } });
    await tick();
    expect(list.profile).toEqual({ name: 'General', image: 'https://example.com/g.png', data: { topic: 'all' } });
    // Only the fields given are written; a change to nothing stores nothing and answers the latest seq.
    await expect(achat.profile({ name: 'General' })).resolves.toEqual(set);
    const cleared = await achat.profile({ image: null });
    expect(server.sockets.find((s) => s.user === 'alice')!.sent('profile').at(-1)).toEqual({ id: expect.any(Number), op: 'profile', chat: 'general', image: null });
    await tick();
    expect(cleared.seq).toBeGreaterThan(set.seq);
    expect(list.profile).toEqual({ name: 'General', image: null, data: { topic: 'all' } });
    expect(profiles).toHaveLength(2);

    const carol = clientOn(server, 'carol');
    await connected(carol);
    const joined = await carol.chat('general').join();
    expect(joined.profile).toEqual({ name: 'General', image: null, data: { topic: 'all' } });
    // A list made after the join starts with its profile.
    expect(carol.chat('general').messages().profile).toEqual(joined.profile);

    const first = await bchat.members({ limit: 2 });
    expect(first).toMatchObject({ members: [{ user: 'alice' }, { user: 'bob' }], count: 3, more: true });
    const next = await bchat.members({ limit: 2, cursor: first.cursor! });
    expect(next).toEqual({ members: [{ user: 'carol', read: 0 }], count: 3, more: false });
    carol.close();
    close();
  });
});

describe('threads and quotes', () => {
  it("keeps replies out of the main list, in the root's thread view, and counts them in the root's replies as they come and go", async () => {
    const { achat, bchat, list, changes, close } = await pair();
    const root = await achat.send({ text: 'lunch?' });
    const r1 = await bchat.send({ text: 'yes' }, { thread: root.seq });
    const r2 = await achat.send({ text: 'noon' }, { thread: root.seq, quote: r1.seq });
    await tick();
    expect(list.messages.map((m) => m.seq)).toEqual([root.seq]);
    expect(list.thread(root.seq).map((m) => [m.seq, m.thread, m.quote])).toEqual([
      [r1.seq, root.seq, undefined],
      [r2.seq, root.seq, r1.seq],
    ]);
    expect(list.get(root.seq)?.replies).toEqual({ count: 2, last: r2.seq });
    await achat.delete(r2.seq);
    await tick();
    expect(list.get(root.seq)?.replies).toEqual({ count: 1, last: r1.seq });
    await bchat.delete(r1.seq);
    await tick();
    expect(list.get(root.seq)?.replies).toBeUndefined();
    expect(changes.filter((c) => c.message.seq === root.seq).map((c) => c.kind)).toEqual(['added', 'updated', 'updated', 'updated', 'updated']);
    close();
  });

  it('refuses a missing root (not_found) and a reply as a root (bad_request)', async () => {
    const { achat, close } = await pair();
    const root = await achat.send({ text: 'root' });
    const reply = await achat.send({ text: 'reply' }, { thread: root.seq });
    await expect(achat.send({ text: 'x' }, { thread: 999 })).rejects.toMatchObject({ code: 'not_found' });
    await expect(achat.send({ text: 'x' }, { thread: reply.seq })).rejects.toMatchObject({ code: 'bad_request' });
    close();
  });

  it('a watch that starts after replies were sent counts each reply once (the root replayed with its count)', async () => {
    const { server, achat, bchat, close } = await pair();
    const root = await achat.send({ text: 'root' });
    await bchat.send({ text: 'one' }, { thread: root.seq });
    await bchat.send({ text: 'two' }, { thread: root.seq });
    const carol = clientOn(server, 'carol');
    await connected(carol);
    const cchat = carol.chat('general');
    await cchat.join();
    const list = cchat.messages();
    await cchat.watch({ after: 0 });
    await tick();
    expect(list.get(root.seq)?.replies).toMatchObject({ count: 2 });
    const three = await achat.send({ text: 'three' }, { thread: root.seq });
    await tick();
    expect(list.get(root.seq)?.replies).toEqual({ count: 3, last: three.seq });
    carol.close();
    close();
  });

  it('replies that arrive through gap repair are counted once: the fetched root already counts them', async () => {
    const { server, achat, bchat, bob, list, close } = await pair();
    server.autoPush = false;
    const root = await achat.send({ text: 'root' });
    await achat.send({ text: 'a' }, { thread: root.seq });
    const last = await achat.send({ text: 'b' }, { thread: root.seq });
    server.pushSeq(server.sockets.find((s) => s.user === 'bob' && s.isOpen)!, 'general', last.seq);
    await tick();
    expect(bchat.lastSeq).toBe(last.seq);
    expect(list.get(root.seq)?.replies).toEqual({ count: 2, last: last.seq });
    expect(list.thread(root.seq)).toHaveLength(2);
    void bob;
    close();
  });

  it('fetches, pages and reads a thread, and lists the threads a user follows', async () => {
    const { alice, achat, bchat, close } = await pair();
    const root = await achat.send({ text: 'root' });
    const other = await achat.send({ text: 'another root' });
    const r1 = await bchat.send({ text: 'r1' }, { thread: root.seq });
    await achat.send({ text: 'not in it' });
    const r2 = await bchat.send({ text: 'r2' }, { thread: root.seq });
    const page = await achat.fetch(root.seq, 10, { thread: root.seq });
    expect(page.events.map((e) => e.seq)).toEqual([r1.seq, r2.seq]);
    const seqs: number[] = [];
    for await (const ev of achat.history(0, { thread: root.seq })) seqs.push(ev.seq);
    expect(seqs).toEqual([r1.seq, r2.seq]);

    let threads = await alice.threads();
    expect(threads.threads).toMatchObject([{ chat: 'general', root: { seq: root.seq }, last: { seq: r2.seq }, read: 0, unread: 2 }]);
    await expect(achat.read(r1.seq, { thread: root.seq })).resolves.toEqual({ seq: r1.seq });
    threads = await achat.threads({ limit: 5 });
    expect(threads.threads).toMatchObject([{ read: r1.seq, unread: 1 }]);
    expect(threads.more).toBe(false);
    void other;
    close();
  });
});

describe('mentions', () => {
  it('a message carries its mentions; an edit with mentions replaces them, one without keeps them, [] clears them', async () => {
    const { achat, list, close } = await pair();
    const { seq } = await achat.send({ text: 'hi @bob' }, { mentions: ['bob', 'bob', 'carol'] });
    await tick();
    expect(list.get(seq)?.mentions).toEqual(['bob', 'carol']);
    await achat.edit(seq, { text: 'hi @carol' }, { mentions: ['carol'] });
    await tick();
    expect(list.get(seq)).toMatchObject({ body: { text: 'hi @carol' }, mentions: ['carol'] });
    await achat.edit(seq, { text: 'hi @carol!' });
    await tick();
    expect(list.get(seq)).toMatchObject({ body: { text: 'hi @carol!' }, mentions: ['carol'] });
    await achat.edit(seq, { text: 'hi' }, { mentions: [] });
    await tick();
    expect(list.get(seq)?.mentions).toEqual([]);
    close();
  });
});

describe('pins and reaction counts', () => {
  it('pin and unpin show in the list and in pins; pinning twice stores nothing; a delete unpins', async () => {
    const { achat, bchat, list, close } = await pair();
    const a = await achat.send({ text: 'rules' });
    const b = await achat.send({ text: 'faq' });
    const pinA = await bchat.pin(a.seq);
    await expect(bchat.pin(a.seq)).resolves.toEqual(pinA);
    await achat.pin(b.seq);
    await tick();
    expect([list.get(a.seq)?.pinned, list.get(b.seq)?.pinned]).toEqual([true, true]);
    const pins = await achat.pins();
    expect(pins.pins.map((p) => [p.message.seq, p.user])).toEqual([
      [b.seq, 'alice'],
      [a.seq, 'bob'],
    ]);
    await bchat.pin(a.seq, false);
    await achat.delete(b.seq);
    await tick();
    expect([list.get(a.seq)?.pinned, list.get(b.seq)?.pinned]).toEqual([false, false]);
    await expect(achat.pin(b.seq)).rejects.toMatchObject({ code: 'not_found' });
    expect((await achat.pins()).pins).toEqual([]);
    close();
  });

  it("counts users whose reaction is on now, from reaction events and from a fetched message's counts", async () => {
    const { server, achat, bchat, list, close } = await pair();
    const { seq } = await achat.send({ text: 'ship it' });
    await bchat.react(seq, '+1');
    await achat.react(seq, '+1');
    await achat.react(seq, 'heart');
    await tick();
    expect(list.get(seq)?.reactions).toEqual({ '+1': 2, heart: 1 });
    await achat.react(seq, 'heart', false);
    await bchat.react(seq, '+1', false);
    await tick();
    expect(list.get(seq)?.reactions).toEqual({ '+1': 1 });
    await expect(bchat.reactions(seq)).resolves.toEqual({ reactions: { '+1': ['alice'] } });

    // A list loaded from history takes the stored counts; the reaction events after it do not move them again.
    const fresh = new MessageList();
    const page = await bchat.fetch(0);
    fresh.load(page.events, page.seq);
    expect(fresh.get(seq)?.reactions).toEqual({ '+1': 1 });
    // A reaction after the fetch does.
    const later = await bchat.react(seq, 'party');
    fresh.apply(server.events('general')[later.seq - 1]!);
    expect(fresh.get(seq)?.reactions).toEqual({ '+1': 1, party: 1 });
    close();
  });
});

describe('streamed messages', () => {
  it("a watcher sees a stream open, grow chunk by chunk and end, with the sender's final text", async () => {
    const { achat, bchat, list, changes, close } = await pair();
    const appends: unknown[] = [];
    bchat.on('append', (p) => appends.push(p));
    const { seq } = await achat.send({ text: '' }, { stream: true });
    await tick();
    expect(list.get(seq)).toMatchObject({ body: { text: '' }, stream: 'open' });
    for (const chunk of ['Hel', 'lo ', 'wörld 👋']) await achat.append(seq, chunk);
    await tick();
    expect(text(list, seq)).toBe('Hello wörld 👋');
    expect(appends).toHaveLength(3);
    await achat.append(seq, '!', { done: true });
    await tick();
    expect(list.get(seq)).toMatchObject({ body: { text: 'Hello wörld 👋!' }, stream: 'done' });
    expect(list.get(seq)?.edited).toBeGreaterThan(seq);
    expect(changes.filter((c) => c.message.seq === seq).map((c) => c.kind)).toEqual(['added', 'appended', 'appended', 'appended', 'appended', 'edited']);
    await expect(achat.append(seq, 'more')).rejects.toMatchObject({ code: 'bad_request' });
    await expect(bchat.append(seq, 'more')).rejects.toMatchObject({ code: 'forbidden' });
    close();
  });

  it('refuses a stream body without text, and an edit of an open stream', async () => {
    const { achat, close } = await pair();
    await expect(achat.send('just a string', { stream: true })).rejects.toMatchObject({ code: 'bad_request' });
    const { seq } = await achat.send({ text: 'a' }, { stream: true });
    await expect(achat.edit(seq, { text: 'b' })).rejects.toMatchObject({ code: 'bad_request' });
    close();
  });

  it('an append whose `at` does not fit makes the list fetch the message again and take its stored text', async () => {
    const { server, achat, list, changes, close } = await pair();
    const bobConn = server.sockets.find((s) => s.user === 'bob' && s.isOpen)!;
    const { seq } = await achat.send({ text: 'Hel' }, { stream: true });
    await tick();
    server.pushAppends = false;
    await achat.append(seq, 'lo'); // missed by bob
    server.pushAppends = true;
    await achat.append(seq, ' world'); // at 5, bob holds 3 characters
    await tick();
    const refetch = bobConn.sent('fetch').at(-1);
    expect(refetch).toMatchObject({ chat: 'general', after: seq - 1, limit: 1 });
    expect(text(list, seq)).toBe('Hello world');
    // The chunks after the repair fit again.
    await achat.append(seq, '!');
    await tick();
    expect(text(list, seq)).toBe('Hello world!');
    expect(bobConn.sent('fetch')).toHaveLength(1);
    // A chunk shown already (a duplicate push) changes nothing and fetches nothing.
    const before = changes.length;
    bobConn.serverSend({ ev: 'append', chat: 'general', target: seq, text: 'world', at: 6 });
    await tick();
    expect(changes.length).toBe(before);
    expect(bobConn.sent('fetch')).toHaveLength(1);
    close();
  });

  it('appends that arrive while the message is read again are folded in after its stored text', async () => {
    let resolve!: (v: { event: HeraldEvent; asOf: number } | null) => void;
    const list = new MessageList({ refetch: () => new Promise((r) => (resolve = r)) });
    const ev: HeraldEvent = { seq: 7, type: 'message', user: 'ai', ts: 1, body: { text: 'ab' }, stream: 'open' };
    list.apply(ev, 7);
    list.append({ target: 7, text: 'x', at: 5 }); // a gap: read it again
    list.append({ target: 7, text: 'fg', at: 5 }); // arrives while the read is out
    resolve({ event: { ...ev, body: { text: 'abcde' } }, asOf: 9 });
    await tick();
    expect(list.get(7)?.body).toEqual({ text: 'abcdefg' });
    // Without a way to read again, a chunk that does not fit is left out until the final edit.
    const bare = new MessageList();
    bare.apply(ev, 7);
    bare.append({ target: 7, text: 'zz', at: 9 });
    expect(bare.get(7)?.body).toEqual({ text: 'ab' });
    bare.apply({ seq: 9, type: 'edit', user: 'ai', ts: 2, body: { target: 7, body: { text: 'all of it' } } });
    expect(bare.get(7)).toMatchObject({ body: { text: 'all of it' }, stream: 'done', edited: 9 });
  });
});

describe('inbox counts', () => {
  it("counts thread replies apart from unread, mentions of this user, and the chat's profile, live", async () => {
    const { alice, achat, bchat, close } = await pair();
    await achat.profile({ name: 'General' });
    const root = await achat.send({ text: 'plan?' });
    await alice.inbox.start();
    expect(alice.inbox.get('general')).toMatchObject({ unread: 0, threads: 0, mentions: 0, profile: { name: 'General' } });
    await bchat.send({ text: 'in the thread' }, { thread: root.seq });
    await tick();
    expect(alice.inbox.get('general')).toMatchObject({ unread: 0, threads: 1, mentions: 0 });
    await bchat.send({ text: '@alice look' }, { mentions: ['alice'] });
    await tick();
    expect(alice.inbox.get('general')).toMatchObject({ unread: 1, threads: 1, mentions: 1 });
    expect([alice.inbox.unread, alice.inbox.threads, alice.inbox.mentions]).toEqual([1, 1, 1]);
    const last = await bchat.send({ text: 'and @alice again, in the thread' }, { thread: root.seq, mentions: ['alice'] });
    await tick();
    expect(alice.inbox.get('general')).toMatchObject({ unread: 1, threads: 2, mentions: 2 });
    await achat.read(last.seq, { thread: root.seq });
    await tick();
    expect(alice.inbox.get('general')).toMatchObject({ threads: 0 });
    await achat.read(last.seq);
    await tick();
    expect(alice.inbox.get('general')).toMatchObject({ unread: 0, threads: 0, mentions: 0 });
    close();
  });
});

describe('sends with 1.2 arguments', () => {
  it('a reply with mentions written while the link is down goes out with them, once, when it is back', async () => {
    const { server, client } = setup();
    await connected(client);
    const chat = client.chat('general');
    await chat.join();
    const root = await chat.send({ text: 'root' });
    server.last.serverClose(1006);
    await tick();
    const reply = chat.send({ text: 'later' }, { thread: root.seq, mentions: ['bob'] });
    await tick(5_000);
    expect(client.state).toBe('connected');
    await expect(reply).resolves.toEqual({ seq: root.seq + 1 });
    expect(server.last.sent('send')).toMatchObject([{ thread: root.seq, mentions: ['bob'], client_id: expect.stringMatching(/^c-/) }]);
    expect(server.events('general').at(-1)).toMatchObject({ thread: root.seq, mentions: ['bob'] });
    client.close();
  });
});

describe('MessageList, fed by hand', () => {
  const message = (seq: number, extra: Partial<HeraldEvent> = {}): HeraldEvent => ({ seq, type: 'message', user: 'bob', ts: seq, body: { text: `m${seq}` }, ...extra });

  it('applies an edit with mentions seen before its message once the message is loaded', () => {
    const list = new MessageList();
    list.apply({ seq: 5, type: 'edit', user: 'bob', ts: 5, body: { target: 2, body: { text: 'fixed' } }, mentions: ['carol'] });
    list.load([message(2, { mentions: ['alice'] })]);
    expect(list.get(2)).toMatchObject({ body: { text: 'fixed' }, edited: 5, mentions: ['carol'] });
  });

  it('keeps at most maxMessages replies apart from the main list, and drops a thread with its root', () => {
    const list = new MessageList({ maxMessages: 2 });
    list.load([message(1), message(2, { thread: 1 }), message(3, { thread: 1 }), message(4, { thread: 1 })]);
    expect(list.thread(1).map((m) => m.seq)).toEqual([3, 4]);
    expect(list.get(1)?.replies).toEqual({ count: 3, last: 4 });
    list.load([message(5), message(6)]);
    expect(list.messages.map((m) => m.seq)).toEqual([5, 6]);
    expect(list.thread(1)).toEqual([]);
    expect(list.get(3)).toBeUndefined();
  });

  it('a reaction, pin or reply at or below the seq a view was read at changes nothing it shows', () => {
    const list = new MessageList();
    list.apply(message(1, { reactions: { '+1': 1 }, pinned: true, replies: { count: 1, last: 2 } }), 4);
    list.apply({ seq: 3, type: 'reaction', user: 'carol', ts: 3, body: { target: 1, emoji: '+1', on: true } });
    list.apply({ seq: 4, type: 'pin', user: 'carol', ts: 4, body: { target: 1, on: true } });
    list.apply(message(2, { thread: 1 }), 4);
    expect(list.get(1)).toMatchObject({ reactions: { '+1': 1 }, pinned: true, replies: { count: 1, last: 2 } });
    // Above it, they count.
    list.apply({ seq: 5, type: 'reaction', user: 'dan', ts: 5, body: { target: 1, emoji: '+1', on: true } });
    list.apply({ seq: 6, type: 'pin', user: 'dan', ts: 6, body: { target: 1, on: false } });
    list.apply(message(7, { thread: 1 }));
    list.apply({ seq: 8, type: 'delete', user: 'bob', ts: 8, body: { target: 2 } });
    expect(list.get(1)).toMatchObject({ reactions: { '+1': 2 }, pinned: false, replies: { count: 1, last: 7 } });
  });
});
