// A webhook receiver for herald in TypeScript (Node, no dependencies): checks each request's
// signature, then handles each event once. HERALD_HOOK_SECRET: herald's --hook-secret; PORT: where to listen.
import { createHmac, timingSafeEqual } from 'node:crypto';
import { createServer } from 'node:http';

const secret = process.env.HERALD_HOOK_SECRET ?? '';
const TOLERANCE_S = 300; // a signature older (or newer) than this is a replay: refused
const seen = new Set<string>(); // in production: a table with a unique key on (workspace, chat, seq)

interface HeraldEvent { workspace: string; chat: string; seq: number; type: string; user?: string; offline?: string[] }

/** Whether `header` (`t=<unix seconds>,v1=<hex>`) signs `body` with the secret, recently. */
function verify(header: string, body: Buffer): boolean {
  const parts = Object.fromEntries(header.split(',').map((kv) => kv.split('=', 2)));
  const t = Number(parts.t);
  if (!Number.isInteger(t) || Math.abs(Date.now() / 1000 - t) > TOLERANCE_S) return false;
  const want = createHmac('sha256', secret).update(`${t}.`).update(body).digest();
  const got = Buffer.from(String(parts.v1 ?? ''), 'hex');
  return got.length === want.length && timingSafeEqual(got, want); // constant time
}

createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    const body = Buffer.concat(chunks);
    if (!verify(String(req.headers['herald-signature'] ?? ''), body)) {
      console.log('rejected: bad signature');
      res.writeHead(401).end();
      return;
    }
    for (const e of (JSON.parse(body.toString()) as { events: HeraldEvent[] }).events) {
      const key = `${e.workspace}/${e.chat}/${e.seq}`;
      if (seen.has(key)) continue; // delivered again (at least once): already handled
      seen.add(key);
      console.log(`accepted ${key} ${e.type}${e.offline ? ` offline=${e.offline.join(',')}` : ''}`);
    }
    res.writeHead(204).end(); // any 2xx acknowledges the whole batch
  });
}).listen(Number(process.env.PORT ?? 8000), '127.0.0.1');
