//! Where the client's JWT comes from, and when to ask for a new one.
//!
//! Owns: caching the token, reading its `exp` without verifying it, deciding when the provider
//! must be called again, and refusing values that cannot be a token (nothing, a non-string, the JSON
//! body of a token endpoint) with words that say what was given and what is expected, and the words for
//! a token the server refused. Does not own: the reaction to a rejected or unusable token (connection.ts
//! decides that).
//!
//! Why look at the value at all, when only the server can verify a token: the easy mistakes (a provider
//! that forgets to `return`, or returns `res.text()` of `{"token": "..."}`) are the client's to name; the
//! server can only answer "not a JWT", and with nothing to send the client could only retry forever.

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
 * A value from the token function that cannot be a token. Asking again would give the same, so the
 * client stops instead of retrying; the message says what came and what is expected.
 */
export class UnusableToken extends HeraldError {
  constructor(message: string) {
    super('token', message);
  }
}

/**
 * Why `value` cannot be sent as a token, in a sentence that starts with `given` (what gave it: "the
 * token function returned", "the `token` option is"); null when it can be. Only the shape is looked at:
 * a string that is not a JWT is the server's to refuse. The value itself is never quoted, since it may
 * hold a credential; only its kind and its field names are.
 */
export function tokenProblem(value: unknown, given: string): string | null {
  const expected = 'expected the JWT string itself (`eyJ...`)';
  const passField = 'not the token: pass its `token` field';
  if (typeof value === 'string') {
    const text = value.trim();
    if (text.length === 0) return `herald: ${given} an empty string; ${expected}`;
    if (text.startsWith('{')) {
      const body = parseJson(text);
      if (hasToken(body)) return `herald: ${given} a JSON body ({"token": "..."}), ${passField} (\`(await res.json()).token\`, not \`res.text()\`)`;
      return `herald: ${given} ${body === undefined ? 'text that starts with "{"' : `a JSON body${fields(body)}`}, not a token; ${expected}`;
    }
    if (text.length > 1 && text.startsWith('"') && text.endsWith('"')) {
      return `herald: ${given} the token inside JSON quotes; ${expected}, without quotes (e.g. \`await res.json()\`, not \`res.text()\`)`;
    }
    return null;
  }
  if (value === undefined || value === null) return `herald: ${given} ${String(value)}; ${expected} (or a promise of it)`;
  if (hasToken(value)) return `herald: ${given} an object with a \`token\` field, ${passField} (\`body.token\`, not \`body\`)`;
  if (Array.isArray(value)) return `herald: ${given} an array; ${expected}`;
  if (typeof value === 'object') return `herald: ${given} an object${fields(value)}; ${expected}`;
  return `herald: ${given} a ${typeof value}; ${expected}`;
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

/** True for `{ token: "..." }`: the answer of herald's token endpoints, or an app's like it. */
function hasToken(v: unknown): boolean {
  return typeof v === 'object' && v !== null && typeof (v as { token?: unknown }).token === 'string';
}

/** " (fields: a, b)" for an object, naming at most five of its fields; "" when it has none. */
function fields(v: unknown): string {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return '';
  const keys = Object.keys(v);
  if (keys.length === 0) return '';
  return ` (fields: ${keys.slice(0, 5).join(', ')}${keys.length > 5 ? ', ...' : ''})`;
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

  /**
   * The token to use for the next `hello`, calling the provider when the cached one will not do. Rejects
   * with `HeraldError` code `token`: an `UnusableToken` for a value that cannot be one.
   */
  async get(): Promise<string> {
    if (typeof this.source === 'string') return this.source;
    if (this.cached !== undefined && !this.nearExpiry(this.cached)) return this.cached;
    let token: unknown;
    try {
      token = await this.source();
    } catch (cause) {
      throw new HeraldError('token', 'the token provider failed', { cause });
    }
    const problem = tokenProblem(token, 'the token function returned');
    if (problem !== null) throw new UnusableToken(problem);
    this.cached = token as string;
    return token as string;
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

/**
 * The rejection for a token the server refused and the client will not replace: the server's own words
 * first (herald says what is wrong: not a JWT, expired, another workspace), then why the client stopped.
 */
export function refusedTokenMessage(reason: string, canRefresh: boolean): string {
  const why = reason.trim() === '' ? 'the server refused the token without saying why' : `the server refused the token: ${reason}`;
  const stopped = canRefresh
    ? 'a fresh one from the token function was refused too, so the client stopped'
    : 'a fixed token cannot be refreshed, so the client stopped; pass a function that fetches a fresh one';
  return `herald: ${why} (${stopped})`;
}
