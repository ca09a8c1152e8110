// Docker engines of their own for a test: separate `dockerd` processes on this machine,
// each with its own data root, exec root, socket and cgroup parent, so each stands for
// one machine's engine. `die()` is that machine's end as near as one kernel allows: every
// process of its containers, its containerd with the shims, and the daemon, killed with
// SIGKILL at once.
import { execFile, spawn } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export interface TestEngine {
  name: string;
  /** `unix://…`, for DOCKER_HOST. */
  host: string;
  dir: string;
  /** Start it (again, after `die`, on the same data). */
  start(): Promise<void>;
  /** SIGKILL everything of it: its containers' processes, containerd, the shims, the daemon. */
  die(): Promise<void>;
  /** Stop it and remove everything it made. */
  remove(): Promise<void>;
}

/** Why engines of a test's own cannot run here (not root, no dockerd), or undefined. */
export function enginesSkipReason(): string | undefined {
  if (process.getuid?.() !== 0) return 'starting Docker engines needs root';
  if (!['/usr/sbin/dockerd', '/usr/bin/dockerd'].some((p) => existsSync(p)))
    return 'no dockerd on this machine';
  return undefined;
}

/** Every process in the cgroup tree `/sys/fs/cgroup/pids/<parent>` (cgroup v1), or none. */
function cgroupProcs(parent: string): number[] {
  const out: number[] = [];
  const walk = (dir: string) => {
    let names: string[];
    try {
      names = readdirSync(dir, { withFileTypes: true })
        .filter((d) => d.isDirectory())
        .map((d) => d.name);
      for (const l of readFileSync(join(dir, 'cgroup.procs'), 'utf8').split('\n'))
        if (/^\d+$/.test(l)) out.push(Number(l));
    } catch {
      return;
    }
    for (const n of names) walk(join(dir, n));
  };
  walk(join('/sys/fs/cgroup/pids', parent));
  return out;
}

async function unmountUnder(dir: string): Promise<void> {
  const mounts = readFileSync('/proc/mounts', 'utf8')
    .split('\n')
    .map((l) => l.split(' ')[1] ?? '')
    .filter((m) => m === dir || m.startsWith(`${dir}/`))
    .sort()
    .reverse();
  for (const m of mounts) await run('umount', ['-l', m]).catch(() => {});
}

/**
 * A new engine under `dir`, started, with `images` copied in from the default engine
 * (`docker save | docker load`: there is no registry here).
 */
export async function startEngine(
  name: string,
  dir: string,
  images: string[],
): Promise<TestEngine> {
  mkdirSync(dir, { recursive: true });
  const sock = join(dir, 'docker.sock');
  const host = `unix://${sock}`;
  const cgroup = `bb-test-${name}`;
  const engine: TestEngine = {
    name,
    host,
    dir,
    async start() {
      const child = spawn(
        'dockerd',
        [
          `--data-root=${join(dir, 'data')}`,
          `--exec-root=${join(dir, 'exec')}`,
          `--pidfile=${join(dir, 'dockerd.pid')}`,
          `--host=${host}`,
          '--storage-driver=overlay2',
          '--iptables=false',
          '--ip6tables=false',
          '--bridge=none',
          `--cgroup-parent=/${cgroup}`,
        ],
        { detached: true, stdio: ['ignore', 'ignore', 'ignore'] },
      );
      child.unref();
      const end = Date.now() + 30_000;
      for (;;) {
        const up = await run('docker', ['-H', host, 'info', '--format', '{{.ID}}']).then(
          () => true,
          () => false,
        );
        if (up) return;
        if (Date.now() > end) throw new Error(`engine ${name} did not come up in 30 s`);
        await sleep(200);
      }
    },
    async die() {
      for (const pid of cgroupProcs(cgroup)) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // gone already
        }
      }
      // dockerd, its containerd and every shim name the engine's directory.
      await run('pkill', ['-KILL', '-f', `${dir}/`]).catch(() => {});
      for (let i = 0; i < 50 && existsSync(join(dir, 'dockerd.pid')); i++) {
        const alive = await run('pgrep', ['-f', `${dir}/`]).then(
          () => true,
          () => false,
        );
        if (!alive) break;
        await sleep(100);
      }
      rmSync(join(dir, 'dockerd.pid'), { force: true });
      // Its container filesystems were the dead daemon's: nothing mounts them now.
      await unmountUnder(join(dir, 'exec'));
      await unmountUnder(join(dir, 'data'));
    },
    async remove() {
      await engine.die();
      rmSync(dir, { recursive: true, force: true });
    },
  };
  await engine.start();
  for (const image of images)
    await run('sh', ['-c', `docker save "$1" | docker -H "$2" load -q`, 'sh', image, host], {
      maxBuffer: 1024 * 1024,
    });
  return engine;
}
