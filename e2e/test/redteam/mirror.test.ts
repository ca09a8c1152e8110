// I3 and I4, the repository's mirror: every bottle of a repository checks out from
// the host's mirror of it and borrows its objects, read-only. A hostile agent can
// neither change what other bottles read from there, nor make the gate push what it
// borrows as if it were its own work, nor make the host read objects it points at.
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { probeDocker } from '@bb/tooling/docker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedTeam } from './harness';

const docker = await probeDocker();

/** A digest of every file under the mirror's objects: what other bottles would read. */
function digest(dir: string): string {
  const h = createHash('sha256');
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true }).sort((a, b) =>
      a.name.localeCompare(b.name),
    )) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else h.update(p).update(readFileSync(p));
    }
  };
  walk(dir);
  return h.digest('hex');
}

describe.skipIf(!docker.ok)('red team: the repository mirror', () => {
  const rt = new RedTeam();
  beforeAll(() => rt.start({ 'README.md': '# widgets\n', 'a.txt': 'a\n' }));
  afterAll(() => rt.stop());

  it('an agent cannot write, replace or remove anything of the mirror it borrows from', async () => {
    const first = await rt.launch([
      [
        {
          do: 'sh',
          cmd: [
            'cat .git/objects/info/alternates',
            'find /var/bb/mirror -type f | head -3',
            'touch /var/bb/mirror/planted',
            'for f in $(find /var/bb/mirror -type f); do echo x > "$f"; rm -f "$f"; done',
            'chmod -R 777 /var/bb/mirror',
            'mount -o remount,rw /var/bb/mirror',
          ].join('; '),
          mayFail: true,
        },
      ],
    ]);
    const mirror = rt.meta(first).mirror!;
    expect(mirror).toBeDefined();
    const out = String(first.steps[0]?.['stdout'] ?? '');
    // It does see the mirror where its checkout says its history is.
    expect(out).toContain('/var/bb/mirror');
    expect(out).toMatch(/\/var\/bb\/mirror\/[0-9a-f]{2}\/[0-9a-f]{38}/);
    const before = digest(join(mirror, 'objects'));
    expect(readdirSync(join(mirror, 'objects'))).not.toContain('planted');
    // The next bottle of the repository checks out whole from the same mirror.
    const second = await rt.launch([[{ do: 'sh', cmd: 'cat a.txt' }]]);
    expect(rt.meta(second).mirror).toBe(mirror);
    expect(second.steps[0]?.['stdout']).toBe('a\n');
    expect(digest(join(mirror, 'objects'))).toBe(before);
  });

  it("an agent's own alternates are never read: it can push only what its own store holds", async () => {
    const run = await rt.launch([
      [
        { do: 'write', path: 'fix.txt', content: 'fixed\n' },
        { do: 'commit', message: 'Fix' },
        // Its new objects moved to a directory of the workspace its alternates name:
        // complete for its own git, which follows them.
        {
          do: 'sh',
          cmd: [
            'mkdir -p .stash',
            'mv .git/objects/?? .stash/',
            "printf '/var/bb/mirror\\n/workspace/.stash\\n' > .git/objects/info/alternates",
            'git log -1 --format=%s',
          ].join(' && '),
        },
        { do: 'call', method: 'open_pr', params: { title: 'Fix' }, mayFail: true },
      ],
    ]);
    expect(run.steps[2]?.['stdout']).toBe('Fix\n');
    // The gate reads the checkout's own store as data and never its alternates: the
    // commit is incomplete there, and nothing is pushed.
    const open = run.steps.find((s) => s['method'] === 'open_pr');
    expect(open?.['ok'], JSON.stringify(open)).toBe(false);
    expect(JSON.stringify(open)).toMatch(/incomplete/);
    expect(await rt.refs('acme/widgets')).not.toContain(`refs/heads/${rt.meta(run).branch}`);
  });

  it('a secret force-pushed away on the forge is gone from the mirror: no later bottle reads it, none pushes it back (I10)', async () => {
    // Someone pushes a secret to the default branch; a bottle launches meanwhile (so the
    // mirror fetches it); the maintainers force-push it away and the forge forgets it.
    const forge = rt.gitea.git.dirOf('acme', 'widgets');
    const git = (args: string[], input?: string) =>
      execFileSync('git', ['-C', forge, ...args], {
        input,
        env: {
          ...process.env,
          GIT_AUTHOR_NAME: 'Bob',
          GIT_AUTHOR_EMAIL: 'bob@example.test',
          GIT_COMMITTER_NAME: 'Bob',
          GIT_COMMITTER_EMAIL: 'bob@example.test',
        },
      })
        .toString()
        .trim();
    const base = git(['rev-parse', 'refs/heads/main']);
    const blob = git(
      ['hash-object', '-w', '--stdin'],
      'AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYLEAKED\n',
    );
    const tree = git(['mktree'], `${git(['ls-tree', base])}\n100644 blob ${blob}\tsecret.env\n`);
    const leaked = git(['commit-tree', tree, '-p', base, '-m', 'add config']);
    git(['update-ref', 'refs/heads/main', leaked]);
    const early = await rt.launch([
      // It also copies everything it borrows into its own store, to keep it past any prune.
      [
        {
          do: 'sh',
          cmd: 'cat secret.env; git repack -a -d -q && git count-objects -v | grep ^in-pack',
        },
      ],
      [
        { do: 'write', path: 'fix.txt', content: 'fixed\n' },
        { do: 'commit', message: 'Fix' },
        { do: 'call', method: 'open_pr', params: { title: 'Fix' }, mayFail: true },
      ],
    ]);
    expect(early.steps[0]?.['stdout']).toContain('LEAKED');
    const mirror = rt.meta(early).mirror!;
    git(['update-ref', 'refs/heads/main', base]);
    git(['reflog', 'expire', '--expire=now', '--all']);
    git(['gc', '-q', '--prune=now']);
    expect(() => git(['cat-file', '-e', leaked])).toThrow();

    // A later bottle knows the commit's id (an old notification, a log) and goes for it.
    const later = await rt.launch([
      [
        {
          do: 'sh',
          cmd: `git cat-file -p ${leaked}:secret.env; git cat-file --batch-all-objects --batch-check | grep -c blob`,
          mayFail: true,
        },
        { do: 'sh', cmd: `git merge --ff-only ${leaked} && git log -1 --format=%H`, mayFail: true },
        { do: 'call', method: 'open_pr', params: { title: 'Sync' }, mayFail: true },
      ],
    ]);
    expect(rt.meta(later).mirror).toBe(mirror);
    // It cannot read the secret, or build on it.
    expect(JSON.stringify(later.steps)).not.toContain('LEAKED');
    expect(later.steps[1]?.['code']).not.toBe(0);
    // The mirror holds nothing the forge's default branch does not reach.
    expect(() =>
      execFileSync('git', [`--git-dir=${mirror}`, 'cat-file', '-e', leaked], { stdio: 'ignore' }),
    ).toThrow();

    // The bottle that started from the secret cannot push it back either.
    // It kept its own copies, so its git works; the gate still pushes nothing built on a
    // commit the forge no longer has.
    const back = await rt.resume(early, 'Go on.', { steps: 3 });
    const open = back.steps.find((x) => x['method'] === 'open_pr');
    expect(open?.['ok'], JSON.stringify(open)).toBe(false);
    expect(String(open?.['error'])).toMatch(/no longer on the forge: its history was rewritten/);
    expect(() => git(['cat-file', '-e', leaked])).toThrow();
    expect(JSON.stringify(await rt.refs('acme/widgets'))).not.toContain(rt.meta(early).branch);
  }, 240_000);
});
