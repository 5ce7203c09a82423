//! The SDK as an app gets it: `npm pack`, installed into a fresh Node project from the tarball alone, then
//! used from plain Node (ESM) and, bundled by esbuild in that project, from Chromium, both chatting
//! through a real herald.
//!
//! Owns: the package's shape as published (its files, its `exports`, its types seen through them) and
//! the two ways apps load it. Does not own: the client's behaviour (test/unit, test/integration).
//!
//!     HERALD_BIN=/path/to/herald node test/pack/run.mjs        from sdk/ts (npm run test:pack)
//!     CHROMIUM_BIN=/path/to/chromium                           default: /usr/bin/chromium
//!
//! Network: the tarball installs offline (the package has no runtime dependencies); the project's tools
//! (`ws` for Node 20, which has no global WebSocket, and esbuild) come from the npm registry, or from npm's
//! cache when they are there. playwright-core is the one web/ installs (npm install in web/).

import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';

const sdkDir = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const repoDir = resolve(sdkDir, '../..');
const HERALD_BIN = resolve(sdkDir, process.env.HERALD_BIN ?? '../../target/release/herald');
const CHROMIUM_BIN = process.env.CHROMIUM_BIN ?? '/usr/bin/chromium';
/** The tools the fresh project installs, pinned as in sdk/ts and web/. */
const WS_VERSION = '8.23.0';
const ESBUILD_VERSION = '0.27.7';

const API_KEY = 'pack-test-api-key-0123456789abcdef012345';
const JWT_SECRET = 'pack-test-jwt-secret-0123456789abcdef0123';
const START_TIMEOUT_MS = 20_000;
const CHAT_TIMEOUT_MS = 20_000;
/** What `npm pack` must ship, and nothing else: the build, its types and map, the README and licence. */
const EXPECTED_FILES = ['LICENSE', 'README.md', 'dist/index.d.ts', 'dist/index.js', 'dist/index.js.map', 'package.json'];

const step = (what) => console.log(`pack: ${what}`);
const npm = (cwd, args) => execFileSync('npm', [...args, '--no-audit', '--no-fund', '--loglevel=error'], { cwd, encoding: 'utf8' });

function within(ms, what, p) {
  let timer;
  const t = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no result within ${ms} ms`)), ms);
  });
  return Promise.race([p, t]).finally(() => clearTimeout(timer));
}

/** Starts herald with secrets on 127.0.0.1:0; resolves with its base URL and a stop function. */
async function startHerald(log) {
  if (!existsSync(HERALD_BIN)) throw new Error(`herald binary not found at ${HERALD_BIN}: build it or set HERALD_BIN`);
  const data = mkdtempSync(join(tmpdir(), 'herald-pack-data-'));
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('HERALD_')));
  Object.assign(env, { HERALD_API_KEY: API_KEY, HERALD_JWT_SECRET: JWT_SECRET });
  const proc = spawn(HERALD_BIN, ['serve', '--listen', '127.0.0.1:0', '--data', data], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  const exited = new Promise((r) => proc.once('exit', (code, signal) => r({ code, signal })));
  proc.stderr.setEncoding('utf8').on('data', (c) => log.push(c));
  let out = '';
  const addr = new Promise((res, rej) => {
    proc.stdout.setEncoding('utf8').on('data', (c) => {
      log.push(c);
      out += c;
      const m = /herald listening on (\S+)/.exec(out);
      if (m) res(m[1]);
    });
    proc.once('error', rej);
    exited.then(({ code, signal }) => rej(new Error(`herald exited early (code ${code}, signal ${signal})`)));
  });
  const stop = async () => {
    if (proc.exitCode === null && proc.signalCode === null) {
      proc.kill('SIGTERM');
      await within(10_000, 'herald stopping', exited).catch(async () => {
        proc.kill('SIGKILL');
        await exited;
      });
    }
    rmSync(data, { recursive: true, force: true });
  };
  try {
    return { base: `http://${await within(START_TIMEOUT_MS, 'herald printing its address', addr)}`, stop };
  } catch (e) {
    await stop();
    throw e;
  }
}

