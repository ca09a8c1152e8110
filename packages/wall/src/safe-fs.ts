import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  closeSync,
  constants,
  existsSync,
  fchmodSync,
  fchownSync,
  fstatSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readSync,
  renameSync,
  type Stats,
  unlinkSync,
  writeSync,
} from 'node:fs';
import { promisify } from 'node:util';
import { BbError } from '@bb/errors';
import { minimalEnv } from './env';

const run = promisify(execFile);
const { O_RDONLY, O_WRONLY, O_CREAT, O_EXCL, O_NOFOLLOW, O_DIRECTORY, O_NONBLOCK } = constants;

export interface Owner {
  uid: number;
  gid: number;
}

/**
 * Linux names an open file as `/proc/self/fd/N`; a path below that resolves
 * from the open directory itself, never again from its name. That is
 * `openat(2)`, which Node does not expose: each step of a walk is opened
 * relative to the directory the previous step opened, with `O_NOFOLLOW`, so a
 * symlink the agent plants anywhere on the way is refused, not followed, and
 * no rename during the walk can redirect it.
 */
const PROC_FD = '/proc/self/fd';
const at = (fd: number, name: string) => `${PROC_FD}/${fd}/${name}`;

function refuse(root: string, rel: string, why: string): BbError {
  return new BbError(
    'UNSAFE_PATH',
    `refusing ${rel} under ${root}: ${why}; the bottle's own files may not point out of it`,
    { data: { root, path: rel } },
  );
}

function components(root: string, rel: string): string[] {
  const parts = rel.split('/').filter((p) => p !== '' && p !== '.');
  if (parts.length === 0) throw refuse(root, rel, 'it names no file');
  for (const p of parts) if (p === '..') throw refuse(root, rel, 'it climbs out with ..');
  return parts;
}

function openDir(root: string): number {
  if (!existsSync(PROC_FD))
    throw new BbError(
      'UNSUPPORTED',
      `${PROC_FD} is missing: bot-bottle needs Linux /proc to write into bottles safely`,
    );
  return openSync(root, O_RDONLY | O_DIRECTORY);
}

/**
 * Walk from the trusted directory `root` (made by the host, not writable by the
 * agent) down `dirs`, each step opened without following a symlink. With
 * `create`, missing directories are made (mode, owner). Returns the last
 * directory's fd; the caller closes it.
 */
function walk(
  root: string,
  rel: string,
  dirs: string[],
  create?: { mode: number; owner?: Owner | undefined },
): number {
  let fd = openDir(root);
  try {
    for (const name of dirs) {
      let next: number;
      try {
        next = openSync(at(fd, name), O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code === 'ENOENT' && create) {
          // mkdir never follows a symlink in its last component (EEXIST instead).
          mkdirSync(at(fd, name), { mode: create.mode });
          next = openSync(at(fd, name), O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
          if (create.owner) fchownSync(next, create.owner.uid, create.owner.gid);
        } else if (code === 'ELOOP' || code === 'ENOTDIR') {
          throw refuse(root, rel, `${name} is a symlink or not a directory`);
        } else throw err;
      }
      closeSync(fd);
      fd = next;
    }
    return fd;
  } catch (err) {
    closeSync(fd);
    throw err;
  }
}

/**
 * Run `fn` with the directory holding `rel` (opened by `walk`, no symlink on the
 * way) and `rel`'s last name; `missing` when a directory on the way is absent.
 */
function inParent<T>(
  root: string,
  rel: string,
  missing: T,
  fn: (dir: number, name: string) => T,
): T {
  const parts = components(root, rel);
  const name = parts.pop()!;
  let dir: number;
  try {
    dir = walk(root, rel, parts);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return missing;
    throw err;
  }
  try {
    return fn(dir, name);
  } finally {
    closeSync(dir);
  }
}

/** Read `size` bytes of `fd` from its start (less when it is shorter). */
export function readAll(fd: number, size: number): Buffer {
  const buf = Buffer.alloc(size);
  let off = 0;
  while (off < buf.length) {
    const n = readSync(fd, buf, off, buf.length - off, off);
    if (n === 0) break;
    off += n;
  }
  return buf.subarray(0, off);
}

export interface WriteOptions {
  /** @default 0o644 */
  mode?: number;
  /** Give the file (and directories made on the way) to this user. */
  owner?: Owner | undefined;
  /** Make missing directories on the way. @default true */
  createDirs?: boolean;
}

/**
 * Write `rel` below the trusted directory `root` without following any symlink
 * on the way or at the end: the content goes to a new file beside it, which is
 * then renamed over whatever `rel` was (a symlink the agent planted is
 * replaced, never written through). Throws `UNSAFE_PATH` when a directory on
 * the way is a symlink.
 */
export function writeFileNoFollow(
  root: string,
  rel: string,
  content: string | Uint8Array,
  options: WriteOptions = {},
): void {
  const parts = components(root, rel);
  const name = parts.pop()!;
  const mode = options.mode ?? 0o644;
  const dir = walk(
    root,
    rel,
    parts,
    options.createDirs === false ? undefined : { mode: 0o755, owner: options.owner },
  );
  const tmp = `.bb-${randomBytes(6).toString('hex')}.tmp`;
  try {
    const fd = openSync(at(dir, tmp), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode);
    try {
      const buf = typeof content === 'string' ? Buffer.from(content) : content;
      let off = 0;
      while (off < buf.length) off += writeSync(fd, buf, off, buf.length - off);
      fchmodSync(fd, mode);
      if (options.owner) fchownSync(fd, options.owner.uid, options.owner.gid);
    } finally {
      closeSync(fd);
    }
    try {
      renameSync(at(dir, tmp), at(dir, name));
    } catch (err) {
      unlinkSync(at(dir, tmp));
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'EISDIR' || code === 'ENOTEMPTY' || code === 'EEXIST')
        throw refuse(root, rel, 'a directory stands where the file goes');
      throw err;
    }
  } finally {
    closeSync(dir);
  }
}

