// forklift end to end: an upstream and its fork on the Gitea-compatible test server, an
// operator's checkout, real git, and the script agent in a real container holding a
// copy of the repository with no remotes and no credentials. The host decides.
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { closeGiteaPools } from '@bb/forge';
import { createGiteaTestServer, type GiteaTestServer } from '@bb/forge/testing';
import { type ForkliftIo, runForkliftCli } from '@bb/forklift';
import { DockerBackend } from '@bb/headless';
import { BASE_IMAGE, probeDocker } from '@bb/tooling/docker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const docker = await probeDocker();
const TOKEN = 'forklift-bot-token-0123456789';

// Asynchronous: the test server answers in this very process.
const run = promisify(execFile);
const git = async (cwd: string, ...args: string[]) =>
  (
    await run('git', args, {
      cwd,
      encoding: 'utf8',
      env: {
        ...process.env,
        GIT_TERMINAL_PROMPT: '0',
        GIT_AUTHOR_NAME: 'T',
        GIT_AUTHOR_EMAIL: 't@x',
        GIT_COMMITTER_NAME: 'T',
        GIT_COMMITTER_EMAIL: 't@x',
      },
    })
  ).stdout.trim();

describe.skipIf(!docker.ok)('forklift: a fork kept in sync by an agent with no credential', () => {
  let gitea: GiteaTestServer;
  let root: string;
  let n = 0;
  let scripts = 0;
  const backend = new DockerBackend();

  /** Commit `files` onto `main` of a repository on the test server (as its owner would). */
  const commit = async (repo: string, files: Record<string, string>, message: string) => {
    const dir = gitea.git.dirOf(...(repo.split('/') as [string, string]));
    const work = mkdtempSync(join(root, 'work-'));
    await git(root, 'clone', '--quiet', dir, work);
    for (const [f, c] of Object.entries(files)) writeFileSync(join(work, f), c);
    await git(work, 'add', '-A');
    await git(work, 'commit', '--quiet', '-m', message);
    await git(work, 'push', '--quiet', 'origin', 'HEAD:main');
    rmSync(work, { recursive: true, force: true });
  };

  /** A fresh upstream and fork sharing their first commit, and the operator's checkout. */
  const scenario = async () => {
    const name = `widgets${++n}`;
    const up = `acme/${name}`;
    const fork = `bot/${name}`;
    await commit(up, { 'a.txt': 'one\ntwo\nthree\n' }, 'Add a.txt');
    // The fork starts as a copy of upstream.
    await git(
      root,
      '--git-dir',
      gitea.git.dirOf('bot', name),
      'fetch',
      '--quiet',
      gitea.git.dirOf('acme', name),
      '+main:main',
    );
    const checkout = join(root, `checkout-${name}`);
    await git(root, 'clone', '--quiet', gitea.cloneUrl(fork), checkout);
    await git(checkout, 'remote', 'add', 'upstream', gitea.cloneUrl(up));
    return { up, fork, checkout, name };
  };

  const forklift = async (checkout: string, steps: unknown[], extra: string[] = []) => {
    const script = join(root, `script-${++scripts}.json`);
    writeFileSync(script, JSON.stringify(steps));
    let out = '';
    let err = '';
    const io: ForkliftIo = {
      cwd: checkout,
      env: {
        ...process.env,
        FORKLIFT_TOKEN: TOKEN,
        FORKLIFT_API: gitea.apiUrl,
        XDG_STATE_HOME: join(root, 'state'),
        BB_HOME: join(root, 'bbhome'),
      },
      stdout: (s) => (out += s),
      stderr: (s) => (err += s),
    };
    const code = await runForkliftCli(
      ['--image', BASE_IMAGE, '--agent', 'script', '--script', script, '--json', ...extra],
      io,
      backend,
    );
    const result = out
      ? (JSON.parse(out) as Record<string, unknown> & { runDir: string; pr?: { number: number } })
      : undefined;
    return { code, result, err };
  };

  beforeAll(async () => {
    root = mkdtempSync(join(tmpdir(), 'bb-forklift-'));
    gitea = await createGiteaTestServer({
      world: {
        users: [{ login: 'alice' }, { login: 'bot', tokens: [TOKEN] }],
        orgs: [{ name: 'acme', members: ['alice'] }],
        repos: Array.from({ length: 10 }, (_, i) => [
          { owner: 'acme', name: `widgets${i + 1}` },
          { owner: 'bot', name: `widgets${i + 1}` },
        ]).flat(),
      },
    });
  });
  afterAll(async () => {
    await gitea?.close();
    await closeGiteaPools();
    rmSync(root, { recursive: true, force: true });
  });

  it('a fast-forward needs no agent: the host opens the PR', async () => {
    const s = await scenario();
    await commit(s.up, { 'b.txt': 'new upstream file\n' }, 'Upstream adds b');
    const { code, result, err } = await forklift(s.checkout, [{ do: 'exit', code: 9 }]);
    expect(code, err).toBe(0);
    expect(result).toMatchObject({ outcome: 'synced', agentRan: false });
    const pr = gitea.issue(s.fork, result!.pr!.number);
    expect(pr.pull?.headRef).toMatch(/^forklift\/sync-/);
    expect(pr.body).toContain(String(result!['upstream']));
    // Again: nothing to do once the fork holds it (the PR merged).
    await git(
      root,
      '--git-dir',
      gitea.git.dirOf('bot', s.name),
      'update-ref',
      'refs/heads/main',
      String(result!['upstream']),
    );
    const again = await forklift(s.checkout, [{ do: 'exit', code: 9 }]);
    expect(again.code).toBe(3);
    expect(again.result).toMatchObject({ outcome: 'nothing-to-do' });
  }, 120_000);

  it('a clean merge needs no agent either: the host makes the merge commit', async () => {
    const s = await scenario();
    await commit(s.up, { 'b.txt': 'upstream\n' }, 'Upstream adds b');
    await commit(s.fork, { 'c.txt': 'fork\n' }, 'Fork adds c');
    const { code, result, err } = await forklift(s.checkout, [{ do: 'exit', code: 9 }]);
    expect(code, err).toBe(0);
    expect(result).toMatchObject({
      outcome: 'synced',
      agentRan: false,
      detail: expect.stringMatching(/^clean merge/),
    });
    const bare = gitea.git.dirOf('bot', s.name);
    const merged = String(result!['merged']);
    expect(await git(root, '--git-dir', bare, 'rev-list', '--parents', '-n', '1', merged)).toBe(
      `${merged} ${result!['fork']} ${result!['upstream']}`,
    );
  }, 120_000);

  it('a conflict the agent resolves becomes a PR with the proof; the agent has no remote and no credential', async () => {
    const s = await scenario();
    await commit(s.up, { 'a.txt': 'one\nTWO (upstream)\nthree\n' }, 'Upstream changes two');
    await commit(s.fork, { 'a.txt': 'one\ntwo (fork)\nthree\n' }, 'Fork changes two');
    const { code, result, err } = await forklift(s.checkout, [
      { do: 'sh', cmd: 'git remote -v > /harness-state/remotes.txt; env > /harness-state/env.txt' },
      {
        do: 'sh',
        cmd: 'git -c user.name=Agent -c user.email=a@x merge upstream/main > /harness-state/merge.txt 2>&1 || true',
      },
      {
        do: 'sh',
        cmd: "printf 'one\\nTWO (upstream) and two (fork)\\nthree\\n' > a.txt && git add a.txt && git -c user.name=Agent -c user.email=a@x commit -qm 'Merge upstream main' && printf 'ran: no tests found\\n' > /harness-state/report.md",
      },
    ]);
    expect(err).not.toContain(TOKEN);
    expect(code, `${err} ${JSON.stringify(result)}`).toBe(0);
    expect(result).toMatchObject({ outcome: 'synced', agentRan: true });
    const pr = gitea.issue(s.fork, result!.pr!.number);
    expect(pr.body).toContain('is an ancestor of the result');
    // The agent's words as text in a fence, never as live Markdown.
    expect(pr.body).toMatch(/```text\nran: no tests found\n```/);
    // The branch holds the agent's merge, and both sides.
    const head = await git(
      root,
      '--git-dir',
      gitea.git.dirOf('bot', s.name),
      'rev-parse',
      `refs/heads/${pr.pull!.headRef}`,
    );
    expect(head).toBe(result!['merged']);
    expect(
      await git(root, '--git-dir', gitea.git.dirOf('bot', s.name), 'show', `${head}:a.txt`),
    ).toContain('TWO (upstream) and two (fork)');
    const hs = join(result!.runDir, 'harness-state');
    expect(readFileSync(join(hs, 'remotes.txt'), 'utf8')).toBe('');
    expect(readFileSync(join(hs, 'env.txt'), 'utf8')).not.toContain(TOKEN);
  }, 180_000);

  it('STUCK.md: the stuck status, its preview, no PR', async () => {
    const s = await scenario();
    await commit(s.up, { 'a.txt': 'x\n' }, 'Upstream');
    await commit(s.fork, { 'a.txt': 'y\n' }, 'Fork');
    const { code, result, err } = await forklift(s.checkout, [
      {
        do: 'sh',
        cmd: "printf '# Stuck\\n\\nThe two sides of a.txt cannot both hold.\\n' > STUCK.md",
      },
    ]);
    expect(code, err).toBe(4);
    expect(result).toMatchObject({
      outcome: 'stuck',
      stuck: expect.stringContaining('cannot both hold'),
    });
    expect(result!.pr).toBeUndefined();
  }, 180_000);

  it('a runaway agent is stopped at --timeout', async () => {
    const s = await scenario();
    await commit(s.up, { 'a.txt': 'x\n' }, 'Upstream');
    await commit(s.fork, { 'a.txt': 'y\n' }, 'Fork');
    const began = Date.now();
    const { code, result, err } = await forklift(
      s.checkout,
      [{ do: 'sleep', ms: 120_000 }],
      ['--timeout', '3s'],
    );
    expect(code, err).toBe(5);
    expect(result).toMatchObject({ outcome: 'timed-out' });
    expect(Date.now() - began).toBeLessThan(90_000);
  }, 180_000);

  it('an agent that only claims to have merged, or drops a fork commit, gets no push and no PR', async () => {
    const s = await scenario();
    await commit(s.up, { 'a.txt': 'x\n' }, 'Upstream');
    await commit(s.fork, { 'a.txt': 'y\n' }, 'Fork');
    const liar = await forklift(s.checkout, [
      {
        do: 'sh',
        cmd: "git merge --abort 2>/dev/null; printf 'merged!\\n' > /harness-state/report.md; git -c user.name=A -c user.email=a@x commit -q --allow-empty -m 'Merged upstream (not really)'",
      },
    ]);
    expect(liar.code).toBe(6);
    expect(liar.result).toMatchObject({
      outcome: 'verification-failed',
      detail: expect.stringMatching(/did not merge/),
    });
    const dropper = await forklift(s.checkout, [
      { do: 'sh', cmd: 'git reset -q --hard upstream/main' },
    ]);
    expect(dropper.code).toBe(6);
    expect(dropper.result).toMatchObject({
      outcome: 'verification-failed',
      detail: expect.stringMatching(/fork commits would be lost/),
    });
    const branches = await git(
      root,
      '--git-dir',
      gitea.git.dirOf('bot', s.name),
      'branch',
      '--list',
      'forklift/*',
    );
    expect(branches).toBe('');
  }, 180_000);

  it('hostile workspace content has no effect on the host', async () => {
    const s = await scenario();
    await commit(s.up, { 'a.txt': 'x\n' }, 'Upstream');
    await commit(s.fork, { 'a.txt': 'y\n' }, 'Fork');
    const canary = join(root, 'pwned');
    const hook = `#!/bin/sh\\ntouch ${canary}\\n`;
    const { code, result, err } = await forklift(s.checkout, [
      {
        do: 'sh',
        cmd: `for h in post-checkout pre-push reference-transaction post-merge; do printf '${hook}' > .git/hooks/$h; chmod +x .git/hooks/$h; done; git config core.fsmonitor 'touch ${canary}'; git config core.hooksPath .git/hooks; printf '* filter=evil\\n' > .gitattributes; git config filter.evil.clean 'touch ${canary}'; ln -s /etc/passwd STUCK.md`,
      },
    ]);
    // A STUCK.md that is a link is not followed: the run stops as stuck, saying so.
    expect(code, err).toBe(4);
    expect(result!['stuck']).toMatch(/was not read/);
    expect(String(result!['stuck'])).not.toContain('root:');
    expect(existsSync(canary)).toBe(false);
    mkdirSync(join(root, 'keep'), { recursive: true });
  }, 180_000);
});
