import { randomBytes } from 'node:crypto';
import { chmodSync, chownSync, renameSync, rmSync } from 'node:fs';
import type { Server } from 'node:net';
import { basename, dirname, join } from 'node:path';

/**
 * Listen on a Unix socket that appears at `path` only once it is usable: bound
 * under a random name beside it, given its mode (and owner), then renamed into
 * place. A client that connects as soon as the path exists (an agent started
 * beside its sidecar) never meets a socket it may not use yet. On failure the
 * server is closed and nothing is left behind.
 */
export async function listenUnixSocket(
  server: Server,
  path: string,
  options: { mode: number; owner?: { uid: number; gid: number } },
): Promise<void> {
  const bound = join(dirname(path), `.${basename(path)}.${randomBytes(6).toString('hex')}`);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(bound, () => {
      server.off('error', reject);
      resolve();
    });
  });
  try {
    chmodSync(bound, options.mode);
    if (options.owner) chownSync(bound, options.owner.uid, options.owner.gid);
    renameSync(bound, path);
  } catch (err) {
    server.close();
    rmSync(bound, { force: true });
    throw err;
  }
}
