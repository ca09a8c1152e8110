import { execFile, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  closeSync,
  createReadStream,
  existsSync,
  constants as fsConstants,
  fstatSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createInflate } from 'node:zlib';
import { BbError, redactString } from '@bb/errors';
import { minimalEnv } from './env';
import { listNoFollow, lstatNoFollow, openNoFollow, readAll, readFileNoFollow } from './safe-fs';

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

/**
 * `setpriv --pdeathsig KILL` where util-linux has it: git dies with the process
 * that ran it (an orchestrator killed mid-clone leaves no clone behind; git's
 * own transport helpers then end at the low-speed limit).
 */
let setpriv: Promise<string | null> | undefined;
function dieWithParent(): Promise<string | null> {
  setpriv ??= (async () => {
    const found = ['/usr/bin/setpriv', '/bin/setpriv'].find((p) => existsSync(p));
    if (!found) return null;
    // Older util-linux has setpriv without --pdeathsig: then git runs as it is. Asked once
    // per process, without blocking it.
    const help = await new Promise<string>((resolve) => {
      execFile(found, ['--help'], { timeout: 5000 }, (_err, stdout) =>
        resolve(String(stdout ?? '')),
      );
    });
    return /--pdeathsig/.test(help) ? found : null;
  })();
  return setpriv;
}
// Asked as soon as git may be needed, so the first git call does not wait for the answer.
void dieWithParent();

