import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  closeSync,
  existsSync,
  ftruncateSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  realpathSync,
  renameSync,
  rmSync,
  statSync,
} from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { BbError } from '@bb/errors';
import { bbHome, homeLayout } from '@bb/names';
import { minimalEnv } from '@bb/wall';
import { memoryBytes } from './size';

/** Where a bottle's disk image is, and where it is mounted (a bottle's `BottlePaths` has both). */
export interface DiskPaths {
  disk: string;
  diskImage: string;
}

const run = promisify(execFile);

/** The disk a bottle gets when neither its manifest nor BB_BOTTLE_DISK says. */
export const DEFAULT_DISK = '10g';

/**
 * The bottle's disk quota in bytes: the manifest's `resources.disk`, else
 * `BB_BOTTLE_DISK`, else 10g; `off` (or `0`) means none.
 */
export function diskQuota(
  manifest: string | number | undefined,
  env: Record<string, string | undefined>,
): number | undefined {
  const value = manifest ?? env['BB_BOTTLE_DISK'] ?? DEFAULT_DISK;
  if (value === 'off' || value === '0' || value === 0) return undefined;
  const text = typeof value === 'string' ? value.trim().toLowerCase() : '';
  const bytes =
    typeof value === 'number'
      ? value
      : /^\d+(\.\d+)?[kmg]$/.test(text)
        ? memoryBytes(text)
        : undefined;
  if (!bytes || !Number.isFinite(bytes) || bytes < 16 * 1024 * 1024)
    throw new BbError(
      'INVALID_INPUT',
      `bottle disk ${JSON.stringify(value)} must be a size of at least 16m such as 2g or 512m, or off`,
    );
  return bytes;
}

/** Whether this process can give bottles a disk of their own (mount needs root, on Linux). */
export function canMountDisks(): boolean {
  return process.platform === 'linux' && process.getuid?.() === 0;
}

function mounted(given: string): boolean {
  // The kernel names mount points by their real path (BB_HOME may go through a symlink).
  let path = given;
  try {
    path = realpathSync(given);
  } catch {
    return false;
  }
  let info: string;
  try {
    info = readFileSync('/proc/self/mountinfo', 'utf8');
  } catch {
    return false;
  }
  // Field 5 is the mount point, with spaces and the like escaped as \ooo.
  const escaped = path.replace(
    /[ \t\n\\]/g,
    (c) => `\\${c.charCodeAt(0).toString(8).padStart(3, '0')}`,
  );
  return info.split('\n').some((l) => l.split(' ')[4] === escaped);
}

async function tool(cmd: string, args: string[], fix: string): Promise<void> {
  try {
    await run(cmd, args, { env: minimalEnv() });
  } catch (err) {
    const e = err as NodeJS.ErrnoException & { stderr?: string };
    throw new BbError(
      'BACKEND_ERROR',
      `${cmd} failed (${e.code === 'ENOENT' ? 'not installed' : (e.stderr || e.message).trim().split('\n').at(-1)}): ${fix}`,
      { cause: err },
    );
  }
}

/**
 * Give the bottle a filesystem of its own, `bytes` big, for its workspace and
 * home: a sparse image (it takes only what is written) formatted ext4 and
 * loop-mounted at `disk/`. Writes past it fail inside the bottle with "No space
 * left on device"; the host's disk, the op log and other bottles are untouched.
 */
export async function makeDisk(
  p: DiskPaths,
  bytes: number,
  env: Record<string, string | undefined> = process.env,
): Promise<void> {
  // A formatted image made ahead of time when there is one (mkfs is off the launch's path).
  const ready = takePooled(bytes, env, p.diskImage);
  if (!ready) await formatImage(p.diskImage, bytes, { guarded: true });
  await mountDisk(p);
  refillPool(bytes, env);
}

const FIX =
  'install e2fsprogs and util-linux, run as root, or set BB_BOTTLE_DISK=off (no disk quota)';

/**
 * A fresh sparse image of `bytes`, formatted ext4, at `file` (which must not exist).
 * `guarded`: with ext4's multiple-mount protection, as every bottle disk is. A disk
 * one machine has mounted is refused to any other (a replica that took the bottle
 * over while the first one only stalled, on a shared bottle store), instead of two
 * kernels writing one filesystem. One machine's own mounts of it share its device.
 */
