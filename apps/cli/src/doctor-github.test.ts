// bb doctor and bb forge hook install on GitHub, against the GitHub test server: as a bot
// user with a token (its admin rights, the hooks of FORGE_REPOS), and as a GitHub App
// (its installations' permissions and events, where it is installed, its webhook).
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  type AppModel,
  createGitHubTestServer,
  type GitHubTestServer,
} from '@bb/forge/test-server';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from './cli';
import { runDoctor } from './commands/doctor';
import { captureIo as io } from './test-io';

const EVENTS = [
  'issues',
  'issue_comment',
  'pull_request',
  'pull_request_review',
  'pull_request_review_comment',
];

describe('bb doctor on GitHub', () => {
  let gh: GitHubTestServer;
  let app: AppModel;
  const home = mkdtempSync(join(tmpdir(), 'bb-doc-gh-'));
  const base = () => ({
    BB_HOME: home,
    FORGE_KIND: 'github',
    FORGE_GITHUB_API: gh.apiUrl,
    FORGE_GITHUB_URL: gh.url,
    FORGE_WEBHOOK_SECRET: 'a-long-enough-secret',
    FORGE_REPOS: 'acme/widgets',
  });
  const appEnv = () => ({
    ...base(),
    FORGE_GITHUB_APP_ID: String(app.id),
    FORGE_GITHUB_APP_KEY_FILE: join(home, 'app.pem'),
  });
  const check = (checks: Awaited<ReturnType<typeof runDoctor>>, name: string) =>
    checks.find((c) => c.check === name);

  beforeAll(async () => {
    gh = await createGitHubTestServer({
      world: {
        users: [{ login: 'bb-bot', tokens: ['gh-bot-token-123456'] }, { login: 'alice' }],
        orgs: [
          { name: 'acme', members: ['alice'] },
          { name: 'bot-bottle', members: ['bb-bot'] },
        ],
        repos: [{ owner: 'acme', name: 'widgets', collaborators: ['bb-bot'] }],
      },
    });
    let privateKey: string;
    ({ app, privateKey } = await gh.apps.create({ slug: 'bb-app', events: EVENTS.slice(0, 3) }));
    writeFileSync(join(home, 'app.pem'), privateKey, { mode: 0o600 });
  });
  afterAll(async () => {
    await gh.close();
    rmSync(home, { recursive: true, force: true });
  });

  it('with a token: says the bot administers nothing and no hook delivers, with the fixes', async () => {
    const checks = await runDoctor(io({ ...base(), FORGE_TOKEN: 'gh-bot-token-123456' }).io);
    expect(check(checks, 'forge')).toMatchObject({
      ok: true,
      detail: expect.stringMatching(/the token is bb-bot's/),
    });
    expect(check(checks, 'repository admin')).toMatchObject({
      ok: false,
      detail: expect.stringMatching(/bb-bot does not administer acme\/widgets \(write\)/),
    });
    expect(check(checks, 'webhook')).toMatchObject({
      ok: false,
      fix: expect.stringMatching(/bb forge hook install/),
    });
    expect(check(checks, 'org membership')).toMatchObject({ ok: true });
  });

  it('with an App: its missing events, where it is not installed, its webhook; then all is well', async () => {
    let checks = await runDoctor(io(appEnv()).io);
    expect(check(checks, 'forge')).toMatchObject({
      ok: true,
      detail: expect.stringMatching(
        new RegExp(`acting as GitHub App ${app.id} \\(bb-app\\[bot\\]\\)`),
      ),
    });
    expect(check(checks, 'github app')).toMatchObject({
      ok: false,
      detail: `GitHub App ${app.id} is installed nowhere`,
    });
    expect(check(checks, 'org membership')?.ok).toBeNull();

    const inst = gh.apps.install(app, 'acme');
    checks = await runDoctor(io(appEnv()).io);
    expect(check(checks, 'github app')?.detail).toBe(
      `installation ${inst.id} (acme) is not subscribed to pull_request_review, pull_request_review_comment`,
    );
    expect(check(checks, 'installed on')).toMatchObject({ ok: true, detail: 'acme/widgets' });
    expect(check(checks, 'webhook')).toMatchObject({
      ok: false,
      detail: 'the App has no webhook address',
    });

    // The App's webhook, set through GitHub's API (no --repo or --org for an App).
    const t = io(appEnv());
    expect(
      await runCli(
        ['forge', 'hook', 'install', '--url', 'https://bb.example.test/webhooks/github'],
        t.io,
      ),
    ).toBe(0);
    expect(t.out).toMatch(/set the webhook of GitHub App/);
    app.events.push(...EVENTS.slice(3));
    checks = await runDoctor(io(appEnv()).io);
    for (const name of ['github app', 'installed on', 'webhook'])
      expect(check(checks, name)?.ok, name).toBe(true);
  });
});
