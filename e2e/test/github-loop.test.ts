// The whole loop on GitHub, in real bottles, through the service with FORGE_KIND=github:
// the GitHub-compatible test server's signed webhook in, a bottle whose sidecar (the
// built-in github kind) writes through GitHub's REST API and pushes over git, a PR
// opened from a real push, a review that resumes the same session, merging the PR
// destroys the bottle. Twice: as a bot user with a personal token, and as a GitHub App
// (no token at all: installation tokens for the service, a narrowed one for each turn's
// gate).
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createGitHubTestServer, type GitHubTestServer } from '@bb/forge/testing';
import { bottleDir, DockerBackend, HOME_LABEL, homeLabel } from '@bb/headless';
import { type RunningOrchestrator, serve } from '@bb/service';
import { BASE_IMAGE, probeDocker } from '@bb/tooling/docker';
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from 'vitest';
import {
  makeHome,
  prTurn,
  rememberTurn,
  removeHome,
  scriptAgent,
  serviceBottle,
  until,
} from './support';

const docker = await probeDocker();
const TOKEN = 'ghp_bbbotgithubloop0123456789';
const SECRET = 'github-webhook-secret';

const IDENTITIES = [
  { as: 'a bot user with a personal token', app: false, bot: 'bb-bot' },
  { as: 'a GitHub App', app: true, bot: 'bb-app[bot]' },
] as const;

