//! Test harness for integration tests against a real herald: process, tokens, a severable TCP proxy.
//!
//! Owns: starting `$HERALD_BIN serve` on a free loopback port with a temporary data dir and fixed
//! secrets (shared by the nodes of a cell when given), waiting for /healthz, issuing tokens through the
//! HTTP API, freezing and thawing the process (SIGSTOP, SIGCONT), stopping it by pid, and a TCP proxy on
//! 127.0.0.1:0 that a test can cut, block or make deaf. Everything it starts, it stops.
//! Does not own: assertions (herald.test.ts).

import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach } from 'vitest';
import WebSocket from 'ws';
import { HeraldClient } from '../../src/client.js';
import type { ClientOptions } from '../../src/options.js';
import type { WebSocketConstructor } from '../../src/transport.js';

/** The herald binary under test; the integration tests are skipped without it. */
export const HERALD_BIN = process.env.HERALD_BIN ?? '';

/** The `ws` package's class, as the client's WebSocket (Node 20 has no global one). */
export const NodeWebSocket = WebSocket as unknown as WebSocketConstructor;

/** Polls `cond` every `intervalMs` until it holds or `timeoutMs` passes (then throws, naming `what`). */
export async function until(
  what: string,
  cond: () => boolean | Promise<boolean>,
  { timeoutMs = 30_000, intervalMs = 25 }: { timeoutMs?: number; intervalMs?: number } = {},
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await cond()) return;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for: ${what}`);
    await sleep(intervalMs);
  }
}

/** Waits `ms` (for polling loops only, never as an assertion). */
export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** A port that was free a moment ago on 127.0.0.1. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as net.AddressInfo;
      srv.close(() => resolve(port));
    });
  });
}

/** How many bytes of the server's output to keep for a failure message. */
const LOG_TAIL_BYTES = 64 * 1024;

/** The secrets a herald is started with; the nodes of one cell share them. */
export interface Secrets {
  jwtSecret: string;
  apiKey: string;
}

/** Fresh random secrets. */
export function newSecrets(): Secrets {
  return { jwtSecret: randomBytes(32).toString('hex'), apiKey: randomBytes(16).toString('hex') };
}

/** A running `herald serve`. */
export class Herald {
  /** Secrets shared by every process of one test, so a restarted server accepts the same tokens. */
  readonly jwtSecret: string;
  readonly apiKey: string;
  private child: ChildProcess | null = null;
  private log = '';
  /** Stopped with SIGSTOP and not yet continued: a stop must SIGCONT it first, or its SIGTERM never lands. */
  private frozen = false;

  private constructor(
    readonly port: number,
    readonly dataDir: string,
    /** Extra flags for `herald serve`. */
    readonly args: string[],
    secrets: Secrets,
  ) {
    this.jwtSecret = secrets.jwtSecret;
    this.apiKey = secrets.apiKey;
  }

  /**
   * Starts herald (with `args` added to `serve`) on a free port with a fresh data dir and waits until
   * /healthz answers. Nodes of one cell must be given the same `secrets`.
   */
  static async start(args: string[] = [], secrets: Secrets = newSecrets()): Promise<Herald> {
    const h = new Herald(await freePort(), mkdtempSync(join(tmpdir(), 'herald-it-')), args, secrets);
    await h.spawn();
    return h;
  }

  /** Stops the process where it stands (SIGSTOP): it sends nothing, its kernel still accepts connections. */
  freeze(): void {
    if (this.child?.pid === undefined) throw new Error('herald is not running');
    process.kill(this.child.pid, 'SIGSTOP');
    this.frozen = true;
  }

  /** Lets a frozen process run again (SIGCONT). */
  thaw(): void {
    if (!this.frozen) return;
    this.frozen = false;
    if (this.child?.pid !== undefined) process.kill(this.child.pid, 'SIGCONT');
  }

  /** `http://127.0.0.1:PORT`. */
  get http(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /** The WebSocket endpoint. */
  get ws(): string {
    return `ws://127.0.0.1:${this.port}/v1/ws`;
  }

  /** The pid of the running process, or undefined. */
  get pid(): number | undefined {
    return this.child?.pid;
  }

  /** The tail of the server's stdout and stderr. */
  get output(): string {
    return this.log;
  }

  /** (Re)starts the process on the same port and data dir. */
  async spawn(): Promise<void> {
    if (this.child !== null) throw new Error('herald is already running');
    const child = spawn(HERALD_BIN, ['serve', '--listen', `127.0.0.1:${this.port}`, '--data', this.dataDir, ...this.args], {
      env: { ...process.env, HERALD_JWT_SECRET: this.jwtSecret, HERALD_API_KEY: this.apiKey },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const keep = (chunk: Buffer) => {
      this.log = (this.log + chunk.toString()).slice(-LOG_TAIL_BYTES);
    };
    child.stdout?.on('data', keep);
    child.stderr?.on('data', keep);
    this.child = child;
    let exited = false;
    child.once('exit', () => {
      exited = true;
    });
    try {
      await until(
        'GET /healthz',
        async () => {
          if (exited) throw new Error(`herald exited during start:\n${this.log}`);
          try {
            const res = await fetch(`${this.http}/healthz`);
            return res.status === 200;
          } catch {
            return false;
          }
        },
        { timeoutMs: 30_000, intervalMs: 50 },
      );
    } catch (err) {
      await this.stop();
      throw err;
    }
  }

  /**
   * Sends `signal` to the process by pid and waits for it to exit; SIGKILL after `timeoutMs`.
   * Returns how long the exit took.
   */
  async stop(signal: NodeJS.Signals = 'SIGTERM', timeoutMs = 60_000): Promise<number> {
    const child = this.child;
    if (child === null) return 0;
    this.child = null;
    const started = Date.now();
    if (child.exitCode !== null || child.signalCode !== null) return 0;
    const exited = new Promise<void>((r) => child.once('exit', () => r()));
    if (this.frozen && child.pid !== undefined) process.kill(child.pid, 'SIGCONT');
    this.frozen = false;
    if (child.pid !== undefined) process.kill(child.pid, signal);
    const timer = setTimeout(() => {
      if (child.pid !== undefined && child.exitCode === null) process.kill(child.pid, 'SIGKILL');
    }, timeoutMs);
    await exited;
    clearTimeout(timer);
    return Date.now() - started;
  }

  /** Stops the process and removes the data dir. */
  async dispose(): Promise<void> {
    await this.stop();
    rmSync(this.dataDir, { recursive: true, force: true });
  }

  /** A server-API call with the api key; throws on a non-2xx answer. */
  async api<T>(method: string, path: string, body?: unknown): Promise<T> {
    const init: RequestInit = { method, headers: { authorization: `Bearer ${this.apiKey}`, 'content-type': 'application/json' } };
    if (body !== undefined) init.body = JSON.stringify(body);
    const res = await fetch(`${this.http}${path}`, init);
    const text = await res.text();
    if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`);
    return JSON.parse(text) as T;
  }

  /** A token for `user` in `workspace` (POST /v1/tokens). */
  async token(workspace: string, user: string): Promise<string> {
    const { token } = await this.api<{ token: string }>('POST', '/v1/tokens', { workspace, user });
    return token;
  }

  /** A client for `user`, on `url` (default: straight to the server). */
  async client(workspace: string, user: string, extra: Partial<ClientOptions> = {}): Promise<HeraldClient> {
    return new HeraldClient({
      url: this.ws,
      workspace,
      token: await this.token(workspace, user),
      WebSocket: NodeWebSocket,
      ...extra,
    });
  }
}

/**
 * A TCP proxy on 127.0.0.1:0 in front of a port. It can cut every link it carries (`sever`), refuse new
 * ones (`blocked`), and stop forwarding the server's bytes (`deaf`) so that requests arrive but replies
 * never come back, which is the one way to lose a reply after the server acted on the request.
 */
export class TcpProxy {
  /** New connections are closed at once. */
  blocked = false;
  /** Bytes from the server are dropped. */
  deaf = false;
  /** Connections accepted so far. */
  accepted = 0;
  private readonly links = new Set<net.Socket>();

  private constructor(
    private readonly server: net.Server,
    readonly port: number,
  ) {}

  /** Listens on 127.0.0.1:0 and forwards to 127.0.0.1:`target`. */
  static start(target: number): Promise<TcpProxy> {
    return new Promise((resolve, reject) => {
      let proxy: TcpProxy;
      const server = net.createServer((down) => proxy.accept(down, target));
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => {
        proxy = new TcpProxy(server, (server.address() as net.AddressInfo).port);
        resolve(proxy);
      });
    });
  }

  /** `ws://127.0.0.1:PORT/v1/ws` through the proxy. */
  get ws(): string {
    return `ws://127.0.0.1:${this.port}/v1/ws`;
  }

  /** Cuts every link now; clients see the socket close without a close frame (1006). */
  sever(): void {
    for (const s of this.links) s.destroy();
    this.links.clear();
  }

  /** Cuts everything and stops listening. */
  close(): Promise<void> {
    this.sever();
    return new Promise((r) => this.server.close(() => r()));
  }

  private accept(down: net.Socket, target: number): void {
    if (this.blocked) {
      down.destroy();
      return;
    }
    this.accepted++;
    const up = net.connect(target, '127.0.0.1');
    this.links.add(down);
    this.links.add(up);
    const end = () => {
      down.destroy();
      up.destroy();
      this.links.delete(down);
      this.links.delete(up);
    };
    down.on('data', (d) => up.write(d));
    up.on('data', (d) => {
      if (!this.deaf) down.write(d);
    });
    down.on('close', end);
    up.on('close', end);
    down.on('error', end);
    up.on('error', end);
  }
}

/**
 * Registers, for the calling test file, an `afterEach` that runs what its tests deferred, last first, and
 * goes on past a failing one; returns the function that defers.
 */
export function stopAfterEach(): (fn: () => unknown) => void {
  let deferred: Array<() => unknown> = [];
  afterEach(async () => {
    const list = deferred.reverse();
    deferred = [];
    for (const fn of list) {
      try {
        await fn();
      } catch {
        // keep stopping the rest
      }
    }
  });
  return (fn) => {
    deferred.push(fn);
  };
}