async function formatImage(
  file: string,
  bytes: number,
  o: { guarded?: boolean } = {},
): Promise<void> {
  const fd = openSync(file, 'wx', 0o600);
  try {
    ftruncateSync(fd, bytes);
  } finally {
    closeSync(fd);
  }
  await tool(
    'mkfs.ext4',
    [
      '-q',
      '-F',
      '-m',
      '0',
      ...(o.guarded ? ['-O', 'mmp'] : []),
      '-E',
      'lazy_itable_init=1,lazy_journal_init=1',
      file,
    ],
    FIX,
  );
}

/**
 * How many formatted, never-used disk images of each size are kept ready
 * (`BB_DISK_POOL`, `0` keeps none). @default 2
 */
export function diskPoolSize(env: Record<string, string | undefined>): number {
  const raw = env['BB_DISK_POOL'];
  if (raw === undefined || raw === '') return 2;
  if (!/^\d{1,2}$/.test(raw))
    throw new BbError(
      'INVALID_INPUT',
      `BB_DISK_POOL ${JSON.stringify(raw)} must be how many disks to keep ready, 0 to 99`,
    );
  return Number(raw);
}

/**
 * `$BB_HOME/disk-pool/`: images made by the host, each only ever handed out once.
 * With a shared bottle store, in the store beside the bottles (`.disk-pool/`, a name
 * no bottle can have): a disk is taken by a rename, which must not cross filesystems.
 */
const poolRoot = (env: Record<string, string | undefined>) => {
  const l = homeLayout(env);
  return l.shared ? join(l.bottles, '.disk-pool') : join(bbHome(env), 'disk-pool');
};
const poolDir = (bytes: number, env: Record<string, string | undefined>) =>
  join(poolRoot(env), String(bytes));

/** Move a pooled image to `target`; whether there was one. */
function takePooled(
  bytes: number,
  env: Record<string, string | undefined>,
  target: string,
): boolean {
  const dir = poolDir(bytes, env);
  let names: string[];
  try {
    names = readdirSync(dir).filter((n) => n.endsWith('.img'));
  } catch {
    return false;
  }
  for (const n of names) {
    try {
      // Same filesystem (both under BB_HOME, or both in the store): taken whole, by one taker.
      renameSync(join(dir, n), target);
      return true;
    } catch {
      // another launch took it first
    }
  }
  return false;
}

const refilling = new Set<string>();

/** Make images in the background until the pool of this size is full again. */
function refillPool(bytes: number, env: Record<string, string | undefined>): void {
  let want: number;
  try {
    want = diskPoolSize(env);
  } catch {
    return;
  }
  const dir = poolDir(bytes, env);
  if (want === 0 || refilling.has(dir)) return;
  refilling.add(dir);
  void (async () => {
    try {
      for (;;) {
        // Never made again under a BB_HOME that went away meanwhile.
        if (!existsSync(bbHome(env))) return;
        for (const d of [poolRoot(env), dir])
          if (!existsSync(d)) mkdirSync(d, { recursive: true, mode: 0o700 });
        const names = readdirSync(dir);
        // A part left by a process that died while formatting goes.
        for (const n of names)
          if (n.endsWith('.part') && Date.now() - statSync(join(dir, n)).mtimeMs > 600_000)
            rmSync(join(dir, n), { force: true });
        if (names.filter((n) => n.endsWith('.img')).length >= want) return;
        const part = join(dir, `${randomBytes(6).toString('hex')}.part`);
        try {
          await formatImage(part, bytes, { guarded: true });
          renameSync(part, part.replace(/\.part$/, '.img'));
        } catch {
          rmSync(part, { force: true });
          return;
        }
      }
    } finally {
      refilling.delete(dir);
    }
  })().catch(() => {});
}

/**
 * A scratch filesystem of `bytes` (and its inodes) at `mountpoint`, from a new
 * sparse image at `file`: what is written below it stops there.
 */
export async function mountScratchDisk(
  file: string,
  mountpoint: string,
  bytes: number,
): Promise<void> {
  await formatImage(file, bytes);
  mkdirSync(mountpoint, { recursive: true, mode: 0o700 });
  await tool('mount', ['-o', 'loop,nosuid,nodev', file, mountpoint], FIX);
}

/** Unmount a scratch filesystem (detached lazily when something still holds it). */
export async function unmountScratchDisk(mountpoint: string): Promise<void> {
  if (!mounted(mountpoint)) return;
  await run('umount', [mountpoint], { env: minimalEnv() }).catch(() =>
    run('umount', ['-l', mountpoint], { env: minimalEnv() }),
  );
}

