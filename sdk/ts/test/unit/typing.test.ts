import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { aliceAndBobInGeneral, tick } from './helpers.js';

beforeEach(() => {
  vi.useFakeTimers({ now: 1_000_000_000_000 });
});
afterEach(() => {
  vi.useRealTimers();
});

/** Alice and bob watching `general`; what bob's chat says of typing, and each one's fake connection. */
async function pair() {
  const { server, alice, bob, achat, bchat } = await aliceAndBobInGeneral();
  await achat.watch();
  await bchat.watch();
  const seen: string[][] = [];
  bchat.on('typing', ({ users }) => seen.push(users));
  const aliceConn = server.sockets.find((s) => s.user === 'alice')!;
  const bobConn = server.sockets.find((s) => s.user === 'bob')!;
  return { server, alice, bob, achat, bchat, seen, aliceConn, bobConn };
}

describe('typing', () => {
  it('sends typing at most once every 2 s however fast the user types', async () => {
    const { alice, bob, achat, aliceConn } = await pair();
    const sentAt: number[] = [];
    for (let t = 0; t <= 4500; t += 100) {
      if (achat.notifyTyping()) sentAt.push(t);
      await tick(100);
    }
    expect(sentAt).toEqual([0, 2000, 4000]);
    expect(aliceConn.sent('typing')).toHaveLength(3);
    expect(aliceConn.sent('typing')[0]).toMatchObject({ chat: 'general' });
    // The keystrokes after 4 s are announced once, when the window is over (4 s + 2 s + 250 ms).
    await tick(1649); // the loop ended at 4.6 s
    expect(aliceConn.sent('typing')).toHaveLength(3);
    await tick(1);
    expect(aliceConn.sent('typing')).toHaveLength(4);
    await tick(10_000);
    expect(aliceConn.sent('typing')).toHaveLength(4);
    alice.close();
    bob.close();
  });

  it('announces a short burst of typing right after the last request, unless the message is sent first', async () => {
    const { alice, bob, achat, bchat, aliceConn } = await pair();
    achat.notifyTyping();
    await tick();
    await achat.send({ text: 'first' });
    await tick();
    expect(bchat.typingUsers).toEqual([]); // her message ended her typing
    // She starts the next message at once: inside the window, so nothing goes out yet...
    await tick(300);
    expect(achat.notifyTyping()).toBe(false);
    expect(achat.notifyTyping()).toBe(false);
    await tick(1950);
    // ...and then one request, which the server pushes: bob sees her typing again.
    expect(aliceConn.sent('typing')).toHaveLength(2);
    expect(bchat.typingUsers).toEqual(['alice']);
    // A burst cut short by the send: no trailing request after the message.
    await tick(100);
    expect(achat.notifyTyping()).toBe(false);
    await achat.send({ text: 'second' });
    await tick(5000);
    expect(aliceConn.sent('typing')).toHaveLength(2);
    alice.close();
    bob.close();
  });

  it('sends nothing while offline, so no stale typing goes out after a reconnect', async () => {
    const { server, alice, bob, achat } = await pair();
    server.refuse = true;
    server.sockets.find((s) => s.user === 'alice' && s.isOpen)!.serverClose(1006);
    await tick();
    expect(achat.notifyTyping()).toBe(false);
    server.refuse = false;
    await tick(30_000);
    expect(alice.state).toBe('connected');
    expect(server.sockets.filter((s) => s.user === 'alice').flatMap((s) => s.sent('typing'))).toHaveLength(0);
    alice.close();
    bob.close();
  });

  it("shows another member typing for 5 s after their last push, and drops them when their message arrives", async () => {
    const { alice, bob, achat, bchat, seen } = await pair();
    achat.notifyTyping();
    await tick();
    expect(bchat.typingUsers).toEqual(['alice']);
    await tick(4000);
    expect(bchat.typingUsers).toEqual(['alice']);
    await tick(1000);
    expect(bchat.typingUsers).toEqual([]);
    expect(seen).toEqual([['alice'], []]);

    // Typing on: pushes at 0 s and 2 s keep her shown until 7 s.
    achat.notifyTyping();
    await tick(2000);
    achat.notifyTyping();
    await tick(4900);
    expect(bchat.typingUsers).toEqual(['alice']);
    await tick(200);
    expect(bchat.typingUsers).toEqual([]);

    achat.notifyTyping();
    await tick();
    expect(bchat.typingUsers).toEqual(['alice']);
    await achat.send({ text: 'done typing' });
    await tick();
    expect(bchat.typingUsers).toEqual([]);
    alice.close();
    bob.close();
  });

  it("never shows this user's own typing from another device, and forgets typists when the link drops", async () => {
    const { alice, bob, bchat, bobConn } = await pair();
    bobConn.serverSend({ ev: 'typing', chat: 'general', user: 'bob' });
    bobConn.serverSend({ ev: 'typing', chat: 'general', user: 'carol' });
    bobConn.serverSend({ ev: 'typing', chat: 'elsewhere', user: 'dave' });
    await tick();
    expect(bchat.typingUsers).toEqual(['carol']);
    bobConn.serverClose(1006);
    await tick();
    expect(bchat.typingUsers).toEqual([]);
    alice.close();
    bob.close();
  });

  it('a muted member typing is refused quietly: no error, no rejection', async () => {
    const { server, alice, bob, achat } = await pair();
    const errors: unknown[] = [];
    achat.on('error', (e) => errors.push(e));
    alice.on('error', (e) => errors.push(e));
    server.intercept = (conn, f) => {
      if (f.op !== 'typing') return false;
      conn.serverSend({ id: f.id, err: { code: 'forbidden', message: 'muted' } });
      return true;
    };
    expect(achat.notifyTyping()).toBe(true);
    await tick();
    await expect(achat.typing()).rejects.toMatchObject({ code: 'forbidden' });
    expect(errors).toEqual([]);
    alice.close();
    bob.close();
  });
});
