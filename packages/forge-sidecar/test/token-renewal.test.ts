// A sidecar whose token expires (a GitHub App's, narrowed to its repository) keeps working
// when the host puts a renewed token in its token file, on the GitHub test server. The
// token file is replaced the way the host's token keeper does it (written beside, then
// renamed over); without the renewal the next call fails, as GitHub refuses the old token.
import { mkdirSync, mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GitHubApp } from '@bb/forge';
import { acmeWorld, createGitHubTestServer, type GitHubTestServer } from '@bb/forge/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ForgeSidecarClient } from '../src/client';
import { runSidecarFromEnv } from '../src/main';
import type { RunningSidecar } from '../src/server';

describe('a sidecar whose forge token expires', () => {
  let server: GitHubTestServer;
  let app: GitHubApp;
  let sidecar: RunningSidecar;
  let client: ForgeSidecarClient;
  const logs: string[] = [];
  const dir = mkdtempSync(join(tmpdir(), 'bb-renew-'));
  const tokenFile = join(dir, 'secrets', 'token');
  const put = (token: string) => {
    writeFileSync(`${tokenFile}.next`, token, { mode: 0o400 });
    renameSync(`${tokenFile}.next`, tokenFile);
  };

  beforeAll(async () => {
    server = await createGitHubTestServer({
      world: acmeWorld('unused-bot-token', {
        issues: [{ repo: 'acme/widgets', title: 'Renew me', author: 'alice' }],
      }),
    });
    const { app: model, privateKey } = await server.apps.create({ slug: 'bb-app' });
    server.apps.install(model, 'acme');
    app = new GitHubApp({ appId: model.id, privateKey, apiUrl: server.apiUrl });
    // Tokens that last a second and a half.
    server.apps.tokenTtlMs = 1_500;
    const first = await app.bottleToken({ owner: 'acme', repo: 'widgets' });
    mkdirSync(join(dir, 'secrets'));
    put(first.token);
    sidecar = await runSidecarFromEnv({
      env: {
        FORGE_KIND: 'github',
        FORGE_GITHUB_API: server.apiUrl,
        FORGE_GITHUB_URL: server.url,
        FORGE_OWNER: 'acme',
        FORGE_REPO: 'widgets',
        FORGE_ISSUE_NUMBER: '1',
        FORGE_TOKEN_FILE: tokenFile,
        BB_SIDECAR_SOCKET: join(dir, 'sock', 'forge.sock'),
        BB_QUEUE_DIR: join(dir, 'queue'),
        BB_OPS_LOG: join(dir, 'ops.jsonl'),
        BB_WORKSPACE: join(dir, 'workspace'),
        BB_BRANCH: 'bot-bottle/implementer-1',
        BB_SLUG: 'implementer-renew',
      },
      logger: {
        info: (o, m) => logs.push(JSON.stringify({ m, ...o })),
        warn: (o, m) => logs.push(JSON.stringify({ m, ...o })),
        error: (o, m) => logs.push(JSON.stringify({ m, ...o })),
      },
    });
    client = new ForgeSidecarClient({ socketPath: join(dir, 'sock', 'forge.sock') });
  });
  afterAll(async () => {
    await client?.close();
    await sidecar?.close();
    await server?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('takes up the renewed token on its next call; the expired one alone fails', async () => {
    await client.postComment(1, 'with the first token');
    await new Promise((r) => setTimeout(r, 1_700));
    // Expired and not renewed: GitHub refuses it.
    await expect(client.readIssue(1)).rejects.toThrow(/401|Bad credentials|unauthori/i);

    server.apps.tokenTtlMs = 60 * 60_000;
    const renewed = await app.bottleToken({ owner: 'acme', repo: 'widgets' });
    put(renewed.token);
    expect((await client.readIssue(1)).title).toBe('Renew me');
    await client.postComment(1, 'with the renewed token');
    const authors = server.issue('acme/widgets', 1).comments.map((c) => c.author);
    expect(authors).toEqual(['bb-app[bot]', 'bb-app[bot]']);
    expect(logs.some((l) => l.includes('the forge token was renewed'))).toBe(true);
    // Neither token in any line the sidecar wrote.
    const first = [...server.apps.tokens.keys()];
    for (const t of first) expect(logs.join('\n')).not.toContain(t);

    // A file the host removes (a token that never expires, read once) changes nothing.
    rmSync(tokenFile);
    expect((await client.readIssue(1)).title).toBe('Renew me');
  });
});
