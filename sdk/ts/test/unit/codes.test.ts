import { describe, expect, it } from 'vitest';
import { closePolicy, CloseCode } from '../../src/codes.js';
import { HeraldError } from '../../src/errors.js';

describe('close code policy', () => {
  it('matches the table in README.md', () => {
    expect(closePolicy(CloseCode.Unauthenticated)).toBe('refresh_token');
    expect(closePolicy(CloseCode.TooManyRequests)).toBe('reconnect_slow');
    expect(closePolicy(CloseCode.SlowConsumer)).toBe('reconnect_smaller');
    for (const code of [1000, 1001, 1006, 1009, 1011, CloseCode.BadProtocol, CloseCode.GoingAway, 4999]) {
      expect(closePolicy(code), `code ${code}`).toBe('reconnect');
    }
  });

  it('keeps the protocol numbers', () => {
    expect(CloseCode).toEqual({
      FrameTooLarge: 1009,
      BadProtocol: 4000,
      Unauthenticated: 4001,
      SlowConsumer: 4008,
      GoingAway: 4012,
      TooManyRequests: 4029,
    });
  });
});

describe('HeraldError', () => {
  it('carries the wire code, message and retry hint', () => {
    const e = HeraldError.fromWire({ code: 'throttled', message: 'slow down', retry_after_ms: 800 }, 'join');
    expect(e).toBeInstanceOf(Error);
    expect(e.name).toBe('HeraldError');
    expect(e.code).toBe('throttled');
    expect(e.message).toBe('slow down');
    expect(e.retryAfterMs).toBe(800);
    expect(e.op).toBe('join');
  });
});
