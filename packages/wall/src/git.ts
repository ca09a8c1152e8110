import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  closeSync,
  createReadStream,
  existsSync,
  fstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inflateSync } from 'node:zlib';
import { BbError, redactString } from '@bb/errors';
import { minimalEnv } from './env';
import { listNoFollow, lstatNoFollow, openNoFollow, readFileNoFollow } from './safe-fs';

/**
 * Configuration every git of ours runs with, given on the command line
 * (`GIT_CONFIG_*`), which outranks every file: nothing a repository says can
 * switch on a hook, a helper program, a network protocol or a signature check.
 */
const FIXED: ReadonlyArray<readonly [string, string]> = [
  ['core.hooksPath', '/dev/null'],
  ['core.fsmonitor', 'false'],
  ['core.attributesFile', '/dev/null'],
  ['core.pager', 'cat'],
  ['credential.helper', ''],
  ['protocol.allow', 'never'],
  ['log.showSignature', 'false'],
  ['log.mailmap', 'false'],
  ['color.ui', 'false'],
  ['push.followTags', 'false'],
  ['push.gpgSign', 'false'],
  ['transfer.fsckObjects', 'true'],
  ['gc.auto', '0'],
  // Only what we wrote and checked is read: no commit-graph, multi-pack-index or bitmap.
  ['core.commitGraph', 'false'],
  ['core.multiPackIndex', 'false'],
  ['pack.useBitmaps', 'false'],
  ['maintenance.auto', 'false'],
];

export interface WallGitOptions {
  /** More protected configuration (a credential header, a protocol to allow). */
  config?: ReadonlyArray<readonly [string, string]>;
  /** More environment. */
  env?: Record<string, string | undefined>;
}

/**
 * The environment for a git that crosses the wall: no system, global or user
 * configuration, no terminal prompts, no replace refs, the fixed configuration
 * above plus `config`, and nothing of this process's environment beyond PATH.
 * Credentials travel here (as `http.extraHeader`), never in argv or a URL.
 */
export function wallGitEnv(options: WallGitOptions = {}): NodeJS.ProcessEnv {
  const config = [...FIXED, ...(options.config ?? [])];
  const env = minimalEnv({
    HOME: '/nonexistent',
    XDG_CONFIG_HOME: '/nonexistent',
    GIT_CONFIG_NOSYSTEM: '1',
    GIT_CONFIG_GLOBAL: '/dev/null',
    GIT_TERMINAL_PROMPT: '0',
    GIT_ASKPASS: 'true',
    GIT_NO_REPLACE_OBJECTS: '1',
    GIT_ATTR_NOSYSTEM: '1',
    GIT_OPTIONAL_LOCKS: '0',
    GIT_NO_LAZY_FETCH: '1',
    GIT_CONFIG_COUNT: String(config.length),
    ...options.env,
  });
  config.forEach(([k, v], i) => {
    env[`GIT_CONFIG_KEY_${i}`] = k;
    env[`GIT_CONFIG_VALUE_${i}`] = v;
  });
  return env;
}

export interface RunGitOptions {
  env: NodeJS.ProcessEnv;
  cwd?: string;
  /** Killed (with its children's pipes closed) after this long. @default 120000 */
  timeoutMs?: number;
  /** Stop reading (and fail) past this much output. @default 64 MiB */
  maxBytes?: number;
}

/** Run git; resolve its stdout, or reject with its (redacted) stderr. */
export function runGit(args: string[], options: RunGitOptions): Promise<string> {
  const max = options.maxBytes ?? 64 * 1024 * 1024;
  return new Promise((resolve, reject) => {
    const child = spawn('git', args, {
      cwd: options.cwd ?? '/',
      env: options.env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const out: Buffer[] = [];
    let size = 0;
    let err = '';
    let failed: Error | undefined;
    const timer = setTimeout(() => {
      failed = new BbError(
        'TIMEOUT',
        `git ${args[0]} took longer than ${options.timeoutMs ?? 120_000} ms and was stopped`,
      );
      child.kill('SIGKILL');
    }, options.timeoutMs ?? 120_000);
    child.stdout.on('data', (d: Buffer) => {
      size += d.length;
      if (size > max) {
        failed ??= new BbError('TOO_LARGE', `git ${args[0]} printed more than ${max} bytes`);
        child.kill('SIGKILL');
        return;
      }
      out.push(d);
    });
    child.stderr.on('data', (d: Buffer) => {
      if (err.length < 16_384) err += d.toString('utf8');
    });
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      if (failed) return reject(failed);
      if (code === 0) return resolve(Buffer.concat(out).toString('utf8'));
      reject(
        Object.assign(new Error(redactString(err.trim() || `git ${args[0]} exited ${code}`)), {
          gitStderr: redactString(err),
          exitCode: code,
        }),
      );
    });
  });
}

