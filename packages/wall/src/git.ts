import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BbError, redactString } from '@bb/errors';
import { minimalEnv } from './env';
import { lstatNoFollow, readFileNoFollow } from './safe-fs';

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
  /** Where the throwaway reader repository goes. @default `${into}.reader` */
  reader?: string;
  timeoutMs?: number;
}

/**
 * Bring the commit the workspace's HEAD names, with everything it reaches,
 * into the repository `into` that we own, as objects: a reader repository of
 * ours borrows the workspace's object store and `git fetch` copies from it,
 * checking every object (`fsckObjects`). No git ever runs with the workspace as
 * its repository, so none of its configuration, hooks or attributes apply; the
 * fetch carries no credential. Returns the commit id, kept under
 * `refs/bb/imported/<id>` in `into`.
 */
export async function importHead(options: ImportOptions): Promise<string> {
  const objects = workspaceObjects(options.workspace);
  const sha = readHeadAsData(options.workspace);
  if (!sha)
    throw new BbError('INVALID_INPUT', 'the workspace has no commit yet: commit your work first');
  const reader = options.reader ?? `${options.into}.reader`;
  makeReaderRepo(reader, [objects]);
  setRef(reader, 'refs/heads/incoming', sha);
  ensureBareRepo(options.into);
  const env = wallGitEnv({ config: [['protocol.file.allow', 'always']] });
  try {
    await runGit(
      [
        `--git-dir=${options.into}`,
        'fetch',
        '--quiet',
        '--no-tags',
        '--no-write-fetch-head',
        '--no-recurse-submodules',
        '--no-auto-gc',
        reader,
        `+refs/heads/incoming:refs/bb/imported/${sha}`,
      ],
      { env, timeoutMs: options.timeoutMs ?? 120_000 },
    );
  } catch (err) {
    throw new BbError(
      'INVALID_INPUT',
      `the workspace's commit ${sha.slice(0, 12)} could not be read: ${(err as Error).message.split('\n').slice(-2).join(' ')}`,
      { cause: err },
    );
  }
  return sha;
}

/** Make a bare repository of ours at `dir` when there is none (no template, fixed config). */
export function ensureBareRepo(dir: string): void {
  makeReaderRepo(dir, []);
}

export interface LogAsDataOptions {
  /** Object stores to read (a workspace's, checked with `workspaceObjects`; ours). */
  objectDirs: string[];
  /** Commits to show, with what they reach. */
  tips: string[];
  /** Commits (and what they reach) to leave out; unknown ones are ignored. */
  exclude?: string[];
  timeoutMs?: number;
  maxBytes?: number;
}

/**
 * `git log -p` of `tips` minus `exclude`, read as data from `objectDirs` in a
 * throwaway repository of ours: every file as text (a NUL byte or an attribute
 * cannot turn a diff into "Binary files differ"), no external diff, no
 * textconv, no replace refs, no signatures, no mailmap. Returns the patch and
 * the range it covered, for the record.
 */
export async function logPatchAsData(
  options: LogAsDataOptions,
): Promise<{ patch: string; range: string }> {
  const tips = options.tips.filter(isSha);
  const exclude = (options.exclude ?? []).filter(isSha);
  const range = `${tips.map((t) => t.slice(0, 12)).join(' ')}${exclude.length ? ` --not ${exclude.map((t) => t.slice(0, 12)).join(' ')}` : ''}`;
  if (tips.length === 0) return { patch: '', range };
  const dir = mkdtempSync(join(tmpdir(), 'bb-reader-'));
  try {
    makeReaderRepo(dir, options.objectDirs);
    const patch = await runGit(
      [
        `--git-dir=${dir}`,
        'log',
        '-p',
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
      ],
      {
        env: wallGitEnv(),
        timeoutMs: options.timeoutMs ?? 120_000,
        maxBytes: options.maxBytes ?? 256 * 1024 * 1024,
      },
    );
    return { patch, range };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
