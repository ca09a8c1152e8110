// The GitHub test server's webhooks as a GitHub user meets them: made with GitHubSite's
// installHook (and made again: updated, not doubled), each change delivered signed and
// parsed by the github kind, every payload valid against GitHub's published webhook
// schemas (@octokit/webhooks-schemas) and every REST answer against its OpenAPI.
import { createServer } from 'node:http';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import Ajv from 'ajv';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GitHubForge, gitHubClient, githubKind } from '../src/index';
import { createGitHubTestServer, type GitHubTestServer, pushCommit } from '../src/testing/index';
import { checkAgainstGitHub } from './support/github-openapi';
import { TOKENS, WORLD } from './support/world';

const require = createRequire(import.meta.url);
const schema = require('@octokit/webhooks-schemas/schema.json') as {
  definitions: Record<string, unknown>;
};
const ajv = new Ajv({ strict: false, allErrors: true, validateFormats: false });
ajv.addSchema(schema as object, 'webhooks');
const SECRET = 'gh-test-hook-secret';

describe("the GitHub test server's webhooks", () => {
  let gh: GitHubTestServer;
  const got: Array<{ headers: Record<string, string>; body: string }> = [];
  const problems: string[] = [];
  const receiver = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      got.push({ headers: req.headers as Record<string, string>, body });
      res.writeHead(202).end();
    });
  });
  let url = '';

  beforeAll(async () => {
    await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', () => r()));
    url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/webhooks/github`;
    gh = await createGitHubTestServer({
      // Hooks are a repository admin's: the bot is one here.
      world: { ...WORLD, repos: WORLD.repos!.map((r) => ({ ...r, admins: ['bb-claude'] })) },
      onResponse: (x) =>
        problems.push(...checkAgainstGitHub(x.template, x.method, x.status, x.body)),
    });
  });
  afterAll(async () => {
    await gh?.close();
    receiver.close();
    expect(problems).toEqual([]);
  });

  it('installHook makes the hook once and updates it after; every change arrives signed, parsed and valid', async () => {
    const site = githubKind.fromEnv({ FORGE_GITHUB_API: gh.apiUrl, FORGE_GITHUB_URL: gh.url });
    expect(
      await site.installHook!(TOKENS.bot, { target: 'acme/widgets', url, secret: 'old-secret-1' }),
    ).toMatch(/^created webhook 1 of acme\/widgets/);
    expect(
      await site.installHook!(TOKENS.bot, { target: 'acme/widgets', url, secret: SECRET }),
    ).toMatch(/^updated webhook 1 of acme\/widgets/);
    expect(gh.hooks.hooks).toHaveLength(1);

    const n = gh.openIssue('alice', 'acme/widgets', {
      title: 'Another',
      body: 'text',
      labels: ['bot-bottle:implementer'],
    });
    gh.comment('alice', 'acme/widgets', n, 'a comment');
    gh.setState('alice', 'acme/widgets', n, 'closed');
    // A PR's life: opened from a pushed branch, pushed to again, reviewed, merged.
    const forge = new GitHubForge({
      owner: 'acme',
      repo: 'widgets',
      client: gitHubClient({ apiUrl: gh.apiUrl, token: TOKENS.bot, spaceWrites: false }),
      webUrl: gh.url,
      token: TOKENS.bot,
    });
    const push = () =>
      pushCommit({
        cloneUrl: gh.cloneUrl('acme/widgets'),
        token: TOKENS.bot,
        branch: 'bb/implementer-9',
        author: 'Bot',
      });
    await push();
    const pr = await forge.openPr({
      head: 'bb/implementer-9',
      base: 'main',
      title: 'Fix',
      body: `Fixes #${n}`,
    });
    await push();
    gh.gitea.review('alice', 'acme/widgets', pr.number, {
      state: 'approved',
      body: 'Good.',
      comments: [],
    });
    await gh.mergePr('alice', 'acme/widgets', pr.number);
    await gh.hooks.settle();
    expect(got.length).toBeGreaterThanOrEqual(3);
    const events: string[] = [];
    for (const d of got) {
      expect(githubKind.webhook.verify(d.headers, d.body, [SECRET])).toBe(true);
      const payload = JSON.parse(d.body) as { action: string };
      const name = `${d.headers['x-github-event']}$${payload.action}`;
      const validate = ajv.getSchema(`webhooks#/definitions/${name}`);
      expect(validate, name).toBeDefined();
      const ok = validate!(payload);
      expect(ok, `${name}: ${JSON.stringify(validate!.errors?.slice(0, 4))}`).toBe(true);
      events.push(`${name}:${githubKind.webhook.parse(d.headers, d.body).kind}`);
    }
    expect(events).toEqual(
      expect.arrayContaining([
        'issues$opened:issue_targeting_changed',
        'issue_comment$created:comment_created',
        'issues$closed:issue_closed',
      ]),
    );
  });
});
