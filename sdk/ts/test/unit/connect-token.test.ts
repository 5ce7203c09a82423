//! `connect()` with a token that cannot work: it settles, and says why in plain words.
//!
//! Owns: a token function that gives nothing, a non-string or a token endpoint's JSON body instead of
//! its `token` field (rejected locally, nothing sent, no retrying), the same mistakes as a fixed `token`
//! option (the constructor throws), and the server's reason carried by the rejection when it refuses a
//! token the client cannot replace. Does not own: refreshing and retrying (client.test.ts, "tokens") or
//! the token cache (token.test.ts).

import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { HeraldClient } from '../../src/client.js';
import { HeraldError } from '../../src/errors.js';
import type { ClientState } from '../../src/client.js';
import { FakeHerald } from '../fake/fake-herald.js';
import { connected, setup, tick } from './helpers.js';

beforeEach(() => {
  vi.useFakeTimers({ now: 1_000_000_000_000 });
});
afterEach(() => {
  vi.useRealTimers();
});

/** Connects with a token function that returns `value`; what `connect()` settled with, and what it did. */
async function connectWith(value: unknown) {
  const provider = vi.fn(async () => value as string);
  const { server, client } = setup({ token: provider });
  const errors: HeraldError[] = [];
  client.on('error', (e) => errors.push(e));
  const states: ClientState[] = [];
  client.on('state', ({ to }) => states.push(to));
  const outcome = client.connect().then(
    () => 'connected',
    (e: unknown) => e,
  );
  await tick(60_000); // long enough for many retries, were there any
  return { server, client, provider, errors, states, outcome: await outcome };
}

describe('a token function that gives no usable token', () => {
  it('makes connect() reject, saying what came back and that a JWT string is expected', async () => {
    for (const [value, said] of [
      [undefined, /returned undefined; expected the JWT string/],
      [null, /returned null; expected the JWT string/],
      ['', /returned an empty string; expected the JWT string/],
      [42, /returned a number; expected the JWT string/],
      [['eyJ'], /returned an array; expected the JWT string/],
      [{ jwt: 'eyJ' }, /returned an object \(fields: jwt\); expected the JWT string/],
    ] as const) {
      const { server, client, provider, errors, states, outcome } = await connectWith(value);
      expect(outcome).toBeInstanceOf(HeraldError);
      expect(outcome).toMatchObject({ code: 'token', message: expect.stringMatching(said) });
      // It stopped: nothing was sent, the function was not asked again, and the state says so.
      expect(server.sockets).toHaveLength(0);
      expect(provider).toHaveBeenCalledTimes(1);
      expect(client.state).toBe('disconnected');
      expect(states).toEqual(['connecting', 'disconnected']);
      expect(errors).toEqual([outcome]);
    }
  });

  it('names the mistake of returning the JSON body, or the parsed object, instead of its `token` field', async () => {
    for (const value of ['{"token":"eyJhbGciOiJIUzI1NiJ9.e30.sig"}', ' {"token": "eyJ..."}\n', { token: 'eyJhbGciOiJIUzI1NiJ9.e30.sig' }]) {
      const { server, outcome } = await connectWith(value);
      expect(outcome).toMatchObject({ code: 'token', message: expect.stringMatching(/not the token: pass its `token` field/) });
      expect(server.sockets).toHaveLength(0);
    }
    const quoted = await connectWith('"eyJhbGciOiJIUzI1NiJ9.e30.sig"');
    expect(quoted.outcome).toMatchObject({ code: 'token', message: expect.stringMatching(/inside JSON quotes/) });
  });

  it('lets a later connect() ask the function again', async () => {
    const provider = vi.fn<() => Promise<string>>().mockResolvedValueOnce(undefined as unknown as string).mockResolvedValueOnce('tok');
    const { server, client } = setup({ token: provider });
    await expect(client.connect()).rejects.toMatchObject({ code: 'token' });
    await connected(client);
    expect(server.tokens).toEqual(['tok']);
    client.close();
  });
});

describe('a fixed token option that cannot be a token', () => {
  it('is refused by the constructor with the same words', () => {
    const server = new FakeHerald();
    const make = (token: unknown) => () =>
      new HeraldClient({ url: 'ws://herald.test/v1/ws', workspace: 'acme', token: token as string, WebSocket: server.WebSocket });
    expect(make('{"token":"eyJhbGciOiJIUzI1NiJ9.e30.sig"}')).toThrow(/the `token` option is a JSON body .* pass its `token` field/);
    expect(make({ token: 'eyJhbGciOiJIUzI1NiJ9.e30.sig' })).toThrow(/pass its `token` field/);
    expect(make('')).toThrow(/the `token` option is an empty string/);
    expect(make(undefined)).toThrow(TypeError);
    expect(make(42)).toThrow(/`token` must be a string or a function returning one/);
  });
});

describe('a token the server refuses', () => {
  it("rejects with the server's reason when the refreshed token is refused too", async () => {
    const provider = vi.fn(async () => 'not-a-jwt');
    const { server, client } = setup({ token: provider });
    server.acceptToken = () => false;
    server.refusal = () => 'not a JWT: it has no dots';
    const p = client.connect().catch((e: unknown) => e);
    await tick(60_000);
    const err = (await p) as HeraldError;
    expect(err).toMatchObject({ code: 'unauthenticated', closeCode: 4001 });
    expect(err.message).toBe(
      'herald: the server refused the token: not a JWT: it has no dots (a fresh one from the token function was refused too, so the client stopped)',
    );
    expect(provider).toHaveBeenCalledTimes(2);
  });

  it("rejects a fixed token with the server's reason and what to do instead", async () => {
    const { server, client } = setup({ token: 'expired-jwt' });
    server.acceptToken = () => false;
    server.refusal = () => 'expired at 2024-11-22T00:00:00Z';
    const p = client.connect().catch((e: unknown) => e);
    await tick(60_000);
    expect(await p).toMatchObject({
      code: 'unauthenticated',
      message: expect.stringMatching(/^herald: the server refused the token: expired at 2024-11-22T00:00:00Z \(a fixed token cannot be refreshed.*pass a function/),
    });
  });

  it("carries a close's reason when a connected link is closed with 4001", async () => {
    const { server, client } = setup({ token: 'tok' });
    await connected(client);
    const errors: HeraldError[] = [];
    client.on('error', (e) => errors.push(e));
    server.last.serverClose(4001, 'token revoked');
    await tick(250);
    expect(client.state).toBe('disconnected');
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatchObject({ code: 'unauthenticated', message: expect.stringMatching(/refused the token: token revoked/) });
  });

  it('says so when the server gave no reason', async () => {
    const { server, client } = setup({ token: 'tok' });
    await connected(client);
    const errors: HeraldError[] = [];
    client.on('error', (e) => errors.push(e));
    server.last.serverClose(4001, '');
    await tick(250);
    expect(errors[0]?.message).toMatch(/refused the token without saying why/);
  });
});
