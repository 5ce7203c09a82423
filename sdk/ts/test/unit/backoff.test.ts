import { describe, expect, it } from 'vitest';
import { Backoff, backoffCeiling, DEFAULT_BACKOFF, fullJitter } from '../../src/backoff.js';

/** A deterministic PRNG (mulberry32) so a failure reproduces. */
function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

describe('full-jitter backoff', () => {
  it('stays within [0, min(cap, base * 2^n)] for every attempt', () => {
    const opts = { baseMs: 500, capMs: 20_000 };
    const random = seeded(42);
    for (let n = 0; n < 64; n++) {
      const ceiling = Math.min(opts.capMs, opts.baseMs * 2 ** n);
      expect(backoffCeiling(n, opts)).toBe(ceiling);
      for (let i = 0; i < 200; i++) {
        const d = fullJitter(n, opts, random);
        expect(d).toBeGreaterThanOrEqual(0);
        expect(d).toBeLessThanOrEqual(ceiling);
      }
    }
  });

  it('reaches both ends of the window: 0 and the ceiling', () => {
    const opts = { baseMs: 500, capMs: 20_000 };
    expect(fullJitter(3, opts, () => 0)).toBe(0);
    expect(fullJitter(3, opts, () => 0.999999)).toBe(3999);
    expect(fullJitter(10, opts, () => 0.999999)).toBe(19_999);
    // An out-of-range random cannot escape the window.
    expect(fullJitter(2, opts, () => 7)).toBe(2000);
    expect(fullJitter(2, opts, () => -1)).toBe(0);
  });

  it('is spread out, not clustered at the edge (mean near half the ceiling)', () => {
    const random = seeded(7);
    let sum = 0;
    const samples = 5000;
    for (let i = 0; i < samples; i++) sum += fullJitter(20, DEFAULT_BACKOFF, random);
    const mean = sum / samples;
    expect(mean).toBeGreaterThan(DEFAULT_BACKOFF.capMs * 0.45);
    expect(mean).toBeLessThan(DEFAULT_BACKOFF.capMs * 0.55);
  });

  it('widens the window on each retry, caps it, and starts over after reset', () => {
    const b = new Backoff({ baseMs: 500, capMs: 20_000 }, () => 0.999999);
    const delays = Array.from({ length: 8 }, () => b.next());
    expect(delays).toEqual([499, 999, 1999, 3999, 7999, 15_999, 19_999, 19_999]);
    expect(b.attempts).toBe(8);
    b.reset();
    expect(b.next()).toBe(499);
  });

  it('stays finite after a very long outage', () => {
    const b = new Backoff({ baseMs: 500, capMs: 20_000 }, () => 0.5);
    for (let i = 0; i < 10_000; i++) b.next();
    expect(b.next()).toBe(10_000);
  });
});