const SHA = /^(?:[0-9a-f]{40}|[0-9a-f]{64})$/;
// A branch ref as git accepts it, minus what git forbids (.., @{, a leading dot, .lock).
const REF = /^refs\/heads\/[A-Za-z0-9_][A-Za-z0-9._/+-]{0,250}$/;

export function isSha(text: string): boolean {
  return SHA.test(text);
}

function unsafeRef(ref: string): boolean {
  return (
    !REF.test(ref) ||
    ref.includes('..') ||
    ref.includes('//') ||
    ref.endsWith('/') ||
    ref.endsWith('.lock') ||
    ref.split('/').some((c) => c.startsWith('.'))
  );
}

/**
 * Check that `workspace/.git` is an ordinary repository directory whose
 * objects we may read as data: `.git` and `.git/objects` are directories (not
 * symlinks, not a `gitdir:` file), and the object store names no alternates
 * (which would make a reader open other directories of the host). Returns the
 * object directory. Throws `UNSAFE_PATH` or `INVALID_INPUT` saying what is wrong.
 */
export function workspaceObjects(workspace: string): string {
  const git = lstatNoFollow(workspace, '.git');
  if (!git?.isDirectory())
    throw new BbError(
      git ? 'UNSAFE_PATH' : 'INVALID_INPUT',
      git
        ? `${workspace}/.git is not a directory (a symlink or a gitdir file); bot-bottle reads only an ordinary repository`
        : `${workspace} has no .git: it is not a repository`,
    );
  const objects = lstatNoFollow(workspace, '.git/objects');
  if (!objects?.isDirectory())
    throw new BbError('UNSAFE_PATH', `${workspace}/.git/objects is not a directory`);
  for (const rel of ['.git/objects/info/alternates', '.git/objects/info/http-alternates'])
    if (lstatNoFollow(workspace, rel))
      throw new BbError(
        'UNSAFE_PATH',
        `${workspace}/${rel} exists: a workspace's object store may not borrow from other directories`,
      );
  return join(workspace, '.git', 'objects');
}

/**
 * The commit the workspace's HEAD names, read as data (files opened without
 * following symlinks; no git runs in the workspace): a detached HEAD's sha, or
 * the branch it points to, loose or packed. `undefined` for an unborn branch.
 */
export function readHeadAsData(workspace: string): string | undefined {
  const head = readFileNoFollow(workspace, '.git/HEAD', { maxBytes: 4096 })
    ?.toString('utf8')
    .trim();
  if (head === undefined)
    throw new BbError('INVALID_INPUT', `${workspace} has no .git/HEAD: it is not a repository`);
  if (isSha(head)) return head;
  const m = /^ref: (\S+)$/.exec(head);
  if (!m || unsafeRef(m[1]!))
    throw new BbError(
      'INVALID_INPUT',
      `${workspace}/.git/HEAD does not name a branch (${JSON.stringify(head.slice(0, 80))})`,
    );
  const ref = m[1]!;
  const loose = readFileNoFollow(workspace, `.git/${ref}`, { maxBytes: 4096 })
    ?.toString('utf8')
    .trim();
  if (loose !== undefined) {
    if (!isSha(loose))
      throw new BbError('INVALID_INPUT', `${workspace}/.git/${ref} does not hold a commit id`);
    return loose;
  }
  const packed = readFileNoFollow(workspace, '.git/packed-refs', { maxBytes: 64 * 1024 * 1024 });
  for (const line of packed?.toString('utf8').split('\n') ?? []) {
    const [sha, name] = line.split(' ');
    if (name === ref && sha && isSha(sha)) return sha;
  }
  return undefined;
}

/**
 * Make (or refresh) a bare repository of ours at `dir` whose object store
 * borrows `objectDirs` read-only: git then reads those commits as data under
 * this repository's configuration, never the one that came with the objects.
 * Written by hand, not by `git init`, so no template or default applies.
 */
export function makeReaderRepo(dir: string, objectDirs: string[]): void {
  for (const d of ['objects/info', 'objects/pack', 'refs/heads', 'refs/tags'])
    mkdirSync(join(dir, d), { recursive: true, mode: 0o700 });
  writeFileSync(join(dir, 'HEAD'), 'ref: refs/heads/main\n');
  writeFileSync(
    join(dir, 'config'),
    '[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = true\n',
  );
  writeFileSync(
    join(dir, 'objects', 'info', 'alternates'),
    objectDirs.length ? `${objectDirs.join('\n')}\n` : '',
  );
}

