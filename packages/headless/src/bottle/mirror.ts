import { createHash } from 'node:crypto';
import {
  chmodSync,
  closeSync,
  existsSync,
  mkdirSync,
  openSync,
  readFileSync,
  rmSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { join } from 'node:path';
import { BbError, redactString, registerSecret } from '@bb/errors';
import { forgeKinds, type GitRemote } from '@bb/forge';
import { homeLayout } from '@bb/names';
import { runGit, wallGitEnv } from '@bb/wall';
import type { ForgeWiring } from './layout';

/**
 * `$BB_HOME/mirrors/<id>.git`: the host's bare mirror of a forge repository
 * (`id` from its clone URL). Bottles check out from it and borrow its objects
 * read-only, so a launch fetches what changed instead of cloning everything,
 * and a frozen bottle keeps only its checkout and its own objects. Only the
 * host writes it. It holds what the forge's default branch reaches and nothing
 * else: when a fetch finds that branch rewritten (a force-push that took a
 * leaked secret away), every object it no longer reaches is pruned at once, so
 * no later bottle can read it or build on it (I10).
 */
export function mirrorDir(cloneUrl: string, env: Record<string, string | undefined>): string {
  const id = createHash('sha256').update(cloneUrl).digest('hex').slice(0, 20);
  return homeLayout(env).mirror(id);
}

/**
 * Make a repository's mirror, empty, when there is none (what a bottle mounts
 * must exist before it is fetched into). Idempotent; returns its directory.
 */
export async function initMirror(dir: string): Promise<string> {
  if (existsSync(join(dir, 'HEAD')) && !making.has(dir)) return dir;
  // Made once, whoever asks first; the others wait for it.
  let made = making.get(dir);
  if (!made) {
    made = makeMirror(dir).finally(() => making.delete(dir));
    making.set(dir, made);
  }
  await made;
  return dir;
}

/** Mirrors being made, by directory. */
const making = new Map<string, Promise<void>>();

async function makeMirror(dir: string): Promise<void> {
  if (existsSync(join(dir, 'HEAD'))) return;
  mkdirSync(join(dir, '..'), { recursive: true, mode: 0o755 });
  const env = wallGitEnv({ config: [] });
  await runGit(['init', '--quiet', '--bare', '--shared=0644', dir], { env, timeoutMs: 30_000 });
  // Never pruned: bottles borrow its objects.
  await runGit([`--git-dir=${dir}`, 'config', 'gc.auto', '0'], { env, timeoutMs: 30_000 });
  // Mounted read-only into bottles and gates, other users: readable whatever the umask.
  for (const d of [dir, join(dir, 'objects'), join(dir, 'objects', 'pack')]) chmodSync(d, 0o755);
}

/** One fetch at a time into each mirror (concurrent ones would fight over its refs). */
const busy = new Map<string, Promise<unknown>>();

/**
 * Bring a repository's mirror up to date with the forge (made on first use).
 * Returns its directory and the commit the forge's default branch is at. The
 * forge's token goes with each request as protected configuration; it is never
 * stored.
 */
export async function syncMirror(
  forge: ForgeWiring,
  env: Record<string, string | undefined>,
  timeoutMs: number,
  /**
   * Where the default branch is, as the forge's API says: when the mirror has it
   * there already, nothing is fetched.
   */
  known?: Promise<string | undefined>,
): Promise<{ dir: string; head: string | undefined }> {
  const dir = mirrorDir(forge.cloneUrl, env);
  // Asked before taking the mirror's turn, and for 2 s at most: a slow forge API holds
  // no launch of the repository (not told in time, the mirror is fetched).
  const there = known
    ? await Promise.race([
        known.catch(() => undefined),
        new Promise<undefined>((r) => setTimeout(() => r(undefined), 2000).unref()),
      ])
    : undefined;
  const before = busy.get(dir) ?? Promise.resolve();
  const mine = before
    .catch(() => {})
    .then(async () => {
      if (there && existsSync(join(dir, 'HEAD')) && readDefault(dir) === there) return there;
      return fetchInto(dir, forge, timeoutMs);
    });
  busy.set(dir, mine);
  try {
    return { dir, head: await mine };
  } finally {
    if (busy.get(dir) === mine) busy.delete(dir);
  }
}

/** The forge's git remote for the wiring's repository, as its kind says; never logged. */
export function gitRemoteOf(forge: ForgeWiring): GitRemote {
  const remote = forgeKinds
    .get(forge.kind)
    .fromEnv(forge.site)
    .forgeFor({ owner: forge.owner, repo: forge.repo, token: forge.token })
    .gitRemote();
  if (!remote)
    throw new BbError(
      'INVALID_INPUT',
      `the ${forge.kind} forge gives no git remote (Forge.gitRemote): bottles cannot be cloned from it`,
    );
  for (const [k, v] of Object.entries(remote.headers)) {
    if (/[\r\n]/.test(k) || /[\r\n]/.test(v))
      throw new BbError(
        'INVALID_INPUT',
        `the ${forge.kind} forge's git header ${k} has a line break`,
      );
    // Whatever the scheme makes of the token (base64, a signature) is as secret as it.
    registerSecret(v);
  }
  return remote;
}

/**
 * A git that talks to the forge: its scheme allowed, a low-speed limit within
 * `timeoutMs`, the token as protected configuration (never argv or a URL).
 */
export function forgeGitEnv(
  forge: ForgeWiring,
  timeoutMs: number,
  extra: Array<[string, string]> = [],
): NodeJS.ProcessEnv {
  const scheme = new URL(forge.cloneUrl).protocol.replace(':', '');
  return wallGitEnv({
    config: [
      [`protocol.${scheme}.allow`, 'always'],
      ...extra,
      ['http.lowSpeedLimit', '1000'],
      ['http.lowSpeedTime', String(Math.max(1, Math.min(60, Math.floor(timeoutMs / 2000))))],
      // As the forge kind authenticates git (several headers become several values).
      ...Object.entries(gitRemoteOf(forge).headers).map(
        ([k, v]) => ['http.extraHeader', `${k}: ${v}`] as [string, string],
      ),
    ],
  });
}

async function fetchInto(
  dir: string,
  forge: ForgeWiring,
  timeoutMs: number,
): Promise<string | undefined> {
  // The forge's repository, not an agent's: its history is checked by the forge.
  const env = forgeGitEnv(forge, timeoutMs, [['transfer.fsckObjects', 'false']]);
  const fail = (err: Error) => {
    throw new BbError(
      'FORGE_UNAVAILABLE',
      `cannot fetch ${forge.cloneUrl}: ${redactString(err.message)}`,
    );
  };
  await initMirror(dir);
  // One fetch (and prune) at a time across processes too: a CLI and a service, or two
  // replicas, on one BB_HOME.
  const loose = await withMirrorLock(dir, timeoutMs, async () => {
    // A prune that did not finish (a timeout, a crash) is done before anything else.
    if (existsSync(join(dir, PRUNE_PENDING))) await prune(dir, timeoutMs);
    const was = readDefault(dir);
    await fetch(dir, forge, env, timeoutMs).catch(fail);
    // The ref the fetch just wrote, read as the file it is (the mirror is the host's alone).
    const now = readDefault(dir);
    if (was && was !== now && !(await isAncestor(dir, was, now))) {
      writeFileSync(join(dir, PRUNE_PENDING), `${was}\n`);
      await prune(dir, timeoutMs);
    }
    return now;
  });
  if (loose) return loose;
  // An empty repository has no default branch yet: the bottle starts from nothing.
  const head = await runGit(
    [`--git-dir=${dir}`, 'rev-parse', '--verify', '--quiet', `${DEFAULT}^{commit}`],
    { env, timeoutMs },
  ).catch(() => '');
  return head.trim() || undefined;
}

/**
 * The commit `branch` is at on the forge (one request, the token as protected
 * configuration), or undefined when it cannot be told (no such branch, no answer).
 */
export async function remoteBranchHead(
  forge: ForgeWiring,
  branch: string,
  timeoutMs: number,
): Promise<string | undefined> {
  const env = forgeGitEnv(forge, timeoutMs);
  try {
    const out = await runGit(['ls-remote', forge.cloneUrl, `refs/heads/${branch}`], {
      env,
      timeoutMs,
    });
    // ls-remote matches a pattern's tail (refs/heads/x/refs/heads/<branch> too): the exact ref only.
    for (const line of out.split('\n')) {
      const [sha, ref] = line.split('\t');
      if (ref === `refs/heads/${branch}` && sha && /^[0-9a-f]{40}$/.test(sha)) return sha;
    }
    return undefined;
  } catch {
    return undefined;
  }
}

/** Whether `a` is an ancestor of `b` in the mirror (false when `b` is gone). */
async function isAncestor(dir: string, a: string, b: string | undefined): Promise<boolean> {
  if (!b) return false;
  return runGit([`--git-dir=${dir}`, 'merge-base', '--is-ancestor', a, b], {
    env: wallGitEnv({ config: [] }),
    timeoutMs: 60_000,
  }).then(
    () => true,
    () => false,
  );
}

/**
 * Drop every object the mirror's refs no longer reach: one pack of what they
 * reach, then the loose rest. Bottles built on the rewritten history lose what
 * they borrowed of it, as they should: their work cannot carry it back to the forge.
 */
async function prune(dir: string, timeoutMs: number): Promise<void> {
  const env = wallGitEnv({ config: [['pack.threads', '1']] });
  const git = (args: string[]) =>
    runGit([`--git-dir=${dir}`, ...args], { env, timeoutMs: Math.max(timeoutMs, 300_000) });
  await git(['repack', '-a', '-d', '-q']);
  await git(['prune', '--expire=now']);
  for (const d of [join(dir, 'objects'), join(dir, 'objects', 'pack')]) chmodSync(d, 0o755);
  rmSync(join(dir, PRUNE_PENDING), { force: true });
}

/** Marks a mirror whose rewritten history is not pruned yet. */
const PRUNE_PENDING = 'bb-prune-pending';

/**
 * Run `fn` holding the mirror's lock file (its holder's pid in it; a dead holder's
 * lock is taken over), waiting for another process's fetch at most `timeoutMs`.
 */
async function withMirrorLock<T>(dir: string, timeoutMs: number, fn: () => Promise<T>): Promise<T> {
  const lock = join(dir, 'bb-fetch.lock');
  const deadline = Date.now() + Math.max(timeoutMs, 60_000);
  for (;;) {
    try {
      const fd = openSync(lock, 'wx', 0o600);
      writeSync(fd, String(process.pid));
      closeSync(fd);
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      const holder = Number(readFileSync(lock, 'utf8').trim() || '0');
      let held = holder > 0;
      try {
        if (held) process.kill(holder, 0);
      } catch {
        held = false;
      }
      if (!held) {
        rmSync(lock, { force: true });
        continue;
      }
      if (Date.now() > deadline)
        throw new BbError(
          'TIMEOUT',
          `the mirror ${dir} is being fetched by process ${holder}, which did not finish in time`,
        );
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  try {
    return await fn();
  } finally {
    rmSync(lock, { force: true });
  }
}

/** Where the forge's default branch (its HEAD) lands in a mirror. */
const DEFAULT = 'refs/bb/default';

/** The default branch's commit as the mirror's last fetch left it (its loose ref), if any. */
function readDefault(dir: string): string | undefined {
  try {
    const loose = readFileSync(join(dir, DEFAULT), 'utf8').trim();
    return /^[0-9a-f]{40}([0-9a-f]{24})?$/.test(loose) ? loose : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The forge's default branch (its HEAD), and nothing else: other branches (other
 * bottles' among them) never enter, so what bottles borrow is what they start
 * from. None when the repository is empty.
 */
async function fetch(
  dir: string,
  forge: ForgeWiring,
  env: NodeJS.ProcessEnv,
  timeoutMs: number,
): Promise<void> {
  const args = [
    `--git-dir=${dir}`,
    'fetch',
    '--quiet',
    '--no-tags',
    '--no-write-fetch-head',
    forge.cloneUrl,
    `+HEAD:${DEFAULT}`,
  ];
  try {
    await runGit(args, { env, timeoutMs });
  } catch (err) {
    if (!/couldn't find remote ref HEAD/i.test((err as Error).message)) throw err;
    rmSync(join(dir, DEFAULT), { force: true });
  }
}
