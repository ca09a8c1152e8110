/**
 * A Docker engine of its own for one image build, on a filesystem of its own.
 *
 * A rebuild runs `RUN` steps an agent wrote. The engine's build API bounds their
 * memory and CPU but not what they write: on the host's engine a step could fill
 * the host's Docker storage, and a step that deletes what it wrote passes any
 * check made after the build. So a bounded build runs on a second `dockerd`
 * started for it, whose data root is a loop-mounted ext4 image of the base
 * image's size plus the bottle's disk quota: a write past that fails inside the
 * step with "No space left on device", whatever the step does next, and the
 * inodes are bounded with the blocks. Its steps run in a cgroup of their own
 * (processes and memory capped for the whole build) that is killed at the time
 * limit. The base image is copied in and the result copied out through the two
 * engines' APIs; the engine, its files and its filesystem are gone afterwards.
 *
 * It needs root (mounts, cgroups) and `dockerd` on this machine, as bottle disks
 * need root: `canBuildBounded()` says whether it is possible here.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  closeSync,
  existsSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  rmdirSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { BbError } from '@bb/errors';
import { minimalEnv } from '@bb/wall';
import type Docker from 'dockerode';
import { canMountDisks, mountScratchDisk, unmountScratchDisk } from './disk';

/** The cgroup v1 hierarchies a build's cgroup is made in (cgroupfs driver). */
const CGROUP_V1 = '/sys/fs/cgroup';

/** Whether builds can be bounded while they run on this machine: root, dockerd, loop mounts. */
export function canBuildBounded(): boolean {
  if (!canMountDisks()) return false;
  try {
    execFileSync('sh', ['-c', 'command -v dockerd'], { stdio: 'ignore', env: minimalEnv() });
    return true;
  } catch {
    return false;
  }
}

export interface BuildEngine {
  docker: Docker;
  /** The cgroup parent the build's containers run under (`cgroupparent` of the build API). */
  cgroupParent: string | undefined;
  /** Kill every process of the build's steps at once (the time limit). */
  killSteps(): void;
  /** Stop the engine, and remove its files and its filesystem. Idempotent. */
  close(): Promise<void>;
}

export interface BuildEngineOptions {
  /** Where its disk image and log are kept while it runs (a host directory of ours). */
  dir: string;
  /** The size of its filesystem: what the base image takes plus what the steps may write. */
  diskBytes: number;
  /** Processes the build's steps may have at once. */
  pidsLimit: number;
  /** Memory the build's steps may take together. */
  memoryBytes: number;
  onProgress?: (line: string) => void;
}

