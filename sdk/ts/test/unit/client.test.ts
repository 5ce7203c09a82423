import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { ClientState, DisconnectInfo } from '../../src/client.js';
import { HeraldError } from '../../src/errors.js';
import { fakeJwt } from '../fake/fake-herald.js';
import { connected, setup, tick } from './helpers.js';

beforeEach(() => {
  vi.useFakeTimers({ now: 1_000_000_000_000 });
});
afterEach(() => {
  vi.useRealTimers();
});

describe('connecting', () => {
  it('goes disconnected -> connecting -> connected, with hello as the first frame', async () => {
    const { server, client } = setup();
    const states: ClientState[] = [];
    client.on('state', ({ to }) => states.push(to));
    expect(client.state).toBe('disconnected');
    const hello = client.connect();
    await tick();
    await expect(hello).resolves.toMatchObject({ user: 'alice', heartbeat_ms: 25_000 });
    expect(states).toEqual(['connecting', 'connected']);
    expect(server.sockets).toHaveLength(1);
    expect(server.last.url).toBe('ws://herald.test/v1/ws?ws=acme');
    expect(server.last.frames[0]).toMatchObject({ op: 'hello', token: 'tok' });
    client.close();
  });

  it('types its events: a misspelt event name does not compile', () => {
    const { client } = setup();
    // @ts-expect-error 'conected' is not an event of HeraldClient
    client.on('conected', () => {});
    // @ts-expect-error the state payload has no `code`
    client.on('state', (s) => s.code);
    client.on('state', (s) => s.to satisfies ClientState);
  });

  it('refuses a url that names another workspace, and a missing WebSocket', async () => {
    const { server } = setup();
    const { HeraldClient } = await import('../../src/client.js');
    expect(
      () => new HeraldClient({ url: 'ws://h/v1/ws?ws=other', workspace: 'acme', token: 't', WebSocket: server.WebSocket }),
    ).toThrow(/workspace "other"/);
    const g = globalThis as { WebSocket?: unknown };
    const saved = g.WebSocket;
    delete g.WebSocket;
    try {
      expect(() => new HeraldClient({ url: 'ws://h/v1/ws', workspace: 'acme', token: 't' })).toThrow(/no global WebSocket/);
    } finally {
      if (saved !== undefined) g.WebSocket = saved;
    }
  });

  it('refuses a url that is not ws:// or wss://, saying which one to use', async () => {
    const { server } = setup();
    const { HeraldClient } = await import('../../src/client.js');
    const make = (url: string) => () => new HeraldClient({ url, workspace: 'acme', token: 't', WebSocket: server.WebSocket });
    expect(make('http://127.0.0.1:8080/v1/ws')).toThrow(/ws:\/\/ or wss:\/\/.*ws:\/\/127\.0\.0\.1:8080\/v1\/ws/);
    expect(make('https://chat.example.com/')).toThrow(/wss:\/\/chat\.example\.com\/v1\/ws/);
    expect(make('chat.example.com/v1/ws')).toThrow(/not a URL/);
    expect(make('wss://chat.example.com/v1/ws')).not.toThrow();
  });

  it('says what is wrong after three attempts in a row fail to open a socket, and keeps trying', async () => {
    // A url without /v1/ws: the server (here: nothing at all) never opens a socket.
    const { server, client } = setup({ url: 'ws://herald.test:8080/' });
    server.refuse = true;
    const errors: HeraldError[] = [];
    client.on('error', (e) => errors.push(e));
    const connecting = client.connect();
    await tick();
    await tick(500);
    expect(server.sockets).toHaveLength(2);
    expect(errors).toEqual([]);
    await tick(1000);
    expect(server.sockets).toHaveLength(3);
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatchObject({ code: 'unreachable' });
    const message = errors[0]!.message;
    expect(message).toContain('ws://herald.test:8080/?ws=acme');
    expect(message).toContain('the path is "/", and herald serves WebSockets at /v1/ws');
    expect(message).toContain('Still retrying');
    // Once per run of failures: the next ones add nothing; it goes on and connects when it can.
    await tick(10_000);
    expect(server.sockets.length).toBeGreaterThan(4);
    expect(errors).toHaveLength(1);
    server.refuse = false;
    await tick(20_000);
    expect(client.state).toBe('connected');
    await expect(connecting).resolves.toMatchObject({ user: 'alice' });
    client.close();
  });

  it('queues requests made while connecting and sends them after hello', async () => {
    const { server, client } = setup();
    void client.connect();
    const joined = client.chat('general').join();
    await tick();
    await expect(joined).resolves.toMatchObject({ chat: 'general', seq: 1 });
    expect(server.last.frames.map((f) => f.op)).toEqual(['hello', 'join']);
    client.close();
  });
});