async function token(base, user) {
  const res = await fetch(`${base}/v1/tokens`, {
    method: 'POST',
    headers: { authorization: `Bearer ${API_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ workspace: 'acme', user }),
  });
  assert.equal(res.status, 200, `a token for ${user}`);
  return (await res.json()).token;
}

/**
 * An app's chat, the same in Node and in the browser: alice and bob join `chat`, bob watches, alice
 * sends; resolves with what bob received. Written as source text so both runtimes get the same code.
 */
const CHAT_APP = `
import { HeraldClient, HeraldError } from '@herald/client';

export async function chat({ url, tokens, chat, text, WebSocket }) {
  const connect = (user) => {
    const c = new HeraldClient({ url, workspace: 'acme', token: () => tokens[user], ...(WebSocket ? { WebSocket } : {}) });
    return c.connect().then((hello) => ({ c, hello }));
  };
  const alice = await connect('alice');
  const bob = await connect('bob');
  try {
    const a = alice.c.chat(chat);
    const b = bob.c.chat(chat);
    await a.join();
    await b.join();
    const got = new Promise((resolve) => b.on('event', (ev) => { if (ev.type === 'message') resolve(ev); }));
    await b.watch();
    const { seq } = await a.send({ text });
    const ev = await got;
    let refused = null;
    try {
      await a.send({ text: 'x'.repeat(70000) });
    } catch (e) {
      refused = e instanceof HeraldError ? e.code : String(e);
    }
    return { user: alice.hello.user, sentSeq: seq, received: { seq: ev.seq, user: ev.user, body: ev.body, chat: ev.chat }, refused };
  } finally {
    alice.c.close();
    bob.c.close();
  }
}
`;

/** The types an app sees through the package's `exports`, checked by tsc with Node's resolution. */
const TYPES_CHECK = `
import { HeraldClient, HeraldError, type ChatEvent, type ClientOptions, type ClientState } from '@herald/client';

const options: ClientOptions = { url: 'ws://127.0.0.1:1/v1/ws', workspace: 'acme', token: () => 'x' };
const client = new HeraldClient(options);
const state: ClientState = client.state;
client.chat('general').on('event', (ev: ChatEvent) => {
  const seq: number = ev.seq;
  void seq;
});
export function code(e: unknown): string | null {
  return e instanceof HeraldError ? e.code : null;
}
void state;
// @ts-expect-error: the package exports its entry point only, not its sources.
import('@herald/client/src/index.ts');
`;

async function main() {
  const work = mkdtempSync(join(tmpdir(), 'herald-pack-'));
  const log = [];
  let herald = null;
  let browserServer = null;
  try {
    step('npm pack (prepack builds dist/)');
    // The prepack build logs to stdout too; npm's JSON report is the last thing written.
    const report = npm(sdkDir, ['pack', '--json', '--pack-destination', work]);
    const packed = JSON.parse(report.slice(report.search(/^\[/m)))[0];
    const files = packed.files.map((f) => f.path).sort();
    assert.deepEqual(files, EXPECTED_FILES, `the tarball's files`);
    assert.equal(packed.name, '@herald/client');
    const tarball = join(work, packed.filename);

    step('a fresh project installs the tarball offline');
    const app = join(work, 'app');
    execFileSync('mkdir', ['-p', app]);
    writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'pack-test-app', private: true, type: 'module' }, null, 2));
    npm(app, ['install', '--offline', tarball]);
    const installed = JSON.parse(readFileSync(join(app, 'node_modules/@herald/client/package.json'), 'utf8'));
    assert.deepEqual(installed.exports, { '.': { types: './dist/index.d.ts', import: './dist/index.js' } });
    assert.deepEqual(installed.dependencies ?? {}, {}, 'no runtime dependencies');
    step(`its tools from the registry (or npm's cache): ws@${WS_VERSION}, esbuild@${ESBUILD_VERSION}`);
    npm(app, ['install', '--prefer-offline', '--save-exact', `ws@${WS_VERSION}`, `esbuild@${ESBUILD_VERSION}`]);

    step('types through exports (tsc, module resolution NodeNext)');
    writeFileSync(join(app, 'types-check.ts'), TYPES_CHECK);
    writeFileSync(
      join(app, 'tsconfig.json'),
      JSON.stringify({ compilerOptions: { module: 'NodeNext', moduleResolution: 'NodeNext', target: 'ES2022', strict: true, noEmit: true, types: [], lib: ['ES2022', 'DOM'] }, files: ['types-check.ts'] }),
    );
    execFileSync(process.execPath, [join(sdkDir, 'node_modules/typescript/bin/tsc'), '-p', app], { cwd: app, encoding: 'utf8' });
    const deep = execFileSync(process.execPath, ['--input-type=module', '-e', "import('@herald/client/dist/index.js').then(() => console.log('loaded'), (e) => console.log(e.code))"], { cwd: app, encoding: 'utf8' });
    assert.equal(deep.trim(), 'ERR_PACKAGE_PATH_NOT_EXPORTED', 'only the entry point is exported');

    herald = await startHerald(log);
    const url = `${herald.base.replace('http://', 'ws://')}/v1/ws`;
    const tokens = { alice: await token(herald.base, 'alice'), bob: await token(herald.base, 'bob') };
    writeFileSync(join(app, 'chat-app.mjs'), CHAT_APP);

    step('plain Node (ESM) chats through herald');
    writeFileSync(
      join(app, 'node-main.mjs'),
      `import WebSocket from 'ws';\nimport { chat } from './chat-app.mjs';\n` +
        `const r = await chat({ ...JSON.parse(process.argv[2]), WebSocket });\nconsole.log(JSON.stringify(r));\n`,
    );
    const nodeArgs = JSON.stringify({ url, tokens, chat: 'from-node', text: 'hello from node' });
    const fromNode = JSON.parse(execFileSync(process.execPath, ['node-main.mjs', nodeArgs], { cwd: app, encoding: 'utf8', timeout: CHAT_TIMEOUT_MS }));
    assert.deepEqual(fromNode, {
      user: 'alice',
      sentSeq: 3,
      received: { seq: 3, user: 'alice', body: { text: 'hello from node' }, chat: 'from-node' },
      refused: 'too_large',
    });

    step('bundled by esbuild in the project, run in Chromium');
    writeFileSync(join(app, 'browser-main.mjs'), `import { chat } from './chat-app.mjs';\nwindow.packTest = { chat };\n`);
    execFileSync(
      join(app, 'node_modules/.bin/esbuild'),
      ['browser-main.mjs', '--bundle', '--format=iife', '--platform=browser', '--target=es2022', '--outfile=bundle.js', '--log-level=warning'],
      { cwd: app, encoding: 'utf8' },
    );
    const bundle = readFileSync(join(app, 'bundle.js'), 'utf8');
    assert.ok(bundle.includes('HeraldClient'), 'the bundle holds the client');
    const webRequire = createRequire(join(repoDir, 'web', 'package.json'));
    let chromium;
    try {
      ({ chromium } = webRequire('playwright-core'));
    } catch {
      throw new Error('playwright-core not found: run `npm install` in web/ first');
    }
    if (!existsSync(CHROMIUM_BIN)) throw new Error(`Chromium not found at ${CHROMIUM_BIN}: apt-get install -y chromium, or set CHROMIUM_BIN`);
    browserServer = await chromium.launchServer({
      executablePath: CHROMIUM_BIN,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'],
      timeout: START_TIMEOUT_MS,
    });
    const browser = await chromium.connect(browserServer.wsEndpoint(), { timeout: START_TIMEOUT_MS });
    const page = await browser.newPage();
    const errors = [];
    page.on('pageerror', (e) => errors.push(e.message));
    await page.goto(`${herald.base}/healthz`);
    await page.addScriptTag({ content: bundle });
    const fromBrowser = await within(
      CHAT_TIMEOUT_MS,
      'the chat in Chromium',
      page.evaluate((args) => window.packTest.chat(args), { url, tokens, chat: 'from-browser', text: 'hello from the browser' }),
    );
    assert.deepEqual(fromBrowser, {
      user: 'alice',
      sentSeq: 3,
      received: { seq: 3, user: 'alice', body: { text: 'hello from the browser' }, chat: 'from-browser' },
      refused: 'too_large',
    });
    assert.deepEqual(errors, [], 'uncaught errors in the page');
    await browser.close();
    step('ok: the packed SDK chats from Node and from a browser bundle');
  } catch (e) {
    if (log.length > 0) console.error(`herald's output:\n${log.join('').slice(-4000)}`);
    throw e;
  } finally {
    if (browserServer !== null) await within(10_000, 'stopping the browser', browserServer.close()).catch(() => browserServer.kill());
    if (herald !== null) await herald.stop();
    rmSync(work, { recursive: true, force: true });
  }
}

await main();