/** Point `ref` of a repository of ours at `sha` (a plain file write; the repository is ours). */
export function setRef(dir: string, ref: string, sha: string): void {
  if (!isSha(sha)) throw new BbError('INVALID_INPUT', `${sha} is not a commit id`);
  const file = join(dir, ref);
  mkdirSync(join(file, '..'), { recursive: true, mode: 0o700 });
  writeFileSync(file, `${sha}\n`);
}

export interface ImportOptions {
  /** The workspace the agent owns; only its objects and HEAD are read, as data. */
  workspace: string;
  /** A bare repository of ours that receives the commit (made when missing). */
  into: string;
  /** The commit to import. @default the workspace's HEAD */
  commit?: string;
  /** Refuse to copy more than this many bytes of objects in one import. @default 8 GiB */
  maxBytes?: number;
  /** Refuse when `into` would grow past this many bytes. @default unlimited */
  maxRepoBytes?: number;
  timeoutMs?: number;
}

/**
 * Bring the commit the workspace's HEAD names, with everything it reaches,
 * into the repository `into` that we own, as verified objects. No git ever
 * reads the workspace: its object directory is walked without following a
 * symlink, each loose object is inflated and its id checked against its
 * content here, and each pack is streamed through `git index-pack`, which
 * computes every object's id itself and writes its own index. Indexes,
 * bitmaps, commit-graphs, multi-pack-indexes and alternates the agent left
 * are never read. Objects already imported are skipped, so later imports are
 * cheap. The commit must then be complete in `into` (every object it reaches
 * present), or the import fails. Returns the commit id, kept under
 * `refs/bb/imported/<id>` in `into`.
 */
export async function importHead(options: ImportOptions): Promise<string> {
  workspaceObjects(options.workspace);
  const sha = options.commit ?? readHeadAsData(options.workspace);
  if (!sha)
    throw new BbError('INVALID_INPUT', 'the workspace has no commit yet: commit your work first');
  if (!isSha(sha) || sha.length !== 40)
    throw new BbError(
      'INVALID_INPUT',
      `${sha.slice(0, 70)} is not a SHA-1 commit id; bot-bottle reads SHA-1 repositories only`,
    );
  ensureBareRepo(options.into);
  const env = wallGitEnv();
  const timeoutMs = options.timeoutMs ?? 300_000;
  const budget = {
    left: options.maxBytes ?? 8 * 1024 ** 3,
    room:
      options.maxRepoBytes === undefined
        ? Number.POSITIVE_INFINITY
        : options.maxRepoBytes - dirBytes(join(options.into, 'objects')),
  };
  const spend = (n: number, what: string) => {
    budget.left -= n;
    budget.room -= n;
    if (budget.left < 0 || budget.room < 0)
      throw new BbError(
        'TOO_LARGE',
        `the workspace's objects are too large to import (${what}); push smaller commits`,
      );
  };
  if (!(await hasObject(options.into, sha, env))) {
    await copyLooseObjects(options.workspace, options.into, spend);
    await copyPacks(options.workspace, options.into, spend, env, timeoutMs);
  }
  // Complete: every object the commit reaches is ours now (or was before).
  try {
    await runGit(
      [`--git-dir=${options.into}`, 'rev-list', '--objects', '--quiet', sha, '--not', '--all'],
      { env, timeoutMs },
    );
  } catch (err) {
    throw new BbError(
      'INVALID_INPUT',
      `the workspace's commit ${sha.slice(0, 12)} is incomplete or not a commit (${(err as Error).message.split('\n')[0]})`,
      { cause: err },
    );
  }
  setRef(options.into, `refs/bb/imported/${sha}`, sha);
  return sha;
}

async function hasObject(repo: string, sha: string, env: NodeJS.ProcessEnv): Promise<boolean> {
  try {
    await runGit([`--git-dir=${repo}`, 'cat-file', '-e', `${sha}^{commit}`], {
      env,
      timeoutMs: 30_000,
    });
    return true;
  } catch {
    return false;
  }
}

function dirBytes(dir: string): number {
  let n = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) n += dirBytes(p);
    else if (e.isFile()) n += statSync(p).size;
  }
  return n;
}

const HEX2 = /^[0-9a-f]{2}$/;
const HEX38 = /^[0-9a-f]{38}$/;
const MAX_LOOSE = 512 * 1024 * 1024;