describe('requests', () => {
  it('matches replies by id and rejects err replies with a typed HeraldError', async () => {
    const { server, client } = setup();
    await connected(client);
    server.intercept = (conn, f) => {
      if (f.op !== 'join') return false;
      conn.serverSend({ id: f.id, err: { code: 'throttled', message: 'joins are throttled', retry_after_ms: 800 } });
      return true;
    };
    const err = await client.chat('general').join().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(HeraldError);
    expect(err).toMatchObject({ code: 'throttled', retryAfterMs: 800, op: 'join', message: 'joins are throttled' });
    client.close();
  });

  it('rejects with timeout when no reply comes', async () => {
    const { server, client } = setup({ requestTimeoutMs: 2000 });
    await connected(client);
    server.intercept = (_conn, f) => f.op === 'fetch'; // swallow fetches
    const p = client.chat('general').fetch(0);
    const caught = p.catch((e: unknown) => e);
    await tick(1999);
    await tick(1);
    expect(await caught).toMatchObject({ code: 'timeout', op: 'fetch' });
    client.close();
  });

  it('rejects a frame over the frame limit locally with too_large', async () => {
    const { server, client } = setup({ maxFrameBytes: 1024 });
    await connected(client);
    await expect(client.chat('general').send({ text: 'é'.repeat(600) })).rejects.toMatchObject({ code: 'too_large' });
    expect(server.last.sent('send')).toHaveLength(0);
    client.close();
  });

  it('rejects requests before connect() and after close()', async () => {
    const { client } = setup();
    await expect(client.chat('general').join()).rejects.toMatchObject({ code: 'disconnected' });
    await connected(client);
    client.close();
    await expect(client.chat('general').join()).rejects.toMatchObject({ code: 'closed' });
    await expect(client.connect()).rejects.toMatchObject({ code: 'closed' });
  });
});

describe('ping watchdog', () => {
  it('detects a dead link (no ping reply) and reconnects', async () => {
    const { server, client } = setup({ pingIntervalMs: 1000, pingTimeoutMs: 500 });
    const drops: DisconnectInfo[] = [];
    client.on('disconnected', (d) => drops.push(d));
    await connected(client);
    const first = server.last;
    first.dead = true; // a half-open TCP link: nothing gets through, nobody reports a close

    await tick(1000); // a second of silence: the ping goes out
    expect(first.frames.filter((f) => f.op === 'ping')).toHaveLength(0); // swallowed by the dead link
    expect(client.state).toBe('connected');
    await tick(499);
    expect(client.state).toBe('connected');
    await tick(1); // ping timeout
    expect(client.state).toBe('connecting');
    expect(drops[0]).toMatchObject({ reason: 'ping timeout', reconnectInMs: 250 });
    expect(first.clientCloseCode).toBe(1000);

    await tick(250); // backoff with random 0.5 over the 500 ms base window
    expect(server.sockets).toHaveLength(2);
    expect(client.state).toBe('connected');
    client.close();
  });

  it('keeps a live link that answers its pings', async () => {
    const { server, client } = setup({ pingIntervalMs: 1000, pingTimeoutMs: 500 });
    await connected(client);
    await tick(10_500);
    expect(server.last.sent('ping').length).toBe(10);
    expect(server.sockets).toHaveLength(1);
    expect(client.state).toBe('connected');
    client.close();
  });
});

