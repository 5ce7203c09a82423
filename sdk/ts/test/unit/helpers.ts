//! Shared helpers for unit tests: a client wired to a fake server, and time control.

import { vi } from 'vitest';
import { HeraldClient } from '../../src/client.js';
import type { ClientOptions } from '../../src/options.js';
import { FakeHerald } from '../fake/fake-herald.js';

/** Lets microtasks (fake socket deliveries, promise chains) run and advances fake time by `ms`. */
export async function tick(ms = 0): Promise<void> {
  await vi.advanceTimersByTimeAsync(ms);
}

/** A client on a fresh fake server; `random` is fixed so backoff delays are predictable. */
export function setup(opts: Partial<ClientOptions> = {}): { server: FakeHerald; client: HeraldClient } {
  const server = new FakeHerald();
  const client = new HeraldClient({
    url: 'ws://herald.test/v1/ws',
    workspace: 'acme',
    token: 'tok',
    WebSocket: server.WebSocket,
    random: () => 0.5,
    ...opts,
  });
  return { server, client };
}

/** Connects and waits for `connected`. */
export async function connected(client: HeraldClient): Promise<void> {
  const p = client.connect();
  await tick();
  await p;
}

/** Another client on `server`, acting as `user` (the fake reads the user from a `user:<name>` token). */
export function clientOn(server: FakeHerald, user: string, opts: Partial<ClientOptions> = {}): HeraldClient {
  return new HeraldClient({
    url: 'ws://herald.test/v1/ws',
    workspace: 'acme',
    token: `user:${user}`,
    WebSocket: server.WebSocket,
    random: () => 0.5,
    ...opts,
  });
}

/** Alice and bob on one fake server, both connected and members of `general`: clients and chat handles. */
export async function aliceAndBobInGeneral() {
  const { server, client: alice } = setup({ token: 'user:alice' });
  const bob = clientOn(server, 'bob');
  await connected(alice);
  await connected(bob);
  const achat = alice.chat('general');
  const bchat = bob.chat('general');
  await achat.join();
  await bchat.join();
  return { server, alice, bob, achat, bchat };
}
