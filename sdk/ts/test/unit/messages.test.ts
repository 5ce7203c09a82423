import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { HeraldError } from '../../src/errors.js';
import { MessageList, type MessageChange } from '../../src/messages.js';
import type { HeraldEvent } from '../../src/types.js';
import { aliceAndBobInGeneral, connected, setup, tick } from './helpers.js';

beforeEach(() => {
  vi.useFakeTimers({ now: 1_000_000_000_000 });
});
afterEach(() => {
  vi.useRealTimers();
});

/** Alice and bob on one fake server, both in `general`; bob watches it and keeps its message list. */
async function pair() {
  const { server, alice, bob, achat, bchat } = await aliceAndBobInGeneral();
  const list = bchat.messages();
  const changes: MessageChange[] = [];
  list.on('change', (c) => changes.push(c));
  await bchat.watch();
  return { server, alice, bob, achat, bchat, list, changes };
}

const texts = (list: MessageList) => list.messages.map((m) => m.body);

describe('edit and delete', () => {
  it("a watcher's message list shows a message, its edit, then its deletion, as they happen", async () => {
    const { alice, bob, achat, list, changes } = await pair();
    const { seq } = await achat.send({ text: 'helo' });
    await tick();
    expect(texts(list)).toEqual([{ text: 'helo' }]);
    const edit = await achat.edit(seq, { text: 'hello' });
    await tick();
    expect(list.get(seq)).toMatchObject({ body: { text: 'hello' }, edited: edit.seq, deleted: false, user: 'alice' });
    await achat.delete(seq);
    await tick();
    expect(list.get(seq)).toMatchObject({ body: null, deleted: true });
    expect(changes.map((c) => c.kind)).toEqual(['added', 'edited', 'deleted']);
    alice.close();
    bob.close();
  });

  it("refuses to edit another user's message (forbidden) and a deleted or unknown one (not_found)", async () => {
    const { alice, bob, achat, bchat } = await pair();
    const { seq } = await achat.send({ text: 'mine' });
    await expect(bchat.edit(seq, { text: 'yours now' })).rejects.toMatchObject({ code: 'forbidden', op: 'edit' });
    await expect(bchat.delete(seq)).rejects.toBeInstanceOf(HeraldError);
    await achat.delete(seq);
    await expect(achat.edit(seq, { text: 'back' })).rejects.toMatchObject({ code: 'not_found' });
    await expect(achat.delete(seq)).rejects.toMatchObject({ code: 'not_found' });
    await expect(achat.delete(999)).rejects.toMatchObject({ code: 'not_found' });
    alice.close();
    bob.close();
  });

  it('applies an edit that arrives through gap repair in seq order, after the message it edits', async () => {
    const { server, alice, bob, achat, bchat, list } = await pair();
    const conn = server.sockets.find((s) => s.user === 'bob')!;
    server.autoPush = false;
    const { seq } = await achat.send({ text: 'v1' });
    const e1 = await achat.edit(seq, { text: 'v2' });
    const e2 = await achat.edit(seq, { text: 'v3' });
    // Only the last edit is pushed: bob fetches what lies between, whose stored view already says v3.
    server.pushSeq(conn, 'general', e2.seq);
    await tick();
    expect(bchat.lastSeq).toBe(e2.seq);
    expect(list.messages).toHaveLength(1);
    expect(list.get(seq)).toMatchObject({ body: { text: 'v3' }, edited: e2.seq });
    expect(e1.seq).toBeLessThan(e2.seq);
    alice.close();
    bob.close();
  });

  it('a watcher back from a dropped link sees edits and deletes made while it was away', async () => {
    const { server, alice, bob, achat, list } = await pair();
    const a = await achat.send({ text: 'keep' });
    const b = await achat.send({ text: 'drop' });
    await tick();
    server.sockets.find((s) => s.user === 'bob' && s.isOpen)!.serverClose(1006);
    await tick();
    expect(bob.state).toBe('connecting');
    await achat.edit(a.seq, { text: 'kept, edited' });
    await achat.delete(b.seq);
    await tick(1000); // backoff (random 0.5 of the 500 ms window), then resume with watch after=
    expect(bob.state).toBe('connected');
    expect(list.get(a.seq)).toMatchObject({ body: { text: 'kept, edited' } });
    expect(list.get(b.seq)).toMatchObject({ body: null, deleted: true });
    alice.close();
    bob.close();
  });
});

