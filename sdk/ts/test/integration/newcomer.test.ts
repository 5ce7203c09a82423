//! What a developer meets first, against a real herald: a wrong `url` is named after a few tries (a path
//! other than /v1/ws that the server answers 404, a port nothing listens on), and a send made while the
//! server is away goes out when it is back. Skipped unless HERALD_BIN names the binary:
//!
//!     HERALD_BIN=../../target/debug/herald npm run test:integration

import { describe, expect, it } from 'vitest';
import type { HeraldError } from '../../src/errors.js';
import { freePort, Herald, HERALD_BIN, stopAfterEach, until } from './harness.js';

const defer = stopAfterEach();

/** Backoff short enough that three failed attempts take well under a second. */
const QUICK = { backoff: { baseMs: 20, capMs: 100 } };

describe.skipIf(HERALD_BIN === '')('a newcomer against a real herald', () => {
  for (const [what, path, expected] of [
    ['a url without /v1/ws (the server answers the upgrade 404)', '/', /404.*the path is "\/", and herald serves WebSockets at \/v1\/ws/],
    ['a url with another path (404)', '/ws', /404/],
  ] as const) {
    it(`${what}: an unreachable error says so, and the client keeps trying`, async () => {
      const herald = await Herald.start();
      defer(() => herald.dispose());
      const client = await herald.client('acme', 'alice', { ...QUICK, url: `ws://127.0.0.1:${herald.port}${path}` });
      defer(() => client.close());
      const errors: HeraldError[] = [];
      client.on('error', (e) => errors.push(e));
      void client.connect().catch(() => {});
      await until('an unreachable error', () => errors.length > 0, { timeoutMs: 10_000 });
      expect(errors[0]!.code).toBe('unreachable');
      expect(errors[0]!.message).toMatch(expected);
      expect(client.state).toBe('connecting');
    });
  }

  it('a port nothing listens on: an unreachable error names it', async () => {
    const port = await freePort();
    const herald = await Herald.start();
    defer(() => herald.dispose());
    const client = await herald.client('acme', 'alice', { ...QUICK, url: `ws://127.0.0.1:${port}/v1/ws` });
    defer(() => client.close());
    const errors: HeraldError[] = [];
    client.on('error', (e) => errors.push(e));
    void client.connect().catch(() => {});
    await until('an unreachable error', () => errors.length > 0, { timeoutMs: 10_000 });
    expect(errors[0]).toMatchObject({ code: 'unreachable' });
    expect(errors[0]!.message).toMatch(new RegExp(`ECONNREFUSED.*nothing listens on 127\\.0\\.0\\.1:${port}`));
  });

  it('a send made while the server is down is stored once it is back', async () => {
    const herald = await Herald.start();
    defer(() => herald.dispose());
    const client = await herald.client('acme', 'alice', QUICK);
    defer(() => client.close());
    await client.connect();
    const chat = client.chat('general');
    await chat.join();
    await herald.stop();
    await until('the client notices', () => client.state === 'connecting');
    const sent = chat.send({ text: 'written offline' });
    await herald.spawn();
    const { seq } = await sent;
    const page = await chat.fetch(0);
    expect(page.events.find((e) => e.seq === seq)?.body).toEqual({ text: 'written offline' });
  });
});
