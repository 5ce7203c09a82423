import { afterEach, describe, expect, it, vi } from 'vitest';
import { jwtExp, tokenProblem, TokenSource, UnusableToken } from '../../src/token.js';
import { fakeJwt } from '../fake/fake-herald.js';

afterEach(() => {
  vi.useRealTimers();
});

describe('jwtExp', () => {
  it('reads exp from the payload without verifying', () => {
    expect(jwtExp(fakeJwt(1_900_000_000))).toBe(1_900_000_000);
  });

  it('reads base64url payloads with - and _ and non-ASCII claims', () => {
    const payload = Buffer.from(JSON.stringify({ sub: 'zoë~~~>>>???', exp: 123 })).toString('base64url');
    expect(payload).toMatch(/[-_]/);
    expect(jwtExp(`h.${payload}.s`)).toBe(123);
  });

  it('gives undefined for things that are not JWTs or lack exp', () => {
    expect(jwtExp('opaque-token')).toBeUndefined();
    expect(jwtExp('a.!!!.c')).toBeUndefined();
    expect(jwtExp(`h.${Buffer.from('{"sub":"x"}').toString('base64url')}.s`)).toBeUndefined();
  });
});

describe('TokenSource', () => {
  it('reuses a fresh token and calls the provider again near expiry', async () => {
    vi.useFakeTimers({ now: 1_000_000_000_000 });
    const nowS = 1_000_000_000;
    const provider = vi.fn<() => Promise<string>>()
      .mockResolvedValueOnce(fakeJwt(nowS + 60))
      .mockResolvedValueOnce(fakeJwt(nowS + 3600));
    const src = new TokenSource(provider, 30_000);
    const first = await src.get();
    expect(await src.get()).toBe(first);
    expect(provider).toHaveBeenCalledTimes(1);
    vi.advanceTimersByTime(31_000); // now 29 s before exp: inside the margin
    const second = await src.get();
    expect(provider).toHaveBeenCalledTimes(2);
    expect(jwtExp(second)).toBe(nowS + 3600);
  });

  it('calls the provider again after invalidate, but never for a fixed string', async () => {
    const provider = vi.fn(async () => 'opaque');
    const src = new TokenSource(provider, 30_000);
    await src.get();
    src.invalidate();
    await src.get();
    expect(provider).toHaveBeenCalledTimes(2);
    const fixed = new TokenSource('fixed', 30_000);
    fixed.invalidate();
    expect(await fixed.get()).toBe('fixed');
    expect(fixed.canRefresh).toBe(false);
  });

  it('reports a failing provider as a token error', async () => {
    const src = new TokenSource(async () => {
      throw new Error('auth service down');
    }, 0);
    await expect(src.get()).rejects.toMatchObject({ name: 'HeraldError', code: 'token' });
  });

  it('refuses a value that cannot be a token, and asks again next time', async () => {
    const provider = vi.fn<() => Promise<string>>().mockResolvedValueOnce(undefined as unknown as string).mockResolvedValueOnce('ok');
    const src = new TokenSource(provider, 0);
    await expect(src.get()).rejects.toBeInstanceOf(UnusableToken);
    await expect(src.get()).resolves.toBe('ok');
  });
});

describe('tokenProblem', () => {
  it('passes any other string: whether it is a valid JWT is the server\'s to say', () => {
    expect(tokenProblem('opaque-token', 'the token function returned')).toBeNull();
    expect(tokenProblem('eyJhbGciOiJIUzI1NiJ9.e30.sig', 'the token function returned')).toBeNull();
  });

  it('says what was given and what is expected', () => {
    expect(tokenProblem(undefined, 'the token function returned')).toMatch(/^herald: the token function returned undefined; expected the JWT string/);
    expect(tokenProblem('{"token":"eyJ"}', 'the `token` option is')).toMatch(/^herald: the `token` option is a JSON body .*pass its `token` field/);
    expect(tokenProblem('{"access_token":"secret"}', 'the token function returned')).toBe(
      'herald: the token function returned a JSON body (fields: access_token), not a token; expected the JWT string itself (`eyJ...`)',
    );
  });
});
