import { afterEach, describe, expect, it, vi } from 'vitest';
import { Emitter } from '../../src/emitter.js';

interface Events {
  ping: number;
}

class Bus extends Emitter<Events> {
  fire(n: number): void {
    this.emit('ping', n);
  }
}

afterEach(() => {
  vi.restoreAllMocks();
});

describe('Emitter', () => {
  it('calls listeners in order; off and once remove them', () => {
    const bus = new Bus();
    const got: string[] = [];
    const off = bus.on('ping', (n) => got.push(`a${n}`));
    bus.once('ping', (n) => got.push(`b${n}`));
    bus.fire(1);
    off();
    bus.fire(2);
    expect(got).toEqual(['a1', 'b1']);
  });

  it('a throwing listener neither stops the others nor the emitter; the error is reported later', () => {
    const reported: unknown[] = [];
    vi.spyOn(globalThis, 'queueMicrotask').mockImplementation((fn) => {
      try {
        fn();
      } catch (e) {
        reported.push(e);
      }
    });
    const bus = new Bus();
    const got: number[] = [];
    bus.on('ping', () => {
      throw new Error('listener bug');
    });
    bus.on('ping', (n) => got.push(n));
    expect(() => bus.fire(7)).not.toThrow();
    expect(got).toEqual([7]);
    expect(reported).toHaveLength(1);
    expect((reported[0] as Error).message).toBe('listener bug');
  });
});
