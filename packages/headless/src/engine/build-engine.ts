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
  readFileSync,
  readlinkSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { BbError } from '@bb/errors';
import { minimalEnv } from '@bb/wall';
import type Docker from 'dockerode';
import {
  CGROUPS,
  killCgroup,
  makeCgroup,
  removeCgroup,
  safeReaddir,
  unified,
} from './build-cgroup';
import { alive, bootId, netnsPath, reclaimBuildNetwork, removeBuildNetns } from './build-network';
import { canMountDisks, mountScratchDisk, unmountScratchDisk } from './disk';

/** Whether builds can be bounded while they run on this machine: root, dockerd, loop mounts. */
export function canBuildBounded(): boolean {
  if (!canMountDisks()) return false;
  if (!unified() && !existsSync(join(CGROUPS, 'pids'))) return false;
  try {
    execFileSync('sh', ['-c', 'command -v dockerd && command -v containerd'], {
      stdio: 'ignore',
      env: minimalEnv(),
    });
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
  /**
   * A network namespace to run the engine in (build-network.ts): its steps then
   * share it, and reach what it offers. Absent: the engine's own, with no network for steps.
   */
  netns?: string | undefined;
  onProgress?: (line: string) => void;
}

/** Start an engine for one build. Its caller closes it. */
export async function startBuildEngine(o: BuildEngineOptions): Promise<BuildEngine> {
  const id = randomBytes(4).toString('hex');
  mkdirSync(o.dir, { recursive: true, mode: 0o700 });
  await reclaimBuildEngines(join(o.dir, '..'));
  const image = join(o.dir, 'disk.img');
  const root = join(o.dir, 'root');
  // Short: containerd's sockets live below the exec root (a socket path has 108 bytes).
  const exec = `/run/bb-build-${id}`;
  const sock = `${exec}.sock`;
  const cgroup = `bb-build-${id}`;
  let child: ChildProcess | undefined;
  let ctr: ChildProcess | undefined;
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    // Held until it is all gone: a one-shot process (`bb supervise approve`) waits for it.
    child?.ref();
    await tearDown(
      { pid: child?.pid, containerd: ctr?.pid, exec, cgroup, root, dir: o.dir, netns: o.netns },
      child,
      ctr,
    );
  };
  if (!makeCgroup(cgroup, o.pidsLimit, o.memoryBytes))
    throw new BbError(
      'BACKEND_ERROR',
      'a bounded build needs a cgroup of its own (pids and memory controllers, v1 or v2) and could not make one; run as root, or set BB_BUILD_BOUNDED=off',
    );
  try {
    o.onProgress?.(
      `a build engine of its own: ${Math.round(o.diskBytes / 1024 ** 2)} MiB of disk, ${o.pidsLimit} processes`,
    );
    await mountScratchDisk(image, root, o.diskBytes);
    mkdirSync(exec, { recursive: true, mode: 0o700 });
    // Its own configuration: nothing of the host's daemon.json (a data root, hosts, a
    // systemd cgroup driver, live restore) applies to it.
    writeFileSync(join(o.dir, 'daemon.json'), '{}\n', { mode: 0o600 });
    const log = openSync(join(o.dir, 'dockerd.log'), 'a', 0o600);
    // Started the same way, in the build's namespace when it has one.
    const start = (cmd: string, args: string[]) => {
      const c = spawn(
        o.netns ? 'nsenter' : cmd,
        o.netns ? [`--net=${netnsPath(o.netns)}`, cmd, ...args] : args,
        { stdio: ['ignore', log, log], detached: true, env: minimalEnv() },
      );
      // Not installed: seen as its exit (below), never an error nobody listens for.
      c.on('error', () => {});
      return c;
    };
    // A containerd of its own, never the host's: given none, dockerd uses a system
    // containerd it finds (/run/containerd/containerd.sock), whose containers would be
    // in the host's network and not the build's.
    const ctrSock = join(exec, 'containerd.sock');
    try {
      writeFileSync(
        join(o.dir, 'containerd.toml'),
        [
          'version = 2',
          `root = ${JSON.stringify(join(root, 'containerd'))}`,
          `state = ${JSON.stringify(join(exec, 'containerd-state'))}`,
          'disabled_plugins = ["io.containerd.grpc.v1.cri"]',
          '[grpc]',
          `  address = ${JSON.stringify(ctrSock)}`,
          '[ttrpc]',
          `  address = ${JSON.stringify(`${ctrSock}.ttrpc`)}`,
          '[debug]',
          '  address = ""',
          '',
        ].join('\n'),
        { mode: 0o600 },
      );
      ctr = start('containerd', ['--config', join(o.dir, 'containerd.toml')]);
      ctr.unref();
      const ctrDeadline = Date.now() + 30_000;
      while (!existsSync(ctrSock)) {
        if (ctr.exitCode !== null || Date.now() > ctrDeadline)
          throw new BbError(
            'BACKEND_ERROR',
            `the build's containerd did not start (${tail(join(o.dir, 'dockerd.log'))})`,
          );
        await new Promise((r) => setTimeout(r, 50));
      }
      if (o.netns) inNetns(ctr.pid!, o.netns, 'containerd');
    } catch (err) {
      closeSync(log);
      throw err;
    }
    try {
      const dockerd = [
        '--config-file',
        join(o.dir, 'daemon.json'),
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
        '--exec-opt',
        'native.cgroupdriver=cgroupfs',
        '--containerd',
        ctrSock,
      ];
      // In the build's namespace when it has one (nsenter becomes dockerd: same pid).
      child = start('dockerd', dockerd);
    } finally {
      closeSync(log);
    }
    child.unref();
    // What a later build (or a restarted orchestrator) needs to clean up after this one
    // if this process dies first: its owner, its daemon, its roots and its cgroup.
    writeFileSync(
      join(o.dir, 'engine.json'),
      JSON.stringify({
        owner: process.pid,
        boot: bootId(),
        pid: child.pid,
        containerd: ctr.pid,
        exec,
        cgroup,
        root,
        netns: o.netns,
      }),
      { mode: 0o600 },
    );
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
    // Answering, so past its start: in the namespace it was started in, or stopped here.
    if (o.netns) inNetns(child.pid!, o.netns, 'dockerd');
    return {
      docker,
      cgroupParent: `/${cgroup}`,
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
  const saved = await from
    .getImage(ref)
    .get()
    .catch((err: Error) => {
      throw new BbError(
        'NOT_FOUND',
        `image ${ref} is not on the engine (${err.message.split('\n')[0]}): build or pull it there first`,
      );
    });
  const loading = await to.loadImage(saved as unknown as NodeJS.ReadableStream, { quiet: true });
  await new Promise<void>((resolve, reject) => {
    to.modem.followProgress(loading, (err: Error | null, out: Array<{ error?: string }>) => {
      const failed = err?.message ?? out.find((e) => e.error)?.error;
      if (failed) reject(new BbError('BACKEND_ERROR', `copying image ${ref}: ${failed}`));
      else resolve();
    });
  });
}

interface EngineRecord {
  owner?: number;
  boot?: string;
  pid?: number | undefined;
  containerd?: number | undefined;
  exec: string;
  cgroup: string;
  root: string;
  dir: string;
  netns?: string | undefined;
}

/** Everything of one engine gone: its steps, its daemon, its filesystem, its cgroup, its files. */
async function tearDown(e: EngineRecord, child?: ChildProcess, ctr?: ChildProcess): Promise<void> {
  killCgroup(e.cgroup);
  if (child?.pid) await stopProcess(child, 20_000);
  else if (e.pid) await stopPid(e.pid, 20_000);
  if (ctr?.pid) await stopProcess(ctr, 10_000);
  else if (e.containerd) await stopPid(e.containerd, 10_000);
  killCgroup(e.cgroup);
  await unmountScratchDisk(e.root).catch(() => {});
  removeCgroup(e.cgroup);
  // What the daemon left mounted below its exec root (in a namespace of its own, the
  // file it binds its network namespace to) goes first: a mount point cannot be removed.
  unmountBelow(e.exec);
  rmSync(e.exec, { recursive: true, force: true });
  rmSync(`${e.exec}.sock`, { force: true });
  rmSync(`${e.exec}.pid`, { force: true });
  // The build's network (its proxy and bridge, its namespace) before its files go.
  reclaimBuildNetwork(join(e.dir, 'net'));
  rmSync(e.dir, { recursive: true, force: true });
  if (e.netns) removeBuildNetns(e.netns);
}

/**
 * Check that a process the build started runs in the build's network namespace
 * (the one its steps get): else the build stops here, before any step runs.
 */
function inNetns(pid: number, netns: string, what: string): void {
  let ours: string | undefined;
  let its: string | undefined;
  try {
    ours = String(statSync(netnsPath(netns)).ino);
    its = /^net:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/ns/net`))?.[1];
  } catch {}
  if (!ours || its !== ours)
    throw new BbError(
      'BACKEND_ERROR',
      `the build's ${what} is not in the build's network namespace (${its ?? 'unknown'} is not ${ours ?? 'unknown'}): nothing was built`,
    );
}

/** Unmount (lazily) every mount at or below `dir`, deepest first. */
function unmountBelow(dir: string): void {
  let points: string[] = [];
  try {
    points = readFileSync('/proc/self/mountinfo', 'utf8')
      .split('\n')
      .map((l) => l.split(' ')[4] ?? '')
      .filter((p) => p === dir || p.startsWith(`${dir}/`))
      .sort((a, b) => b.length - a.length);
  } catch {}
  for (const p of points)
    try {
      execFileSync('umount', ['-l', p], { stdio: 'ignore', env: minimalEnv() });
    } catch {}
}

/**
 * Tear down the build engines below `root` whose owner died (an orchestrator killed
 * mid-build): their steps must not run on past their time limit. Engines of live
 * owners are left alone.
 */
export function reclaimBuildEngines(root: string): Promise<void> {
  const work: Array<Promise<void>> = [];
  for (const e of safeReaddir(root)) {
    if (!e.isDirectory()) continue;
    const dir = join(root, e.name);
    // A build's network whose engine never started (its owner died first) goes too.
    if (!existsSync(join(dir, 'engine.json'))) {
      if (reclaimBuildNetwork(join(dir, 'net'))) rmSync(dir, { recursive: true, force: true });
      continue;
    }
    let rec: EngineRecord;
    try {
      rec = {
        ...(JSON.parse(readFileSync(join(dir, 'engine.json'), 'utf8')) as EngineRecord),
        dir,
      };
    } catch {
      continue;
    }
    // Recorded in another boot: its pids are other processes' now, and its mounts,
    // cgroup and namespace went with that boot. Its files go; nothing is signalled.
    if (rec.boot !== undefined && rec.boot !== bootId()) {
      try {
        rmSync(dir, { recursive: true, force: true });
      } catch {}
      continue;
    }
    if (alive(rec.owner)) continue;
    if (
      !/^\/run\/bb-build-[0-9a-f]{8}$/.test(rec.exec) ||
      !/^bb-build-[0-9a-f]{8}$/.test(rec.cgroup)
    )
      continue;
    work.push(tearDown({ ...rec, root: join(dir, 'root') }).catch(() => {}));
  }
  return Promise.all(work).then(() => {});
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
  const timer = new Promise<'late'>((r) => setTimeout(() => r('late'), ms));
  if ((await Promise.race([ended, timer])) === 'late') {
    group('SIGKILL');
    await Promise.race([ended, new Promise((r) => setTimeout(r, 5000))]);
  }
}

/** The same for a daemon this process did not start (found from its record). */
async function stopPid(pid: number, ms: number): Promise<void> {
  const send = (sig: NodeJS.Signals) => {
    try {
      process.kill(-pid, sig);
    } catch {
      try {
        process.kill(pid, sig);
      } catch {}
    }
  };
  send('SIGTERM');
  for (let waited = 0; alive(pid) && waited < ms; waited += 100)
    await new Promise((r) => setTimeout(r, 100));
  if (alive(pid)) send('SIGKILL');
}

function tail(file: string): string {
  try {
    return readFileSync(file, 'utf8').trim().split('\n').slice(-3).join(' | ').slice(-600);
  } catch {
    return 'no log';
  }
}
