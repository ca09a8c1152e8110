import { type ChildProcess, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { BbError } from '@bb/errors';
import { LABEL } from '@bb/names';
import pkg from '../../package.json' with { type: 'json' };
import {
  type Backend,
  type BottleInfo,
  type BottleSpec,
  VERSION_LABEL,
  type WaitResult,
} from './backend';

interface LocalBottle {
  id: string;
  spec: BottleSpec;
  labels: Record<string, string>;
  child: ChildProcess | undefined;
  state: BottleInfo['state'];
  exitCode: number | null;
  /** What it wrote, each piece with when (ms since the epoch). */
  output: Array<{ at: number; text: string }>;
  exited: Promise<WaitResult>;
  resolveExit: (r: WaitResult) => void;
}

export const LOCAL_BACKEND_WARNING =
  '[bb] WARNING: the local backend runs agents as plain processes on this machine. It does NOT isolate them: no container, the network and your files are reachable. Use it only for development.';

/**
 * Bottles as plain child processes, for development and for machines with no
 * Docker engine. It does not isolate anything, and says so every time it is
 * created. Mount targets are not remapped: commands see the host's paths.
 */
export class LocalBackend implements Backend {
  readonly name = 'local';
  readonly isolates = false;
  readonly mapsMounts = false;
  readonly #bottles = new Map<string, LocalBottle>();

  constructor(options: { warn?: (message: string) => void } = {}) {
    (options.warn ?? ((m: string) => process.stderr.write(`${m}\n`)))(LOCAL_BACKEND_WARNING);
  }

  async ensureImage(): Promise<void> {
    // No images: commands run from this machine's PATH.
  }

  async create(spec: BottleSpec): Promise<string> {
    if (!spec.labels[LABEL.slug] || !spec.labels[LABEL.role]) {
      throw new BbError(
        'INVALID_INPUT',
        `bottle ${spec.name} needs the labels bb.slug and bb.role`,
      );
    }
    for (const b of this.#bottles.values()) {
      if (b.spec.name === spec.name)
        throw new BbError(
          'CONFLICT',
          `a bottle named ${spec.name} already exists; destroy it or choose another slug`,
        );
    }
    const id = randomUUID();
    let resolveExit!: (r: WaitResult) => void;
    const exited = new Promise<WaitResult>((r) => {
      resolveExit = r;
    });
    this.#bottles.set(id, {
      id,
      spec,
      labels: { ...spec.labels, [VERSION_LABEL]: pkg.version },
      child: undefined,
      state: 'created',
      exitCode: null,
      output: [],
      exited,
      resolveExit,
    });
    return id;
  }

  async start(id: string): Promise<void> {
    const b = this.#get(id);
    if (b.state !== 'created')
      throw new BbError('CONFLICT', `bottle ${b.spec.name} was already started`);
    const [cmd, ...args] = b.spec.cmd;
    if (!cmd) throw new BbError('INVALID_INPUT', `bottle ${b.spec.name} has no command`);
    const child = spawn(cmd, args, {
      cwd: b.spec.workdir,
      env: { PATH: process.env['PATH'], HOME: process.env['HOME'], ...b.spec.env },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    b.child = child;
    b.state = 'running';
    child.stdout?.on('data', (d) => b.output.push({ at: Date.now(), text: String(d) }));
    child.stderr?.on('data', (d) => b.output.push({ at: Date.now(), text: String(d) }));
    child.on('error', (err) => {
      b.output.push({ at: Date.now(), text: `${err.message}\n` });
      b.state = 'exited';
      b.exitCode = 127;
      b.resolveExit({ exitCode: 127, oomKilled: false });
    });
    child.on('exit', (code, signal) => {
      // As a container's end takes everything in it: what the command left running in
      // its process group (a bridge holding the host's ports, say) goes with it.
      try {
        if (child.pid) process.kill(-child.pid, 'SIGKILL');
      } catch {
        // nothing was left
      }
      b.state = 'exited';
      b.exitCode = code ?? (signal ? 128 + (signal === 'SIGKILL' ? 9 : 15) : 1);
      b.resolveExit({ exitCode: b.exitCode, oomKilled: false });
    });
  }

  async wait(
    id: string,
    options: { timeoutMs?: number; signal?: AbortSignal } = {},
  ): Promise<WaitResult> {
    const exited = this.#get(id).exited;
    if (!options.timeoutMs && !options.signal) return exited;
    let timer: NodeJS.Timeout | undefined;
    let onAbort: (() => void) | undefined;
    try {
      return await Promise.race([
        exited,
        new Promise<never>((_, reject) => {
          onAbort = () => reject(new BbError('ABORTED', `stopped waiting for bottle ${id}`));
          if (options.signal?.aborted) onAbort();
          else options.signal?.addEventListener('abort', onAbort, { once: true });
        }),
        new Promise<never>((_, reject) => {
          if (!options.timeoutMs) return;
          timer = setTimeout(
            () =>
              reject(
                new BbError('TIMEOUT', `bottle ${id} did not exit within ${options.timeoutMs} ms`),
              ),
            options.timeoutMs,
          );
        }),
      ]);
    } finally {
      if (timer) clearTimeout(timer);
      if (onAbort) options.signal?.removeEventListener('abort', onAbort);
    }
  }

  async stop(id: string, timeoutMs = 10_000): Promise<void> {
    const b = this.#get(id);
    if (b.state !== 'running' && b.state !== 'paused') return;
    this.#signal(b, 'SIGCONT');
    this.#signal(b, 'SIGTERM');
    const timer = setTimeout(() => this.#signal(b, 'SIGKILL'), timeoutMs);
    await b.exited;
    clearTimeout(timer);
  }

  async freeze(id: string): Promise<void> {
    this.#move(id, 'running', 'SIGSTOP', 'paused');
  }

  async rehydrate(id: string): Promise<void> {
    this.#move(id, 'paused', 'SIGCONT', 'running');
  }

  /** Stop or continue a bottle's processes: only from `from` (CONFLICT otherwise). */
  #move(
    id: string,
    from: 'running' | 'paused',
    signal: NodeJS.Signals,
    to: 'running' | 'paused',
  ): void {
    const b = this.#get(id);
    if (b.state !== from) {
      const want = from === 'running' ? 'running' : 'frozen';
      throw new BbError('CONFLICT', `bottle ${b.spec.name} is ${b.state}, not ${want}`);
    }
    this.#signal(b, signal);
    b.state = to;
  }

  async destroy(id: string): Promise<void> {
    const b = this.#bottles.get(id);
    if (!b) return;
    if (b.state === 'running' || b.state === 'paused') await this.stop(id, 2000);
    this.#bottles.delete(id);
  }

  async list(labels: Record<string, string>): Promise<BottleInfo[]> {
    return [...this.#bottles.values()]
      .filter((b) => Object.entries(labels).every(([k, v]) => b.labels[k] === v))
      .map((b) => this.#info(b))
      .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  async inspect(id: string): Promise<BottleInfo | undefined> {
    const b = this.#bottles.get(id);
    return b ? this.#info(b) : undefined;
  }

  async logs(id: string, options: { sinceMs?: number } = {}): Promise<string> {
    const since = options.sinceMs ?? 0;
    return this.#get(id)
      .output.filter((o) => o.at >= since)
      .map((o) => o.text)
      .join('');
  }

  /** The processes of its command's process group (the command and what it started), from /proc. */
  async processes(id: string): Promise<number> {
    const pgid = this.#get(id).child?.pid;
    if (!pgid) return 0;
    let n = 0;
    for (const pid of readdirSync('/proc')) {
      if (!/^\d+$/.test(pid)) continue;
      try {
        // Fields after the command's closing parenthesis: state, ppid, pgrp, ...
        const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
        const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
        if (Number(rest[2]) === pgid && rest[0] !== 'Z') n++;
      } catch {
        // gone meanwhile
      }
    }
    return n;
  }

  #get(id: string): LocalBottle {
    const b = this.#bottles.get(id);
    if (!b) throw new BbError('NOT_FOUND', `bottle ${id} does not exist`);
    return b;
  }

  async signal(id: string, signal: NodeJS.Signals): Promise<void> {
    this.#signal(this.#get(id), signal);
  }

  #signal(b: LocalBottle, signal: NodeJS.Signals): void {
    if (!b.child?.pid) return;
    try {
      // The whole process group: the command and everything it started.
      process.kill(-b.child.pid, signal);
    } catch {
      // already gone
    }
  }

  #info(b: LocalBottle): BottleInfo {
    return {
      id: b.id,
      name: b.spec.name,
      image: b.spec.image,
      state: b.state,
      exitCode: b.state === 'exited' ? b.exitCode : null,
      oomKilled: false,
      labels: { ...b.labels },
      isolation: {
        network: 'host',
        capDrop: [],
        noNewPrivileges: false,
        readOnlyRootfs: false,
        user: String(process.getuid?.() ?? ''),
        pidsLimit: null,
        memoryBytes: null,
      },
    };
  }
}
