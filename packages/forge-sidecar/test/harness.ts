// A sidecar wired to the Gitea-compatible test server, with a real workspace
// (a clone of the repository with its remotes removed) and a real socket.
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { closeGiteaPools, type Forge } from '@bb/forge';
import {
  type ApiExchange,
  acmeWorld,
  createGiteaTestServer,
  type GiteaTestServer,
} from '@bb/forge/testing';
import { afterAll, afterEach } from 'vitest';
import { ForgeSidecarClient } from '../src/client';
import type { SidecarEnv } from '../src/config';
import { runSidecarFromEnv } from '../src/main';
import type { RunningSidecar, SidecarLogger } from '../src/server';

const run = promisify(execFile);
export const TOKEN = 'bb-claude-secret-token-7f3a9c2e';
export const ALICE = 'alice-token-0123456789';

export interface Harness {
  server: GiteaTestServer;
  sidecar: RunningSidecar;
  client: ForgeSidecarClient;
  dir: string;
  workspace: string;
  env: Record<string, string>;
  exchanges: ApiExchange[];
  logs: string[];
  git: (...args: string[]) => Promise<string>;
  close: () => Promise<void>;
}

export async function startHarness(
  opts: {
    makeForge?: (env: SidecarEnv & { FORGE_TOKEN: string }) => Forge;
    env?: Record<string, string>;
  } = {},
): Promise<Harness> {
  const exchanges: ApiExchange[] = [];
  const server = await createGiteaTestServer({
    world: acmeWorld(TOKEN, {
      aliceToken: ALICE,
      issues: [
        {
          repo: 'acme/widgets',
          title: 'Widget export drops trailing newline',
          author: 'alice',
          labels: ['bot-bottle:implementer'],
          assignees: ['bb-claude'],
        },
        { repo: 'acme/widgets', title: 'Someone else’s issue', author: 'alice' },
      ],
    }),
    onResponse: (x) => exchanges.push(x),
  });
  const dir = mkdtempSync(join(tmpdir(), 'bb-sidecar-'));
  const workspace = join(dir, 'workspace');
  const gitEnv = { ...process.env, HOME: dir, GIT_CONFIG_NOSYSTEM: '1' };
  await run('git', ['clone', '--quiet', server.cloneUrl('acme/widgets'), workspace], {
    env: gitEnv,
  });
  await run('git', ['remote', 'remove', 'origin'], { cwd: workspace, env: gitEnv });
  const git = async (...args: string[]) =>
    (
      await run('git', ['-c', 'user.name=Agent', '-c', 'user.email=agent@example.test', ...args], {
        cwd: workspace,
        env: gitEnv,
      })
    ).stdout.trim();
  const env: Record<string, string> = {
    FORGE_GITEA_API: server.apiUrl,
    FORGE_OWNER: 'acme',
    FORGE_REPO: 'widgets',
    FORGE_ISSUE_NUMBER: '1',
    FORGE_PR_NUMBER: '',
    FORGE_TOKEN: TOKEN,
    BB_SIDECAR_SOCKET: join(dir, 'sock', 'forge.sock'),
    BB_QUEUE_DIR: join(dir, 'queue'),
    BB_OPS_LOG: join(dir, 'ops.jsonl'),
    BB_WORKSPACE: workspace,
    BB_BRANCH: 'bb/implementer-1',
    BB_SLUG: 'implementer-abcde',
    ...opts.env,
  };
  const logs: string[] = [];
  const logger: SidecarLogger = {
    info: (o, m) => logs.push(JSON.stringify({ m, ...o })),
    warn: (o, m) => logs.push(JSON.stringify({ m, ...o })),
    error: (o, m) => logs.push(JSON.stringify({ m, ...o })),
  };
  const sidecar = await runSidecarFromEnv({
    env,
    logger,
    ...(opts.makeForge ? { makeForge: opts.makeForge } : {}),
  });
  const client = new ForgeSidecarClient({ socketPath: env['BB_SIDECAR_SOCKET']! });
  return {
    server,
    sidecar,
    client,
    dir,
    workspace,
    env,
    exchanges,
    logs,
    git,
    close: async () => {
      await client.close();
      await sidecar.close();
      await server.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** POST a raw body to the sidecar's socket; returns status and text. */
export async function rawPost(
  socketPath: string,
  body: string | Buffer,
  headers: Record<string, string> = {},
): Promise<{ status: number; text: string }> {
  const { request } = await import('node:http');
  return new Promise((resolve, reject) => {
    const req = request(
      {
        socketPath,
        path: '/rpc',
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
      },
      (res) => {
        let text = '';
        res.on('data', (c) => (text += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

/**
 * Harnesses for the enclosing test file: each one started is closed after its
 * test, the forge's connection pools after the file.
 */
export function useHarness(): (o?: Parameters<typeof startHarness>[0]) => Promise<Harness> {
  let current: Harness | undefined;
  afterEach(async () => {
    await current?.close();
    current = undefined;
  });
  afterAll(() => closeGiteaPools());
  return async (o) => {
    current = await startHarness(o);
    return current;
  };
}
