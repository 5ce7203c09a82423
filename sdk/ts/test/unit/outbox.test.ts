import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { HeraldError } from '../../src/errors.js';
import { connected, setup, tick } from './helpers.js';

beforeEach(() => {
  vi.useFakeTimers({ now: 1_000_000_000_000 });
});
afterEach(() => {
  vi.useRealTimers();
});

describe('offline send queue', () => {
  it('holds sends while offline and sends them in order once connected', async () => {
    const { server, client } = setup();
    server.refuse = true;
    void client.connect();
    const chat = client.chat('general');
    const sends = ['a', 'b', 'c'].map((text) => chat.send({ text }));
    await tick(1000);
    expect(client.state).toBe('connecting');
    expect(client.unacknowledgedSends).toBe(3);

    server.refuse = false;
    await tick(2000);
    expect(client.state).toBe('connected');
    const seqs = (await Promise.all(sends)).map((r) => r.seq);
    expect(seqs).toEqual([1, 2, 3]);
    const frames = server.last.sent('send');
    expect(frames.map((f) => (f.body as { text: string }).text)).toEqual(['a', 'b', 'c']);
    // Each got its own generated idempotency key.
    expect(new Set(frames.map((f) => f.client_id)).size).toBe(3);
    for (const f of frames) expect(f.client_id).toMatch(/^c-[0-9a-f]{32}$/);
    expect(client.unacknowledgedSends).toBe(0);
    client.close();
  });

  it('is bounded: the send past maxQueue rejects with queue_full and is never sent', async () => {
    const { server, client } = setup({ maxQueue: 2 });
    server.refuse = true;
    void client.connect();
    const chat = client.chat('general');
    const ok1 = chat.send('one');
    const ok2 = chat.send('two');
    const err = await chat.send('three').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(HeraldError);
    expect(err).toMatchObject({ code: 'queue_full', op: 'send' });

    server.refuse = false;
    await tick(2000);
    await expect(ok1).resolves.toEqual({ seq: 1 });
    await expect(ok2).resolves.toEqual({ seq: 2 });
    expect(server.last.sent('send').map((f) => f.body)).toEqual(['one', 'two']);
    // Room again once the queue drained.
    await expect(chat.send('four')).resolves.toEqual({ seq: 3 });
    client.close();
  });

  it('uses the caller clientId when given', async () => {
    const { server, client } = setup();
    await connected(client);
    await client.chat('general').send('hi', { clientId: 'm-17' });
    expect(server.last.sent('send')[0]).toMatchObject({ chat: 'general', body: 'hi', client_id: 'm-17' });
    expect(server.events('general')[0]).toMatchObject({ client_id: 'm-17' });
    client.close();
  });

  it('close() rejects queued sends with closed', async () => {
    const { server, client } = setup();
    server.refuse = true;
    const connecting = client.connect().catch((e: unknown) => e);
    const p = client.chat('general').send('x').catch((e: unknown) => e);
    client.close();
    expect(await p).toMatchObject({ code: 'closed' });
    expect(await connecting).toMatchObject({ code: 'closed' });
    await expect(client.chat('general').send('y')).rejects.toMatchObject({ code: 'closed' });
  });
});