/** Copy the workspace's loose objects we lack, each checked: its content must hash to its name. */
async function copyLooseObjects(
  workspace: string,
  into: string,
  spend: (n: number, what: string) => void,
): Promise<void> {
  for (const dir of listNoFollow(workspace, '.git/objects')) {
    if (!HEX2.test(dir)) continue;
    for (const name of listNoFollow(workspace, `.git/objects/${dir}`)) {
      if (!HEX38.test(name)) continue;
      const id = `${dir}${name}`;
      const ours = join(into, 'objects', dir, name);
      if (existsSync(ours)) continue;
      const compressed = readFileNoFollow(workspace, `.git/objects/${dir}/${name}`, {
        maxBytes: MAX_LOOSE,
      });
      if (!compressed) continue;
      spend(compressed.length, `loose object ${id}`);
      let raw: Buffer;
      try {
        raw = inflateSync(compressed, { maxOutputLength: MAX_LOOSE });
      } catch {
        continue; // not an object: the pack walk or the completeness check decides
      }
      const nul = raw.indexOf(0);
      const header = nul > 0 ? raw.subarray(0, nul).toString('latin1') : '';
      const m = /^(blob|tree|commit|tag) (\d+)$/.exec(header);
      if (!m || Number(m[2]) !== raw.length - nul - 1) continue;
      if (createHash('sha1').update(raw).digest('hex') !== id) continue; // a lie about its name
      mkdirSync(join(into, 'objects', dir), { recursive: true, mode: 0o700 });
      const tmp = `${ours}.${process.pid}.tmp`;
      writeFileSync(tmp, compressed, { mode: 0o444 });
      renameSync(tmp, ours);
    }
  }
}

/** Stream the workspace's packs we lack through `git index-pack` into ours. */
async function copyPacks(
  workspace: string,
  into: string,
  spend: (n: number, what: string) => void,
  env: NodeJS.ProcessEnv,
  timeoutMs: number,
): Promise<void> {
  for (const name of listNoFollow(workspace, '.git/objects/pack')) {
    if (!/^pack-[0-9a-f]{40,64}\.pack$/.test(name)) continue;
    const rel = `.git/objects/pack/${name}`;
    const fd = openNoFollow(workspace, rel);
    if (fd === undefined) continue;
    try {
      const size = fstatSync(fd).size;
      if (size < 32) continue;
      // A pack's name in ours is its checksum (its last 20 bytes, checked by index-pack).
      const trailer = Buffer.alloc(20);
      readSync(fd, trailer, 0, 20, size - 20);
      if (existsSync(join(into, 'objects', 'pack', `pack-${trailer.toString('hex')}.pack`)))
        continue;
      spend(size, name);
      await indexPack(into, fd, env, timeoutMs);
    } finally {
      closeSync(fd);
    }
  }
}

/**
 * Stream one pack into ours through `git index-pack --stdin`, which checks the
 * pack and computes each object's id itself. A file that is not a valid pack
 * is skipped (the completeness check decides); a half-written pack of a
 * failed or killed run never stays behind.
 */
