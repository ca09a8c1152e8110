import {
  chownSync,
  existsSync,
  lstatSync,
  mkdirSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { BbError } from '@bb/errors';
import type { Owner } from '@bb/wall';
import { bbHome } from '../home';
import { homeLabel } from './layout';

/**
 * Where a bottle's gate finds the secrets it reads once at start: on a tmpfs
 * (`/dev/shm`), so they never reach a disk, in a directory per bottle and per
 * role mounted into that role's container alone. Set `BB_RUN_DIR` to choose
 * another place. The container's configuration names only the file.
 */
export function secretsRoot(env: Record<string, string | undefined>): string {
  if (env['BB_RUN_DIR']) return env['BB_RUN_DIR'];
  return existsSync('/dev/shm')
    ? join('/dev/shm', `bot-bottle-${homeLabel(env)}`)
    : join(bbHome(env), 'run');
}

export function secretsDir(
  slug: string,
  role: 'gate' | 'proxy',
  env: Record<string, string | undefined>,
): string {
  return join(secretsRoot(env), slug, role);
}

/**
 * Write `content` as a 0400 file for `role` of bottle `slug`, owned by `owner`
 * (the gate's user) in a 0700 directory of its own. Returns the directory.
 */
export function writeSecret(
  slug: string,
  role: 'gate' | 'proxy',
  name: string,
  content: string,
  env: Record<string, string | undefined>,
  owner?: Owner,
): string {
  const root = secretsRoot(env);
  mkdirSync(root, { recursive: true, mode: 0o711 });
  // /dev/shm is everyone's: a directory someone else made there is not ours to trust.
  const st = lstatSync(root);
  const me = process.getuid?.() ?? st.uid;
  if (!st.isDirectory() || st.uid !== me || (st.mode & 0o022) !== 0)
    throw new BbError(
      'UNSAFE_PATH',
      `${root} is not a directory of this user's that only it can write: remove it, or set BB_RUN_DIR`,
    );
  const dir = secretsDir(slug, role, env);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const file = join(dir, name);
  rmSync(file, { force: true });
  writeFileSync(file, content, { mode: 0o400, flag: 'wx' });
  if (owner) {
    chownSync(file, owner.uid, owner.gid);
    chownSync(dir, owner.uid, owner.gid);
  }
  return dir;
}

/**
 * Put a new `content` in place of secret `name` in `dir` at once (written beside it, then
 * renamed over it): a reader sees the old file or the new one, never half of one.
 */
export function replaceSecret(dir: string, name: string, content: string, owner?: Owner): void {
  const next = join(dir, `.${name}.next`);
  rmSync(next, { force: true });
  writeFileSync(next, content, { mode: 0o400, flag: 'wx' });
  if (owner) chownSync(next, owner.uid, owner.gid);
  renameSync(next, join(dir, name));
}

/** Remove one secret file (once its reader has it), or all of a bottle's. */
export function removeSecret(dir: string, name: string): void {
  rmSync(join(dir, name), { force: true });
}

export function removeSecrets(slug: string, env: Record<string, string | undefined>): void {
  rmSync(join(secretsRoot(env), slug), { recursive: true, force: true });
}
