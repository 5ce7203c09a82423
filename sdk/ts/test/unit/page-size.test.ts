import { describe, expect, it } from 'vitest';
import { GROW_INTERVAL_MS, MIN_PAGE_SIZE, PageSize } from '../../src/page-size.js';

describe('page size of the SDK own fetches', () => {
  it('halves on each slow-consumer close, down to the floor', () => {
    const now = 0;
    const size = new PageSize(500, () => now);
    const seen: number[] = [];
    for (let i = 0; i < 8; i++) {
      size.shrink();
      seen.push(size.current);
    }
    expect(seen).toEqual([250, 125, 62, 31, 15, MIN_PAGE_SIZE, MIN_PAGE_SIZE, MIN_PAGE_SIZE]);
  });

  it('grows back a quarter at a time, at most once per interval, up to the configured size', () => {
    let now = 0;
    const size = new PageSize(500, () => now);
    size.shrink(); // 250
    size.shrink(); // 125
    // A burst of successful fetches right after the close changes nothing.
    for (let i = 0; i < 50; i++) size.grow();
    expect(size.current).toBe(125);
    const steps: number[] = [];
    for (let i = 0; i < 6; i++) {
      now += GROW_INTERVAL_MS;
      size.grow();
      size.grow(); // a second fetch in the same interval does not count
      steps.push(size.current);
    }
    expect(steps).toEqual([157, 197, 247, 309, 387, 484]);
    now += GROW_INTERVAL_MS;
    size.grow();
    expect(size.current).toBe(500);
    now += GROW_INTERVAL_MS;
    size.grow();
    expect(size.current).toBe(500);
  });

  it('never floors above a configured size smaller than the floor', () => {
    const size = new PageSize(4, () => 0);
    size.shrink();
    expect(size.current).toBe(4);
  });
});
