// forklift run the way a fork maintainer runs it: every night, from cron, as their own
// user. Real git, the Gitea-compatible test server, the script agent in a real
// container. One sync branch and one open PR at a time, updated when upstream moves;
// nothing pushed, opened or run when nothing changed; a squash merge detected and
// recorded; a run that leaves the fork behind says so on the fork, once, and the next
// sync closes it; upstream may be a local path; a user who is not root can run it.
import { execFile } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { GiteaForge } from '@bb/forge';
import { probeDocker } from '@bb/tooling/docker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ForkWorld, forkWorld, git } from './forklift-world';
import { probeKitchenSink } from './support';

const docker = await probeDocker();
const { ok: hasImage, image: IMAGE } = await probeKitchenSink(docker.ok);
const TOKEN = 'forklift-nightly-token-0123456789';
const run = promisify(execFile);
const FORKLIFT = fileURLToPath(new URL('../../packages/forklift/dist/bin.js', import.meta.url));

describe.skipIf(!docker.ok || !hasImage)('forklift every night', () => {
  let w: ForkWorld;
  beforeAll(async () => {
    w = await forkWorld({ token: TOKEN, image: IMAGE, repos: 6 });
  });
  afterAll(async () => {
    await w?.close();
  });
  const forge = (name: string) =>
    new GiteaForge({ owner: 'bot', repo: name, baseUrl: w.gitea.apiUrl, token: TOKEN });
  const syncPrs = (name: string) =>
    forge(name).findPrs({ head: 'forklift/sync', base: 'main', state: 'all' });
  const branchHead = (name: string) =>
    git(
      w.root,
      '--git-dir',
      w.gitea.git.dirOf('bot', name),
      'rev-parse',
      'refs/heads/forklift/sync',
    );
  const ancestor = (name: string, a: string, b: string) =>
    git(
      w.root,
      '--git-dir',
      w.gitea.git.dirOf('bot', name),
      'merge-base',
      '--is-ancestor',
      a,
      b,
    ).then(
      () => true,
      () => false,
    );
  const NO_AGENT = [{ do: 'exit', code: 9 }];

  it('three nights and a squash merge: one open PR at a time, no re-run without change, the squash recorded and warned about', async () => {
    const s = await w.scenario({ 'a.txt': 'one\ntwo\nthree\n', 'lib.txt': 'lib v1\n' });
    await w.commit(s.fork, { 'fork.txt': 'the fork adds this\n' }, 'Fork adds fork.txt');
    await w.commit(s.up, { 'b.txt': 'upstream b\n' }, 'Upstream adds b');

    // Night 1: a clean merge, proposed on the one sync branch.
    const n1 = await w.scripted(s.checkout, NO_AGENT);
    expect(n1.code, n1.err).toBe(0);
    expect(n1.result).toMatchObject({
      outcome: 'synced',
      agentRan: false,
      pr: { branch: 'forklift/sync' },
    });
    const pr = n1.result!.pr!.number;
    const head1 = await branchHead(s.name);

    // Night 2: nothing moved. Nothing pushed, nothing opened, no agent.
    const n2 = await w.scripted(s.checkout, NO_AGENT);
    expect(n2.code, n2.err).toBe(3);
    expect(n2.result).toMatchObject({
      outcome: 'nothing-to-do',
      agentRan: false,
      pr: { number: pr },
      detail: expect.stringMatching(/already proposes upstream/),
    });
    expect(await branchHead(s.name)).toBe(head1);

    // Night 3: upstream moved. The same PR, its branch moved on (over forklift's own push only).
    await w.commit(s.up, { 'c.txt': 'upstream c\n' }, 'Upstream adds c');
    const n3 = await w.scripted(s.checkout, NO_AGENT);
    expect(n3.code, n3.err).toBe(0);
    expect(n3.result).toMatchObject({ outcome: 'synced', pr: { number: pr, updated: true } });
    const head3 = await branchHead(s.name);
    expect(head3).not.toBe(head1);
    expect(await ancestor(s.name, String(n3.result!['upstream']), head3)).toBe(true);
    expect((await syncPrs(s.name)).map((p) => [p.number, p.state])).toEqual([[pr, 'open']]);
    expect(w.gitea.issue(s.fork, pr).body).toContain(String(n3.result!['upstream']));

    // The maintainer squash-merges it; upstream moves again, on a file the squash carried.
    await w.gitea.mergePr('bot', s.fork, pr, 'squash');
    await git(s.checkout, 'fetch', '-q', 'origin');
    const squashed = String(n3.result!['upstream']);
    await w.commit(
      s.up,
      { 'lib.txt': 'lib v2\n', 'b.txt': 'upstream b, edited\n' },
      'Upstream edits lib and b',
    );
    const n4 = await w.scripted(s.checkout, NO_AGENT);
    expect(n4.code, n4.err).toBe(0);
    expect(n4.result).toMatchObject({ outcome: 'synced', agentRan: false });
    expect(n4.result!['warnings']).toEqual([
      expect.stringMatching(/PR #\d+ was merged without its history \(squash or rebase\)/),
    ]);
    const pr4 = n4.result!.pr!.number;
    expect(pr4).not.toBe(pr);
    // The result records what the squash took: upstream's history is in it now.
    const merged4 = String(n4.result!['merged']);
    expect(await ancestor(s.name, squashed, merged4)).toBe(true);
    expect(w.gitea.issue(s.fork, pr4).body).toMatch(/recorded upstream `[0-9a-f]{12}` as merged/);
    expect(w.gitea.issue(s.fork, pr4).body).toMatch(
      /\*\*Warning:\*\*\n\n`{3,}text\nPR #\d+ was merged without its history/,
    );
    const open = (await syncPrs(s.name)).filter((p) => p.state === 'open');
    expect(open.map((p) => p.number)).toEqual([pr4]);

    // Merged with a merge commit this time: the next night has nothing to do, and no warning.
    await w.gitea.mergePr('bot', s.fork, pr4);
    const n5 = await w.scripted(s.checkout, NO_AGENT);
    expect(n5.code, n5.err).toBe(3);
    expect(n5.result).toMatchObject({ outcome: 'nothing-to-do' });
    expect(n5.result!['warnings']).toBeUndefined();
  }, 300_000);

  it('a stuck run opens one issue on the fork; unchanged it is not retried; FORK.md changing retries it; the sync closes the issue', async () => {
    const s = await w.scenario();
    await w.commit(s.up, { 'a.txt': 'x\n' }, 'Upstream');
    await w.commit(s.fork, { 'a.txt': 'y\n' }, 'Fork');
    const stuck = [
      {
        do: 'sh',
        cmd: "printf '# Stuck\\n\\nBoth sides of a.txt matter: @alice decide.\\n' > STUCK.md",
      },
    ];
    const first = await w.scripted(s.checkout, stuck);
    expect(first.code, first.err).toBe(4);
    const issue = first.result!['issue'] as number;
    expect(issue).toBeGreaterThan(0);
    const body = w.gitea.issue(s.fork, issue).body;
    expect(body).toContain(String(first.result!['upstream']));
    // The agent's words as text in a fence; no path of the host's.
    expect(body).toMatch(/```text\n# Stuck\n\nBoth sides of a.txt matter: @alice decide.\n```/);
    expect(body).not.toContain(w.root);

    // The next night: the same upstream and FORK.md. Not tried; the state is also on the forge.
    const again = await w.scripted(s.checkout, [{ do: 'exit', code: 9 }]);
    expect(again.code, again.err).toBe(7);
    expect(again.result).toMatchObject({ outcome: 'unchanged', agentRan: false });
    const state = join(w.root, 'state', 'forklift', 'state');
    for (const f of readdirSync(state))
      if (f.startsWith(`bot-${s.name}@`)) await run('rm', [join(state, f)]);
    const fromForge = await w.scripted(s.checkout, [{ do: 'exit', code: 9 }]);
    expect(fromForge.code, fromForge.err).toBe(7);

    // FORK.md changes: tried again, and this time the agent merges; the issue is closed.
    await w.commit(s.fork, { 'FORK.md': '# Our fork\n\nKeep both lines of a.txt.\n' }, 'FORK.md');
    const merged = await w.scripted(s.checkout, [
      {
        do: 'sh',
        cmd: "git -c user.name=A -c user.email=a@x merge -q upstream/main; printf 'x\\ny\\n' > a.txt; git add a.txt; git -c user.name=A -c user.email=a@x commit -qm merge",
      },
    ]);
    expect(merged.code, merged.err).toBe(0);
    expect(w.gitea.issue(s.fork, issue).state).toBe('closed');
    expect(w.gitea.issue(s.fork, issue).comments.at(-1)?.body).toMatch(/Synced at upstream/);
  }, 300_000);

  it('a range the agent cannot merge whole: the PR takes the furthest prefix the host merges, and says what blocks the rest', async () => {
    const s = await w.scenario({ 'a.txt': 'one\ntwo\nthree\n', 'test.sh': 'grep -q one a.txt\n' });
    await w.commit(
      s.fork,
      { 'a.txt': 'one\ntwo (fork)\nthree\n', 'FORK.md': 'test: sh test.sh\n' },
      'Fork',
    );
    await w.commit(s.up, { 'b.txt': 'b\n' }, 'Upstream adds b');
    await w.commit(s.up, { 'c.txt': 'c\n' }, 'Upstream adds c');
    await w.commit(s.up, { 'a.txt': 'one\nTWO (upstream)\nthree\n' }, 'Upstream rewrites two');
    await w.commit(s.up, { 'd.txt': 'd\n' }, 'Upstream adds d');
    const r = await w.scripted(s.checkout, [
      { do: 'sh', cmd: "printf 'two cannot be both\\n' > STUCK.md" },
    ]);
    expect(r.code, r.err).toBe(8);
    expect(r.result).toMatchObject({
      outcome: 'partial',
      stuck: expect.stringContaining('two cannot be both'),
      partial: { taken: 2, total: 4 },
      tests: { ok: true },
    });
    const merged = String(r.result!['merged']);
    const bare = w.gitea.git.dirOf('bot', s.name);
    const files = (await git(w.root, '--git-dir', bare, 'ls-tree', '--name-only', merged)).split(
      '\n',
    );
    expect(files).toEqual(expect.arrayContaining(['b.txt', 'c.txt']));
    expect(files).not.toContain('d.txt');
    expect(await git(w.root, '--git-dir', bare, 'show', `${merged}:a.txt`)).toBe(
      'one\ntwo (fork)\nthree',
    );
    const body = w.gitea.issue(s.fork, r.result!.pr!.number).body;
    expect(body).toMatch(/a partial sync: upstream up to `[0-9a-f]{12}`, 2 of its 4 commits/);
    expect(body).toMatch(/```text\n[0-9a-f]{40} Upstream rewrites two\n```/);
    expect(body).toMatch(/```text\ntwo cannot be both\n```/);
    // The issue says the rest is blocked; the next night, with nothing changed, is quiet.
    expect(w.gitea.issue(s.fork, r.result!['issue'] as number).body).toMatch(/\*\*partial\*\*/);
    const again = await w.scripted(s.checkout, [{ do: 'exit', code: 9 }]);
    expect(again.code, again.err).toBe(7);
  }, 300_000);

  it("someone else's commit on the sync branch is never overwritten, and proves nothing", async () => {
    const s = await w.scenario();
    await w.commit(s.up, { 'b.txt': 'b\n' }, 'Upstream adds b');
    const first = await w.scripted(s.checkout, NO_AGENT);
    expect(first.code, first.err).toBe(0);
    // A person pushes to forklift/sync (over forklift's branch) a commit that holds upstream.
    const bare = w.gitea.git.dirOf('bot', s.name);
    const theirs = await git(
      w.root,
      '--git-dir',
      bare,
      'commit-tree',
      '-p',
      await branchHead(s.name),
      '-m',
      'mine',
      `${await branchHead(s.name)}^{tree}`,
    );
    await git(w.root, '--git-dir', bare, 'update-ref', 'refs/heads/forklift/sync', theirs);
    // Not taken as forklift's proposal: the run goes on, and refuses to push over it.
    const again = await w.scripted(s.checkout, NO_AGENT);
    expect(again.code, again.err).toBe(1);
    expect(again.result!['detail']).toMatch(
      /forklift\/sync on the fork is at [0-9a-f]{12}, which forklift did not push/,
    );
    expect(await branchHead(s.name)).toBe(theirs);
  }, 180_000);

  it('upstream may be a local path or a file:// URL (only fetched)', async () => {
    const s = await w.scenario();
    await w.commit(s.up, { 'b.txt': 'b\n' }, 'Upstream adds b');
    await git(s.checkout, 'remote', 'set-url', 'upstream', w.gitea.git.dirOf('acme', s.name));
    const local = await w.scripted(s.checkout, NO_AGENT);
    expect(local.code, local.err).toBe(0);
    await w.commit(s.up, { 'c.txt': 'c\n' }, 'Upstream adds c');
    await git(
      s.checkout,
      'remote',
      'set-url',
      'upstream',
      `file://${w.gitea.git.dirOf('acme', s.name)}`,
    );
    const file = await w.scripted(s.checkout, NO_AGENT);
    expect(file.code, file.err).toBe(0);
    expect(file.result).toMatchObject({ pr: { number: local.result!.pr!.number, updated: true } });
  }, 180_000);

  it('a user who is not root runs it: the agent works as that user, and the PR is opened', async () => {
    const s = await w.scenario();
    await w.commit(s.up, { 'a.txt': 'one\nTWO\nthree\n' }, 'Upstream');
    await w.commit(s.fork, { 'a.txt': 'one\n2\nthree\n' }, 'Fork');
    const uid = 4321;
    const home = join(w.root, 'home-4321');
    mkdirSync(home, { recursive: true });
    // The user may pass through the test's directory to its home and its checkout.
    chmodSync(w.root, 0o711);
    await run('chown', ['-R', `${uid}:${uid}`, home, s.checkout]);
    const script = join(home, 'steps.json');
    await run('sh', [
      '-c',
      `printf '%s' '[{"do":"sh","cmd":"git -c user.name=A -c user.email=a@x merge -q upstream/main; printf \\"one\\\\nTWO 2\\\\nthree\\\\n\\" > a.txt; git add a.txt; git -c user.name=A -c user.email=a@x commit -qm merge"}]' > ${script}`,
    ]);
    chownSync(script, uid, uid);
    const dockerGid = statSync('/var/run/docker.sock').gid;
    const r = await run(
      'setpriv',
      [
        `--reuid=${uid}`,
        `--regid=${uid}`,
        `--groups=${dockerGid}`,
        process.execPath,
        FORKLIFT,
        '--image',
        IMAGE,
        '--json',
        '--agent',
        'script',
        '--script',
        script,
      ],
      {
        cwd: s.checkout,
        encoding: 'utf8',
        env: {
          PATH: process.env['PATH'],
          HOME: home,
          XDG_STATE_HOME: join(home, 'state'),
          FORKLIFT_TOKEN: TOKEN,
          FORKLIFT_API: w.gitea.apiUrl,
          BB_HOME: join(home, 'bb'),
        },
      },
    ).catch((err: { code?: number; stdout?: string; stderr?: string }) => err);
    if (!r.stdout) throw new Error(`forklift printed nothing: ${String(r.stderr)}`);
    const result = JSON.parse(String(r.stdout)) as Record<string, unknown>;
    expect(result, String(r.stderr)).toMatchObject({ outcome: 'synced', agentRan: true });
    // The agent's files are the user's own now: kept as an archive, where no git of theirs reads a .git of the agent's.
    const runDir = String(result['runDir']);
    expect(existsSync(join(runDir, 'workspace.tar'))).toBe(true);
    expect(existsSync(join(runDir, 'workspace'))).toBe(false);
    expect(existsSync(join(runDir, 'harness-state'))).toBe(false);
    const head = await branchHead(s.name);
    expect(
      await git(w.root, '--git-dir', w.gitea.git.dirOf('bot', s.name), 'show', `${head}:a.txt`),
    ).toBe('one\nTWO 2\nthree');
  }, 240_000);
});
