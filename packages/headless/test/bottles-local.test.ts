// The same bottle lifecycle on the local backend (plain processes, no isolation):
// what the demo falls back to when no Docker engine answers.
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { createGiteaTestServer, type GiteaTestServer } from '@bb/forge/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { destroy, launch, resume } from '../src/bottle/bottles';
import { bottleDir, readMeta } from '../src/bottle/layout';
import { LOCAL_BACKEND_WARNING, LocalBackend } from '../src/engine/local-backend';
import { giteaWiring, makeTestHome, prSteps, scriptAgent } from '../src/test-home';

const TOKEN = 'bb-claude-token-local-3b8d';
let server: GiteaTestServer;
let home: string;

beforeAll(async () => {
  server = await createGiteaTestServer({
    world: {
      users: [{ login: 'alice' }, { login: 'bb-claude', tokens: [TOKEN] }],
      orgs: [{ name: 'acme', members: ['alice'] }],
      repos: [{ owner: 'acme', name: 'widgets', collaborators: ['bb-claude'] }],
      issues: [
        { repo: 'acme/widgets', title: 'Local thing', author: 'alice', assignees: ['bb-claude'] },
      ],
    },
  });
  home = makeTestHome('bb-local-', {
    agents: {
      demo: scriptAgent(
        [
          {
            steps: [
              { do: 'read_issue' },
              ...prSteps({ path: 'a.txt', content: 'a\n', message: 'a', title: 'A', body: '' }),
              { do: 'done', status: 'success', summary: 'a' },
            ],
          },
          {
            steps: [
              { do: 'comment', body: 'saw: {{previousPrompts}}' },
              { do: 'done', status: 'success', summary: 'b' },
            ],
          },
        ],
        { name: 'Demo' },
      ),
    },
    bottles: { default: { image: 'local' } },
  });
});
afterAll(async () => {
  await server?.close();
  rmSync(home, { recursive: true, force: true });
});

describe('launch and resume on the local backend', () => {
  it('warns that it does not isolate, runs the script agent with its sidecar, resumes, destroys', async () => {
    const warnings: string[] = [];
    const backend = new LocalBackend({ warn: (m) => warnings.push(m) });
    expect(warnings).toEqual([LOCAL_BACKEND_WARNING]);
    const env = { BB_HOME: home };
    const forge = giteaWiring(server, TOKEN);
    const first = await launch({ agent: 'demo', prompt: 'first prompt', forge, backend, env });
    expect(first, first.output).toMatchObject({ exitCode: 0, ok: true });
    expect(
      [...server.repos.get('acme/widgets')!.issues.values()].some(
        (i) => i.pull?.headRef === 'bb/demo-1',
      ),
    ).toBe(true);
    expect(readMeta(first.slug, env)?.status).toBe('frozen');
    const second = await resume({
      slug: first.slug,
      prompt: 'second prompt',
      forgeToken: TOKEN,
      backend,
      env,
    });
    expect(second).toMatchObject({ exitCode: 0, sessionId: first.sessionId });
    expect(server.issue('acme/widgets', 1).comments.at(-1)!.body).toBe('saw: first prompt');
    expect(readFileSync(join(bottleDir(first.slug, env), 'meta.json'), 'utf8')).not.toContain(
      TOKEN,
    );
    await destroy(first.slug, { backend, env });
    expect(existsSync(bottleDir(first.slug, env))).toBe(false);
  });
});
