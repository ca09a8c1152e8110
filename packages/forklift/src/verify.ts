import { mkdirSync, rmSync } from 'node:fs';
import { errorMessage } from '@bb/errors';
import { AGENT_USER, type Backend } from '@bb/headless';
import { chownTreeNoFollow, runGit, wallGitEnv } from '@bb/wall';
import { runBounded, treeSize, watchDisk } from './disk';
import { quarantine } from './quarantine';

/**
 * What runs with the repository's secrets once a branch is pushed: CI workflows and
 * pipelines, and what decides what they check out. Directories (matched on a path's
 * first component) and files (the whole path), both without regard to case (a forge on
 * a case-insensitive filesystem reads `.GitHub` as `.github`). In a result forklift
 * pushes, each is byte for byte (and mode for mode) the fork's, upstream's or the
 * automatic merge's: no byte of them is the agent's.
 */
export const CI_DIRS = [
  '.github',
  '.gitea',
  '.forgejo',
  '.gitlab',
  '.woodpecker',
  '.circleci',
  '.buildkite',
  '.semaphore',
  '.builds',
  '.teamcity',
  '.tekton',
];
export const CI_FILES = [
  '.gitlab-ci.yml',
  '.woodpecker.yml',
  '.woodpecker.yaml',
  '.travis.yml',
  'azure-pipelines.yml',
  'Jenkinsfile',
  '.drone.yml',
  '.drone.yaml',
  'bitbucket-pipelines.yml',
  '.cirrus.yml',
  'appveyor.yml',
  '.appveyor.yml',
  '.build.yml',
  '.cirrus.star',
  'buildkite.yml',
  'buildkite.yaml',
  'buildkite.json',
  '.buildkite.yml',
  '.buildkite.yaml',
  '.buildkite.json',
  '.gitmodules',
];

/** Whether `path` (unquoted) is a CI path. */
export function isCiPath(path: string): boolean {
  const lower = path.toLowerCase();
  const first = lower.split('/')[0]!;
  return CI_DIRS.includes(first) || CI_FILES.some((f) => f.toLowerCase() === lower);
}

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
  // A name may hold any byte but / and NUL (newlines too): . and [^/] match them all.
  return new RegExp(`^${re}$`, 's').test(path);
}

export interface TreeCheck {
  /** Paths the automatic merge could not merge (the agent resolved them). */
  conflicted: string[];
  /** Paths where the agent's result differs from the automatic merge outside its conflicts. */
  beyond: string[];
  /** Protected paths whose content in the result is no side's: the agent wrote them. */
  violations: string[];
  /** The automatic merge's tree (conflicted paths hold their markers). */
  autoTree: string;
}

/**
 * Unquote a path as git prints it with core.quotePath (C-style, in double quotes, when it
 * holds a control character, a quote, a backslash or a byte above 0x7f).
 */
export function unquotePath(p: string): string {
  if (!p.startsWith('"')) return p;
  const bytes: number[] = [];
  const s = p.slice(1, -1);
  const esc: Record<string, number> = {
    n: 10,
    t: 9,
    r: 13,
    a: 7,
    b: 8,
    f: 12,
    v: 11,
    '"': 34,
    '\\': 92,
  };
  for (let i = 0; i < s.length; i++) {
    if (s[i] !== '\\') {
      bytes.push(s.charCodeAt(i));
      continue;
    }
    const o = /^[0-7]{3}/.exec(s.slice(i + 1));
    if (o) {
      bytes.push(Number.parseInt(o[0], 8));
      i += 3;
    } else {
      bytes.push(esc[s[i + 1]!] ?? s.charCodeAt(i + 1));
      i += 1;
    }
  }
  // A name is bytes; read as UTF-8 (what FORK.md's globs are written in).
  return Buffer.from(bytes).toString('utf8');
}

/** A tree's entries (trees included), by quoted path: `mode type oid` (a tree: `tree`). */
async function entries(
  git: (a: string[]) => Promise<string>,
  rev: string,
): Promise<Map<string, string>> {
  const out = await git(['-c', 'core.quotePath=true', 'ls-tree', '-r', '-t', '--full-tree', rev]);
  const map = new Map<string, string>();
  for (const line of out.split('\n')) {
    if (!line) continue;
    const tab = line.indexOf('\t');
    const [mode, type, oid] = line.slice(0, tab).split(' ');
    // A tree's id changes with anything below it: what matters is that it is a tree.
    map.set(line.slice(tab + 1), type === 'tree' ? 'tree' : `${mode} ${type} ${oid}`);
  }
  return map;
}

/**
 * Compare the agent's result with both sides and their automatic merge, in the host's
 * repository `gitDir` (every object already imported and checked). Any git failure
 * throws: the caller refuses the result.
 */
