//! What the browser tests share: finding herald and Chromium, bounded waits, and starting a real herald
//! on 127.0.0.1:0 with a fresh data directory (its address read from its "herald listening on" line,
//! so no port is guessed and none can collide), stopped by SIGTERM, then SIGKILL if it lingers.

import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

export const webDir = resolve(dirname(fileURLToPath(import.meta.url)), '..');
export const HERALD_BIN = resolve(webDir, process.env.HERALD_BIN ?? '../target/release/herald');
export const CHROMIUM_BIN = process.env.CHROMIUM_BIN ?? '/usr/bin/chromium';
export const ARTIFACTS = join(webDir, 'test-artifacts');

/** Flags for a quiet, hermetic Chromium: no sandbox (containers), no GPU, no background traffic. */
export const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

const START_TIMEOUT_MS = 20_000;
const STOP_TIMEOUT_MS = 10_000;

/** A loopback port nothing listens on now: bound, read, closed. */
export function freePort() {
  return new Promise((res, rej) => {
    const s = createServer();
    s.once('error', rej);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => res(port));
    });
  });
}

/** Resolves with `p`, or rejects after `ms` saying what took too long. */
export function within(ms, what, p) {
  let timer;
  const t = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no result within ${ms} ms`)), ms);
  });
  return Promise.race([p, t]).finally(() => clearTimeout(timer));
}

/** Polls `check` (sync or async) until it returns true; fails with `describeState()` after `ms`. */
export async function until(ms, what, check, describeState = async () => '') {
  const deadline = Date.now() + ms;
  for (;;) {
    if (await check()) return;
    if (Date.now() > deadline) throw new Error(`${what}: not true within ${ms} ms. ${await describeState()}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * Starts herald with `args` after `serve --listen 127.0.0.1:0 --data <fresh dir>` and `env` on top of
 * this process's environment less every HERALD_* setting a surrounding script may export (a store, a
 * secret). Appends its output to `log`; `logName` names that log in errors. Resolves with
 * `{ base, stop, apiKey }` once it answers /healthz (`apiKey`: the one a development-mode herald
 * printed, else null).
 */
export async function startHerald({ args = [], env: extra = {}, log, logName }) {
  if (!existsSync(HERALD_BIN)) {
    throw new Error(`herald binary not found at ${HERALD_BIN}: run \`cargo build --release -p herald\` or set HERALD_BIN`);
  }
  const data = mkdtempSync(join(tmpdir(), 'herald-web-'));
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('HERALD_')));
  Object.assign(env, extra);
  const proc = spawn(HERALD_BIN, ['serve', '--listen', '127.0.0.1:0', '--data', data, ...args], {
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const exited = new Promise((r) => proc.once('exit', (code, signal) => r({ code, signal })));
  let out = '';
  const addr = new Promise((resolveAddr, reject) => {
    proc.stdout.setEncoding('utf8');
    proc.stdout.on('data', (chunk) => {
      log.push(chunk);
      out += chunk;
      const m = /herald listening on (\S+)/.exec(out);
      if (m) resolveAddr(m[1]);
    });
    proc.stderr.setEncoding('utf8');
    proc.stderr.on('data', (chunk) => log.push(chunk));
    proc.once('error', reject);
    exited.then(({ code, signal }) => reject(new Error(`herald exited early (code ${code}, signal ${signal}); see ${logName}`)));
  });
  const stop = async () => {
    if (proc.exitCode === null && proc.signalCode === null) {
      proc.kill('SIGTERM');
      try {
        await within(STOP_TIMEOUT_MS, 'herald stopping after SIGTERM', exited);
      } catch {
        proc.kill('SIGKILL');
        await exited;
      }
    }
    rmSync(data, { recursive: true, force: true });
  };
  try {
    const base = `http://${await within(START_TIMEOUT_MS, 'herald printing its address', addr)}`;
    await until(START_TIMEOUT_MS, 'herald answering /healthz', async () => {
      try {
        return (await fetch(`${base}/healthz`)).ok;
      } catch {
        return false;
      }
    });
    // In development mode herald prints the api key it made (the server API's, e.g. for a bot).
    const apiKey = /HERALD_API_KEY=(\S+)/.exec(out)?.[1] ?? null;
    return { base, stop, apiKey };
  } catch (err) {
    await stop();
    throw err;
  }
}

/**
 * Starts Debian's Chromium as a browser server (rather than launch(): it hands back the process, so
 * `stop` can kill it by pid if closing hangs; Playwright gives it a fresh temporary user-data-dir and
 * deletes it on close) and connects to it. Makes ARTIFACTS. Resolves with `{ browser, stop }`.
 */
export async function startChromium() {
  if (!existsSync(CHROMIUM_BIN)) {
    throw new Error(
      `Chromium not found at ${CHROMIUM_BIN}. This test drives Debian's Chromium (Playwright's browser download is not used): ` +
        'install it as root with `apt-get update && apt-get install -y chromium`, or set CHROMIUM_BIN.',
    );
  }
  mkdirSync(ARTIFACTS, { recursive: true });
  const server = await chromium.launchServer({ executablePath: CHROMIUM_BIN, args: CHROMIUM_ARGS, timeout: START_TIMEOUT_MS });
  let browser;
  try {
    browser = await chromium.connect(server.wsEndpoint(), { timeout: START_TIMEOUT_MS });
  } catch (err) {
    server.kill();
    throw err;
  }
  const stop = async () => {
    await within(STOP_TIMEOUT_MS, 'closing the browser', browser.close()).catch(() => {});
    const pid = server.process().pid;
    await within(STOP_TIMEOUT_MS, 'stopping the browser', server.close()).catch(() => {
      console.error(`browser did not close; killing pid ${pid}`);
      server.kill();
    });
  };
  return { browser, stop };
}
