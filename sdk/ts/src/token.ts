//! Where the client's JWT comes from, and when to ask for a new one.
//!
//! Owns: caching the token, reading its `exp` without verifying it, and deciding when the provider
//! must be called again. Does not own: the reaction to a rejected token (client.ts decides that).

import { HeraldError } from './errors.js';

/** Returns a JWT for `hello`; may be async (fetching one from the application's backend). */
export type TokenProvider = () => string | Promise<string>;

/**
 * The `exp` claim of a JWT in seconds since the epoch, or `undefined` when the token has none or is
 * not a readable JWT. The signature is not checked: only the server can do that, and the client only
 * needs to know when to fetch a fresh token before the server refuses this one.
 */
export function jwtExp(token: string): number | undefined {
  const parts = token.split('.');
  if (parts.length < 2) return undefined;
  try {
    const payload: unknown = JSON.parse(base64UrlDecode(parts[1]!));
    if (payload !== null && typeof payload === 'object') {
      const exp = (payload as { exp?: unknown }).exp;
      if (typeof exp === 'number' && Number.isFinite(exp)) return exp;
    }
  } catch {
    // Not a JWT we can read: treat as "expiry unknown", the server will tell us if it is bad.
  }
  return undefined;
}

function base64UrlDecode(s: string): string {
  const b64 = s.replace(/-/g, '+').replace(/_/g, '/');
  const padded = b64 + '='.repeat((4 - (b64.length % 4)) % 4);
  const binary = atob(padded);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return new TextDecoder().decode(bytes);
}

/**
 * Holds the current token. With a fixed string there is nothing to refresh; with a provider the token
 * is fetched lazily, reused while it is fresh, and fetched again when it is within `marginMs` of its
 * `exp` or after the server rejected it.
 */
export class TokenSource {
  private cached: string | undefined;

  constructor(
    private readonly source: string | TokenProvider,
    private readonly marginMs: number,
    private readonly now: () => number = () => Date.now(),
  ) {
    if (typeof source === 'string') this.cached = source;
  }

  /** True when a rejected token can be replaced by asking the provider again. */
  get canRefresh(): boolean {
    return typeof this.source === 'function';
  }

  /** The token to use for the next `hello`, calling the provider when the cached one will not do. */
  async get(): Promise<string> {
    if (typeof this.source === 'string') return this.source;
    if (this.cached !== undefined && !this.nearExpiry(this.cached)) return this.cached;
    let token: unknown;
    try {
      token = await this.source();
    } catch (cause) {
      throw new HeraldError('token', 'the token provider failed', { cause });
    }
    if (typeof token !== 'string' || token.length === 0) {
      throw new HeraldError('token', 'the token provider returned no token');
    }
    this.cached = token;
    return token;
  }

  /** Forgets the cached token so the next `get` calls the provider (after a 4001). */
  invalidate(): void {
    if (typeof this.source === 'function') this.cached = undefined;
  }

  private nearExpiry(token: string): boolean {
    const exp = jwtExp(token);
    return exp !== undefined && exp * 1000 - this.now() <= this.marginMs;
  }
}
