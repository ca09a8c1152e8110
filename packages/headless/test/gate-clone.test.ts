// `bb-gate clone` (a pod bottle's launch): what it refuses and what it leaves alone,
// before it ever reaches the forge. The clone itself runs in e2e/test/kubernetes-pods.
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isBbError } from '@bb/errors';
import { afterEach, describe, expect, it } from 'vitest';
import { cloneWorkspaceFromEnv } from '../src/bottle/gate-clone';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function gateEnv() {
  const root = mkdtempSync(join(tmpdir(), 'bb-clone-'));
  dirs.push(root);
  writeFileSync(join(root, 'token'), 'tok-never-used');
  return {
    root,
    env: {
      FORGE_KIND: 'gitea',
      // Nothing listens here: reaching the forge would fail the test.
      FORGE_GITEA_API: 'http://127.0.0.1:9/api/v1',
      FORGE_OWNER: 'acme',
      FORGE_REPO: 'app',
      FORGE_ISSUE_NUMBER: '3',
      FORGE_TOKEN_FILE: join(root, 'token'),
      BB_SIDECAR_SOCKET: join(root, 'forge.sock'),
      BB_QUEUE_DIR: join(root, 'queue'),
      BB_OPS_LOG: join(root, 'ops.jsonl'),
      BB_WORKSPACE: join(root, 'workspace'),
      BB_BRANCH: 'bb/implementer-3',
    },
  };
}

describe('cloneWorkspaceFromEnv', () => {
  it('leaves a workspace that holds anything as it is, without reaching the forge', async () => {
    const { env } = gateEnv();
    mkdirSync(env.BB_WORKSPACE);
    // What an agent could leave: a repository of its own making.
    mkdirSync(join(env.BB_WORKSPACE, '.git'));
    writeFileSync(join(env.BB_WORKSPACE, '.git', 'config'), '[core]\n\tfsmonitor = evil\n');
    expect(await cloneWorkspaceFromEnv(env, 5_000)).toBeUndefined();
    expect(readdirSync(env.BB_WORKSPACE)).toEqual(['.git']);
  });

  it('refuses a workspace that is not mounted, and a gate configuration that is not whole', async () => {
    const { env } = gateEnv();
    let err: unknown;
    await cloneWorkspaceFromEnv(env, 5_000).catch((e) => (err = e));
    expect(isBbError(err, 'NOT_FOUND')).toBe(true);
    expect(String(err)).toMatch(/workspace .* is not mounted/);
    const { BB_BRANCH: _, ...partial } = env;
    await expect(cloneWorkspaceFromEnv(partial, 5_000)).rejects.toThrow(/BB_BRANCH/);
  });

  it('says which forge it could not clone from, with no token in the message', async () => {
    const { env } = gateEnv();
    mkdirSync(env.BB_WORKSPACE);
    let err: unknown;
    await cloneWorkspaceFromEnv(env, 5_000).catch((e) => (err = e));
    expect(isBbError(err, 'FORGE_UNAVAILABLE')).toBe(true);
    expect(String(err)).toMatch(/cannot clone http:\/\/127\.0\.0\.1:9\/acme\/app\.git/);
    expect(String(err)).not.toContain('tok-never-used');
  });
});
