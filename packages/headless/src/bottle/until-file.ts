import { existsSync, watch } from 'node:fs';
import { basename, dirname } from 'node:path';

/**
 * Wait until `file` exists: woken by the kernel when it appears under its name (a
 * file renamed into place; not by another written beside it first, which would
 * close the watch just before the rename), or at the latest every `pollMs`, where
 * the filesystem says nothing.
 */
export async function untilFile(file: string, pollMs: number): Promise<void> {
  const dir = dirname(file);
  const name = basename(file);
  while (!existsSync(file)) {
    await new Promise<void>((resolve) => {
      let w: ReturnType<typeof watch> | undefined;
      const done = () => {
        clearTimeout(timer);
        w?.close();
        resolve();
      };
      const timer = setTimeout(done, pollMs);
      try {
        w = watch(dir, (_event, changed) => {
          if (!changed || changed === name) done();
        });
      } catch {
        // polled
      }
      // Put in place between the look and the watch.
      if (existsSync(file)) done();
    });
  }
}
