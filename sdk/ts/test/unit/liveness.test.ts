//! A frozen node, a dead link, a connect that never completes, and several node URLs: what the client
//! notices, when, and where it goes next. One fake server stands for a cell: every host of the URLs
//! serves the same chats, and `freeze(host)` stops one as SIGSTOP would.

import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { DisconnectInfo } from '../../src/client.js';
import { HeraldClient } from '../../src/client.js';
import type { HeraldError } from '../../src/errors.js';
import type { ChatEvent } from '../../src/types.js';
import { FakeHerald } from '../fake/fake-herald.js';
import { clientOn, connected, setup, tick } from './helpers.js';

beforeEach(() => {
  vi.useFakeTimers({ now: 1_000_000_000_000 });
});
afterEach(() => {
  vi.useRealTimers();
});

const A = 'ws://a.test/v1/ws';
const B = 'ws://b.test/v1/ws';
const C = 'ws://c.test/v1/ws';

/** The hosts the client's sockets were opened to, in order. */
function hosts(server: FakeHerald): string[] {
  return server.sockets.map((s) => FakeHerald.hostOf(s).replace('.test', ''));
}

describe('a link that goes silent', () => {
  it('with the defaults: a ping after 5 s of silence, the link lost 5 s later, a reconnect that resumes the watch', async () => {
    const { server, client } = setup({ token: 'user:alice' });
    const bob = clientOn(server, 'bob');
    await connected(client);
    await connected(bob);
    const chat = client.chat('general');
    const seen: number[] = [];
    chat.on('event', (ev) => seen.push(ev.seq));
    await chat.join();
    await bob.chat('general').join();
    await chat.watch();
    await bob.chat('general').send({ text: 'before' });
    await tick();
    const drops: DisconnectInfo[] = [];
    client.on('disconnected', (d) => drops.push(d));
    const first = server.sockets[0]!;
    first.dead = true; // nothing gets through either way, and nobody reports a close
    const deadAt = Date.now();

    await tick(4_999);
    expect(client.state).toBe('connected');
    await tick(1); // 5 s of silence: the ping goes out, into the void
    await bob.chat('general').send({ text: 'while the link is dead' });
    await tick(4_999);
    expect(client.state).toBe('connected');
    await tick(1);
    expect(client.state).toBe('connecting');
    expect(Date.now() - deadAt).toBe(10_000);
    expect(drops).toEqual([{ code: 1006, reason: 'ping timeout', reconnectInMs: 250, url: 'ws://herald.test/v1/ws' }]);
    expect(first.clientCloseCode).toBe(1000);

    await tick(250);
    expect(client.state).toBe('connected');
    await bob.chat('general').send({ text: 'after' });
    await tick();
    // The watch began after both joins (seq 2): 'before', the one sent while the link was dead, 'after';
    // once each, in order, the watch resumed on the new link from the last one delivered.
    expect(seen).toEqual([3, 4, 5]);
    expect(server.last.sent('watch')).toEqual([expect.objectContaining({ after: 3 })]);
    client.close();
    bob.close();
  });

  it('keeps a link whose pongs come late but within the timeout, and one that answers with other frames', async () => {
    const { server, client } = setup({ pingIntervalMs: 1_000, pingTimeoutMs: 2_000 });
    let pings = 0;
    server.intercept = (conn, f) => {
      if (f.op !== 'ping') return false;
      pings++;
      setTimeout(() => conn.serverSend({ id: f.id, ok: {} }), 1_999); // a slow server, still in time
      return true;
    };
    await connected(client);
    await tick(60_000);
    expect(pings).toBeGreaterThan(15);
    expect(server.sockets).toHaveLength(1);
    expect(client.state).toBe('connected');

    // No pong at all, but pushes keep coming (a long catch-up ahead of it): the server is there.
    server.intercept = (_conn, f) => f.op === 'ping';
    const chat = client.chat('general');
    await chat.join();
    await chat.watch();
    for (let i = 0; i < 60; i++) {
      server.store('general', 'message', { i }, 'bob');
      await tick(1_000);
    }
    expect(server.sockets).toHaveLength(1);
    expect(client.state).toBe('connected');
    client.close();
  });

  it('a request that times out probes the link at once: a live link stays, a dead one is dropped', async () => {
    const { server, client } = setup({ requestTimeoutMs: 2_000, pingIntervalMs: 60_000, pingTimeoutMs: 1_000 });
    await connected(client);
    const link = server.last;

    // Live: the server swallows a fetch but answers the probe.
    server.intercept = (_c, f) => f.op === 'fetch';
    const lost = client.chat('general').fetch(0).catch((e: unknown) => e);
    await tick(1_999);
    expect(link.sent('ping')).toHaveLength(0);
    await tick(1);
    expect(await lost).toMatchObject({ code: 'timeout', op: 'fetch' });
    expect(link.sent('ping')).toHaveLength(1);
    await tick(5_000);
    expect(server.sockets).toHaveLength(1);
    expect(client.state).toBe('connected');

    // Dead: the probe meets silence, and the link is dropped 1 s after the timeout, not 60 s.
    const drops: DisconnectInfo[] = [];
    client.on('disconnected', (d) => drops.push(d));
    link.dead = true;
    const fetched = client.chat('general').fetch(0).catch((e: unknown) => e);
    await tick(2_000);
    expect(await fetched).toMatchObject({ code: 'timeout' });
    expect(client.state).toBe('connected');
    await tick(999);
    expect(client.state).toBe('connected');
    await tick(1);
    expect(drops[0]).toMatchObject({ reason: 'ping timeout' });
    await tick(250);
    expect(server.sockets).toHaveLength(2);
    expect(client.state).toBe('connected');
    client.close();
  });

  it('gives frames one more moment when its own event loop stalled past the deadline', async () => {
    const { server, client } = setup({ pingIntervalMs: 1_000, pingTimeoutMs: 1_000 });
    await connected(client);
    let pong: (() => void) | null = null;
    server.intercept = (conn, f) => {
      if (f.op !== 'ping') return false;
      pong = () => conn.serverSend({ id: f.id, ok: {} });
      return true;
    };
    await tick(1_000); // the ping is out
    expect(pong).not.toBeNull();
    vi.setSystemTime(Date.now() + 5_000); // a 5 s stall: no timer ran, the pong waits undelivered
    await tick(1_000); // the deadline fires 5 s late: a grace, not a verdict
    expect(client.state).toBe('connected');
    pong!();
    await tick(1_000);
    expect(server.sockets).toHaveLength(1);
    expect(client.state).toBe('connected');
    client.close();
  });
});