/** Run git; resolve its stdout, or reject with its (redacted) stderr. */
export async function runGit(args: string[], options: RunGitOptions): Promise<string> {
  const max = options.maxBytes ?? 64 * 1024 * 1024;
  const wrapper = await dieWithParent();
  return new Promise((resolve, reject) => {
    const [cmd, argv] = wrapper
      ? [wrapper, ['--pdeathsig', 'KILL', 'git', ...args]]
      : ['git', args];
    const child = spawn(cmd, argv, {
      cwd: options.cwd ?? '/',
      env: options.env,
      stdio: ['ignore', 'pipe', 'pipe'],
      // Its own process group: a timeout kills git and its transport helpers together.
      detached: true,
    });
    const kill = () => {
      try {
        if (child.pid) process.kill(-child.pid, 'SIGKILL');
      } catch {
        child.kill('SIGKILL');
      }
    };
    const out: Buffer[] = [];
    let size = 0;
    let err = '';
    let failed: Error | undefined;
    const timer = setTimeout(() => {
      failed = new BbError(
        'TIMEOUT',
        `git ${args[0]} took longer than ${options.timeoutMs ?? 120_000} ms and was stopped`,
      );
      kill();
    }, options.timeoutMs ?? 120_000);
    child.stdout.on('data', (d: Buffer) => {
      size += d.length;
      if (size > max) {
        failed ??= new BbError('TOO_LARGE', `git ${args[0]} printed more than ${max} bytes`);
        kill();
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
          // Some commands answer on stdout as they fail (merge-tree on a conflict).
          gitStdout: Buffer.concat(out).toString('utf8'),
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
  // Its alternates (a checkout borrowing from the repository's mirror) are never
  // read: what it borrows must already be in the repository it is imported into.
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
  return readRefAsData(workspace, m[1]!);
}

/**
 * The commit a branch of the workspace names (`refs/heads/<name>`), read as data
 * like `readHeadAsData`: loose or packed, no symlink followed, no git run there.
 * `undefined` when there is no such branch.
 */
export function readBranchAsData(workspace: string, branch: string): string | undefined {
  const ref = `refs/heads/${branch}`;
  if (unsafeRef(ref)) throw new BbError('INVALID_INPUT', `${branch} is not a branch name`);
  return readRefAsData(workspace, ref);
}

/** A ref's commit, loose or packed, read without following a link. */
function readRefAsData(workspace: string, ref: string): string | undefined {
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
  /** Refuse to read more than this many (compressed) bytes of objects in one import. @default 8 GiB */
  maxBytes?: number;
  /** Refuse to inflate more than this many bytes of loose objects in one import. @default 16 GiB */
  maxInflatedBytes?: number;
  /** Refuse when `into` would use more than this much disk. @default unlimited */
  maxRepoBytes?: number;
  /**
   * Commits `into` already has, with their whole history (through `alternates`,
   * say: the launch's base commit in the repository's mirror): their history is
   * neither walked again nor copied. Ones it lacks are ignored.
   */
  exclude?: string[];
  /**
   * Object stores of ours `into` borrows from, read-only, for this import only
   * (`GIT_ALTERNATE_OBJECT_DIRECTORIES`; nothing is written into `into`): the
   * repository's mirror, whose history the commit may reuse (a revert, a file
   * restored) without its workspace holding it.
   */
  alternates?: string[];
  timeoutMs?: number;
}

/** At most this many loose objects and packs are looked at in one import. */
const MAX_FILES = 1_000_000;

/**
 * Bring the commit the workspace's HEAD names, with everything it reaches,
 * into the repository `into` that we own, as verified objects. No git ever
 * reads the workspace: its object directory is walked without following a
 * symlink, each loose object is inflated as a stream, hashed and kept only
 * when its content matches its name, and each pack is streamed through
 * `git index-pack`, which computes every object's id itself. Indexes,
 * bitmaps, commit-graphs, multi-pack-indexes and alternates the agent left
 * are never read. All of that lands in a quarantine first; the commit must be
 * complete there, and only the objects it reaches move into `into`, as one
 * pack of ours. Returns the commit id, kept under `refs/bb/imported/<id>`.
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
  // `own`: this repository's objects only; `env`: with the object stores it borrows.
  const own = wallGitEnv({ config: [['pack.threads', '1']] });
  const env = withAlternates(own, options.alternates ?? []);
  const timeoutMs = options.timeoutMs ?? 300_000;
  // What `into` borrows on disk would count as present however it got there (an
  // operator's private history, a mirror's orphans): it must borrow nothing (I10).
  const borrowed = readAlternates(options.into);
  if (borrowed.length > 0)
    throw new BbError(
      'INVALID_INPUT',
      `${options.into} borrows objects from ${borrowed.join(', ')}: a repository the agent's commits are imported into must hold its own objects only`,
    );
  // A commit imported before is complete there (each import is, and `into` borrows nothing).
  if (refsOf(options.into).includes(sha)) {
    setRef(options.into, `refs/bb/imported/${sha}`, sha);
    return sha;
  }
  const budget: Budget = {
    read: options.maxBytes ?? 8 * 1024 ** 3,
    inflated: options.maxInflatedBytes ?? 16 * 1024 ** 3,
    files: MAX_FILES,
  };
  const quarantine = mkdtempSync(join(dirname(options.into), '.bb-quarantine-'));
  try {
    makeReaderRepo(quarantine, [join(options.into, 'objects')]);
    await copyLooseObjects(options.workspace, quarantine, options.into, budget);
    await copyPacks(options.workspace, quarantine, budget, env, timeoutMs);
    const known = [...refsOf(options.into)];
    for (const e of options.exclude ?? []) {
      if (!isSha(e) || known.includes(e)) continue;
      if (await hasObject(options.into, e, env)) known.push(e);
      // The stores borrowed hold what the forge's refs reach (a mirror pruned when they
      // are rewritten): a starting commit they no longer hold was taken off the forge,
      // and work built on it would carry it back, whatever copies the agent kept (I10).
      else if ((options.alternates ?? []).length > 0)
        throw new BbError(
          'CONFLICT',
          `the commit this work started from (${e.slice(0, 12)}) is no longer on the forge: its history was rewritten there (a force-push), and nothing built on it is pushed; start again from the forge's current branch`,
        );
    }
    let needed: string[];
    try {
      needed = (
        await runGit(
          [
            `--git-dir=${quarantine}`,
            'rev-list',
            '--objects',
            `${sha}^{commit}`,
            '--not',
            ...known,
          ],
          { env, timeoutMs },
        )
      )
        .split('\n')
        .map((l) => l.slice(0, 40))
        .filter(isSha);
    } catch (err) {
      throw new BbError(
        'INVALID_INPUT',
        `the workspace's commit ${sha.slice(0, 12)} is incomplete or not a commit (${(err as Error).message.split('\n')[0]})`,
        { cause: err },
      );
    }
    // Beyond what the bottle may see (the refs and bases in `known`), every object must be
    // the workspace's own or already `into`'s: a borrowed store (the repository's mirror)
    // may hold objects no ref reaches any more (a secret force-pushed away), and its having
    // one never makes it the agent's to push (I10).
    const absent = await absentFrom(quarantine, needed, own, timeoutMs);
    // What the walk lists also holds objects of the bases' older history (a file restored
    // from an old commit): those are the bottle's to use. The whole history is walked only
    // when there are such objects.
    const missing =
      absent.length > 0 ? await notReachable(quarantine, absent, known, env, timeoutMs) : [];
    if (missing.length > 0)
      throw new BbError(
        'INVALID_INPUT',
        `the workspace's commit ${sha.slice(0, 12)} is incomplete: it needs ${missing.length} object${missing.length === 1 ? '' : 's'} (${missing.slice(0, 3).join(', ')}${missing.length > 3 ? ', …' : ''}) that the workspace does not hold and no ref the bottle may see reaches`,
      );

    // Only what the commit reaches, as one pack of ours; the rest of the quarantine goes.
    const before = diskUsage(join(options.into, 'objects'));
    // Every object checked as fsck would (tree entries duplicated or named .git, bad modes,
    // malformed commits) as it enters: a repository of ours holds nothing git would refuse.
    const name = await packStrictly(
      quarantine,
      options.into,
      `${sha}\n--not\n${known.join('\n')}\n`,
      env,
      timeoutMs,
    );
    const after = diskUsage(join(options.into, 'objects'));
    if (options.maxRepoBytes !== undefined && after > options.maxRepoBytes) {
      const id = name.trim();
      for (const ext of ['pack', 'idx', 'rev'])
        rmSync(join(options.into, 'objects', 'pack', `pack-${id}.${ext}`), { force: true });
      throw new BbError(
        'TOO_LARGE',
        `the commit would grow the push repository from ${mb(before)} to ${mb(after)} MB, past its limit of ${mb(options.maxRepoBytes)} MB; push smaller commits`,
      );
    }
  } finally {
    rmSync(quarantine, { recursive: true, force: true });
  }
  setRef(options.into, `refs/bb/imported/${sha}`, sha);
  return sha;
}

/** `env` with `dirs` as alternate object stores (absolute paths of ours, no `:`). */
export function withAlternates(env: NodeJS.ProcessEnv, dirs: string[]): NodeJS.ProcessEnv {
  if (dirs.length === 0) return env;
  for (const d of dirs)
    if (!d.startsWith('/') || d.includes(':') || /[\n\r]/.test(d))
      throw new BbError(
        'INVALID_INPUT',
        `${JSON.stringify(d)} is not an object store path of ours`,
      );
  return { ...env, GIT_ALTERNATE_OBJECT_DIRECTORIES: dirs.join(':') };
}

interface Budget {
  read: number;
  inflated: number;
  files: number;
}

const mb = (n: number) => Math.round(n / 1024 ** 2);

function charge(budget: Budget, what: keyof Budget, n: number, name: string): void {
  budget[what] -= n;
  if (budget[what] < 0)
    throw new BbError(
      'TOO_LARGE',
      `the workspace's objects are too many or too large to import (at ${name}); push smaller commits`,
    );
}

/** The object stores a repository of ours names in `objects/info/alternates`. */
function readAlternates(repo: string): string[] {
  try {
    return readFileSync(join(repo, 'objects', 'info', 'alternates'), 'utf8')
      .split('\n')
      .map((l) => l.trim())
      .filter((l) => l && !l.startsWith('#'));
  } catch {
    return [];
  }
}

/**
 * Which of `ids` the repository `repo` does not hold in its own object store and
 * those its files name (no alternates from the environment), one `cat-file` for all.
 */
async function absentFrom(
  repo: string,
  ids: string[],
  env: NodeJS.ProcessEnv,
  timeoutMs: number,
): Promise<string[]> {
  if (ids.length === 0) return [];
  const { GIT_ALTERNATE_OBJECT_DIRECTORIES: _borrowed, ...own } = env;
  const out = await runGitInput(
    [`--git-dir=${repo}`, 'cat-file', '--batch-check=%(objectname)'],
    `${ids.join('\n')}\n`,
    { env: own, timeoutMs, maxBytes: 64 * ids.length + 4096 },
  );
  return out
    .split('\n')
    .filter((l) => l.endsWith(' missing'))
    .map((l) => l.slice(0, -' missing'.length));
}

/**
 * Which of `ids` no commit of `tips` reaches (their whole history walked, object by
 * object, until every id is found).
 */
function notReachable(
  repo: string,
  ids: string[],
  tips: string[],
  env: NodeJS.ProcessEnv,
  timeoutMs: number,
): Promise<string[]> {
  const left = new Set(ids);
  if (tips.length === 0) return Promise.resolve([...left]);
  return new Promise((resolve, reject) => {
    const child = spawn(
      'git',
      [`--git-dir=${repo}`, 'rev-list', '--objects', '--no-object-names', ...tips],
      { cwd: '/', env, stdio: ['ignore', 'pipe', 'ignore'] },
    );
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new BbError('TIMEOUT', `git rev-list took longer than ${timeoutMs} ms`));
    }, timeoutMs);
    let rest = '';
    child.stdout.on('data', (d: Buffer) => {
      const lines = (rest + d.toString('latin1')).split('\n');
      rest = lines.pop() ?? '';
      for (const l of lines) left.delete(l.trim());
      if (left.size === 0) child.kill('SIGKILL');
    });
    child.on('error', reject);
    child.on('close', () => {
      clearTimeout(timer);
      left.delete(rest.trim());
      resolve([...left]);
    });
  });
}

/** The refs of a repository of ours (its imported commits), read as files. */
function refsOf(repo: string): string[] {
  const dir = join(repo, 'refs', 'bb', 'imported');
  if (!existsSync(dir)) return [];
  return readdirSync(dir).filter((n) => isSha(n));
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

/** Disk a directory tree really takes (blocks, not sizes: a million tiny files are not free). */
/**
 * The disk a directory tree takes (allocated blocks, at least a block per entry), walked
 * without following a link, through directory descriptors (a path however deep stays
 * short). Entries that vanish meanwhile count for nothing. `strict`: anything else that
 * cannot be measured (a tree too deep for the descriptors, an unreadable entry) throws,
 * for a caller that must not be told less than there is.
 */
export function diskUsage(dir: string, options: { strict?: boolean } = {}): number {
  const viaFd = existsSync('/proc/self/fd');
  const gone = (err: unknown) => (err as NodeJS.ErrnoException).code === 'ENOENT';
  const seen = new Set<string>();
  const walk = (path: string): number => {
    let fd: number | undefined;
    let base = path;
    let names: string[];
    try {
      if (viaFd) {
        fd = openSync(
          path,
          fsConstants.O_RDONLY | fsConstants.O_DIRECTORY | fsConstants.O_NOFOLLOW,
        );
        base = `/proc/self/fd/${fd}`;
      }
      names = readdirSync(base);
    } catch (err) {
      if (fd !== undefined) closeSync(fd);
      if (gone(err) || !options.strict) return 0;
      throw err;
    }
    let n = 0;
    try {
      for (const name of names) {
        const p = `${base}/${name}`;
        try {
          const st = lstatSync(p);
          // A file with several names takes its blocks once.
          if (st.nlink > 1 && !st.isDirectory()) {
            const key = `${st.dev}:${st.ino}`;
            if (seen.has(key)) continue;
            seen.add(key);
          }
          n += Math.max(st.blocks * 512, 4096);
          if (st.isDirectory()) n += walk(p);
        } catch (err) {
          if (gone(err) || !options.strict) continue;
          throw err;
        }
      }
    } finally {
      if (fd !== undefined) closeSync(fd);
    }
    return n;
  };
  return walk(dir);
}

const HEX2 = /^[0-9a-f]{2}$/;
const HEX38 = /^[0-9a-f]{38}$/;

/**
 * Copy the workspace's loose objects we lack into the quarantine, each checked
 * as a stream: its header declares its type and size (charged before a byte is
 * inflated), and its content must hash to its name. A file seen under two names
 * (a hard link) is read once; nothing blocks the event loop.
 */
async function copyLooseObjects(
  workspace: string,
  quarantine: string,
  into: string,
  budget: Budget,
): Promise<void> {
  const seen = new Set<string>();
  for (const dir of listNoFollow(workspace, '.git/objects')) {
    if (!HEX2.test(dir)) continue;
    for (const name of listNoFollow(workspace, `.git/objects/${dir}`)) {
      if (!HEX38.test(name)) continue;
      charge(budget, 'files', 1, `${dir}${name}`);
      if (existsSync(join(into, 'objects', dir, name))) continue;
      const fd = openNoFollow(workspace, `.git/objects/${dir}/${name}`);
      if (fd === undefined) continue;
      try {
        const st = fstatSync(fd);
        const inode = `${st.dev}:${st.ino}`;
        if (seen.has(inode)) continue;
        seen.add(inode);
        charge(budget, 'read', st.size, `${dir}${name}`);
        if (!(await looseObjectIs(fd, `${dir}${name}`, budget))) continue;
        mkdirSync(join(quarantine, 'objects', dir), { recursive: true, mode: 0o700 });
        writeFileSync(join(quarantine, 'objects', dir, name), readAll(fd, st.size), {
          mode: 0o444,
        });
      } finally {
        closeSync(fd);
      }
    }
  }
}

/** Whether the loose object in `fd` inflates to a well-formed object whose id is `id`. */
async function looseObjectIs(fd: number, id: string, budget: Budget): Promise<boolean> {
  const hash = createHash('sha1');
  const inflate = createInflate();
  let head = Buffer.alloc(0);
  let declared = -1;
  let got = 0;
  let verdict: boolean | undefined;
  const ended = new Promise<void>((resolve) => {
    inflate.on('end', () => {
      verdict ??= got === declared && hash.digest('hex') === id;
      resolve();
    });
    inflate.on('error', () => {
      verdict ??= false;
      resolve();
    });
    inflate.on('close', () => resolve());
  });
  inflate.on('data', (data: Buffer) => {
    if (verdict !== undefined) return;
    let chunk = data;
    if (declared < 0) {
      head = Buffer.concat([head, chunk]);
      const nul = head.indexOf(0);
      if (nul < 0) {
        if (head.length > 64) verdict = false;
        return;
      }
      const m = /^(blob|tree|commit|tag) (\d{1,15})$/.exec(
        head.subarray(0, nul).toString('latin1'),
      );
      if (!m) {
        verdict = false;
        return;
      }
      declared = Number(m[2]) + nul + 1;
      // Charged as declared, before it is inflated: a bomb costs what it says it is. One
      // that says more than is left is refused alone; the others still fit.
      if (declared > budget.inflated) {
        verdict = false;
        return;
      }
      budget.inflated -= declared;
      chunk = head;
    }
    got += chunk.length;
    if (got > declared) verdict = false;
    else hash.update(chunk);
  });
  // Read by hand (a stream on the fd would close it): 64 KiB at a time, with backpressure.
  let pos = 0;
  for (;;) {
    if (verdict !== undefined) break;
    const buf = Buffer.alloc(64 * 1024);
    const n = readSync(fd, buf, 0, buf.length, pos);
    if (n === 0) break;
    pos += n;
    if (!inflate.write(buf.subarray(0, n)))
      await new Promise<void>((r) => {
        inflate.once('drain', r);
        inflate.once('close', r);
      });
  }
  if (verdict !== undefined) inflate.destroy();
  else inflate.end();
  await ended;
  return verdict ?? false;
}

/** Stream the workspace's packs we lack through `git index-pack` into the quarantine. */
async function copyPacks(
  workspace: string,
  quarantine: string,
  budget: Budget,
  env: NodeJS.ProcessEnv,
  timeoutMs: number,
): Promise<void> {
  for (const name of listNoFollow(workspace, '.git/objects/pack')) {
    if (!/^pack-[0-9a-f]{40,64}\.pack$/.test(name)) continue;
    charge(budget, 'files', 1, name);
    const fd = openNoFollow(workspace, `.git/objects/pack/${name}`);
    if (fd === undefined) continue;
    try {
      const size = fstatSync(fd).size;
      if (size < 32) continue;
      charge(budget, 'read', size, name);
      await indexPack(quarantine, fd, env, timeoutMs);
    } finally {
      closeSync(fd);
    }
  }
}

/**
 * Stream one pack into the quarantine through `git index-pack --stdin`, which
 * checks the pack and computes each object's id itself. A file that is not a
 * valid pack is skipped (the completeness check decides).
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
      resolve();
    };
    child.on('error', done);
    child.on('close', done);
  });
}

/** Make a bare repository of ours at `dir` when there is none (no template, fixed config). */
export function ensureBareRepo(dir: string): void {
  // One of ours already (a reader repository keeps its alternates).
  if (existsSync(join(dir, 'HEAD')) && existsSync(join(dir, 'objects', 'pack'))) return;
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

/** How each commit is introduced in a patch: its id, then its people and message, indented. */
const COMMIT_FORMAT = 'format:commit %H%n%w(0,4,4)%an <%ae>%n%cn <%ce>%n%B';

/**
 * Every commit of `tips` minus `exclude`, as one patch read from `objectDirs`
 * (stores of ours, whose objects were checked when they came in) in a
 * throwaway repository of ours. Each commit appears with its author, committer
 * and message (a secret in a message counts), every commit of the range is
 * shown (no history simplification: a merge cannot hide a side branch),
 * merges show what they add themselves (`--cc`), every file is shown as text
 * (a NUL byte or an attribute cannot turn a diff into "Binary files differ"),
 * with no external diff, textconv, replace refs or signatures. A tip that is
 * not there is an error, never an empty patch. A blob over `maxFileBytes` is
 * left out of the one commit that adds it, and named in `skipped`: the caller
 * must not call such a scan complete.
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
  const big = { maxBytes: 256 * 1024 * 1024, env, timeoutMs };
  try {
    makeReaderRepo(dir, options.objectDirs);
    for (const t of tips)
      if (!(await hasObject(dir, t, env)))
        throw new BbError('NOT_FOUND', `commit ${t.slice(0, 12)} is not there to be scanned`);
    const git = [`--git-dir=${dir}`];
    const revs = [...tips, '--not', ...exclude];
    const commits = (await runGit([...git, 'rev-list', '--ignore-missing', ...revs], big))
      .split('\n')
      .filter(isSha);
    if (commits.length === 0) return { patch: '', range, skipped: [] };
    // Which blobs are too big to diff: by id, from their sizes.
    const objects = (
      await runGit(
        [...git, 'rev-list', '--objects', '--no-object-names', '--ignore-missing', ...revs],
        big,
      )
    )
      .split('\n')
      .filter(isSha);
    const sizes = await runGitInput(
      [...git, 'cat-file', '--batch-check=%(objectname) %(objecttype) %(objectsize)'],
      `${objects.join('\n')}\n`,
      big,
    );
    const tooBig = new Map<string, number>();
    for (const line of sizes.split('\n')) {
      const [id, type, size] = line.split(' ');
      if (type === 'blob' && Number(size) > limit) tooBig.set(id!, Number(size));
    }
    // The commits that add one, and at which paths.
    const touches = new Map<string, Set<string>>();
    const skipped: PatchAsData['skipped'] = [];
    if (tooBig.size > 0) {
      const raw = await runGitInput(
        [...git, 'diff-tree', '--stdin', '-r', '-m', '--root', '--no-abbrev', '--raw', '-z'],
        `${commits.join('\n')}\n`,
        big,
      );
      let commit = '';
      const tokens = raw.split('\0');
      for (let i = 0; i < tokens.length; i++) {
        const t = tokens[i]!.replace(/^\n/, '');
        if (isSha(t)) commit = t;
        else if (t.startsWith(':')) {
          const path = tokens[++i] ?? '';
          const blob = t.split(' ')[3] ?? '';
          const bytes = tooBig.get(blob);
          if (bytes === undefined) continue;
          const set = touches.get(commit) ?? new Set<string>();
          if (!set.has(path)) skipped.push({ path, bytes });
          set.add(path);
          touches.set(commit, set);
        }
      }
    }
    const diff = [
      'diff-tree',
      '--root',
      '--always',
      '--cc',
      '--text',
      '--no-ext-diff',
      '--no-textconv',
      '--no-color',
      `--pretty=${COMMIT_FORMAT}`,
    ];
    const plain = commits.filter((c) => !touches.has(c));
    let patch = plain.length
      ? await runGitInput([...git, ...diff, '--stdin'], `${plain.join('\n')}\n`, {
          ...big,
          maxBytes: options.maxBytes ?? 256 * 1024 * 1024,
        })
      : '';
    // A commit that adds a too-big blob: everything else of it, that one path left out.
    for (const [c, paths] of touches)
      patch += await runGit(
        [...git, ...diff, c, '--', '.', ...[...paths].map((p) => `:(exclude,literal,top)${p}`)],
        big,
      );
    return { patch, range, skipped };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** `runGit` with `input` on stdin. */
/**
 * `pack-objects` of what `revs` names, from `from`, piped into `index-pack --strict` in
 * `into`. Resolves the new pack's id; rejects (and leaves no pack) when an object fails
 * the checks. Old repositories' harmless quirks (zero-padded modes, odd dates) pass.
 */
function packStrictly(
  from: string,
  into: string,
  revs: string,
  env: NodeJS.ProcessEnv,
  timeoutMs: number,
): Promise<string> {
  return new Promise((resolve, reject) => {
    const pack = spawn(
      'git',
      [`--git-dir=${from}`, 'pack-objects', '--revs', '--quiet', '--window=0', '--stdout'],
      { cwd: '/', env, stdio: ['pipe', 'pipe', 'ignore'] },
    );
    const index = spawn(
      'git',
      [
        `--git-dir=${into}`,
        'index-pack',
        '--strict=zeroPaddedFilemode=ignore,badTimezone=ignore,missingSpaceBeforeDate=ignore,badDate=ignore,badFilemode=error',
        '--stdin',
      ],
      { cwd: into, env, stdio: ['pipe', 'pipe', 'pipe'] },
    );
    const kill = () => {
      pack.kill('SIGKILL');
      index.kill('SIGKILL');
    };
    const timer = setTimeout(kill, timeoutMs);
    let out = '';
    let err = '';
    index.stdout.on('data', (d: Buffer) => {
      if (out.length < 4096) out += d.toString('utf8');
    });
    index.stderr.on('data', (d: Buffer) => {
      if (err.length < 4096) err += d.toString('utf8');
    });
    pack.stdin.on('error', () => {});
    index.stdin.on('error', () => {});
    pack.stdout.pipe(index.stdin);
    pack.on('error', (e) => {
      kill();
      reject(e);
    });
    index.on('error', (e) => {
      kill();
      reject(e);
    });
    let packed: number | null | undefined;
    pack.on('close', (code) => {
      packed = code;
    });
    index.on('close', (code) => {
      clearTimeout(timer);
      const id = /^pack\t([0-9a-f]{40,64})$/m.exec(out)?.[1];
      if (code === 0 && packed !== undefined && packed !== 0) {
        if (id)
          for (const ext of ['pack', 'idx', 'rev', 'keep'])
            rmSync(join(into, 'objects', 'pack', `pack-${id}.${ext}`), { force: true });
        return reject(new BbError('INTERNAL', `git pack-objects exited ${packed}`));
      }
      if (code === 0 && id) return resolve(id);
      reject(
        new BbError(
          'INVALID_INPUT',
          `the workspace's objects fail git's checks: ${redactString(err.trim().split('\n').slice(-2).join('; ') || `index-pack exited ${code}`)}`,
        ),
      );
    });
    pack.stdin.end(revs);
  });
}

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