describe('tokens', () => {
  it('asks the provider again after a 4001 and connects with the new token', async () => {
    const provider = vi.fn<() => Promise<string>>().mockResolvedValueOnce('stale').mockResolvedValueOnce('fresh');
    const { server, client } = setup({ token: provider });
    server.acceptToken = (t) => t === 'fresh';
    void client.connect();
    await tick();
    expect(client.state).toBe('connecting');
    await tick(250);
    expect(client.state).toBe('connected');
    expect(server.tokens).toEqual(['stale', 'fresh']);
    expect(provider).toHaveBeenCalledTimes(2);
    client.close();
  });

  it('refreshes when a connected link is closed with 4001', async () => {
    const provider = vi.fn<() => Promise<string>>().mockResolvedValueOnce('t1').mockResolvedValueOnce('t2');
    const { server, client } = setup({ token: provider });
    await connected(client);
    server.acceptToken = (t) => t === 't2';
    server.last.serverClose(4001, 'token expired');
    await tick(250);
    expect(client.state).toBe('connected');
    expect(server.tokens).toEqual(['t1', 't2']);
    client.close();
  });

  it('stops when the refreshed token is rejected too', async () => {
    const provider = vi.fn(async () => 'always-bad');
    const { server, client } = setup({ token: provider });
    server.acceptToken = () => false;
    const errors: HeraldError[] = [];
    client.on('error', (e) => errors.push(e));
    const p = client.connect().catch((e: unknown) => e);
    await tick(60_000);
    expect(await p).toMatchObject({ code: 'unauthenticated', closeCode: 4001 });
    expect(client.state).toBe('disconnected');
    expect(server.sockets).toHaveLength(2);
    expect(provider).toHaveBeenCalledTimes(2);
    expect(errors.map((e) => e.code)).toEqual(['unauthenticated']);
  });

  it('stops at once when a fixed token is rejected', async () => {
    const { server, client } = setup({ token: 'bad' });
    server.acceptToken = () => false;
    const p = client.connect().catch((e: unknown) => e);
    await tick(60_000);
    expect(await p).toMatchObject({ code: 'unauthenticated' });
    expect(server.sockets).toHaveLength(1);
  });

  it('fetches a new token before reconnecting when the cached one is near expiry', async () => {
    const nowS = 1_000_000_000;
    const provider = vi.fn<() => Promise<string>>()
      .mockResolvedValueOnce(fakeJwt(nowS + 40))
      .mockResolvedValueOnce(fakeJwt(nowS + 3600));
    const { server, client } = setup({ token: provider, tokenRefreshMarginMs: 30_000 });
    await connected(client);

    server.last.serverClose(1006); // still 40 s left: the cached token is reused
    await tick(250);
    expect(provider).toHaveBeenCalledTimes(1);
    expect(server.tokens).toHaveLength(2);
    expect(server.tokens[1]).toBe(server.tokens[0]);

    await tick(15_000); // now 25 s before exp, inside the 30 s margin
    server.last.serverClose(1006);
    await tick(250);
    expect(provider).toHaveBeenCalledTimes(2);
    expect(server.tokens[2]).toBe(fakeJwt(nowS + 3600));
    expect(client.state).toBe('connected');
    client.close();
  });

  it('retries with backoff when the provider throws', async () => {
    const provider = vi.fn<() => Promise<string>>().mockRejectedValueOnce(new Error('down')).mockResolvedValueOnce('ok');
    const { server, client } = setup({ token: provider });
    const errors: string[] = [];
    client.on('error', (e) => errors.push(e.code));
    void client.connect();
    await tick();
    expect(errors).toEqual(['token']);
    expect(server.sockets).toHaveLength(0);
    await tick(250);
    expect(client.state).toBe('connected');
    client.close();
  });
});