describe('a connect that never completes', () => {
  it('times out after connectTimeoutMs and counts as a failed attempt', async () => {
    const { server, client } = setup({ connectTimeoutMs: 3_000 });
    server.hang = true; // TCP accepted, the upgrade never answered
    const drops: DisconnectInfo[] = [];
    const errors: HeraldError[] = [];
    client.on('disconnected', (d) => drops.push(d));
    client.on('error', (e) => errors.push(e));
    const connecting = client.connect();
    await tick(2_999);
    expect(server.sockets).toHaveLength(1);
    expect(drops).toEqual([]);
    await tick(1);
    expect(drops).toEqual([{ code: 1006, reason: 'connect timeout', reconnectInMs: 250, url: 'ws://herald.test/v1/ws' }]);
    expect(server.sockets[0]!.clientCloseCode).toBe(1000);
    // Failed attempts in a row: backoff widens (0.5 of 1 s, then of 2 s), and the third says so.
    await tick(250 + 3_000);
    expect(drops[1]).toMatchObject({ reason: 'connect timeout', reconnectInMs: 500 });
    await tick(500 + 3_000);
    expect(drops[2]).toMatchObject({ reason: 'connect timeout', reconnectInMs: 1_000 });
    expect(errors.map((e) => e.code)).toEqual(['unreachable']);
    server.hang = false;
    await tick(1_000);
    await expect(connecting).resolves.toMatchObject({ user: 'alice' });
    expect(server.sockets).toHaveLength(4);
    client.close();
  });
});