/** Mounts of bottle disks under way in this process, by mount point. */
const mounting = new Map<string, Promise<void>>();

/**
 * Mount the bottle's disk image when it has one and it is not mounted (after a
 * reboot). Callers asking at once (a resume, a record's read of a frozen bottle)
 * share one mount: a second `mount` of the same image would be refused.
 */
export async function mountDisk(p: DiskPaths): Promise<void> {
  const pending = mounting.get(p.disk);
  if (pending) return pending;
  const done = (async () => {
    if (!existsSync(p.diskImage) || mounted(p.disk)) return;
    mkdirSync(p.disk, { recursive: true, mode: 0o755 });
    try {
      await tool(
        'mount',
        ['-o', 'loop,nosuid,nodev', p.diskImage, p.disk],
        'the bottle disk could not be mounted: check that loop devices are available',
      );
    } catch (err) {
      // Mounted meanwhile by another process (a second orchestrator, bb): it is there.
      if (mounted(p.disk)) return;
      const holder = await activeElsewhere(p.diskImage);
      if (holder !== undefined)
        throw new BbError(
          'CONFLICT',
          `the bottle disk ${p.diskImage} is in use by another machine (${holder}): its bottle still runs there. It can be mounted here once that machine unmounts it, or, if that machine is gone, about 11 s after its last update`,
        );
      throw err;
    }
  })();
  mounting.set(p.disk, done);
  try {
    await done;
  } finally {
    mounting.delete(p.disk);
  }
}

/**
 * Who last held a guarded disk image mounted, as its multiple-mount protection
 * block says (`node on device, updated <date>`), or `undefined` when it was let
 * go cleanly (or the image is not guarded, or `e2mmpstatus` is missing). Read at
 * once: what the block says, not a wait to see whether its holder still writes it
 * (the kernel's mount waited for that already).
 */
export async function activeElsewhere(image: string): Promise<string | undefined> {
  let info: string;
  try {
    info = (await run('e2mmpstatus', ['-i', image], { env: minimalEnv() })).stdout;
  } catch {
    return undefined;
  }
  const field = (k: string) => new RegExp(`${k}:\\s*(.+)`).exec(info)?.[1]?.trim();
  const seq = field('mmp_sequence');
  // No block (not guarded), or the sequence of a clean unmount.
  if (!seq || seq.toLowerCase() === MMP_CLEAN) return undefined;
  const node = field('mmp_node_name') || 'another node';
  const device = field('mmp_device_name');
  const at = field('mmp_update_date');
  return `${node}${device ? ` on ${device}` : ''}${at ? `, updated ${at}` : ''}`;
}

/** `EXT4_MMP_SEQ_CLEAN`: the sequence a filesystem unmounted cleanly leaves. */
const MMP_CLEAN = '0xff4d4d50';

/**
 * Unmount everything mounted at or below `dir` (deepest first; detached lazily
 * when something still holds one): what must go before `dir` is removed. A
 * mount made there after the disk was unmounted (a launch still mounting its
 * disk while the bottle is destroyed) goes too, so the removal is never busy.
 */
export async function unmountAllUnder(dir: string): Promise<void> {
  let root: string;
  try {
    root = realpathSync(dir);
  } catch {
    return;
  }
  let info: string;
  try {
    info = readFileSync('/proc/self/mountinfo', 'utf8');
  } catch {
    return;
  }
  const unescaped = (m: string) =>
    m.replace(/\\(\d{3})/g, (_, o) => String.fromCharCode(Number.parseInt(o, 8)));
  const points = info
    .split('\n')
    .map((l) => l.split(' ')[4])
    .filter((m): m is string => !!m)
    .map(unescaped)
    .filter((m) => m === root || m.startsWith(`${root}/`))
    .sort((a, b) => b.length - a.length);
  for (const m of points)
    await run('umount', [m], { env: minimalEnv() }).catch(() =>
      run('umount', ['-l', m], { env: minimalEnv() }).catch(() => {}),
    );
}

/** Unmount the bottle's disk (before it is removed). */
export async function unmountDisk(p: DiskPaths): Promise<void> {
  if (!mounted(p.disk)) return;
  try {
    await run('umount', [p.disk], { env: minimalEnv() });
  } catch {
    // Busy (a process still in it): detach now, the kernel frees it when it is not.
    await run('umount', ['-l', p.disk], { env: minimalEnv() });
  }
}
