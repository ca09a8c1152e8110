import { statfsSync } from 'node:fs';
import { isBbError } from '@bb/errors';
import type { Backend } from '@bb/headless';
import { diskUsage, runGit, wallGitEnv } from '@bb/wall';

/** How often what a container writes to the host's disk is measured. */
export const DISK_POLL_MS = 1000;

/** Whether `dirs` together take more than `limit` bytes, or cannot be measured (counted as more). */
export function overLimit(dirs: string[], limit: number): boolean {
  try {
    return dirs.reduce((n, d) => n + diskUsage(d, { strict: true }), 0) > limit;
  } catch {
    return true;
  }
}

/**
 * Measure `dirs` every second while a container writes to them; past `limit` (or when
 * they cannot be measured) call `onOver` once. `stop()` ends the watch with a last look
 * and says whether the limit was passed.
 */
export function watchDisk(
  dirs: string[],
  limit: number | undefined,
  onOver: () => void,
): { stop: () => boolean } {
  let over = false;
  // What no walk sees (a file deleted while still open) still fills the host's disk: the
  // filesystem's free space is watched too, and may not fall by more than the limit.
  const free = () => {
    const st = statfsSync(dirs[0]!);
    return st.bavail * st.bsize;
  };
  const floor = limit ? free() - limit : 0;
  const look = () => {
    if (over || !limit) return;
    let low: boolean;
    try {
      low = free() < floor;
    } catch {
      low = true;
    }
    if (!low && !overLimit(dirs, limit)) return;
    over = true;
    onOver();
  };
  const timer = limit ? setInterval(look, DISK_POLL_MS) : undefined;
  return {
    stop: () => {
      clearInterval(timer);
      look();
      return over;
    },
  };
}

/** The bytes and entries a commit's tree would take once checked out (read from the tree, nothing written). */
export async function treeSize(
  gitDir: string,
  commit: string,
): Promise<{ bytes: number; entries: number }> {
  const out = await runGit(
    // Trees too: a shared subtree named many times costs a directory each time.
    ['--git-dir', gitDir, 'ls-tree', '-r', '-t', '-l', '-z', '--full-tree', commit],
    {
      env: wallGitEnv(),
      timeoutMs: 300_000,
      maxBytes: 512 * 1024 ** 2,
    },
  );
  let bytes = 0;
  let entries = 0;
  for (const rec of out.split('\0')) {
    if (!rec) continue;
    entries++;
    // <mode> SP <type> SP <oid> SP+ <size or -> TAB <path>
    const size = Number(rec.slice(0, rec.indexOf('\t')).trim().split(/\s+/)[3]);
    // Whole blocks, as a filesystem takes them.
    bytes += Number.isFinite(size) ? Math.max(Math.ceil(size / 4096) * 4096, 4096) : 4096;
  }
  return { bytes, entries };
}

/** Start container `id` and wait for its exit; after `timeoutMs` the host stops it, whatever it does. */
export async function runBounded(
  backend: Backend,
  id: string,
  timeoutMs: number,
): Promise<{ exitCode: number; timedOut: boolean }> {
  await backend.start(id);
  return backend.wait(id, { timeoutMs }).then(
    (r) => ({ exitCode: r.exitCode, timedOut: false }),
    async (err) => {
      if (!isBbError(err, 'TIMEOUT')) throw err;
      await backend.stop(id, 1000).catch(() => {});
      return { exitCode: -1, timedOut: true };
    },
  );
}
