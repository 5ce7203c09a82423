import { afterEach, describe, expect, it, vi } from 'vitest';
import { jwtExp, TokenSource } from '../../src/token.js';
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
});
