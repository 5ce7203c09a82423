//! A real herald cell for integration tests: a PostgreSQL cluster holding the cell's one shard (Debian's
//! server binaries, started through the repository's scripts/pg.sh, which runs them as the `postgres`
//! user when we are root), a nats-server as the cell's bus, and herald nodes sharing both, each on a free
//! loopback port with the same secrets.
//!
//! Owns: finding those programs, starting them, waiting until the nodes see each other, and stopping
//! everything by pid (SIGCONT first for a frozen node), its temporary directory removed.
//! Does not own: one herald process (harness.ts's `Herald`) or assertions (the tests).

import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort, Herald, newSecrets, sleep, until } from './harness.js';

/** The repository's PostgreSQL script (initdb, pg_ctl, as the `postgres` user when run as root). */
const PG_SH = fileURLToPath(new URL('../../../../scripts/pg.sh', import.meta.url));

/** Debian's nats-server, where scripts/test.sh installs it. */
const NATS_BIN = ['/usr/sbin/nats-server', '/usr/bin/nats-server'].find((p) => existsSync(p)) ?? '';

/** Whether PostgreSQL's server binaries are installed (what pg.sh looks for). */
function hasPostgres(): boolean {
  const root = '/usr/lib/postgresql';
  if (!existsSync(root)) return false;
  return readdirSync(root).some((v) => existsSync(join(root, v, 'bin', 'initdb')));
}

/** Why a cell cannot be started here, or null when it can. */
export function cellMissing(): string | null {
  if (NATS_BIN === '') return 'nats-server is not installed (apt-get install nats-server)';
  if (!hasPostgres()) return 'PostgreSQL server binaries are not installed (apt-get install postgresql)';
  if (!existsSync(PG_SH)) return `${PG_SH} is missing`;
  return null;
}

/** True once a TCP connect to 127.0.0.1:`port` succeeds. */
function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}

/** Runs `file args`, resolving with its stdout; rejects with its stderr. */
function run(file: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(file, args, { timeout: 60_000 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`${file} ${args.join(' ')}: ${err.message}\n${stderr}`));
      else resolve(stdout);
    });
  });
}

/**
 * Whether process `pid` still runs. Not `kill(pid, 0)`: the postmaster is not our child (pg_ctl
 * detaches it), and where nobody reaps it, its zombie would answer that forever.
 */
function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}

/** A cell: PostgreSQL, NATS and herald nodes. `stop()` ends them all. */
export class Cell {
  readonly nodes: Herald[] = [];
  /** The secrets every node of the cell shares. */
  private readonly secrets = newSecrets();
  private nats: ChildProcess | null = null;
  private postmaster: number | null = null;

  private constructor(
    /** Holds the PostgreSQL data directory. */
    private readonly dir: string,
    /** `postgres://herald@127.0.0.1:PORT/postgres`: the shard (the cluster's own database will do). */
    private store = '',
    private natsUrl = '',
  ) {}

  /**
   * Starts PostgreSQL and NATS, then `n` herald nodes named `node-0`.. that share them, and waits until
   * every node lists all `n`. Rebalancing is off, so a client stays on the node it chose.
   */
  static async start(n: number): Promise<Cell> {
    const cell = new Cell(mkdtempSync(join(tmpdir(), 'herald-cell-')));
    try {
      await cell.startPostgres();
      await cell.startNats();
      for (let i = 0; i < n; i++) {
        const args = ['--node', `node-${i}`, '--store', cell.store, '--broker', cell.natsUrl, '--rebalance', 'false'];
        cell.nodes.push(await Herald.start(args, cell.secrets));
      }
      await cell.waitMembers(n);
      return cell;
    } catch (err) {
      await cell.stop();
      throw err;
    }
  }

  private async startPostgres(): Promise<void> {
    const port = await freePort();
    const admin = (await run(PG_SH, ['start', join(this.dir, 'pg'), String(port)])).trim();
    this.postmaster = Number(readFileSync(join(this.dir, 'pg', 'postmaster.pid'), 'utf8').split('\n')[0]);
    this.store = admin;
  }

  private async startNats(): Promise<void> {
    const port = await freePort();
    this.nats = spawn(NATS_BIN, ['-a', '127.0.0.1', '-p', String(port)], { stdio: 'ignore' });
    this.natsUrl = `nats://127.0.0.1:${port}`;
    await until('nats-server to accept connections', () => accepts(port), { timeoutMs: 15_000, intervalMs: 50 });
  }

  /** Waits until every node's /v1/admin/nodes lists `n` live nodes (each announces itself every second). */
  private async waitMembers(n: number): Promise<void> {
    await until(
      `${n} nodes to see each other`,
      async () => {
        for (const node of this.nodes) {
          const { nodes } = await node.api<{ nodes: unknown[] }>('GET', '/v1/admin/nodes');
          if (nodes.length !== n) return false;
        }
        return true;
      },
      { timeoutMs: 30_000, intervalMs: 100 },
    );
  }

  /** Stops every node (thawing a frozen one first), NATS and PostgreSQL, by pid; removes the directory. */
  async stop(): Promise<void> {
    for (const node of this.nodes) await node.dispose().catch(() => {});
    const nats = this.nats;
    this.nats = null;
    if (nats !== null && nats.exitCode === null && nats.signalCode === null) {
      const exited = new Promise<void>((r) => nats.once('exit', () => r()));
      nats.kill('SIGTERM');
      await exited;
    }
    const pm = this.postmaster;
    this.postmaster = null;
    if (pm !== null && alive(pm)) {
      process.kill(pm, 'SIGINT'); // PostgreSQL's fast shutdown: sessions cut, no wait for clients
      for (let i = 0; i < 300 && alive(pm); i++) await sleep(100);
      if (alive(pm)) process.kill(pm, 'SIGKILL');
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}
