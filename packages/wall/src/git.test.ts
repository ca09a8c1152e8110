import { execFileSync } from 'node:child_process';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { deflateSync } from 'node:zlib';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  diskUsage,
  importHead,
  logPatchAsData,
  makeReaderRepo,
  readHeadAsData,
  runGit,
  wallGitEnv,
  workspaceObjects,
} from './git';

let dir: string;
let ws: string;
const gitIn = (cwd: string, ...args: string[]) =>
  execFileSync('git', ['-C', cwd, ...args], {
    env: {
      ...process.env,
      GIT_AUTHOR_NAME: 'a',
      GIT_AUTHOR_EMAIL: 'a@b',
      GIT_COMMITTER_NAME: 'a',
      GIT_COMMITTER_EMAIL: 'a@b',
    },
  })
    .toString()
    .trim();
const git = (...args: string[]) => gitIn(ws, ...args);
/** Write `file` in the repository at `cwd` and commit everything; the new HEAD. */
const commitIn = (cwd: string, file: string, content: string, msg = file) => {
  writeFileSync(join(cwd, file), content);
  gitIn(cwd, 'add', '-A');
  gitIn(cwd, 'commit', '-qm', msg);
  return gitIn(cwd, 'rev-parse', 'HEAD');
};
const commit = (file: string, content: string, msg = file) => commitIn(ws, file, content, msg);

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'wall-git-'));
  ws = join(dir, 'ws');
  execFileSync('git', ['init', '-q', '-b', 'main', ws]);
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

describe('readHeadAsData', () => {
  it('reads a branch, loose or packed, and a detached HEAD', () => {
    const a = commit('a.txt', 'a');
    expect(readHeadAsData(ws)).toBe(a);
    git('pack-refs', '--all');
    expect(existsSync(join(ws, '.git/refs/heads/main'))).toBe(false);
    expect(readHeadAsData(ws)).toBe(a);
    const b = commit('b.txt', 'b');
    git('checkout', '-q', '--detach', b);
    expect(readHeadAsData(ws)).toBe(b);
  });

  it('says undefined for an unborn branch and refuses symlinks and odd refs', () => {
    expect(readHeadAsData(ws)).toBeUndefined();
    commit('a.txt', 'a');
    writeFileSync(join(ws, '.git/HEAD'), 'ref: refs/heads/../../etc/passwd\n');
    expect(() => readHeadAsData(ws)).toThrow(/does not name a branch/);
    rmSync(join(ws, '.git/HEAD'));
    symlinkSync('/etc/hostname', join(ws, '.git/HEAD'));
    expect(() => readHeadAsData(ws)).toThrow(/symlink/);
  });
});

describe('workspaceObjects', () => {
  it('refuses a symlinked .git and a gitdir file', () => {
    commit('a.txt', 'a');
    expect(workspaceObjects(ws)).toBe(join(ws, '.git', 'objects'));
    renameSync(join(ws, '.git'), join(dir, 'real.git'));
    symlinkSync(join(dir, 'real.git'), join(ws, '.git'));
    expect(() => workspaceObjects(ws)).toThrow(/not a directory/);
    rmSync(join(ws, '.git'));
    writeFileSync(join(ws, '.git'), `gitdir: ${join(dir, 'real.git')}\n`);
    expect(() => workspaceObjects(ws)).toThrow(/not a directory/);
  });
});