describe('MessageList', () => {
  const msg = (seq: number, body: unknown, extra: Partial<HeraldEvent> = {}): HeraldEvent => ({ seq, type: 'message', user: 'alice', ts: seq, body, ...extra });

  it('never goes back to an older version when history arrives after live edits', () => {
    const list = new MessageList();
    // Live: the edit of 10 arrives before 10 itself was loaded (it is older than the watch).
    list.apply({ seq: 20, type: 'edit', user: 'alice', ts: 20, body: { target: 10, body: 'new' } });
    // History fetched before the edit was stored: the original body, no `edited`.
    list.load([msg(10, 'old')]);
    expect(list.get(10)).toMatchObject({ body: 'new', edited: 20 });
    // A later page of the stored view with a newer edit wins; an older view does not.
    list.load([msg(10, 'newer', { edited: 30 })]);
    list.load([msg(10, 'old', { edited: 20 })]);
    expect(list.get(10)).toMatchObject({ body: 'newer', edited: 30 });
    // A delete is final: neither an edit nor an older view brings the body back.
    list.apply({ seq: 31, type: 'delete', user: 'alice', ts: 31, body: { target: 10 } });
    list.apply({ seq: 32, type: 'edit', user: 'alice', ts: 32, body: { target: 10, body: null } });
    list.load([msg(10, 'newer', { edited: 30 })]);
    expect(list.get(10)).toMatchObject({ body: null, deleted: true });
  });

  it('keeps messages in seq order when older history is loaded after live ones, and drops the oldest past its bound', () => {
    const list = new MessageList({ maxMessages: 3 });
    list.apply(msg(5, 'e'));
    list.apply(msg(6, 'f'));
    list.load([msg(2, 'b'), msg(4, 'd')]);
    expect(list.messages.map((m) => m.seq)).toEqual([4, 5, 6]);
    list.load([msg(1, 'a')]); // older than all three kept: not added
    expect(list.messages.map((m) => m.seq)).toEqual([4, 5, 6]);
    list.apply(msg(7, 'g'));
    expect(list.messages.map((m) => m.seq)).toEqual([5, 6, 7]);
  });

  it('shows a deleted message of the stored view as deleted, and ignores other and unknown types', () => {
    const list = new MessageList();
    list.load([
      msg(1, null, { deleted: true }),
      { seq: 2, type: 'reaction', user: 'bob', ts: 2, body: { target: 1, emoji: '+1', on: true } },
      { seq: 3, type: 'poll', user: 'bob', ts: 3, body: { question: '?' } },
      { seq: 4, type: 'edit', user: 'bob', ts: 4, body: 'not an edit body' },
    ]);
    expect(list.messages).toEqual([{ seq: 1, type: 'message', user: 'alice', ts: 1, body: null, deleted: true, pinned: false }]);
  });
});

describe('protocol 1.1 rule: unknown pushes, types and fields are ignored', () => {
  it('delivers an event of an unknown type in its place, ignores unknown pushes and fields, and raises no error', async () => {
    const { server, client } = setup();
    server.autoPush = false;
    await connected(client);
    const chat = client.chat('general');
    const seen: HeraldEvent[] = [];
    const errors: HeraldError[] = [];
    chat.on('event', (e) => seen.push(e));
    client.on('error', (e) => errors.push(e));
    chat.on('error', (e) => errors.push(e));
    const list = chat.messages();
    await chat.watch();
    const conn = server.last;
    conn.serverSend({ ev: 'weather', chat: 'general', sunny: true });
    conn.serverSend({ ev: 'event', chat: 'general', seq: 1, type: 'poll', user: 'bob', ts: 1, body: {}, colour: 'red' });
    conn.serverSend({ ev: 'event', chat: 'general', seq: 2, type: 'message', user: 'bob', ts: 2, body: { text: 'hi' }, mood: 'fine' });
    conn.serverSend({ ev: 'typing', chat: 'general' }); // a shape this version cannot read
    conn.serverSend({ ev: 'presence', chat: 'general', what: 'new' });
    conn.serverSend({ ev: 'inbox', chat: 'general' });
    await tick();
    expect(seen.map((e) => [e.seq, e.type])).toEqual([
      [1, 'poll'],
      [2, 'message'],
    ]);
    expect(list.messages.map((m) => m.body)).toEqual([{ text: 'hi' }]);
    expect(conn.sent('fetch')).toHaveLength(0); // seq 1 counted although its type is unknown
    expect(errors).toEqual([]);
    expect(client.session?.protocol).toBe('1.2');
    client.close();
  });
});
