import {
  chownSync,
  closeSync,
  constants,
  existsSync,
  fchownSync,
  lstatSync,
  mkdirSync,
  openSync,
  renameSync,
  rmSync,
  writeFileSync,
  writeSync,
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
  const dir = makeSecretsDir(slug, role, env);
  const file = join(dir, name);
  rmSync(file, { force: true });
  writeFileSync(file, content, { mode: 0o400, flag: 'wx' });
  if (owner) {
    chownSync(file, owner.uid, owner.gid);
    chownSync(dir, owner.uid, owner.gid);
  }
  return dir;
}

/** Make `role`'s secrets folder of bottle `slug`, empty, as `writeSecret` makes it. Returns it. */
export function makeSecretsDir(
  slug: string,
  role: 'gate' | 'proxy',
  env: Record<string, string | undefined>,
  owner?: Owner,
): string {
  const root = secretsRoot(env);
  mkdirSync(root, { recursive: true, mode: 0o711 });
  trustedDir(root, 'remove it, or set BB_RUN_DIR');
  const dir = secretsDir(slug, role, env);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  if (owner) chownSync(dir, owner.uid, owner.gid);
  return dir;
}

/**
 * Throw UNSAFE_PATH unless `dir` is a real directory (no symlink) of this user's, or of
 * `owner` (the gate's user, to whom a role's folder is given), that no one else may
 * write: /dev/shm is everyone's, and what someone else made there is not ours to trust.
 */
export function trustedDir(dir: string, fix: string, owner?: Owner): void {
  const st = lstatSync(dir, { throwIfNoEntry: false });
  const me = process.getuid?.() ?? st?.uid;
  if (!st?.isDirectory() || (st.uid !== me && st.uid !== owner?.uid) || (st.mode & 0o022) !== 0)
    throw new BbError(
      'UNSAFE_PATH',
      `${dir} is not a directory of this user's that only it can write: ${fix}`,
    );
}

/**
 * Put a new `content` in place of secret `name` in `dir` at once (written beside it, then
 * renamed over it): a reader sees the old file or the new one, never half of one. The
 * file is made new (never through a link), given to `owner` and only then written.
 */
export function replaceSecret(dir: string, name: string, content: string, owner?: Owner): void {
  const next = join(dir, `.${name}.next`);
  rmSync(next, { force: true });
  const fd = openSync(
    next,
    constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
    0o400,
  );
  try {
    if (owner) fchownSync(fd, owner.uid, owner.gid);
    writeSync(fd, content);
  } finally {
    closeSync(fd);
  }
  renameSync(next, join(dir, name));
}

/** Remove one secret file (once its reader has it), or all of a bottle's. */
export function removeSecret(dir: string, name: string): void {
  rmSync(join(dir, name), { force: true });
}

export function removeSecrets(slug: string, env: Record<string, string | undefined>): void {
  rmSync(join(secretsRoot(env), slug), { recursive: true, force: true });
}
