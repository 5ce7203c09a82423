//! Request bookkeeping: ids, replies, timeouts, and requests parked until a link is greeted.
//!
//! Owns: the protocol rule "every request frame `{"id": n, "op": ...}` gets exactly one reply with the
//! same id", turned into one promise per request that settles exactly once (reply, timeout or a lost link).
//! Does not own: which link is current or what a lost link means (connection.ts).

import { HeraldError } from './errors.js';
import type { Link } from './transport.js';
import type { Op, ReplyFrame } from './types.js';

/** A request written on a link, waiting for its reply. */
interface Pending {
  op: Op;
  link: Link;
  resolve(ok: unknown): void;
  reject(err: HeraldError): void;
  timer: ReturnType<typeof setTimeout>;
}

/** A request made while connecting, waiting for a greeted link. */
interface Parked {
  op: Op;
  args: object;
  deadline: number;
  resolve(ok: unknown): void;
  reject(err: HeraldError): void;
  timer: ReturnType<typeof setTimeout>;
}

/** True when `s` is over `limit` bytes of UTF-8; encodes only when the length alone cannot tell. */
function overLimit(s: string, limit: number): boolean {
  if (s.length * 3 <= limit) return false; // a UTF-16 unit is at most 3 UTF-8 bytes
  return new TextEncoder().encode(s).length > limit;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** The requests of one client, across all its links. */
export class Requests {
  /** Ids are unique per client, not per link, so a late reply from an old link can never match. */
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private parked: Parked[] = [];

  /**
   * @param maxFrameBytes frames over this are refused locally (`too_large`): the server would close the
   *   link with 1009, and a retried send would do that again on every link.
   * @param writeFailed called when a link refuses a frame; the client treats that link as lost.
   * @param timedOut called after a request written on `link` got no reply in time (its promise already
   *   rejected with `timeout`); the client probes that link. Not called for parked requests.
   */
  constructor(
    private readonly maxFrameBytes: number,
    private readonly writeFailed: (link: Link) => void,
    private readonly timedOut: (link: Link, op: Op) => void = () => {},
  ) {}

  /** Writes `{"id", "op", ...args}` on `link`; resolves with the reply's `ok`, rejects with its `err`. */
  call(link: Link, op: Op, args: object, timeoutMs: number): Promise<unknown> {
    return new Promise((resolve, reject) => {
      const id = this.nextId++;
      const text = JSON.stringify({ id, op, ...args });
      if (overLimit(text, this.maxFrameBytes)) {
        reject(new HeraldError('too_large', `herald: ${op} frame is over ${this.maxFrameBytes} bytes`, { op }));
        return;
      }
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new HeraldError('timeout', `herald: no reply to ${op} within ${timeoutMs} ms`, { op }));
        this.timedOut(link, op);
      }, timeoutMs);
      this.pending.set(id, { op, link, resolve, reject, timer });
      if (!link.send(text)) this.writeFailed(link);
    });
  }

  /** Parks a request until `flush` gets a greeted link, or rejects with `timeout` at `deadline`. */
  park(op: Op, args: object, deadline: number): Promise<unknown> {
    return new Promise((resolve, reject) => this.parkEntry(op, args, deadline, resolve, reject));
  }

  /**
   * Writes the parked requests on `link`, in the order they were made, each with what is left of its
   * deadline. `isCurrent` is checked before each: a write can fail and drop the link mid-way, and the
   * rest then wait for the next link.
   */
  flush(link: Link, isCurrent: () => boolean): void {
    const parked = this.parked;
    this.parked = [];
    for (const p of parked) {
      clearTimeout(p.timer);
      if (!isCurrent()) {
        this.parkEntry(p.op, p.args, p.deadline, p.resolve, p.reject);
        continue;
      }
      this.call(link, p.op, p.args, Math.max(1, p.deadline - Date.now())).then(p.resolve, p.reject);
    }
  }

  /** Settles the request a reply answers; a reply to nothing (timed out already) is ignored. */
  settle(msg: ReplyFrame): void {
    const p = this.pending.get(msg.id);
    if (p === undefined) return;
    clearTimeout(p.timer);
    this.pending.delete(msg.id);
    if (msg.err !== undefined) p.reject(HeraldError.fromWire(isObject(msg.err) ? msg.err : { code: 'internal' }, p.op));
    else p.resolve(msg.ok ?? {});
  }

  /** Rejects every request written on `link` with `err`'s code: their outcome is unknown. */
  failLink(link: Link, err: HeraldError): void {
    for (const [id, p] of this.pending) {
      if (p.link !== link) continue;
      clearTimeout(p.timer);
      this.pending.delete(id);
      p.reject(new HeraldError(err.code, `${err.message} (${p.op} outcome unknown)`, { op: p.op, closeCode: err.closeCode }));
    }
  }

  /** Rejects every parked request with `err`'s code (the client stopped or closed). */
  failParked(err: HeraldError): void {
    const parked = this.parked;
    this.parked = [];
    for (const p of parked) {
      clearTimeout(p.timer);
      p.reject(new HeraldError(err.code, err.message, { op: p.op, closeCode: err.closeCode }));
    }
  }

  private parkEntry(op: Op, args: object, deadline: number, resolve: (ok: unknown) => void, reject: (err: HeraldError) => void): void {
    const p: Parked = {
      op,
      args,
      deadline,
      resolve,
      reject,
      timer: setTimeout(() => {
        this.parked = this.parked.filter((x) => x !== p);
        reject(new HeraldError('timeout', `herald: not connected in time for ${op}`, { op }));
      }, Math.max(0, deadline - Date.now())),
    };
    this.parked.push(p);
  }
}
