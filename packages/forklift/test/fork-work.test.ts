// The fork-work check on real git histories: a merge that drops, reverts or overwrites
// the fork's own changes is found; one that adapts them to upstream is not refused.
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { runGit, wallGitEnv } from '@bb/wall';
import { afterAll, describe, expect, it } from 'vitest';
import { checkForkWork } from '../src/fork-work';

const root = mkdtempSync(join(tmpdir(), 'bb-forkwork-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
let n = 0;

const LIB = 'def greet(name):\n    return "hello " + name\n\ndef part():\n    return 1\n';

/** base → fork and base → upstream, then `result` written on a merge of the two. */
function history(o: {
  base?: Record<string, string>;
  fork: Record<string, string | null>;
  upstream: Record<string, string | null>;
  result: Record<string, string | null>;
}) {
  const dir = join(root, `r${++n}`);
  mkdirSync(dir);
  const git = (...a: string[]) =>
    execFileSync('git', a, {
      cwd: dir,
      encoding: 'utf8',
      env: {
        ...process.env,
        GIT_AUTHOR_NAME: 'T',
        GIT_AUTHOR_EMAIL: 't@x',
        GIT_COMMITTER_NAME: 'T',
        GIT_COMMITTER_EMAIL: 't@x',
      },
    }).trim();
  const write = (files: Record<string, string | null>) => {
    for (const [f, c] of Object.entries(files)) {
      if (c === null) rmSync(join(dir, f), { force: true });
      else {
        mkdirSync(dirname(join(dir, f)), { recursive: true });
        writeFileSync(join(dir, f), c);
      }
    }
    git('add', '-A');
  };
  git('init', '-q', '-b', 'main');
  write({
    'lib.py': LIB,
    README: 'the project\nmore text here\n',
    'old.txt': 'old file with words\n',
    ...o.base,
  });
  git('commit', '-qm', 'base');
  const base = git('rev-parse', 'HEAD');
  write(o.upstream);
  git('commit', '-qm', 'upstream', '--allow-empty');
  const upstream = git('rev-parse', 'HEAD');
  git('checkout', '-q', '-b', 'fork', base);
  write(o.fork);
  git('commit', '-qm', 'fork', '--allow-empty');
  const fork = git('rev-parse', 'HEAD');
  git('merge', '-q', '--no-edit', '-s', 'ours', upstream);
  // The result's tree: the upstream side's files, then the fork's, then what the "agent" wrote.
  git('checkout', '-q', upstream, '--', '.');
  write({ ...o.fork, ...o.result });
  git('commit', '-q', '--amend', '--no-edit');
  const merged = git('rev-parse', 'HEAD');
  const g = (args: string[]) =>
    runGit(['-C', dir, ...args], { env: wallGitEnv(), timeoutMs: 60_000 });
  return checkForkWork(g, { base, fork, upstream, merged });
}

describe('checkForkWork', () => {
  it('a merge keeping both sides undoes nothing', async () => {
    const r = await history({
      fork: { 'feature.py': 'def feature():\n    return greet("fork")\n' },
      upstream: { README: 'the project, now documented\nmore text here\n' },
      result: {},
    });
    expect(r).toMatchObject({ reverted: [], reworked: [], checked: 1 });
  });

  it('finds a fork-only file the result dropped', async () => {
    const r = await history({
      fork: { 'feature.py': 'def feature():\n    return 1\n' },
      upstream: { README: 'changed upstream\nmore text here\n' },
      result: { 'feature.py': null },
    });
    expect(r.reverted).toEqual(["feature.py: the fork's file is gone"]);
  });

  it('finds a fork hunk put back as it was, and a file where upstream overwrote the fork', async () => {
    const r = await history({
      fork: {
        'lib.py': LIB.replace('"hello " + name', '"hello, " + name.title()'),
        README: 'the fork of the project\nmore text here\n',
      },
      upstream: { README: 'the project (upstream)\nmore text here\n' },
      result: { 'lib.py': LIB, README: 'the project (upstream)\nmore text here\n' },
    });
    expect(r.reverted.sort()).toEqual([
      "README: upstream's version replaced the fork's change",
      "lib.py: the fork's change is undone (the file is as before it)",
    ]);
  });

  it("a fork's file moved whole to another path is a move, not a loss", async () => {
    const feature = 'def feature():\n    return 1\n';
    const r = await history({
      fork: { 'feature.py': feature },
      upstream: { README: 'changed upstream\nmore text here\n' },
      result: { 'feature.py': null, 'plugins/feature.py': feature },
    });
    expect(r).toMatchObject({ reverted: [], reworked: ['feature.py'] });
  });

  it('finds what a sneaky result undoes: a path with a space, code commented out, a two-word change, a file brought back changed, a "++" line', async () => {
    const cfg = 'name: app\nverify: false\nmode: fast\n';
    const r = await history({
      base: { 'my config.yml': cfg, 'flags.yml': cfg, 'notes.txt': 'intro words\nmore\n' },
      fork: {
        'my config.yml': 'name: app\nverify: true\nmode: fast\n',
        'lib.py': `${LIB}\ndef guard(user):\n    if not user.admin: raise PermissionError(user)\n`,
        'notes.txt': 'intro words\n++ keep this line of the fork\nmore\n',
        'flags.yml': cfg.replace('verify: false', 'verify: strict'),
        'old.txt': null,
      },
      upstream: {
        'old.txt': 'old file with words, upstream\n',
        'flags.yml': `${cfg}extra: upstream\n`,
        'my config.yml': `${cfg}extra: upstream\n`,
      },
      result: {
        'my config.yml': `${cfg}extra: upstream\n`.replace('verify: false', 'verify: false'),
        'lib.py': `${LIB}\ndef guard(user):\n    # if not user.admin: raise PermissionError(user)\n    pass\n`,
        'notes.txt': 'intro words\nmore\n',
        'flags.yml': `${cfg}extra: upstream\n`,
        'old.txt': 'old file with words, and the agent\n',
      },
    });
    expect(r.reverted.map((x) => x.split(':')[0]).sort()).toEqual([
      'flags.yml',
      'lib.py',
      'my config.yml',
      'notes.txt',
      'old.txt',
    ]);
  });

  it('finds a file the fork deleted brought back', async () => {
    const r = await history({
      fork: { 'old.txt': null },
      upstream: {},
      result: { 'old.txt': 'old file with words\n' },
    });
    expect(r.reverted).toEqual(['old.txt: the fork deleted it, and it is back']);
  });

  it('a fork change adapted to upstream (a renamed call) is listed for review, not refused', async () => {
    const r = await history({
      fork: { 'welcome.sh': 'welcome() { echo "$(greet $1)!"; }\n' },
      upstream: { 'lib.py': LIB.replace(/greet/g, 'salute') },
      result: { 'welcome.sh': 'welcome() { echo "$(salute $1)!"; }\n' },
    });
    expect(r).toMatchObject({ reverted: [], reworked: ['welcome.sh'] });
  });
});
