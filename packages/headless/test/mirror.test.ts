// The host's view of the forge's repository: its mirror (the default branch only) and
// where a bottle's branch is.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GiteaForge } from '@bb/forge';
import { createGiteaTestServer, type GiteaTestServer } from '@bb/forge/testing';
import { runGit, wallGitEnv } from '@bb/wall';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { remoteBranchHead, syncMirror } from '../src/bottle/mirror';
import { giteaWiring } from '../src/test-home';

const TOKEN = 'bb-token-mirror-test-0042';
let server: GiteaTestServer;
let home: string;
beforeAll(async () => {
  server = await createGiteaTestServer({
    world: {
      users: [{ login: 'bot', tokens: [TOKEN] }],
      repos: [{ owner: 'bot', name: 'widgets' }],
    },
  });
  home = mkdtempSync(join(tmpdir(), 'bb-mirror-'));
});
afterAll(async () => {
  await server?.close();
  rmSync(home, { recursive: true, force: true });
});
const forge = () => giteaWiring(server, TOKEN, 1, 'bot/widgets');

describe('the repository mirror', () => {
  it('holds the default branch only, and says where a branch is by its exact name', async () => {
    const repo = server.git.dirOf('bot', 'widgets');
    const main = (await server.git.git(repo, ['rev-parse', 'refs/heads/main'])).trim();
    // Another bottle's branch, and one whose name ends like it.
    const tree = (await server.git.git(repo, ['rev-parse', 'main^{tree}'])).trim();
    const other = (
      await server.git.git(repo, ['commit-tree', tree, '-p', main, '-m', 'elsewhere'])
    ).trim();
    await server.git.git(repo, ['update-ref', 'refs/heads/bb/x-1', main]);
    await server.git.git(repo, ['update-ref', 'refs/heads/a/refs/heads/bb/x-1', other]);
    const { dir, head } = await syncMirror(forge(), { BB_HOME: home }, 30_000);
    expect(head).toBe(main);
    const refs = await runGit([`--git-dir=${dir}`, 'for-each-ref', '--format=%(refname)'], {
      env: wallGitEnv(),
    });
    expect(refs.trim().split('\n')).toEqual(['refs/bb/default']);
    expect(await remoteBranchHead(forge(), 'bb/x-1', 30_000)).toBe(main);
    expect(await remoteBranchHead(forge(), 'bb/none-9', 30_000)).toBeUndefined();
    expect(existsSync(join(dir, 'objects'))).toBe(true);
  });

  it('fetches nothing when the forge’s API says the default branch is where the mirror has it', async () => {
    const { head } = await syncMirror(forge(), { BB_HOME: home }, 30_000);
    const api = new GiteaForge({
      baseUrl: server.apiUrl,
      token: TOKEN,
      owner: 'bot',
      repo: 'widgets',
    });
    // The forge's API and its git agree on where the default branch is.
    expect(await api.defaultBranchHead()).toBe(head);
    const fetched = () => server.gitRequests;
    const before = fetched();
    const again = await syncMirror(forge(), { BB_HOME: home }, 30_000, api.defaultBranchHead());
    expect(again.head).toBe(head);
    expect(fetched()).toBe(before);
    // Told of a commit the mirror does not have: it fetches.
    const moved = await syncMirror(
      forge(),
      { BB_HOME: home },
      30_000,
      Promise.resolve('f'.repeat(40)),
    );
    expect(moved.head).toBe(head);
    expect(fetched()).toBeGreaterThan(before);
  });
});