describe('reconnect policy', () => {
  it('backs off between refused attempts, doubling the window', async () => {
    const { server, client } = setup({ random: () => 0.999999 });
    server.refuse = true;
    const delays: Array<number | null> = [];
    client.on('disconnected', (d) => delays.push(d.reconnectInMs));
    void client.connect();
    await tick();
    expect(server.sockets).toHaveLength(1);
    // Ceilings 500, 1000, 2000, 4000 ms; random just under 1 puts each attempt at the ceiling's edge.
    await tick(498);
    expect(server.sockets).toHaveLength(1);
    await tick(1);
    expect(server.sockets).toHaveLength(2);
    await tick(998);
    expect(server.sockets).toHaveLength(2);
    await tick(1);
    expect(server.sockets).toHaveLength(3);
    await tick(1999);
    expect(server.sockets).toHaveLength(4);
    expect(delays).toEqual([499, 999, 1999, 3999]);
    server.refuse = false;
    await tick(3999);
    expect(client.state).toBe('connected');
    client.close();
  });

  it('waits the after_ms of a reconnect push, then reconnects (4012)', async () => {
    const { server, client } = setup();
    await connected(client);
    server.last.serverSend({ ev: 'reconnect', after_ms: 3000, reason: 'drain' });
    await tick();
    server.last.serverClose(4012, 'going away');
    await tick(2999);
    expect(server.sockets).toHaveLength(1);
    expect(client.state).toBe('connecting');
    await tick(1);
    expect(server.sockets).toHaveLength(2);
    expect(client.state).toBe('connected');
    client.close();
  });

  it('leaves by itself at after_ms when the server does not close in time', async () => {
    const { server, client } = setup();
    await connected(client);
    const first = server.last;
    first.serverSend({ ev: 'reconnect', after_ms: 1000 });
    await tick(999);
    expect(client.state).toBe('connected');
    await tick(1);
    expect(first.clientCloseCode).toBe(1000);
    await tick(1); // no backoff on top: the push already spent the wait (setTimeout 0 fires after 1 ms)
    expect(server.sockets).toHaveLength(2);
    expect(client.state).toBe('connected');
    client.close();
  });

  it('waits a long floor after 4029', async () => {
    const { server, client } = setup({ throttledReconnectFloorMs: 10_000 });
    await connected(client);
    server.last.serverClose(4029, 'too many requests');
    await tick(10_249);
    expect(server.sockets).toHaveLength(1);
    await tick(1);
    expect(server.sockets).toHaveLength(2);
    client.close();
  });

  it.each([4000, 4008, 1006, 1009])('reconnects with backoff after %i', async (code) => {
    const { server, client } = setup();
    await connected(client);
    server.last.serverClose(code);
    await tick(249);
    expect(server.sockets).toHaveLength(1);
    await tick(1);
    expect(server.sockets).toHaveLength(2);
    expect(client.state).toBe('connected');
    client.close();
  });

  it('gives a connect whose hello is never answered a timeout, then retries', async () => {
    const { server, client } = setup({ connectTimeoutMs: 3000 });
    server.intercept = null;
    server.acceptToken = () => true;
    // Swallow the hello: the socket opens but the server never answers.
    const realReceive = server.receive.bind(server);
    let swallow = true;
    server.receive = (conn, frame) => {
      if (swallow && frame.op === 'hello') return;
      realReceive(conn, frame);
    };
    void client.connect();
    await tick(2999);
    expect(client.state).toBe('connecting');
    swallow = false;
    await tick(1);
    await tick(250);
    expect(server.sockets).toHaveLength(2);
    expect(client.state).toBe('connected');
    client.close();
  });

  it('disconnect() stops reconnecting; connect() resumes', async () => {
    const { server, client } = setup();
    await connected(client);
    client.disconnect();
    expect(client.state).toBe('disconnected');
    await tick(60_000);
    expect(server.sockets).toHaveLength(1);
    await connected(client);
    expect(server.sockets).toHaveLength(2);
    client.close();
  });

  it('close() rejects what is pending and stops for good', async () => {
    const { server, client } = setup();
    await connected(client);
    server.intercept = (_c, f) => f.op === 'join';
    const pending = client.chat('general').join().catch((e: unknown) => e);
    client.close();
    expect(await pending).toMatchObject({ code: 'closed' });
    expect(client.state).toBe('closed');
    await tick(60_000);
    expect(server.sockets).toHaveLength(1);
    expect(vi.getTimerCount()).toBe(0);
  });
});
