//! The webhook receivers of docs/hooks.md, run for real: examples/webhook/receiver.ts (compiled with
//! the TypeScript compiler's transpiler, run by Node) and examples/webhook/receiver.py (python3), each
//! the receiver of a real herald started with --webhook-url.
//!
//! Owns: what a receiver's author must see: herald's signed batches accepted, every event handled once
//! (a repeated delivery is acknowledged, not handled again), a forged or stale request refused with
//! 401; and that docs/hooks.md shows these very files. Leaves web/test-artifacts/webhook-*.log behind.
//!
//!     HERALD_BIN=/path/to/herald npm test     default: ../target/release/herald from web/

import { spawn } from 'node:child_process';
import { createHmac } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import ts from 'typescript';
import { ARTIFACTS, freePort, startHerald, until, webDir } from './support.mjs';

const API_KEY = 'webhook-test-api-key-0123456789abcdef0123';
const JWT_SECRET = 'webhook-test-jwt-secret-0123456789abcdef01';
const HOOK_SECRET = 'webhook-test-hook-secret-0123456789abcdef';
const EXAMPLES = resolve(webDir, '../examples/webhook');
const WAIT_MS = 20_000;


/** The command that runs each example. */
function commandFor(kind) {
  if (kind === 'python') return ['python3', [join(EXAMPLES, 'receiver.py')]];
  const source = readFileSync(join(EXAMPLES, 'receiver.ts'), 'utf8');
  const { outputText } = ts.transpileModule(source, {
    compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 },
  });
  const dir = mkdtempSync(join(tmpdir(), 'herald-receiver-'));
  writeFileSync(join(dir, 'receiver.mjs'), outputText);
  return [process.execPath, [join(dir, 'receiver.mjs')]];
}

/** Starts a receiver; resolves with its URL, its output lines so far, and `stop`. */
async function startReceiver(kind) {
  const port = await freePort();
  const [cmd, args] = commandFor(kind);
  const proc = spawn(cmd, args, {
    env: { ...process.env, PORT: String(port), HERALD_HOOK_SECRET: HOOK_SECRET },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines = [];
  let err = '';
  proc.stdout.setEncoding('utf8');
  proc.stdout.on('data', (chunk) => lines.push(...chunk.split('\n').filter((l) => l !== '')));
  proc.stderr.setEncoding('utf8');
  proc.stderr.on('data', (chunk) => (err += chunk));
  const url = `http://127.0.0.1:${port}/hook`;
  // Listening once a TCP connection is accepted (a request would be one more for it to refuse).
  const accepts = () =>
    new Promise((res) => {
      const sock = connect(port, '127.0.0.1');
      sock.once('connect', () => sock.end(() => res(true)));
      sock.once('error', () => res(false));
    });
  await until(WAIT_MS, `the ${kind} receiver listening`, accepts, async () => `stderr: ${err}`);
  return { url, lines, stderr: () => err, stop: () => proc.kill('SIGKILL') };
}

/** A request signed as herald signs, with `secret` at unix time `t`. */
function signed(body, secret, t) {
  const v1 = createHmac('sha256', secret).update(`${t}.${body}`).digest('hex');
  return { 'content-type': 'application/json', 'herald-signature': `t=${t},v1=${v1}` };
}

async function api(base, method, path, body) {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { authorization: `Bearer ${API_KEY}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  assert.ok(res.ok, `${method} ${path}: ${res.status} ${text}`);
  return text === '' ? null : JSON.parse(text);
}

test('docs/hooks.md shows the example receivers as they are run here', () => {
  const doc = readFileSync(resolve(webDir, '../docs/hooks.md'), 'utf8');
  for (const file of ['receiver.ts', 'receiver.py']) {
    assert.ok(doc.includes(readFileSync(join(EXAMPLES, file), 'utf8').trim()), `docs/hooks.md shows ${file} verbatim`);
  }
});

for (const kind of ['typescript', 'python']) {
  describe(`the ${kind} receiver`, () => {
    const stops = [];
    const log = [];
    after(async () => {
      for (const stop of stops.reverse()) await stop();
      mkdirSync(ARTIFACTS, { recursive: true });
      writeFileSync(join(ARTIFACTS, `webhook-${kind}.log`), log.join(''));
    });

    test('accepts herald\'s signed batches, handles each event once, refuses forged and stale requests', async () => {
      const recv = await startReceiver(kind);
      stops.push(async () => recv.stop());
      const herald = await startHerald({
        args: ['--webhook-url', recv.url],
        env: { HERALD_API_KEY: API_KEY, HERALD_JWT_SECRET: JWT_SECRET, HERALD_HOOK_SECRET: HOOK_SECRET },
        log,
        logName: `webhook-${kind}.log`,
      });
      stops.push(herald.stop);
      await api(herald.base, 'PUT', '/v1/workspaces/acme/chats/general', { open: true });
      for (const user of ['alice', 'bob']) await api(herald.base, 'PUT', `/v1/workspaces/acme/chats/general/members/${user}`);
      for (const text of ['one', 'two', 'three']) {
        await api(herald.base, 'POST', '/v1/workspaces/acme/chats/general/events', { type: 'message', user: 'alice', body: { text } });
      }
      // Two joins and three messages, each handled once, in order; bob (no connection) is offline.
      const want = [
        'accepted acme/general/1 join',
        'accepted acme/general/2 join',
        'accepted acme/general/3 message offline=bob',
        'accepted acme/general/4 message offline=bob',
        'accepted acme/general/5 message offline=bob',
      ];
      await until(WAIT_MS, 'five events handled', () => recv.lines.filter((l) => l.startsWith('accepted')).length >= 5,
        async () => `lines: ${JSON.stringify(recv.lines)}; stderr: ${recv.stderr()}`);
      assert.deepEqual(recv.lines.filter((l) => l.startsWith('accepted')), want);
      assert.ok(!recv.lines.some((l) => l.startsWith('rejected')), 'herald\'s requests all pass the check');

      const now = Math.floor(Date.now() / 1000);
      const post = (body, headers) => fetch(recv.url, { method: 'POST', headers, body });
      // A forged batch: signed with another secret.
      const forged = JSON.stringify({ events: [{ workspace: 'acme', chat: 'general', seq: 99, type: 'message', user: 'mallory', ts: 1, body: {} }] });
      assert.equal((await post(forged, signed(forged, 'not-the-secret-0123456789abcdef0123456', now))).status, 401);
      // A replay: the right secret, an hour old.
      assert.equal((await post(forged, signed(forged, HOOK_SECRET, now - 3600))).status, 401);
      // No signature at all.
      assert.equal((await post(forged, { 'content-type': 'application/json' })).status, 401);
      // A delivery again of what was handled: acknowledged, not handled twice.
      const again = JSON.stringify({ events: [{ workspace: 'acme', chat: 'general', seq: 3, type: 'message', user: 'alice', ts: 1, body: {} }] });
      assert.equal((await post(again, signed(again, HOOK_SECRET, now))).status, 204);
      await until(WAIT_MS, 'three refusals logged', () => recv.lines.filter((l) => l.startsWith('rejected')).length === 3);
      assert.deepEqual(recv.lines.filter((l) => l.startsWith('accepted')), want, 'nothing forged or repeated was handled');
    });
  });
}