/** Start an engine for one build. Its caller closes it. */
export async function startBuildEngine(o: BuildEngineOptions): Promise<BuildEngine> {
  const id = randomBytes(4).toString('hex');
  mkdirSync(o.dir, { recursive: true, mode: 0o700 });
  const image = join(o.dir, 'disk.img');
  const root = join(o.dir, 'root');
  // Short: containerd's sockets live below the exec root (a socket path has 108 bytes).
  const exec = `/run/bb-build-${id}`;
  const sock = `${exec}.sock`;
  const cgroup = `bb-build-${id}`;
  let child: ChildProcess | undefined;
  let closed = false;
  const cgroups = makeCgroup(cgroup, o.pidsLimit, o.memoryBytes);
  const close = async () => {
    if (closed) return;
    closed = true;
    killCgroup(cgroup);
    if (child?.pid) await stopProcess(child, 20_000);
    killCgroup(cgroup);
    await unmountScratchDisk(root).catch(() => {});
    removeCgroup(cgroup);
    rmSync(exec, { recursive: true, force: true });
    rmSync(sock, { force: true });
    rmSync(`${exec}.pid`, { force: true });
    rmSync(o.dir, { recursive: true, force: true });
  };
  try {
    o.onProgress?.(
      `a build engine of its own: ${Math.round(o.diskBytes / 1024 ** 2)} MiB of disk, ${o.pidsLimit} processes`,
    );
    await mountScratchDisk(image, root, o.diskBytes);
    mkdirSync(exec, { recursive: true, mode: 0o700 });
    const log = openSync(join(o.dir, 'dockerd.log'), 'a', 0o600);
    try {
      child = spawn(
        'dockerd',
        [
          '--data-root',
          join(root, 'data'),
          '--exec-root',
          exec,
          '--pidfile',
          `${exec}.pid`,
          '--host',
          `unix://${sock}`,
          '--storage-driver',
          'overlay2',
          '--iptables=false',
          '--ip6tables=false',
          '--bridge=none',
          '--ip-forward=false',
          '--userland-proxy=false',
        ],
        { stdio: ['ignore', log, log], detached: true, env: minimalEnv() },
      );
    } finally {
      closeSync(log);
    }
    child.unref();
    const { default: DockerClient } = await import('dockerode');
    const docker = new DockerClient({ socketPath: sock });
    const deadline = Date.now() + 30_000;
    for (;;) {
      if (child.exitCode !== null)
        throw new BbError(
          'BACKEND_ERROR',
          `the build engine exited at once (${tail(join(o.dir, 'dockerd.log'))})`,
        );
      try {
        await docker.ping();
        break;
      } catch {
        if (Date.now() > deadline)
          throw new BbError(
            'TIMEOUT',
            `the build engine did not answer within 30 s (${tail(join(o.dir, 'dockerd.log'))})`,
          );
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    return {
      docker,
      cgroupParent: cgroups ? `/${cgroup}` : undefined,
      killSteps: () => killCgroup(cgroup),
      close,
    };
  } catch (err) {
    await close();
    throw err;
  }
}

/** Copy an image from one engine to another (as `docker save | docker load`). */
export async function copyImage(from: Docker, to: Docker, ref: string): Promise<void> {
  const saved = await from.getImage(ref).get();
  const loading = await to.loadImage(saved as unknown as NodeJS.ReadableStream, { quiet: true });
  await new Promise<void>((resolve, reject) => {
    to.modem.followProgress(loading, (err: Error | null, out: Array<{ error?: string }>) => {
      const failed = err?.message ?? out.find((e) => e.error)?.error;
      if (failed) reject(new BbError('BACKEND_ERROR', `copying image ${ref}: ${failed}`));
      else resolve();
    });
  });
}

/** Make the build's cgroup in the pids and memory hierarchies; false when they are not there. */
function makeCgroup(name: string, pids: number, memory: number): boolean {
  const pidsDir = join(CGROUP_V1, 'pids', name);
  const memDir = join(CGROUP_V1, 'memory', name);
  if (!existsSync(join(CGROUP_V1, 'pids', 'pids.max')) && !existsSync(join(CGROUP_V1, 'pids')))
    return false;
  try {
    mkdirSync(pidsDir);
    writeFileSync(join(pidsDir, 'pids.max'), String(pids));
    if (existsSync(join(CGROUP_V1, 'memory'))) {
      mkdirSync(memDir);
      writeFileSync(join(memDir, 'memory.limit_in_bytes'), String(memory));
    }
    return true;
  } catch {
    removeCgroup(name);
    return false;
  }
}

/** Every process of the build's cgroup (and of the containers below it), killed. */
function killCgroup(name: string): void {
  const base = join(CGROUP_V1, 'pids', name);
  const walk = (dir: string): number[] => {
    if (!existsSync(dir)) return [];
    let pids: number[] = [];
    try {
      pids = readFileSync(join(dir, 'cgroup.procs'), 'utf8')
        .split('\n')
        .filter(Boolean)
        .map(Number);
    } catch {}
    for (const e of safeReaddir(dir)) if (e.isDirectory()) pids.push(...walk(join(dir, e.name)));
    return pids;
  };
  for (const pid of walk(base))
    try {
      process.kill(pid, 'SIGKILL');
    } catch {}
}

function removeCgroup(name: string): void {
  for (const ctl of ['pids', 'memory']) {
    const dir = join(CGROUP_V1, ctl, name);
    const rm = (d: string) => {
      for (const e of safeReaddir(d)) if (e.isDirectory()) rm(join(d, e.name));
      try {
        rmdirSync(d);
      } catch {}
    };
    if (existsSync(dir)) rm(dir);
  }
}

function safeReaddir(dir: string) {
  try {
    return readdirSync(dir, { withFileTypes: true });
  } catch {
    return [];
  }
}

/** SIGTERM to the process group, then SIGKILL after `ms`. */
async function stopProcess(child: ChildProcess, ms: number): Promise<void> {
  const group = (sig: NodeJS.Signals) => {
    try {
      process.kill(-child.pid!, sig);
    } catch {}
  };
  if (child.exitCode !== null) return;
  const ended = new Promise<void>((r) => child.once('exit', () => r()));
  group('SIGTERM');
  const timer = new Promise<'late'>((r) => setTimeout(() => r('late'), ms).unref());
  if ((await Promise.race([ended, timer])) === 'late') {
    group('SIGKILL');
    await Promise.race([ended, new Promise((r) => setTimeout(r, 5000).unref())]);
  }
}

function tail(file: string): string {
  try {
    return readFileSync(file, 'utf8').trim().split('\n').slice(-3).join(' | ').slice(-600);
  } catch {
    return 'no log';
  }
}