describe('several node URLs', () => {
  it('refuses an empty list, a repeat, and a URL that is not ws:// or wss://', () => {
    const server = new FakeHerald();
    const make = (url: unknown) => () =>
      new HeraldClient({ url: url as string[], workspace: 'acme', token: 't', WebSocket: server.WebSocket });
    expect(make([])).toThrow(/lists no URL/);
    expect(make([A, A])).toThrow(/same URL twice/);
    expect(make([A, 'ws://a.test/v1/ws?ws=acme'])).toThrow(/same endpoint twice/);
    expect(make([A, ''])).toThrow(/non-empty string/);
    expect(make([A, 7])).toThrow(/non-empty string/);
    expect(make([A, 'http://b.test/v1/ws'])).toThrow(/ws:\/\/b\.test\/v1\/ws/);
    expect(make({ 0: A })).toThrow(/`url` is required/);
    expect(make([A, B])).not.toThrow();
  });

  it('goes round the list, one URL per attempt, and names them all when none opens', async () => {
    const { server, client } = setup({ url: [A, B, C] });
    server.refuse = true;
    const errors: HeraldError[] = [];
    client.on('error', (e) => errors.push(e));
    const urls: string[] = [];
    client.on('disconnected', (d) => urls.push(d.url));
    void client.connect();
    await tick(10_000);
    expect(hosts(server).slice(0, 5)).toEqual(['a', 'b', 'c', 'a', 'b']);
    expect(urls.slice(0, 4)).toEqual([A, B, C, A]);
    expect(errors[0]!.message).toContain('any of ws://a.test/v1/ws?ws=acme, ws://b.test/v1/ws?ws=acme, ws://c.test/v1/ws?ws=acme');
    server.refuse = false;
    await tick(20_000);
    expect(client.state).toBe('connected');
    expect(client.url).toBe(new Map([['a', A], ['b', B], ['c', C]]).get(hosts(server).at(-1)!));
    client.close();
  });

  it('after losing a node, tries every other node before the lost one', async () => {
    const { server, client } = setup({ url: [A, B, C], connectTimeoutMs: 2_000 });
    await connected(client);
    expect(client.url).toBe(A);
    server.freeze('a.test');
    server.refuse = true; // b and c are down as well, for a while
    await tick(10_000); // A is found silent
    expect(client.state).toBe('connecting');
    await tick(20_000);
    // Lost on a, then b, c refused, and only then a again (it hangs: a frozen node's kernel accepts).
    expect(hosts(server).slice(0, 5)).toEqual(['a', 'b', 'c', 'a', 'b']);
    server.refuse = false;
    await tick(30_000);
    expect(client.state).toBe('connected');
    expect(client.url).not.toBe(A);
    client.close();
  });

  it('a frozen node: the client moves to the next one and gets what was sent there, once each, in order', async () => {
    const { server, client: alice } = setup({ url: [A, B], token: 'user:alice' });
    const bob = clientOn(server, 'bob', { url: B });
    await connected(alice);
    await connected(bob);
    const chat = alice.chat('general');
    const seen: ChatEvent[] = [];
    chat.on('event', (ev) => seen.push(ev));
    await chat.join();
    await bob.chat('general').join();
    await chat.watch();
    await bob.chat('general').send({ text: 'one' });
    await tick();
    expect(alice.url).toBe(A);

    server.freeze('a.test');
    const frozenAt = Date.now();
    let lostAt = 0;
    alice.on('disconnected', () => {
      lostAt ||= Date.now();
    });
    await bob.chat('general').send({ text: 'two' }); // stored through b while a is frozen
    await tick(10_000);
    expect(lostAt - frozenAt).toBeLessThanOrEqual(10_000);
    await tick(500);
    expect(alice.state).toBe('connected');
    expect(alice.url).toBe(B);
    await bob.chat('general').send({ text: 'three' });
    await tick();
    const texts = seen.filter((e) => e.type === 'message').map((e) => (e.body as { text: string }).text);
    expect(texts).toEqual(['one', 'two', 'three']);
    expect(seen.map((e) => e.seq)).toEqual(Array.from({ length: seen.length }, (_, i) => seen[0]!.seq + i));
    alice.close();
    bob.close();
  });
});
