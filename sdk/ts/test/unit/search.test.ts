//! Protocol 1.2's search through the SDK against the fake server: a page of results with their chats,
//! one chat's, paging by cursor (by hand and with `searchAll`), and the queries refused before asking.

import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { HeraldError } from '../../src/errors.js';
import type { SearchResult } from '../../src/types.js';
import { aliceAndBobInGeneral } from './helpers.js';

beforeEach(() => {
  vi.useFakeTimers({ now: 1_000_000_000_000 });
});
afterEach(() => {
  vi.useRealTimers();
});

/** Alice and bob in `general`, alice also in `random`, with a few messages. */
async function chats() {
  const all = await aliceAndBobInGeneral();
  const random = all.alice.chat('random');
  await random.join();
  await all.bchat.send({ text: '서버가 준비됐어요' });
  await all.achat.send({ text: 'the Heralds are here', extra: { note: '서버 로그' } });
  await random.send({ text: '서버 재시작' });
  await all.achat.send({ text: 'nothing to see' });
  const close = () => {
    all.alice.close();
    all.bob.close();
  };
  return { ...all, random, close };
}

const texts = (results: SearchResult[]) => results.map((r) => [r.chat, (r.body as { text: string }).text]);

describe('search', () => {
  it('finds a word inside a longer word, in every chat of the user, newest first, each with its chat', async () => {
    const { server, alice, bob, close } = await chats();
    const page = await alice.search('서버');
    expect(texts(page.results)).toEqual([
      ['random', '서버 재시작'],
      ['general', 'the Heralds are here'], // a string anywhere in the body counts
      ['general', '서버가 준비됐어요'],
    ]);
    expect(page.more).toBe(false);
    expect(page.results[0]).toMatchObject({ type: 'message', user: 'alice', seq: expect.any(Number) });
    expect(server.sockets.find((s) => s.user === 'alice' && s.readyState === 1)!.sent('search').at(-1)).toEqual({
      id: expect.any(Number),
      op: 'search',
      query: '서버',
    });
    // bob is not in `random`; case is folded.
    expect(texts((await bob.search('HERALD')).results)).toEqual([['general', 'the Heralds are here']]);
    expect(texts((await bob.search('서버')).results)).toHaveLength(2);
    close();
  });

  it("searches one chat with chat.search, and a chat the user is not in is forbidden", async () => {
    const { bob, achat, bchat, close } = await chats();
    expect(texts((await achat.search('서버')).results)).toEqual([
      ['general', 'the Heralds are here'],
      ['general', '서버가 준비됐어요'],
    ]);
    await expect(bchat.search('준비')).resolves.toMatchObject({ results: [{ chat: 'general' }] });
    await expect(bob.search('서버', { chat: 'random' })).rejects.toMatchObject({ code: 'forbidden', op: 'search' });
    close();
  });

  it('pages by cursor, and searchAll walks every page (or up to max)', async () => {
    const { alice, achat, close } = await chats();
    for (let i = 0; i < 7; i++) await achat.send({ text: `page word ${i}` });
    const first = await alice.search('word', { limit: 3 });
    expect(first).toMatchObject({ more: true, cursor: expect.any(String) });
    const second = await alice.search('word', { limit: 3, cursor: first.cursor! });
    expect(texts([...first.results, ...second.results]).map(([, t]) => t)).toEqual([6, 5, 4, 3, 2, 1].map((i) => `page word ${i}`));
    const all: string[] = [];
    for await (const r of alice.searchAll('word', { limit: 2 })) all.push((r.body as { text: string }).text);
    expect(all).toEqual([6, 5, 4, 3, 2, 1, 0].map((i) => `page word ${i}`));
    const some: number[] = [];
    for await (const r of alice.searchAll('word', { limit: 2, max: 3 })) some.push(r.seq);
    expect(some).toHaveLength(3);
    close();
  });

  it('refuses an empty query or one over 200 characters before asking', async () => {
    const { alice, close } = await chats();
    expect(() => alice.search('   ')).toThrow(TypeError);
    expect(() => alice.search('가'.repeat(201))).toThrow(TypeError);
    await expect(alice.search('가'.repeat(200))).resolves.toMatchObject({ results: [] });
    close();
  });

  it('searchAll stops with a protocol error when the server says more but gives no new cursor', async () => {
    const { server, alice, close } = await chats();
    server.intercept = (conn, frame) => {
      if (frame.op !== 'search') return false;
      conn.serverSend({ id: frame.id, ok: { results: [], more: true } });
      return true;
    };
    const err = await (async () => {
      for await (const _ of alice.searchAll('x')) void _;
    })().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(HeraldError);
    expect((err as HeraldError).code).toBe('protocol');
    close();
  });
});
