// forklift on a fork that lives on GitHub: the GitHub-compatible test server (GitHub's
// REST shapes, real git over smart HTTP), the kind found from the registry by
// FORKLIFT_FORGE_KIND=github, the script agent in a real container. One sync PR, updated
// when upstream moves; nothing done when nothing changed; a stuck run's issue opened and
// closed by the next sync, all through GitHub's API.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GitHubForge } from '@bb/forge';
import { createGitHubTestServer, type GitHubTestServer } from '@bb/forge/testing';
import { type ForkliftIo, runForkliftCli } from '@bb/forklift';
import { DockerBackend } from '@bb/headless';
import { probeDocker } from '@bb/tooling/docker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { git } from './forklift-world';
import { probeKitchenSink } from './support';

const docker = await probeDocker();
const { ok: hasImage, image: IMAGE } = await probeKitchenSink(docker.ok);
const TOKEN = 'ghp_forkliftgithubtesttoken0123456789';

describe.skipIf(!docker.ok || !hasImage)('forklift on GitHub', () => {
  let gh: GitHubTestServer;
  let root: string;
  const backend = new DockerBackend();
  beforeAll(async () => {
    root = mkdtempSync(join(tmpdir(), 'bb-forklift-gh-'));
    gh = await createGitHubTestServer({
      world: {
        users: [{ login: 'alice' }, { login: 'bot', tokens: [TOKEN] }],
        orgs: [{ name: 'acme', members: ['alice'] }],
        repos: [
          { owner: 'acme', name: 'widgets' },
          { owner: 'bot', name: 'widgets' },
        ],
      },
    });
  });
  afterAll(async () => {
    await gh?.close();
    if (root) rmSync(root, { recursive: true, force: true });
  });

  const commit = async (repo: string, files: Record<string, string>, message: string) => {
    const work = mkdtempSync(join(root, 'work-'));
    await git(
      root,
      'clone',
      '--quiet',
      gh.git.dirOf(...(repo.split('/') as [string, string])),
      work,
    );
    for (const [f, c] of Object.entries(files)) writeFileSync(join(work, f), c);
    await git(work, 'add', '-A');
    await git(work, 'commit', '--quiet', '-m', message);
    await git(work, 'push', '--quiet', 'origin', 'HEAD:main');
    rmSync(work, { recursive: true, force: true });
  };
  const forklift = async (checkout: string, steps: unknown[]) => {
    const script = join(root, `steps-${Date.now()}.json`);
    writeFileSync(script, JSON.stringify(steps));
    let out = '';
    let err = '';
    const io: ForkliftIo = {
      cwd: checkout,
      env: {
        ...process.env,
        FORKLIFT_TOKEN: TOKEN,
        FORKLIFT_FORGE_KIND: 'github',
        XDG_STATE_HOME: join(root, 'state'),
        BB_HOME: join(root, 'bbhome'),
      },
      stdout: (s) => (out += s),
      stderr: (s) => (err += s),
    };
    const code = await runForkliftCli(
      ['--image', IMAGE, '--json', '--agent', 'script', '--script', script],
      io,
      backend,
    );
    return {
      code,
      err,
      result: out
        ? (JSON.parse(out) as Record<string, unknown> & { pr?: { number: number } })
        : undefined,
    };
  };

  it('proposes on GitHub, updates its one PR, opens and closes its issue, and does nothing when nothing changed', async () => {
    await commit('acme/widgets', { 'a.txt': 'one\n' }, 'First');
    await git(
      root,
      '--git-dir',
      gh.git.dirOf('bot', 'widgets'),
      'fetch',
      '--quiet',
      gh.git.dirOf('acme', 'widgets'),
      '+main:main',
    );
    const checkout = join(root, 'checkout');
    await git(root, 'clone', '--quiet', gh.cloneUrl('bot/widgets'), checkout);
    await git(checkout, 'remote', 'add', 'upstream', gh.cloneUrl('acme/widgets'));
    await commit('bot/widgets', { 'fork.txt': 'ours\n' }, 'Fork');
    await commit('acme/widgets', { 'b.txt': 'b\n' }, 'Upstream b');

    const first = await forklift(checkout, [{ do: 'exit', code: 9 }]);
    expect(first.code, first.err).toBe(0);
    expect(first.err).not.toContain(TOKEN);
    const n = first.result!.pr!.number;
    expect(gh.issue('bot/widgets', n).pull?.headRef).toBe('forklift/sync');

    const again = await forklift(checkout, [{ do: 'exit', code: 9 }]);
    expect(again.code, again.err).toBe(3);

    // Upstream conflicts with the fork now; the agent gives up. The PR takes what merges
    // (upstream's b, not yet merged on the fork), and an issue says what blocks the rest.
    await commit('bot/widgets', { 'a.txt': 'fork one\n' }, 'Fork edits a');
    await commit('acme/widgets', { 'a.txt': 'upstream one\n' }, 'Upstream edits a');
    const stuck = await forklift(checkout, [
      { do: 'sh', cmd: "printf 'both sides of a.txt\\n' > STUCK.md" },
    ]);
    expect(stuck.code, stuck.err).toBe(8);
    expect(stuck.result).toMatchObject({ outcome: 'partial', pr: { number: n, updated: true } });
    const issue = stuck.result!['issue'] as number;
    expect(gh.issue('bot/widgets', issue).title).toBe(
      'forklift: syncing main with upstream needs a person',
    );
    const unchanged = await forklift(checkout, [{ do: 'exit', code: 9 }]);
    expect(unchanged.code, unchanged.err).toBe(7);

    // Upstream resolves it its own way; the next run merges cleanly, updates the PR, closes the issue.
    await commit('acme/widgets', { 'a.txt': 'fork one\n' }, 'Upstream takes the fork line');
    const synced = await forklift(checkout, [{ do: 'exit', code: 9 }]);
    expect(synced.code, synced.err).toBe(0);
    expect(synced.result!.pr!.number).toBe(n);
    expect(gh.issue('bot/widgets', issue).state).toBe('closed');
    const open = await new GitHubForge({
      owner: 'bot',
      repo: 'widgets',
      apiUrl: gh.apiUrl,
      webUrl: gh.url,
      token: TOKEN,
    }).findPrs({
      head: 'forklift/sync',
      base: 'main',
    });
    expect(open.map((p) => p.number)).toEqual([n]);
  }, 300_000);
});
