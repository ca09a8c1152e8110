import { chownSync, lchownSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { errorMessage, isBbError } from '@bb/errors';
import type { Backend } from '@bb/headless';
import { runGit, wallGitEnv } from '@bb/wall';

/**
 * Paths whose content runs with the repository's secrets once a branch is
 * pushed (CI workflows and pipelines). In a result forklift pushes, each of
 * them is byte for byte the fork's, upstream's or the automatic merge's: no
 * byte of them is the agent's.
 */
export const CI_PATHS = [
  '.github/**',
  '.gitea/**',
  '.forgejo/**',
  '.gitlab-ci.yml',
  '.gitlab/**',
  '.woodpecker.yml',
  '.woodpecker.yaml',
  '.woodpecker/**',
  '.circleci/**',
  '.buildkite/**',
  '.travis.yml',
  'azure-pipelines.yml',
  'Jenkinsfile',
  '.drone.yml',
];

/** What FORK.md declares: the test command (`test: …`) and protected paths (`protect: glob`). */
export interface ForkRules {
  test?: string | undefined;
  protect: string[];
}

export function parseForkMd(text: string): ForkRules {
  const test = /^test:[ \t]*(.+)$/im.exec(text)?.[1]?.trim() || undefined;
  const protect = [...text.matchAll(/^protect:[ \t]*(\S.*)$/gim)].map((m) => m[1]!.trim());
  return { test, protect };
}

/** A `*`/`**` glob over repository paths (`dir/**` matches everything below dir). */
export function globMatch(glob: string, path: string): boolean {
  let re = '';
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i]!;
    if (c === '*' && glob[i + 1] === '*') {
      re += '.*';
      i++;
    } else if (c === '*') re += '[^/]*';
    else if (c === '?') re += '[^/]';
    else re += c.replace(/[.+^${}()|[\]\\]/g, '\\$&');
  }
  return new RegExp(`^${re}$`).test(path);
}

export interface TreeCheck {
  /** Paths the automatic merge could not merge (the agent resolved them). */
  conflicted: string[];
  /** Paths where the agent's result differs from the automatic merge outside its conflicts. */
  beyond: string[];
  /** Protected paths whose content in the result is no side's: the agent wrote them. */
  violations: string[];
}

/**
 * Compare the agent's result with the automatic merge of the two sides, in the
 * host's repository `gitDir` (every object already imported and checked).
 */
export async function checkTree(
  gitDir: string,
  sides: { fork: string; upstream: string; merged: string },
  protect: string[],
): Promise<TreeCheck> {
  const git = (args: string[]) =>
    runGit(['--git-dir', gitDir, ...args], { env: wallGitEnv(), timeoutMs: 300_000 });
  // merge-tree exits 1 on conflicts and still prints the tree and the conflicted paths.
  const auto = await git([
    'merge-tree',
    '--write-tree',
    '--name-only',
    '--no-messages',
    sides.fork,
    sides.upstream,
  ]).catch((err: { exitCode?: number; gitStdout?: string }) => {
    if (err.exitCode === 1 && err.gitStdout) return err.gitStdout;
    throw err;
  });
  const [tree, ...conflictLines] = auto.split('\n').filter(Boolean);
  const conflicted = [...new Set(conflictLines)];
  const changed = (
    await git(['diff-tree', '-r', '-z', '--no-renames', '--name-only', tree!, sides.merged])
  )
    .split('\0')
    .filter(Boolean);
  const beyond = changed.filter((p) => !conflicted.includes(p));
  const guarded = [...CI_PATHS, ...protect];
  const violations: string[] = [];
  const blob = (commit: string, path: string) =>
    git(['rev-parse', '--verify', '--quiet', `${commit}:${path}`]).then(
      (s) => s.trim(),
      () => 'absent',
    );
  for (const path of changed) {
    if (!guarded.some((g) => globMatch(g, path))) continue;
    const mine = await blob(sides.merged, path);
    const theirs = await Promise.all([blob(sides.fork, path), blob(sides.upstream, path)]);
    // Either side's version is the maintainer's or upstream's choice; anything else is the agent's.
    if (!theirs.includes(mine)) violations.push(path);
  }
  return { conflicted, beyond, violations };
}

export interface TestRun {
  ok: boolean;
  timedOut: boolean;
  exitCode: number;
  /** The last lines of the output, for the PR body or the agent. */
  tail: string;
  durationMs: number;
}

/**
 * Run the fork's test command on `commit` in a fresh container: the commit's
 * tree checked out by the host into a directory of the run's (never the
 * agent's workspace), no network, a read-only root, the same image as the
 * agent, killed after `timeoutMs`.
 */
export async function runTests(o: {
  backend: Backend;
  image: string;
  gitDir: string;
  commit: string;
  command: string;
  dir: string;
  name: string;
  labels: Record<string, string>;
  timeoutMs: number;
}): Promise<TestRun> {
  const t0 = Date.now();
  rmSync(o.dir, { recursive: true, force: true });
  mkdirSync(o.dir, { recursive: true, mode: 0o755 });
  await runGit(
    ['--git-dir', o.gitDir, '--work-tree', o.dir, 'read-tree', '-u', '--reset', o.commit],
    {
      env: wallGitEnv({ env: { GIT_INDEX_FILE: `${o.dir}.index` } }),
      timeoutMs: 600_000,
    },
  );
  rmSync(`${o.dir}.index`, { force: true });
  if (process.getuid?.() === 0) chownTree(o.dir, 1000);
  const id = await o.backend.create({
    name: o.name,
    image: o.image,
    cmd: ['sh', '-c', o.command],
    env: { HOME: '/tmp', CI: 'true' },
    user: '1000:1000',
    workdir: '/workspace',
    labels: o.labels,
    network: 'none',
    readOnlyRootfs: true,
    tmpfs: { '/tmp': 'rw,size=512m' },
    mounts: [{ source: o.dir, target: '/workspace' }],
    resources: { memoryBytes: 4 * 1024 ** 3, pidsLimit: 1024 },
  });
  let timedOut = false;
  let exitCode = -1;
  try {
    await o.backend.start(id);
    exitCode = await o.backend.wait(id, { timeoutMs: o.timeoutMs }).then(
      (r) => r.exitCode,
      async (err) => {
        if (!isBbError(err, 'TIMEOUT')) throw err;
        timedOut = true;
        await o.backend.stop(id, 1000).catch(() => {});
        return -1;
      },
    );
    const logs = await o.backend.logs(id).catch((e) => errorMessage(e));
    return {
      ok: !timedOut && exitCode === 0,
      timedOut,
      exitCode,
      tail: logs.split('\n').slice(-30).join('\n').slice(-4000),
      durationMs: Date.now() - t0,
    };
  } finally {
    await o.backend.destroy(id).catch(() => {});
  }
}

/** Give a directory the host made to the given uid (nothing in it is anyone else's yet). */
export function chownTree(dir: string, uid: number): void {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) chownTree(p, uid);
    else lchownSync(p, uid, uid);
  }
  chownSync(dir, uid, uid);
}