export interface ReadOptions {
  /** Refuse files bigger than this. @default 1 MiB */
  maxBytes?: number;
}

/**
 * Read the regular file `rel` below `root`, following no symlink anywhere on
 * the way; a FIFO, a device, a directory or a symlink is refused, and so is a
 * file over `maxBytes`. Returns `undefined` when there is no such file.
 */
export function readFileNoFollow(
  root: string,
  rel: string,
  options: ReadOptions = {},
): Buffer | undefined {
  const max = options.maxBytes ?? 1024 * 1024;
  return inParent(root, rel, undefined, (dir, name) => {
    let fd: number;
    try {
      // O_NONBLOCK: opening a FIFO the agent planted must not hang the host.
      fd = openSync(at(dir, name), O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') return undefined;
      if (code === 'ELOOP') throw refuse(root, rel, 'it is a symlink');
      throw err;
    }
    try {
      const st = fstatSync(fd);
      if (!st.isFile()) throw refuse(root, rel, 'it is not a regular file');
      if (st.size > max) throw refuse(root, rel, `it is larger than ${max} bytes`);
      return readAll(fd, st.size);
    } finally {
      closeSync(fd);
    }
  });
}

/**
 * The names in the directory `rel` below `root`, opened without following a
 * symlink anywhere (a symlinked directory is refused); `[]` when there is none.
 */
export function listNoFollow(root: string, rel: string): string[] {
  let dir: number;
  try {
    dir = walk(root, rel, components(root, rel));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
  try {
    return readdirSync(`${PROC_FD}/${dir}`);
  } finally {
    closeSync(dir);
  }
}

/**
 * An fd of the regular file `rel` below `root` (the caller closes it), opened
 * without following a symlink and without blocking on a FIFO; `undefined`
 * when there is no such regular file.
 */
export function openNoFollow(root: string, rel: string): number | undefined {
  return inParent(root, rel, undefined, (dir, name) => {
    let fd: number;
    try {
      fd = openSync(at(dir, name), O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
    } catch {
      return undefined;
    }
    if (!fstatSync(fd).isFile()) {
      closeSync(fd);
      return undefined;
    }
    return fd;
  });
}

/**
 * What `rel` below `root` is, without following symlinks (the last component
 * included): `undefined` when absent. Throws `UNSAFE_PATH` when a directory on
 * the way is a symlink.
 */
export function lstatNoFollow(root: string, rel: string): Stats | undefined {
  // lstat never follows the last component; the /proc name resolves from the open directory.
  return inParent(root, rel, undefined, (dir, name) =>
    lstatSync(at(dir, name), { throwIfNoEntry: false }),
  );
}

/**
 * Make the directory `rel` below `root` (and those on the way), following no
 * symlink, owned by `owner`. Returns nothing; throws `UNSAFE_PATH` on a symlink.
 */
export function mkdirNoFollow(
  root: string,
  rel: string,
  options: { mode?: number; owner?: Owner | undefined } = {},
): void {
  const fd = walk(root, rel, components(root, rel), {
    mode: options.mode ?? 0o755,
    owner: options.owner,
  });
  closeSync(fd);
}

/**
 * Give every file under `paths` to `owner`, never dereferencing a symlink
 * (the link itself changes owner, its target never does) and never crossing
 * into another filesystem's mount. Only for trees no agent process can touch
 * while it runs (at launch, before the agent starts).
 */
export async function chownTreeNoFollow(owner: Owner, ...paths: string[]): Promise<void> {
  if (paths.length === 0) return;
  // GNU chown: -h acts on symlinks themselves, -P never traverses them.
  await run('chown', ['-h', '-P', '-R', `${owner.uid}:${owner.gid}`, '--', ...paths], {
    env: minimalEnv(),
  });
}
