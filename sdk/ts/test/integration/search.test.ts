//! Integration tests of protocol 1.2's search against a real herald: a Korean word found inside a
//! longer word within the protocol's 2 s, in the chats of the searching user only, newest first, with
//! every term required; one chat; edits found by their new text only, deletes never; paging by cursor
//! and `searchAll`. Skipped unless HERALD_BIN names the binary:
//!
//!     HERALD_BIN=../../target/release/herald npm run test:integration

import { describe, expect, it } from 'vitest';
import type { HeraldClient } from '../../src/client.js';
import type { SearchResult } from '../../src/types.js';
import { Herald, HERALD_BIN, stopAfterEach, until } from './harness.js';

const WS = 'acme';

/** The protocol's bound on how soon a stored message can be found (docs/protocol.md, "Search"). */
const SEARCH_VISIBLE_MS = 2_000;

const defer = stopAfterEach();

async function user(herald: Herald, name: string): Promise<HeraldClient> {
  const c = await herald.client(WS, name);
  defer(() => c.close());
  await c.connect();
  return c;
}

/** alice and bob, both members of `general`. */
async function pair() {
  const herald = await Herald.start();
  defer(() => herald.dispose());
  const alice = await user(herald, 'alice');
  const bob = await user(herald, 'bob');
  const achat = alice.chat('general');
  const bchat = bob.chat('general');
  await achat.join();
  await bchat.join();
  return { herald, alice, bob, achat, bchat };
}

const textOf = (r: SearchResult) => (r.body as { text?: string } | null)?.text;

describe.skipIf(HERALD_BIN === '')('herald protocol 1.2: search', () => {
  it('finds a Korean word inside a longer word within 2 s, in the chats of the user, newest first', async () => {
    const { herald, alice, achat, bchat } = await pair();
    const carol = await user(herald, 'carol');
    await carol.chat('elsewhere').join();
    await carol.chat('elsewhere').send({ text: '서버 재시작' }); // not alice's chat
    const first = await bchat.send({ text: '서버가 준비됐어요' });
    const second = await achat.send({ text: 'Heralds: 서버는 괜찮아요' });
    await achat.send({ text: 'nothing here' });
    let results: SearchResult[] = [];
    const started = Date.now();
    await until(
      'alice finds both messages',
      async () => {
        results = (await alice.search('서버')).results;
        return results.length === 2;
      },
      { timeoutMs: SEARCH_VISIBLE_MS + 3_000, intervalMs: 100 },
    );
    expect(Date.now() - started).toBeLessThan(SEARCH_VISIBLE_MS + 1_000);
    expect(results.map((r) => [r.chat, r.seq, textOf(r)])).toEqual([
      ['general', second.seq, 'Heralds: 서버는 괜찮아요'],
      ['general', first.seq, '서버가 준비됐어요'],
    ]);
    expect(results[1]).toMatchObject({ type: 'message', user: 'bob' });
    // Terms all must match, case folded, inside words; one chat; a chat alice is not in is forbidden.
    expect((await alice.search('herald 괜찮')).results.map((r) => r.seq)).toEqual([second.seq]);
    expect((await achat.search('준비')).results.map((r) => r.seq)).toEqual([first.seq]);
    await expect(alice.search('서버', { chat: 'elsewhere' })).rejects.toMatchObject({ code: 'forbidden' });
    await expect((async () => alice.search(' '))()).rejects.toThrow(TypeError);
  });

  it('an edited message is found by its new text only, a deleted one never; pages follow the cursor', async () => {
    const { alice, achat } = await pair();
    const { seq } = await achat.send({ text: '오래된 문장' });
    await until('found by the old text', async () => (await alice.search('오래된')).results.length === 1, { timeoutMs: 5_000 });
    await achat.edit(seq, { text: '새로운 문장' });
    await until('found by the new text only', async () => (await alice.search('새로운')).results.length === 1 && (await alice.search('오래된')).results.length === 0, {
      timeoutMs: 5_000,
    });
    await achat.delete(seq);
    await until('never found once deleted', async () => (await alice.search('문장')).results.length === 0, { timeoutMs: 5_000 });

    for (let i = 0; i < 5; i++) await achat.send({ text: `페이지 ${i}` });
    await until('all five found', async () => (await alice.search('페이지', { limit: 100 })).results.length === 5, { timeoutMs: 5_000 });
    const seen: string[] = [];
    for await (const r of alice.searchAll('페이지', { limit: 2 })) seen.push(textOf(r)!);
    expect(seen).toEqual([4, 3, 2, 1, 0].map((i) => `페이지 ${i}`));
  });
});
