/**
 * A pooled bottle's mirror slot: its containers are made before anyone knows
 * the repository, and a running container takes no new mount. So they mount an
 * empty directory the host made a shared mount of, with `rslave` propagation;
 * when the bottle is bound to an issue, the host mounts that repository's
 * mirror objects there, read-only, and the mount appears inside them.
 */
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { BbError } from '@bb/errors';
import { minimalEnv } from '@bb/wall';
import { unmountAllUnder } from './disk';

const run = promisify(execFile);

async function mount(args: string[]): Promise<void> {
  try {
    await run('mount', args, { env: minimalEnv() });
  } catch (err) {
    const e = err as NodeJS.ErrnoException & { stderr?: string };
    throw new BbError(
      'BACKEND_ERROR',
      `mount ${args.join(' ')} failed (${(e.stderr || e.message).trim().split('\n').at(-1)}): a pooled bottle's mirror needs root on Linux`,
      { cause: err },
    );
  }
}

/** Where a pooled bottle's containers see a mirror, below its directory: the slot's parent (a bottle's `mirror`). */
export const slotMirror = (bottleDir: string): string => join(bottleDir, 'pool-mirror');

/** The slot itself: the mirror's `objects` go here. */
const slotOf = (bottleDir: string): string => join(slotMirror(bottleDir), 'objects');

/** Make the empty slot, a shared mount point of its own (before the containers that mount it). */
export async function makeSlot(bottleDir: string): Promise<void> {
  const slot = slotOf(bottleDir);
  mkdirSync(slot, { recursive: true, mode: 0o755 });
  await mount(['--bind', slot, slot]);
  await mount(['--make-shared', slot]);
}

/**
 * Mount `mirror`'s objects in the slot, read-only. A read-only bind made in one
 * step is not read-only where it propagates (the flag is set by a second call,
 * which does not travel): so the objects are bound read-only beside it first, and
 * that mount is bound into the slot, which copies its flags.
 */
export async function fillSlot(bottleDir: string, mirror: string): Promise<void> {
  // Root's own, away from the bottle (between the bind and its read-only remount, an
  // older mount binary shows the objects writable there).
  const stage = mkdtempSync(join(tmpdir(), 'bb-slot-'));
  try {
    await mount(['--bind', '-o', 'ro', join(mirror, 'objects'), stage]);
    await mount(['--bind', stage, slotOf(bottleDir)]);
  } finally {
    await unmountAllUnder(stage);
    rmdirSync(stage);
  }
}

/** Let go of the slot's mounts (the bottle's containers are gone). Nothing when it has none. */
export async function clearSlot(bottleDir: string): Promise<void> {
  await unmountAllUnder(slotMirror(bottleDir));
}
