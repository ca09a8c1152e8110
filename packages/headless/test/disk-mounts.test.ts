// A bottle's disk is mounted once however many ask at the same moment (a resume and a
// record's read of a frozen bottle, say: a second mount of the image is refused), and
// destroying a bottle leaves nothing mounted below its directory, which then goes at
// once, with no "device or resource busy".
import { execFileSync } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { destroy } from '../src/bottle/bottle-parts';
import { bottlePaths } from '../src/bottle/layout';
import {
  activeElsewhere,
  canMountDisks,
  makeDisk,
  mountDisk,
  mountScratchDisk,
  unmountDisk,
} from '../src/engine/disk';
import type { Backend } from '../src/index';

const homes: string[] = [];
afterEach(() => {
  for (const h of homes.splice(0)) {
    for (const line of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
      const at = line.split(' ')[4];
      if (at?.startsWith(realpathSync(h))) execFileSync('umount', ['-l', at]);
    }
    rmSync(h, { recursive: true, force: true });
  }
});

/** How many mounts sit at `dir` (stacked ones each count). */
const mountsAt = (dir: string) =>
  readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .filter((l) => l.split(' ')[4] === realpathSync(dir)).length;

const SIZE = 32 * 1024 * 1024;

/** A bottle `slug` with its own disk, made and mounted, in a home of its own. */
async function bottleWithDisk(slug: string) {
  const home = mkdtempSync(join(tmpdir(), 'bb-mounts-'));
  homes.push(home);
  const env = { BB_HOME: home, BB_DISK_POOL: '0' };
  const p = bottlePaths(slug, env);
  mkdirSync(p.dir, { recursive: true });
  await makeDisk(p, SIZE, env);
  return { home, env, p };
}

describe.skipIf(!canMountDisks())("a bottle's disk", () => {
  it('is mounted once when two ask at once, and unmounted whole: its directory goes at once', async () => {
    const { p } = await bottleWithDisk('mounts-a');
    await unmountDisk(p); // frozen: no mount
    expect(mountsAt(p.disk)).toBe(0);
    await Promise.all([mountDisk(p), mountDisk(p), mountDisk(p)]);
    expect(mountsAt(p.disk)).toBe(1);
    await unmountDisk(p);
    expect(mountsAt(p.disk)).toBe(0);
    rmSync(p.dir, { recursive: true });
  });

  it('destroy leaves nothing mounted below the bottle, a mount made there after its disk included', async () => {
    const { home, env, p } = await bottleWithDisk('mounts-b');
    // Something else mounted below the bottle's directory (a disk a launch was still
    // mounting when the bottle was destroyed): the removal must not find it busy.
    await mountScratchDisk(join(p.dir, 'scratch.img'), join(p.dir, 'state', 'scratch'), SIZE);
    const engine = { list: async () => [], destroy: async () => {} } as unknown as Backend;
    await destroy('mounts-b', { backend: engine, env });
    expect(existsSync(p.dir)).toBe(false);
    expect(readFileSync('/proc/self/mountinfo', 'utf8')).not.toContain(realpathSync(home));
  });
});

// A shared bottle store: a replica that took a bottle over while the first one only stalled
// must not mount the disk the first one's kernel still writes. Two loop devices over one
// image are what two machines are: each its own block device, its own filesystem driver.
describe.skipIf(!canMountDisks())("a bottle's disk, held by another machine", () => {
  const attach = (file: string) =>
    execFileSync('losetup', ['-f', '--show', file], { encoding: 'utf8' }).trim();
  const detach = (dev: string) => execFileSync('losetup', ['-d', dev]);

  it('is refused to a second machine while the first has it mounted, and says who holds it', async () => {
    const { home, p } = await bottleWithDisk('mounts-c');
    await unmountDisk(p);
    const a = join(home, 'machine-a');
    const b = join(home, 'machine-b');
    mkdirSync(a);
    mkdirSync(b);
    const devA = attach(p.diskImage);
    const devB = attach(p.diskImage);
    try {
      execFileSync('mount', [devA, a]);
      writeFileSync(join(a, 'from-a'), 'a');
      expect(await activeElsewhere(p.diskImage)).toMatch(/on loop\d+, updated /);
      let refused = false;
      try {
        execFileSync('mount', [devB, b], { stdio: 'ignore' });
      } catch {
        refused = true;
      }
      if (!refused) execFileSync('umount', [b]);
      expect(refused).toBe(true);
      execFileSync('umount', [a]);
      // `umount` returns once the mount is gone from this namespace; the filesystem itself
      // shuts down (and writes its clean MMP sequence) when the last reference goes, which
      // a mount namespace cloned meanwhile (a container starting on a busy CI machine)
      // holds for a moment. Not a wait for a live holder: that would never end.
      await vi.waitFor(async () => expect(await activeElsewhere(p.diskImage)).toBeUndefined(), {
        timeout: 20_000,
        interval: 250,
      });
      // Let go: the other machine mounts it.
      execFileSync('mount', [devB, b]);
      expect(readFileSync(join(b, 'from-a'), 'utf8')).toBe('a');
      execFileSync('umount', [b]);
    } finally {
      for (const m of [a, b]) if (mountsAt(m) > 0) execFileSync('umount', ['-l', m]);
      detach(devA);
      detach(devB);
    }
  }, 60_000);
});