export async function checkTree(
  gitDir: string,
  sides: { fork: string; upstream: string; merged: string },
  protect: string[],
): Promise<TreeCheck> {
  const git = (args: string[]) =>
    runGit(['--git-dir', gitDir, ...args], { env: wallGitEnv(), timeoutMs: 300_000 });
  // merge-tree exits 1 on conflicts and still prints the tree and the conflicted paths
  // (quoted like every path here: ASCII, one per line).
  const auto = await git([
    '-c',
    'core.quotePath=true',
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
  if (!tree || !/^[0-9a-f]{40,64}$/.test(tree)) throw new Error('git merge-tree printed no tree');
  const conflicted = [...new Set(conflictLines)];
  const changed = (
    await git([
      '-c',
      'core.quotePath=true',
      'diff-tree',
      '-r',
      '--no-renames',
      '--name-only',
      tree,
      sides.merged,
    ])
  )
    .split('\n')
    .filter(Boolean);
  const beyond = changed.filter((p) => !conflicted.includes(p));
  const [mine, fork, upstream, merged] = await Promise.all(
    [sides.merged, sides.fork, sides.upstream, tree].map((r) => entries(git, r)),
  );
  const all = new Set([...mine!.keys(), ...fork!.keys(), ...upstream!.keys(), ...merged!.keys()]);
  const direct = (p: string) => isCiPath(p) || protect.some((g) => globMatch(g, p));
  // Guarded: CI paths and protected ones, and every directory above them (a link or a file
  // in a directory's place would serve other bytes at the guarded path), with the literal
  // part of each protect glob (what it guards may exist on no side yet).
  const guardedPaths = new Set<string>();
  const addWithParents = (p: string) => {
    const parts = p.split('/');
    for (let i = 1; i <= parts.length; i++) guardedPaths.add(parts.slice(0, i).join('/'));
  };
  for (const q of all) {
    const p = unquotePath(q);
    if (direct(p)) addWithParents(p);
  }
  for (const g of protect) {
    const literal = g.slice(0, g.search(/[*?]|$/)).replace(/\/[^/]*$/, '');
    if (literal) addWithParents(literal);
  }
  const violations: string[] = [];
  for (const path of all) {
    const p = unquotePath(path);
    if (!guardedPaths.has(p) && !direct(p)) continue;
    const state = (m: Map<string, string>) => m.get(path) ?? 'absent';
    // Not in conflict: exactly what the automatic merge made of the two sides (the agent
    // neither reverts a side's change nor deletes what a side added). In conflict: one
    // side's version, whole.
    const allowed = conflicted.includes(path) ? [fork!, upstream!] : [merged!];
    if (!allowed.map(state).includes(state(mine!))) violations.push(path);
  }
  // A new directory is named by what is in it.
  const named = violations.filter(
    (v) => !violations.some((w) => w !== v && unquotePath(w).startsWith(`${unquotePath(v)}/`)),
  );
  return { conflicted, beyond, violations: named, autoTree: tree };
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
  /** The most the checkout and what the tests write may take on the host's disk. */
  diskBytes: number;
}): Promise<TestRun> {
  const t0 = Date.now();
  // Measured before a byte is written: a small repository can name one big blob a thousand times.
  const size = await treeSize(o.gitDir, o.commit);
  if (size.bytes > o.diskBytes || size.entries > 1_000_000)
    return {
      ok: false,
      timedOut: false,
      exitCode: -1,
      tail: `the tree would take ${Math.round(size.bytes / 1024 ** 2)} MiB in ${size.entries} entries checked out, past the limit of ${Math.round(o.diskBytes / 1024 ** 2)} MiB: not tested`,
      durationMs: Date.now() - t0,
    };
  rmSync(o.dir, { recursive: true, force: true });
  rmSync(`${o.dir}.tar`, { force: true });
  mkdirSync(o.dir, { recursive: true, mode: 0o755 });
  await runGit(
    ['--git-dir', o.gitDir, '--work-tree', o.dir, 'read-tree', '-u', '--reset', o.commit],
    {
      env: wallGitEnv({ env: { GIT_INDEX_FILE: `${o.dir}.index` } }),
      timeoutMs: 600_000,
    },
  );
  rmSync(`${o.dir}.index`, { force: true });
  // As for the agent: root hands the tree to the agent's user, anyone else runs the tests as themselves.
  const root = process.getuid?.() === 0;
  if (root) await chownTreeNoFollow(AGENT_USER, o.dir);
  const user = root
    ? AGENT_USER
    : { uid: process.getuid?.() ?? 1000, gid: process.getgid?.() ?? 1000 };
  const id = await o.backend.create({
    name: o.name,
    image: o.image,
    cmd: ['sh', '-c', o.command],
    env: { HOME: '/tmp', CI: 'true' },
    user: `${user.uid}:${user.gid}`,
    workdir: '/workspace',
    labels: o.labels,
    network: 'none',
    readOnlyRootfs: true,
    tmpfs: { '/tmp': 'rw,size=512m' },
    mounts: [{ source: o.dir, target: '/workspace' }],
    resources: { memoryBytes: 4 * 1024 ** 3, pidsLimit: 1024, cpus: 2 },
  });
  let timedOut = false;
  let exitCode = -1;
  let overDisk = false;
  const disk = watchDisk([o.dir], o.diskBytes, () => {
    o.backend.stop(id, 0).catch(() => {});
  });
  try {
    ({ exitCode, timedOut } = await runBounded(o.backend, id, o.timeoutMs));
    overDisk = disk.stop();
    const logs = `${await o.backend.logs(id).catch((e) => errorMessage(e))}${overDisk ? `\nforklift: the tests wrote past the disk limit of ${Math.round(o.diskBytes / 1024 ** 2)} MiB and were stopped` : ''}`;
    return {
      ok: !timedOut && !overDisk && exitCode === 0,
      timedOut,
      exitCode,
      tail: logs.split('\n').slice(-30).join('\n').slice(-4000),
      durationMs: Date.now() - t0,
    };
  } finally {
    disk.stop();
    await o.backend.destroy(id).catch(() => {});
    // What the tests wrote is put away from the operator's git, as the agent's is.
    await quarantine(o.dir);
  }
}
