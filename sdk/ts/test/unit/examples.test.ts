//! examples/webhook/receiver.ts as its README says to run it on Node 20 (`npm start`: tsc with the
//! example's own tsconfig.json, then node): it type-checks and compiles with that config, and the
//! output runs on this Node, accepting a signed batch and refusing an unsigned one. Uses this package's
//! TypeScript and Node types, the versions the example pins, so it needs no install of its own.
//!
//! Owns: that check. Does not own: the receiver against a real herald (web/test/webhook-receivers.test.mjs).

import { spawn } from 'node:child_process';
import { createHmac } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { afterAll, describe, expect, it } from 'vitest';

const EXAMPLE = fileURLToPath(new URL('../../../../examples/webhook/', import.meta.url));
const NODE_TYPES = fileURLToPath(new URL('../../node_modules/@types', import.meta.url));
const SECRET = 'examples-test-hook-secret-0123456789abcdef';

const out = mkdtempSync(join(tmpdir(), 'herald-example-'));
afterAll(() => rmSync(out, { recursive: true, force: true }));

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as net.AddressInfo;
      srv.close(() => resolve(port));
    });
  });
}

describe('examples/webhook', () => {
  // A type-checked compile with Node's types takes seconds, more on a loaded machine.
  it('receiver.ts compiles with its tsconfig.json and runs on this Node', { timeout: 60_000 }, async () => {
    const config = ts.getParsedCommandLineOfConfigFile(
      join(EXAMPLE, 'tsconfig.json'),
      { outDir: out, typeRoots: [NODE_TYPES] },
      {
        ...ts.sys,
        onUnRecoverableConfigFileDiagnostic: (d) => {
          throw new Error(ts.flattenDiagnosticMessageText(d.messageText, '\n'));
        },
      },
    );
    expect(config?.errors ?? []).toEqual([]);
    const program = ts.createProgram(config!.fileNames, config!.options);
    const diagnostics = ts.getPreEmitDiagnostics(program).concat(program.emit().diagnostics);
    expect(diagnostics.map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n'))).toEqual([]);
    // The example's package.json makes its output an ES module; so does this one, beside the output.
    writeFileSync(join(out, 'package.json'), '{"type": "module"}');

    const port = await freePort();
    const proc = spawn(process.execPath, [join(out, 'receiver.js')], {
      env: { ...process.env, PORT: String(port), HERALD_HOOK_SECRET: SECRET },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    proc.stdout.on('data', (c: Buffer) => (output += c.toString()));
    proc.stderr.on('data', (c: Buffer) => (output += c.toString()));
    try {
      const url = `http://127.0.0.1:${port}/hook`;
      const post = (body: string, headers: Record<string, string>) => fetch(url, { method: 'POST', headers, body });
      const deadline = Date.now() + 20_000;
      for (;;) {
        const up = await post('{}', {}).then(
          () => true,
          () => false,
        );
        if (up) break;
        if (Date.now() > deadline || proc.exitCode !== null) throw new Error(`the receiver did not start: ${output}`);
        await new Promise((r) => setTimeout(r, 50));
      }
      const body = JSON.stringify({ events: [{ workspace: 'acme', chat: 'general', seq: 1, type: 'message', user: 'alice', ts: 1, body: {} }] });
      const t = Math.floor(Date.now() / 1000);
      const v1 = createHmac('sha256', SECRET).update(`${t}.${body}`).digest('hex');
      expect((await post(body, { 'herald-signature': `t=${t},v1=${v1}` })).status).toBe(204);
      expect((await post(body, {})).status).toBe(401);
      expect(output).toContain('accepted acme/general/1 message');
    } finally {
      proc.kill('SIGKILL');
    }
  });
});
