// A bot for herald that answers a message mentioning it by streaming its reply word by word (Node 20,
// no dependencies). It learns of messages as herald's webhook receiver: it checks each request's
// signature (as examples/webhook does), and for each new `message` event whose `mentions` name it, it
// posts a streamed message through the server API and appends to it one word at a time.
//
// HERALD_URL (default http://127.0.0.1:8080), HERALD_API_KEY: the server API; HERALD_HOOK_SECRET:
// herald's --hook-secret; BOT_USER (default helper): who the bot is; PORT (default 8001): where it
// listens, on 127.0.0.1. Point herald at it with --webhook-url http://127.0.0.1:8001/hook.
import { createHmac, timingSafeEqual } from 'node:crypto';
import { createServer } from 'node:http';

const herald = process.env.HERALD_URL ?? 'http://127.0.0.1:8080';
const apiKey = process.env.HERALD_API_KEY ?? '';
const secret = process.env.HERALD_HOOK_SECRET ?? '';
const me = process.env.BOT_USER ?? 'helper';
const WORD_DELAY_MS = Number(process.env.WORD_DELAY_MS ?? 150); // how fast the reply "thinks"
const TOLERANCE_S = 300; // a signature older (or newer) than this is a replay: refused
const seen = new Set(); // events already answered: herald delivers at least once

/** Whether `header` (`t=<unix seconds>,v1=<hex>`) signs `body` with the secret, recently. */
function verify(header, body) {
  const parts = Object.fromEntries(header.split(',').map((kv) => kv.split('=', 2)));
  const t = Number(parts.t);
  if (!Number.isInteger(t) || Math.abs(Date.now() / 1000 - t) > TOLERANCE_S) return false;
  const want = createHmac('sha256', secret).update(`${t}.`).update(body).digest();
  const got = Buffer.from(String(parts.v1 ?? ''), 'hex');
  return got.length === want.length && timingSafeEqual(got, want); // constant time
}

/** One server API call with the api key; resolves with the JSON answer, throws on a refusal. */
async function api(path, body) {
  const res = await fetch(`${herald}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`POST ${path}: HTTP ${res.status} ${text}`);
  return JSON.parse(text);
}

/** What the bot says to `e`; a real bot would ask a language model and stream its tokens. */
function replyTo(e) {
  const asked = String(e.body?.text ?? '').replaceAll(`@${me}`, '').trim();
  return `Hi ${e.user}, this is ${me}. You asked: "${asked}". I answer word by word, as a model writes.`;
}

/** Streams the reply to `e` into its chat: one message opened empty, one append per word, then done. */
async function answer(e) {
  const events = `/v1/workspaces/${encodeURIComponent(e.workspace)}/chats/${encodeURIComponent(e.chat)}/events`;
  // The client_id makes the post idempotent: a retry after a lost answer stores no second reply.
  const { seq } = await api(events, { type: 'message', user: me, body: { text: '' }, stream: true, client_id: `${me}-re-${e.seq}` });
  const words = replyTo(e).split(' ');
  for (const [i, word] of words.entries()) {
    await new Promise((r) => setTimeout(r, WORD_DELAY_MS));
    await api(`${events}/${seq}/append`, { text: i === 0 ? word : ` ${word}` }); // durable once answered
  }
  await api(`${events}/${seq}/append`, { text: '', done: true }); // stored as the message's final edit
  console.log(`answered ${e.workspace}/${e.chat}/${e.seq} with ${seq}`);
}

createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const body = Buffer.concat(chunks);
    if (!verify(String(req.headers['herald-signature'] ?? ''), body)) {
      console.log('rejected: bad signature');
      res.writeHead(401).end();
      return;
    }
    for (const e of JSON.parse(body.toString()).events) {
      const key = `${e.workspace}/${e.chat}/${e.seq}`;
      if (e.type !== 'message' || e.user === me || !e.mentions?.includes(me) || seen.has(key)) continue;
      seen.add(key);
      // Answered after the acknowledgement: herald's next batch does not wait for the reply.
      answer(e).catch((err) => console.error(`answering ${key}: ${err.message}`));
    }
    res.writeHead(204).end(); // any 2xx acknowledges the whole batch
  });
}).listen(Number(process.env.PORT ?? 8001), '127.0.0.1', () => console.log(`${me} listening`));