function indexPack(
  into: string,
  fd: number,
  env: NodeJS.ProcessEnv,
  timeoutMs: number,
): Promise<void> {
  return new Promise((resolve) => {
    const child = spawn('git', [`--git-dir=${into}`, 'index-pack', '--stdin'], {
      cwd: into,
      env,
      stdio: ['pipe', 'ignore', 'ignore'],
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    const source = createReadStream('', { fd, autoClose: false, start: 0 });
    source.on('error', () => child.kill('SIGKILL'));
    child.stdin.on('error', () => {});
    source.pipe(child.stdin);
    const done = () => {
      clearTimeout(timer);
      for (const f of readdirSync(join(into, 'objects', 'pack')))
        if (f.startsWith('tmp_')) rmSync(join(into, 'objects', 'pack', f), { force: true });
      resolve();
    };
    child.on('error', done);
    child.on('close', done);
  });
}

/** Make a bare repository of ours at `dir` when there is none (no template, fixed config). */
export function ensureBareRepo(dir: string): void {
  makeReaderRepo(dir, []);
}

export interface LogAsDataOptions {
  /** Object stores to read: repositories of ours only (what `importHead` filled, the sidecar's). */
  objectDirs: string[];
  /** Commits to show, with what they reach. Each must be there, or this fails. */
  tips: string[];
  /** Commits (and what they reach) to leave out; unknown ones are ignored. */
  exclude?: string[];
  /** Files bigger than this are left out of the patch and named in `skipped`. @default 64 MiB */
  maxFileBytes?: number;
  timeoutMs?: number;
  maxBytes?: number;
}

export interface PatchAsData {
  patch: string;
  /** The range covered, for the record. */
  range: string;
  /** Files left out because they were too big to diff: the caller must not call the scan clean. */
  skipped: Array<{ path: string; bytes: number }>;
}

/**
 * `git log -p` of `tips` minus `exclude`, from `objectDirs` (stores of ours,
 * whose objects were checked when they came in), in a throwaway repository of
 * ours: every file as text (a NUL byte or an attribute cannot turn a diff into
 * "Binary files differ"), a merge's own changes included, no external diff, no textconv, no replace refs, no
 * signatures, no mailmap. A tip that is not there is an error, never an empty
 * patch. Files over `maxFileBytes` are left out and named.
 */
export async function logPatchAsData(options: LogAsDataOptions): Promise<PatchAsData> {
  const tips = [...new Set(options.tips.filter(isSha))];
  const exclude = (options.exclude ?? []).filter(isSha);
  const range = `${tips.map((t) => t.slice(0, 12)).join(' ')}${exclude.length ? ` --not ${exclude.map((t) => t.slice(0, 12)).join(' ')}` : ''}`;
  if (tips.length === 0) return { patch: '', range, skipped: [] };
  const dir = mkdtempSync(join(tmpdir(), 'bb-reader-'));
  const env = wallGitEnv();
  const timeoutMs = options.timeoutMs ?? 120_000;
  const limit = options.maxFileBytes ?? 64 * 1024 * 1024;
  try {
    makeReaderRepo(dir, options.objectDirs);
    for (const t of tips)
      if (!(await hasObject(dir, t, env)))
        throw new BbError('NOT_FOUND', `commit ${t.slice(0, 12)} is not there to be scanned`);
    // Sizes first: a file too big to diff is named, not read.
    const listed = await runGit(
      [
        `--git-dir=${dir}`,
        'rev-list',
        '--objects',
        '--ignore-missing',
        ...tips,
        '--not',
        ...exclude,
      ],
      { env, timeoutMs, maxBytes: 256 * 1024 * 1024 },
    );
    const paths = new Map<string, string>();
    for (const line of listed.split('\n')) {
      const sp = line.indexOf(' ');
      if (sp > 0) paths.set(line.slice(0, sp), line.slice(sp + 1));
    }
    const sizes = paths.size
      ? await runGitInput(
          [
            `--git-dir=${dir}`,
            'cat-file',
            '--batch-check=%(objectname) %(objecttype) %(objectsize)',
          ],
          [...paths.keys()].join('\n'),
          { env, timeoutMs, maxBytes: 256 * 1024 * 1024 },
        )
      : '';
    const skipped: PatchAsData['skipped'] = [];
    for (const line of sizes.split('\n')) {
      const [id, type, size] = line.split(' ');
      if (type === 'blob' && Number(size) > limit)
        skipped.push({ path: paths.get(id!) ?? id!, bytes: Number(size) });
    }
    const patch = await runGit(
      [
        `--git-dir=${dir}`,
        'log',
        '-p',
        // A merge's own changes (content in neither parent) too: plain -p shows none.
        '--cc',
        '--text',
        '--no-ext-diff',
        '--no-textconv',
        '--no-color',
        '--no-notes',
        '--no-mailmap',
        '--ignore-missing',
        '--format=commit %H',
        ...tips,
        '--not',
        ...exclude,
        '--',
        '.',
        ...[...new Set(skipped.map((x) => x.path))].map((p) => `:(exclude,literal)${p}`),
      ],
      { env, timeoutMs, maxBytes: options.maxBytes ?? 256 * 1024 * 1024 },
    );
    return { patch, range, skipped };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** `runGit` with `input` on stdin. */
function runGitInput(args: string[], input: string, options: RunGitOptions): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn('git', args, {
      cwd: '/',
      env: options.env,
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    const out: Buffer[] = [];
    let size = 0;
    const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs ?? 120_000);
    child.stdout.on('data', (d: Buffer) => {
      size += d.length;
      if (size > (options.maxBytes ?? 64 * 1024 * 1024)) child.kill('SIGKILL');
      else out.push(d);
    });
    child.stderr.resume();
    child.stdin.on('error', () => {});
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      if (code === 0) resolve(Buffer.concat(out).toString('utf8'));
      else reject(new BbError('INTERNAL', `git ${args[1] ?? ''} exited ${code}`));
    });
    child.stdin.end(input);
  });
}