describe('importHead', () => {
  it("never follows the workspace's alternates: what it borrows must be in `into` already", async () => {
    // A repository of the agent's choosing, holding the base commit's objects.
    const other = join(dir, 'other');
    execFileSync('git', ['init', '-q', other]);
    commitIn(other, 'old.txt', 'old\n', 'old');
    rmSync(join(other, 'old.txt'));
    commitIn(other, 'base.txt', 'base\n', 'base');
    // The workspace borrows it and commits on top: its own store lacks the base.
    writeFileSync(join(ws, '.git/objects/info/alternates'), `${join(other, '.git/objects')}\n`);
    gitIn(ws, 'fetch', '-q', other, 'HEAD');
    gitIn(ws, 'reset', '-q', '--hard', 'FETCH_HEAD');
    commitIn(ws, 'mine.txt', 'mine\n', 'mine');
    const sha = gitIn(ws, 'rev-parse', 'HEAD');
    const base = gitIn(ws, 'rev-parse', 'HEAD~1');
    await expect(importHead({ workspace: ws, into: join(dir, 'a.git') })).rejects.toThrow(
      /incomplete/,
    );
    // Borrowed by `into` (a mirror of ours), the base is found there and not copied.
    const into = join(dir, 'b.git');
    const mirror = [join(other, '.git/objects')];
    expect(await importHead({ workspace: ws, into, exclude: [base], alternates: mirror })).toBe(
      sha,
    );
    // Nothing of it written into `into`: the borrowing is for that import only.
    const alternates = join(into, 'objects/info/alternates');
    expect(existsSync(alternates) ? readFileSync(alternates, 'utf8') : '').toBe('');
    const env = wallGitEnv();
    const packed = await runGit([`--git-dir=${into}`, 'count-objects', '-v'], { env });
    // The commit, its tree and its new blob: nothing of the base's history.
    expect(/^in-pack: (\d+)$/m.exec(packed)?.[1]).toBe('3');

    // A commit that restores what the base's history had (a revert) reuses the mirror's
    // objects without its workspace holding them: it imports.
    gitIn(ws, 'checkout', `${base}~1`, '--', 'old.txt');
    gitIn(ws, 'commit', '-q', '-m', 'restore old');
    const restored = gitIn(ws, 'rev-parse', 'HEAD');
    expect(await importHead({ workspace: ws, into, exclude: [base], alternates: mirror })).toBe(
      restored,
    );
  });

  it('never takes an object from a borrowed store that no ref the bottle may see reaches (I10)', async () => {
    // The host's mirror: a default branch at `base`, and an orphan commit holding a secret
    // (what a force-push on the forge left behind).
    const mirror = join(dir, 'mirror');
    execFileSync('git', ['init', '-q', mirror]);
    commitIn(mirror, 'base.txt', 'base\n', 'base');
    const base = gitIn(mirror, 'rev-parse', 'HEAD');
    commitIn(mirror, 'secret.env', 'AWS_SECRET=leaked\n', 'oops');
    const orphan = gitIn(mirror, 'rev-parse', 'HEAD');
    gitIn(mirror, 'reset', '-q', '--hard', base);
    // The agent's checkout borrows the mirror, finds the orphan and merges it into its work.
    writeFileSync(join(ws, '.git/objects/info/alternates'), `${join(mirror, '.git/objects')}\n`);
    gitIn(ws, 'reset', '-q', '--hard', orphan);
    commitIn(ws, 'mine.txt', 'mine\n', 'mine');
    expect(gitIn(ws, 'show', 'HEAD~1:secret.env')).toBe('AWS_SECRET=leaked');
    const into = join(dir, 'push.git');
    const alternates = [join(mirror, '.git/objects')];
    await expect(importHead({ workspace: ws, into, exclude: [base], alternates })).rejects.toThrow(
      /incomplete: it needs \d+ objects? .* that the workspace does not hold and no ref the bottle may see reaches/,
    );
    // Nothing of the orphan entered the repository that pushes.
    const env = wallGitEnv();
    await expect(
      runGit([`--git-dir=${into}`, 'cat-file', '-e', `${orphan}^{commit}`], { env }),
    ).rejects.toThrow();
    // Once the orphan is reachable again (the branch moved back to it), the same import passes.
    expect(await importHead({ workspace: ws, into, exclude: [base, orphan], alternates })).toBe(
      gitIn(ws, 'rev-parse', 'HEAD'),
    );
  });

  it('refuses to import into a repository that borrows objects on disk', async () => {
    const sha = commit('a.txt', 'a');
    const into = join(dir, 'borrowing.git');
    makeReaderRepo(into, [join(dir, 'elsewhere', 'objects')]);
    await expect(importHead({ workspace: ws, into })).rejects.toThrow(
      /borrows objects from .*elsewhere\/objects: a repository the agent's commits are imported into must hold its own objects only/,
    );
    expect(sha).toMatch(/^[0-9a-f]{40}$/);
  });

  it('copies the commit as objects and runs nothing the workspace configures', async () => {
    const sha = commit('a.txt', 'a');
    const marker = join(dir, 'RAN');
    const evil = join(ws, 'evil.sh');
    writeFileSync(evil, `#!/bin/sh\ntouch ${marker}\n`);
    chmodSync(evil, 0o755);
    for (const hook of ['pre-push', 'post-update', 'reference-transaction', 'pre-receive'])
      writeFileSync(join(ws, '.git/hooks', hook), `#!/bin/sh\ntouch ${marker}\n`, { mode: 0o755 });
    git('config', 'core.hooksPath', join(ws, '.git/hooks'));
    git('config', 'core.fsmonitor', evil);
    git('config', 'uploadpack.packObjectsHook', evil);
    git('config', 'core.alternateRefsCommand', evil);
    git('config', 'http.proxy', 'http://127.0.0.1:1');
    const into = join(dir, 'gate.git');
    expect(await importHead({ workspace: ws, into })).toBe(sha);
    expect(existsSync(marker)).toBe(false);
    const env = wallGitEnv();
    expect(await runGit([`--git-dir=${into}`, 'cat-file', '-t', sha], { env })).toBe('commit\n');
    // The objects are ours now: the workspace can go.
    rmSync(ws, { recursive: true });
    expect(await runGit([`--git-dir=${into}`, 'log', '--format=%s', sha], { env })).toBe('a.txt\n');
  });

  it('refuses objects git itself would refuse: a tree with a duplicate entry, or one naming .git', async () => {
    const blob = git('rev-parse', `${commit('a.txt', 'a\n')}:a.txt`);
    const raw = Buffer.from(blob, 'hex');
    const entry = (name: string) => Buffer.concat([Buffer.from(`100644 ${name}\0`), raw]);
    for (const entries of [[entry('ci.yml'), entry('ci.yml')], [entry('.git')]]) {
      const tree = execFileSync(
        'git',
        ['-C', ws, 'hash-object', '-w', '-t', 'tree', '--literally', '--stdin'],
        {
          input: Buffer.concat(entries),
        },
      )
        .toString()
        .trim();
      const sha = git('commit-tree', tree, '-m', 'crafted');
      await expect(
        importHead({ workspace: ws, into: join(dir, 'g.git'), commit: sha }),
      ).rejects.toThrow(/fail git's checks/);
    }
    // The same repository's honest commit goes in.
    const ok = git('rev-parse', 'HEAD');
    await expect(importHead({ workspace: ws, into: join(dir, 'g.git'), commit: ok })).resolves.toBe(
      ok,
    );
  });

  it('checks every object it takes: a loose object whose content lies about its name is not imported', async () => {
    const base = commit('readme', 'r\n');
    const secret = commit('prod.env', 'SECRET=1\n');
    const blob = git('rev-parse', `${secret}:prod.env`);
    const harmless = git('rev-parse', `${base}:readme`);
    // The secret blob's file now holds the harmless blob's bytes.
    const file = (id: string) => join(ws, '.git', 'objects', id.slice(0, 2), id.slice(2));
    chmodSync(file(blob), 0o644);
    writeFileSync(file(blob), readFileSync(file(harmless)));
    await expect(importHead({ workspace: ws, into: join(dir, 'g.git') })).rejects.toThrow(
      /incomplete/,
    );
  });

  it('reads no index, bitmap or commit-graph the agent wrote, and refuses a symlinked pack directory', async () => {
    commit('a.txt', 'a\n');
    git('repack', '-a', '-d', '-q');
    git('commit-graph', 'write', '--reachable');
    // Corrupt every index the agent has: only the packs themselves may be trusted.
    for (const f of readdirSync(join(ws, '.git/objects/pack')))
      if (f.endsWith('.idx')) {
        chmodSync(join(ws, '.git/objects/pack', f), 0o644);
        writeFileSync(join(ws, '.git/objects/pack', f), 'garbage');
      }
    const sha = git('rev-parse', 'HEAD');
    expect(await importHead({ workspace: ws, into: join(dir, 'g.git') })).toBe(sha);
    renameSync(join(ws, '.git/objects/pack'), join(dir, 'elsewhere'));
    symlinkSync(join(dir, 'elsewhere'), join(ws, '.git/objects/pack'));
    await expect(importHead({ workspace: ws, into: join(dir, 'g2.git') })).rejects.toThrow(
      /symlink/,
    );
  });

  it('keeps only what the commit reaches, and a bomb costs what it declares, not what it inflates to', async () => {
    const sha = commit('a.txt', 'a\n');
    // Junk nobody reaches, and a "blob" that declares a terabyte.
    for (let i = 0; i < 20; i++) git('hash-object', '-w', '--stdin').toString();
    writeFileSync(join(ws, 'junk'), 'x');
    for (let i = 0; i < 20; i++) git('hash-object', '-w', 'junk');
    // In several directories, so some are read before the real objects whatever the order.
    for (const d of ['00', '7f', 'ab', 'ff']) {
      mkdirSync(join(ws, '.git/objects', d), { recursive: true });
      writeFileSync(
        join(ws, '.git/objects', d, 'c'.repeat(38)),
        deflateSync(Buffer.from('blob 999999999999\0xxxx')),
      );
    }
    const into = join(dir, 'g.git');
    const t0 = Date.now();
    expect(await importHead({ workspace: ws, into, maxInflatedBytes: 1024 * 1024 })).toBe(sha);
    expect(Date.now() - t0).toBeLessThan(10_000);
    const count = execFileSync('git', [`--git-dir=${into}`, 'count-objects', '-v']).toString();
    // a.txt's commit, tree and blob: three objects, in one pack of ours; nothing loose.
    expect(count).toMatch(/^count: 0$/m);
    expect(count).toMatch(/^in-pack: 3$/m);
  });

  it('refuses a workspace with no commit, with a message that says so', async () => {
    await expect(importHead({ workspace: ws, into: join(dir, 'g.git') })).rejects.toThrow(
      /no commit yet/,
    );
  });
});

describe('logPatchAsData', () => {
  /** Import the workspace's HEAD into a repository of ours; log it (or `tips`) since `exclude`. */
  const logImported = async (
    exclude: string[],
    o: { tips?: string[]; maxFileBytes?: number } = {},
  ) => {
    const ours = join(dir, 'ours.git');
    const tip = await importHead({ workspace: ws, into: ours });
    return logPatchAsData({
      objectDirs: [join(ours, 'objects')],
      tips: o.tips ?? [tip],
      exclude,
      ...o,
    });
  };
  const SECRET = 'AKIAIOSFODNN7EXAMPLX';
  it('shows every file as text whatever the attributes, and runs no program', async () => {
    const base = commit('readme', 'hello\n');
    const marker = join(dir, 'RAN');
    writeFileSync(join(ws, 'evil.sh'), `#!/bin/sh\ntouch ${marker}\ncat "$1"\n`, { mode: 0o755 });
    writeFileSync(join(ws, '.gitattributes'), 'a.env -diff\nb.env diff=evil\nc.env binary\n');
    git('config', 'diff.evil.textconv', './evil.sh');
    git('config', 'diff.external', './evil.sh');
    git('config', 'log.showSignature', 'true');
    git('config', 'gpg.program', './evil.sh');
    writeFileSync(join(ws, 'a.env'), `${SECRET}-a\n`);
    writeFileSync(join(ws, 'b.env'), `${SECRET}-b\n`);
    writeFileSync(join(ws, 'c.env'), `${SECRET}-c\n`);
    writeFileSync(join(ws, 'd.env'), Buffer.from(`\0\n${SECRET}-d\n`));
    git('add', '-A');
    git('commit', '-qm', 'secrets');
    const tip = git('rev-parse', 'HEAD');
    // A replace ref that would show a clean commit in its place.
    const clean = git('commit-tree', `${base}^{tree}`, '-p', base, '-m', 'clean');
    git('replace', tip, clean);
    const { patch } = await logImported([base], { tips: [tip] });
    for (const s of ['a', 'b', 'c', 'd']) expect(patch).toContain(`${SECRET}-${s}`);
    expect(patch).not.toContain('hello');
    expect(existsSync(marker)).toBe(false);
  });

  it('ignores excluded commits it does not know, but never a tip that is not there', async () => {
    const a = commit('a.txt', 'a\n');
    const { patch, range } = await logImported(['0'.repeat(40)], { tips: [a] });
    expect(patch).toContain(`commit ${a}`);
    expect(range).toContain(a.slice(0, 12));
    await expect(
      logPatchAsData({ objectDirs: [join(dir, 'ours.git', 'objects')], tips: ['1'.repeat(40)] }),
    ).rejects.toThrow(/not there to be scanned/);
  });

  it('shows what a merge adds itself, which plain git log -p hides', async () => {
    const base = commit('readme', 'r\n');
    git('checkout', '-q', '-b', 'side');
    commit('side.txt', 's\n');
    git('checkout', '-q', 'main');
    commit('main.txt', 'm\n');
    git('merge', '-q', '--no-commit', 'side');
    writeFileSync(join(ws, 'evil.env'), `${SECRET}-merge\n`);
    git('add', '-A');
    git('commit', '-qm', 'merge');
    const { patch } = await logImported([base]);
    expect(patch).toContain(`${SECRET}-merge`);
  });

  it('shows a side branch a merge drops (merge -s ours) and secrets in commit messages', async () => {
    const base = commit('readme', 'r\n');
    git('checkout', '-q', '-b', 'side');
    commit('creds.env', `${SECRET}-side\n`);
    git('checkout', '-q', 'main');
    git('merge', '-q', '-s', 'ours', '-m', 'merge ours', 'side');
    git('commit', '-q', '--allow-empty', '-m', `note ${SECRET}-message`);
    const { patch } = await logImported([base]);
    expect(patch).toContain(`${SECRET}-side`);
    expect(patch).toContain(`${SECRET}-message`);
  });

  it('leaves a big blob out of only the commit that adds it, by blob, not by path', async () => {
    const base = commit('readme', 'r\n');
    commit('data.bin', `${SECRET}-small\n`);
    writeFileSync(join(ws, 'data.bin'), Buffer.alloc(2 * 1024 * 1024, 97));
    git('add', '-A');
    git('commit', '-qm', 'big');
    const tip = git('rev-parse', 'HEAD');
    const r = await logImported([base], { tips: [tip], maxFileBytes: 1024 * 1024 });
    expect(r.skipped.map((x) => x.path)).toEqual(['data.bin']);
    expect(r.patch).toContain(`${SECRET}-small`);
  });

  it('names files too big to diff instead of reading them', async () => {
    const base = commit('readme', 'r\n');
    writeFileSync(join(ws, 'big.bin'), Buffer.alloc(2 * 1024 * 1024, 97));
    const tip = commit('small.txt', `${SECRET}\n`);
    const r = await logImported([base], { tips: [tip], maxFileBytes: 1024 * 1024 });
    expect(r.skipped).toEqual([{ path: 'big.bin', bytes: 2 * 1024 * 1024 }]);
    expect(r.patch).toContain(SECRET);
    expect(r.patch).not.toContain('aaaaaaaa');
  });
});

describe('diskUsage', () => {
  it('measures a tree deeper than any path the host can name, and strictly refuses what it cannot read', () => {
    const deep = join(dir, 'deep');
    mkdirSync(deep);
    // 400 levels of 20-character names: a path of 8,400 bytes, past PATH_MAX.
    execFileSync('bash', [
      '-c',
      'cd "$1" && for i in $(seq 400); do mkdir aaaaaaaaaaaaaaaaaaaa && cd aaaaaaaaaaaaaaaaaaaa; done && dd if=/dev/zero of=f bs=1M count=5 2>/dev/null',
      'bash',
      deep,
    ]);
    expect(diskUsage(deep, { strict: true })).toBeGreaterThan(5 * 1024 * 1024);
    expect(diskUsage(join(dir, 'missing'))).toBe(0);
    // A file with ten names takes its blocks once.
    const linked = join(dir, 'linked');
    mkdirSync(linked);
    writeFileSync(join(linked, 'f0'), Buffer.alloc(4 * 1024 * 1024, 1));
    for (let i = 1; i < 10; i++) execFileSync('ln', [join(linked, 'f0'), join(linked, `f${i}`)]);
    expect(diskUsage(linked, { strict: true })).toBeLessThan(5 * 1024 * 1024);
    execFileSync('rm', ['-rf', deep]);
  });
});
