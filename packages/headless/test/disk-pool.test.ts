// Formatted disk images made ahead of time: a launch takes one instead of running
// mkfs on its way, each image is handed out once, and the pool refills itself.
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { bottlePaths } from '../src/bottle/layout';
import { canMountDisks, diskPoolSize, makeDisk, unmountDisk } from '../src/engine/disk';

const homes: string[] = [];
const mounted: Array<ReturnType<typeof bottlePaths>> = [];
afterEach(async () => {
  for (const p of mounted.splice(0)) await unmountDisk(p);
  for (const h of homes.splice(0)) rmSync(h, { recursive: true, force: true });
});

async function until(f: () => boolean, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!f()) {
    if (Date.now() > end) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 20));
  }
}

const SIZE = 32 * 1024 * 1024;

describe.skipIf(!canMountDisks())('the disk pool', () => {
  it('hands each formatted image out once and refills to BB_DISK_POOL', async () => {
    const home = mkdtempSync(join(tmpdir(), 'bb-pool-'));
    homes.push(home);
    const env = { BB_HOME: home, BB_DISK_POOL: '1' };
    const pool = join(home, 'disk-pool', String(SIZE));
    const images = () =>
      existsSync(pool) ? readdirSync(pool).filter((n) => n.endsWith('.img')) : [];
    const bottle = (slug: string) => {
      const p = bottlePaths(slug, env);
      mkdirSync(p.dir, { recursive: true });
      return p;
    };
    // The first disk is formatted on the way; the pool then fills.
    const a = bottle('a');
    await makeDisk(a, SIZE, env);
    mounted.push(a);
    await until(() => images().length === 1);
    const pooled = images()[0]!;
    writeFileSync(join(a.disk, 'mine.txt'), 'a\n');
    // The next takes the pooled image (an empty filesystem, not a's), and the pool fills again.
    const b = bottle('b');
    await makeDisk(b, SIZE, env);
    mounted.push(b);
    expect(existsSync(join(pool, pooled))).toBe(false);
    expect(readdirSync(b.disk).filter((n) => n !== 'lost+found')).toEqual([]);
    await until(() => images().length === 1 && images()[0] !== pooled);
    // What a bottle used never goes back to the pool.
    await unmountDisk(a);
    expect(images()).not.toContain('disk.img');
  });

  it('keeps none with BB_DISK_POOL=0 and refuses a bad value', async () => {
    const home = mkdtempSync(join(tmpdir(), 'bb-pool-'));
    homes.push(home);
    const env = { BB_HOME: home, BB_DISK_POOL: '0' };
    const p = bottlePaths('c', env);
    mkdirSync(p.dir, { recursive: true });
    await makeDisk(p, SIZE, env);
    mounted.push(p);
    await new Promise((r) => setTimeout(r, 300));
    expect(existsSync(join(home, 'disk-pool'))).toBe(false);
    expect(() => diskPoolSize({ BB_DISK_POOL: 'lots' })).toThrow(/BB_DISK_POOL "lots" must be/);
  });
});