describe('a send has a deadline', () => {
  it('a send that cannot go out within sendTimeoutMs rejects with timeout and is never written', async () => {
    const { server, client } = setup({ sendTimeoutMs: 30_000 });
    server.refuse = true;
    void client.connect();
    const chat = client.chat('general');
    const p = chat.send({ text: 'lost in a tunnel' }).catch((e: unknown) => e);
    await tick(29_999);
    expect(client.unacknowledgedSends).toBe(1);
    await tick(1);
    const err = await p;
    expect(err).toBeInstanceOf(HeraldError);
    expect(err).toMatchObject({ code: 'timeout', op: 'send' });
    expect((err as HeraldError).message).toMatch(/sendTimeoutMs.*not connected/);
    expect(client.unacknowledgedSends).toBe(0);

    server.refuse = false;
    await tick(25_000);
    expect(client.state).toBe('connected');
    expect(server.last.sent('send')).toHaveLength(0);
    // The next send goes out as usual.
    await expect(chat.send({ text: 'out of the tunnel' })).resolves.toEqual({ seq: 1 });
    client.close();
  });

  it('a send made before connect() waits for it, within the deadline (default 60 s)', async () => {
    const { server, client } = setup();
    const p = client.chat('general').send({ text: 'queued before connecting' });
    await tick(50_000);
    expect(server.sockets).toHaveLength(0);
    await connected(client);
    await expect(p).resolves.toEqual({ seq: 1 });
    // disconnect() keeps unsent sends for the next connect(); without one, the deadline ends them.
    client.disconnect();
    const late = client.chat('general').send({ text: 'no connect() follows' }).catch((e: unknown) => e);
    await tick(59_999);
    expect(client.unacknowledgedSends).toBe(1);
    await tick(1);
    expect(await late).toMatchObject({ code: 'timeout', op: 'send' });
    expect(server.last.sent('send')).toHaveLength(1);
    client.close();
  });

  it('a send written before its deadline waits for its reply', async () => {
    const { server, client } = setup({ sendTimeoutMs: 5_000, requestTimeoutMs: 10_000 });
    await connected(client);
    server.intercept = (conn, frame) => {
      if (frame.op !== 'send') return false;
      server.intercept = null;
      setTimeout(() => server.receive(conn, frame), 7_000); // a slow store: past the send's deadline
      return true;
    };
    const p = client.chat('general').send({ text: 'slow but stored' });
    await tick(7_000);
    await expect(p).resolves.toEqual({ seq: 1 });
    client.close();
  });
});