describe.skipIf(!docker.ok).each(IDENTITIES)('GitHub end to end in real bottles, as $as', (id) => {
  let home: string;
  let gh: GitHubTestServer;
  let orch: RunningOrchestrator;
  const logs: Array<Record<string, unknown>> = [];
  const backend = new DockerBackend();

  beforeAll(async () => {
    home = makeHome('bb-github-', {
      implementer: scriptAgent([
        prTurn({
          pr: { content: 'fixed on GitHub\n', message: 'Fix on GitHub', title: 'Fix the export' },
          comment: 'PR is up.',
          summary: 'Opened the PR.',
        }),
        rememberTurn(),
      ]),
    });
    gh = await createGitHubTestServer({
      world: {
        users: [
          { login: 'alice', tokens: ['alice-gh-token'] },
          { login: 'bb-bot', tokens: [TOKEN] },
        ],
        orgs: [
          { name: 'acme', members: ['alice'] },
          { name: 'bot-bottle', members: ['bb-bot'] },
        ],
        repos: [
          {
            owner: 'acme',
            name: 'widgets',
            collaborators: ['bb-bot', 'alice'],
            admins: ['bb-bot'],
          },
        ],
        labels: [{ repo: 'acme/widgets', name: 'bot-bottle:implementer' }],
      },
    });
    let identity: Record<string, string> = { FORGE_TOKEN: TOKEN };
    if (id.app) {
      const { app, privateKey } = await gh.apps.create({ slug: 'bb-app' });
      // On the repositories' org, and on the agent org (whose members it reads).
      gh.apps.install(app, 'acme');
      gh.apps.install(app, 'bot-bottle');
      writeFileSync(join(home, 'app.pem'), privateKey, { mode: 0o600 });
      identity = {
        FORGE_GITHUB_APP_ID: String(app.id),
        FORGE_GITHUB_APP_KEY_FILE: join(home, 'app.pem'),
      };
    }
    orch = await serve({
      env: {
        BB_HOME: home,
        BB_BASE_IMAGE: BASE_IMAGE,
        BB_PORT: '0',
        FORGE_KIND: 'github',
        FORGE_GITHUB_API: gh.apiUrl,
        FORGE_GITHUB_URL: gh.url,
        ...identity,
        FORGE_WEBHOOK_SECRET: SECRET,
        BB_SWEEP_INTERVAL: '0',
        // As an App each turn's token is new: the bottle is still kept warm between turns.
        BB_WARM_WINDOW: id.app ? '2m' : '0',
      },
      backend,
      logStream: {
        write: (line: string) => {
          logs.push(JSON.parse(line) as Record<string, unknown>);
          return true;
        },
      } as unknown as NodeJS.WritableStream,
    });
    gh.hooks.add(`${orch.url}/webhooks/github`, SECRET);
  }, 120_000);

  afterAll(async () => {
    await orch?.close();
    await gh?.close();
    for (const c of await backend.list({ [HOME_LABEL]: homeLabel({ BB_HOME: home }) }))
      await backend.destroy(c.id);
    await removeHome(home);
  });

  it('issue → bottle → PR → frozen → review → resumed → merged → destroyed', async () => {
    onTestFailed(() => console.error('orchestrator log:', JSON.stringify(logs, null, 1)));
    // What the service's own API says of the issue's bottle.
    const bottle = (issue: number) => serviceBottle(orch.url, issue);
    const n = gh.openIssue('alice', 'acme/widgets', {
      title: 'Export drops a newline',
      body: 'Exporting drops the trailing newline.',
      labels: ['bot-bottle:implementer'],
      assignees: ['bb-bot'],
    });
    const frozen = await until(
      'the first turn to end frozen with a PR',
      async () => {
        const row = await bottle(n);
        return row?.status === 'frozen' && row.prNumber ? row : undefined;
      },
      120_000,
    );
    const pr = gh.issue('acme/widgets', frozen.prNumber!);
    expect(pr.author).toBe(id.bot);
    expect(pr.pull?.headRef).toBe(`bb/implementer-${n}`);
    const comments = () =>
      gh.issue('acme/widgets', n).comments.map((c) => `${c.author}: ${c.body}`);
    expect(comments()).toContain(`${id.bot}: PR is up.`);
    // Every delivery was GitHub's, signed, and taken.
    await gh.hooks.settle();
    expect(gh.hooks.deliveries.length).toBeGreaterThan(0);
    expect(gh.hooks.deliveries.every((d) => d.status === 202 || d.status === 200)).toBe(true);

    const held = async () =>
      (await backend.list({ 'bb.slug': frozen.slug })).map((c) => c.id).sort();
    const warm = await held();
    if (id.app) expect(warm.length).toBeGreaterThan(0);

    // A review asking for changes resumes the same session.
    gh.gitea.review('alice', 'acme/widgets', frozen.prNumber!, {
      state: 'changes_requested',
      body: 'Please also handle empty widgets.',
      comments: [],
    });
    await until(
      'the resumed turn',
      async () => (comments().some((c) => c.includes('Turn 2: I remember')) ? true : undefined),
      120_000,
    );
    await until('the bottle to freeze again', async () =>
      (await bottle(n))?.status === 'frozen' ? true : undefined,
    );
    expect((await bottle(n))?.sessionId).toBe(frozen.sessionId);
    // In the very containers it was kept warm in.
    if (id.app) expect(await held()).toEqual(warm);

    // Merging the PR destroys the bottle.
    await gh.mergePr('alice', 'acme/widgets', frozen.prNumber!);
    await until('the bottle to be destroyed', async () =>
      (await bottle(n))?.status === 'destroyed' ? true : undefined,
    );
    expect(await backend.list({ 'bb.slug': frozen.slug })).toEqual([]);
    expect(existsSync(bottleDir(frozen.slug, { BB_HOME: home }))).toBe(false);
    expect(logs.some((l) => String(l['msg']).startsWith('event failed'))).toBe(false);
    if (id.app) {
      // Each turn's gate had a token of its own, for acme/widgets alone, with what the
      // sidecar needs alone; the service's own tokens were the installation's.
      const tokens = [...gh.apps.tokens.values()];
      const narrowed = tokens.filter((t) => t.repos !== 'all');
      expect(narrowed.length).toBeGreaterThanOrEqual(2);
      for (const t of narrowed) {
        expect([...t.repos]).toEqual(['acme/widgets']);
        expect(Object.keys(t.permissions).sort()).toEqual([
          'contents',
          'issues',
          'metadata',
          'pull_requests',
        ]);
      }
      const said = JSON.stringify(logs);
      for (const t of tokens) expect(said).not.toContain(t.token);
    }
  }, 300_000);
});