describe('send retries', () => {
  it('a send whose reply is lost with the link is retried with the same client_id and stored once', async () => {
    const { server, client } = setup();
    await connected(client);
    // The first send reaches the server and is stored, but the link dies before the reply gets out.
    let cut = false;
    server.intercept = (conn, frame) => {
      if (frame.op !== 'send' || cut) return false;
      cut = true;
      server.intercept = null;
      server.receive(conn, frame); // stored...
      conn.dead = true; // ...but the reply is lost...
      conn.serverClose(1006); // ...and the link drops
      return true;
    };
    // Hold the reply back: `dead` swallows it, since serverSend checks the link before queueing.
    const p = client.chat('general').send({ text: 'once' }, {});
    await tick(1000);
    const { seq } = await p;

    const stored = server.events('general').filter((e) => e.type === 'message');
    expect(stored).toHaveLength(1);
    expect(seq).toBe(stored[0]!.seq);
    const [first, second] = server.sockets;
    const id1 = first!.sent('send')[0]!.client_id;
    const id2 = second!.sent('send')[0]!.client_id;
    expect(id1).toBeDefined();
    expect(id2).toBe(id1);
    client.close();
  });

  it('retries after throttled, waiting retry_after_ms', async () => {
    const { server, client } = setup();
    await connected(client);
    let throttled = 0;
    server.intercept = (conn, frame) => {
      if (frame.op !== 'send' || throttled > 0) return false;
      throttled++;
      conn.serverSend({ id: frame.id, err: { code: 'throttled', message: 'slow down', retry_after_ms: 700 } });
      return true;
    };
    let done = false;
    const p = client.chat('general').send('x').then((r) => {
      done = true;
      return r;
    });
    await tick(699);
    expect(done).toBe(false);
    expect(server.last.sent('send')).toHaveLength(1);
    await tick(1);
    await expect(p).resolves.toEqual({ seq: 1 });
    expect(server.last.sent('send')).toHaveLength(2);
    client.close();
  });

  it('into a throttle it pauses and narrows its window instead of hammering, and every send lands once', async () => {
    const { server, client } = setup();
    // The server's token bucket in small: 10 at once, then 100 per second.
    let tokens = 10;
    let last = Date.now();
    let throttled = 0;
    let inARow = 0;
    let worstRow = 0;
    server.intercept = (conn, frame) => {
      if (frame.op !== 'send') return false;
      const now = Date.now();
      tokens = Math.min(10, tokens + ((now - last) * 100) / 1000);
      last = now;
      if (tokens >= 1) {
        tokens -= 1;
        inARow = 0;
        return false; // stored by the normal handler
      }
      throttled++;
      worstRow = Math.max(worstRow, ++inARow);
      conn.serverSend({ id: frame.id, err: { code: 'throttled', message: 'slow down', retry_after_ms: Math.ceil(((1 - tokens) * 1000) / 100) } });
      return true;
    };
    server.refuse = true;
    void client.connect();
    const sends = Array.from({ length: 90 }, (_, i) => client.chat('general').send({ n: i }));
    server.refuse = false;
    await tick(2000);
    const seqs = (await Promise.all(sends)).map((r) => r.seq);
    expect(new Set(seqs).size).toBe(90);
    expect(server.events('general').map((e) => (e.body as { n: number }).n)).toEqual(Array.from({ length: 90 }, (_, i) => i));
    // Only the first window runs into the empty bucket in a row (the server closes with 4029 past 200);
    // after that the outbox waits as told and probes with a window of one or two.
    expect(worstRow).toBeLessThanOrEqual(32);
    expect(throttled).toBeLessThan(3 * 90);
    client.close();
  });

  it('keeps a chat in the order sent when one send is refused for now and those behind it were already written', async () => {
    const { server, client } = setup();
    await connected(client);
    // Like herald: 'b' is refused once (unavailable); until 'b' comes again, every later send to its chat is
    // refused the same way (it was written behind a refused one) and stored nowhere. Another chat is served.
    let refusedB = false;
    let fenced = false;
    const written: string[] = [];
    server.intercept = (conn, frame) => {
      if (frame.op !== 'send') return false;
      const body = frame.body as string;
      written.push(body);
      if (frame.chat === 'general' && body === 'b' && !refusedB) {
        refusedB = true;
        fenced = true;
        conn.serverSend({ id: frame.id, err: { code: 'unavailable', message: 'busy', retry_after_ms: 300 } });
        return true;
      }
      if (frame.chat === 'general' && fenced) {
        if (body !== 'b') {
          conn.serverSend({ id: frame.id, err: { code: 'unavailable', message: 'behind b', retry_after_ms: 250 } });
          return true;
        }
        fenced = false;
      }
      return false;
    };
    const general = client.chat('general');
    const sends = ['a', 'b', 'c', 'd', 'e'].map((t) => general.send(t));
    await tick(50);
    // While 'b' sleeps before its retry, the sends behind it stay back instead of probing the fence.
    const other = client.chat('other').send('elsewhere');
    await tick(100);
    await expect(other).resolves.toEqual({ seq: 1 });
    expect(written.filter((b) => b === 'c')).toHaveLength(1);
    await tick(1000);
    await Promise.all(sends);
    expect(server.events('general').map((e) => e.body)).toEqual(['a', 'b', 'c', 'd', 'e']);
    // 'b' retried before anything behind it was written again.
    const again = written.slice(written.indexOf('e') + 1).filter((b) => b !== 'elsewhere');
    expect(again).toEqual(['b', 'c', 'd', 'e']);
    client.close();
  });

  it('gives up after sendRetries and on errors that will not change (forbidden)', async () => {
    const { server, client } = setup({ sendRetries: 2 });
    await connected(client);
    server.intercept = (conn, frame) => {
      if (frame.op !== 'send') return false;
      const code = frame.body === 'busy' ? 'unavailable' : 'forbidden';
      conn.serverSend({ id: frame.id, err: { code, message: code, retry_after_ms: 100 } });
      return true;
    };
    const busy = client.chat('general').send('busy').catch((e: unknown) => e);
    const forbidden = client.chat('general').send('nope').catch((e: unknown) => e);
    await tick(1000);
    expect(await busy).toMatchObject({ code: 'unavailable' });
    expect(await forbidden).toMatchObject({ code: 'forbidden' });
    const sends = server.last.sent('send');
    expect(sends.filter((f) => f.body === 'busy')).toHaveLength(3); // first try + 2 retries
    expect(sends.filter((f) => f.body === 'nope')).toHaveLength(1);
    client.close();
  });
});
