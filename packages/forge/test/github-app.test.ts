// A GitHub App as the orchestrator's identity, on the GitHub test server: JWTs signed with
// the App's own key (PKCS#1, as GitHub hands it out), installation tokens for the
// orchestrator, a narrowed token per bottle that can touch its repository alone, expiry
// and renewal, what `bb doctor` checks, and the failures GitHub gives (5xx, rate limits).
// Every answer is checked against GitHub's published OpenAPI description.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isBbError } from '@bb/errors';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { BOTTLE_PERMISSIONS, GitHubSite, gitHubClient, githubKind } from '../src/index';
import {
  type AppModel,
  createGitHubTestServer,
  type GitHubTestServer,
  pushCommit,
} from '../src/testing/index';
import { recordingChecker } from './support/github-openapi';
import { TOKENS, WORLD } from './support/world';

const { problems, record } = recordingChecker();

const WORLD_APP = {
  ...WORLD,
  repos: [...(WORLD.repos ?? []), { owner: 'acme', name: 'gadgets' }],
};

describe('a GitHub App as the identity', () => {
  let server: GitHubTestServer;
  let app: AppModel;
  let env: Record<string, string>;
  const dir = mkdtempSync(join(tmpdir(), 'bb-gh-app-'));

  const site = (extra: Record<string, string> = {}) =>
    githubKind.fromEnv({ ...env, ...extra }) as GitHubSite;

  beforeAll(async () => {
    server = await createGitHubTestServer({ world: WORLD_APP, onResponse: record });
    let privateKey: string;
    ({ app, privateKey } = await server.apps.create({
      slug: 'bb-app',
      events: [
        'issues',
        'issue_comment',
        'pull_request',
        'pull_request_review',
        'pull_request_review_comment',
      ],
    }));
    server.apps.install(app, 'acme');
    writeFileSync(join(dir, 'app.pem'), privateKey, { mode: 0o600 });
    env = {
      FORGE_GITHUB_API: server.apiUrl,
      FORGE_GITHUB_URL: server.url,
      FORGE_GITHUB_APP_ID: String(app.id),
      FORGE_GITHUB_APP_KEY_FILE: join(dir, 'app.pem'),
    };
  });
  afterEach(() => {
    server.apps.tokenTtlMs = 60 * 60_000;
  });
  afterAll(async () => {
    await server.close();
    expect(problems.join('\n')).toBe('');
  });

  it('acts as <slug>[bot] with no token of its own, through its installation', async () => {
    const s = site();
    expect(s.credentials?.describe).toBe(`GitHub App ${app.id}`);
    // What a bottle's sidecar is given names no App: it gets a token, never the key.
    expect(Object.keys(s.env())).toEqual(['FORGE_GITHUB_API', 'FORGE_GITHUB_URL']);
    expect(await s.whoami()).toBe('bb-app[bot]');
    const forge = s.forgeFor({ owner: 'acme', repo: 'widgets' });
    expect((await forge.readIssue(1)).title).toBe('Widget export drops trailing newline');
    const c = await forge.postComment(1, 'hello from the App');
    const stored = server.issue('acme/widgets', 1).comments.find((x) => x.id === c.id);
    expect(stored?.author).toBe('bb-app[bot]');
    expect(await s.repositories(undefined, [])).toEqual(
      expect.arrayContaining([
        { owner: 'acme', repo: 'widgets' },
        { owner: 'acme', repo: 'gadgets' },
      ]),
    );
  });

  it("a bottle's token reaches its repository alone, with contents, issues and PRs alone", async () => {
    const s = site();
    const { token, expiresAt } = await s.credentials!.bottleToken({
      owner: 'acme',
      repo: 'widgets',
    });
    expect(token).toMatch(/^ghs_/);
    expect(expiresAt.getTime()).toBeGreaterThan(Date.now() + 50 * 60_000);
    const minted = server.apps.tokens.get(token)!;
    expect([...(minted.repos as Set<string>)]).toEqual(['acme/widgets']);
    expect(minted.permissions).toEqual({ ...BOTTLE_PERMISSIONS });
    // Two bottles never share one.
    expect((await s.credentials!.bottleToken({ owner: 'acme', repo: 'widgets' })).token).not.toBe(
      token,
    );

    const mine = s.forgeFor({ owner: 'acme', repo: 'widgets', token });
    await mine.postComment(1, 'the bottle writes on its issue');
    const other = s.forgeFor({ owner: 'acme', repo: 'gadgets', token });
    await expect(other.openIssue({ title: 'elsewhere', body: 'x' })).rejects.toSatisfy((e) =>
      isBbError(e, 'NOT_FOUND'),
    );
    // The org's members are the orchestrator's to read, not a bottle's.
    await expect(mine.isOrgMember('acme', 'alice')).rejects.toSatisfy((e) =>
      isBbError(e, 'FORBIDDEN'),
    );
    // git: its own repository takes a push; another refuses it.
    await pushCommit({
      cloneUrl: mine.gitRemote().url,
      token,
      branch: 'bot-bottle/app-push',
      file: 'APP.md',
      author: 'Bot',
      message: 'pushed with a bottle token',
    });
    await expect(
      pushCommit({
        cloneUrl: server.cloneUrl('acme/gadgets'),
        token,
        branch: 'bot-bottle/app-push',
        file: 'APP.md',
        author: 'Bot',
        message: 'pushed elsewhere',
      }),
    ).rejects.toThrow();
  });

  it('never hands on a token wider than asked, nor one of an installation on another owner', async () => {
    // Made at once, each bottle still gets a token of its own.
    const s = site();
    const both = await Promise.all([
      s.credentials!.bottleToken({ owner: 'acme', repo: 'widgets' }),
      s.credentials!.bottleToken({ owner: 'acme', repo: 'widgets' }),
    ]);
    expect(both[0].token).not.toBe(both[1].token);
    server.apps.ignoreNarrowing = true;
    try {
      await expect(
        site().credentials!.bottleToken({ owner: 'acme', repo: 'widgets' }),
      ).rejects.toThrow(/wider than asked .*: it is not used/);
    } finally {
      server.apps.ignoreNarrowing = false;
    }
    const inst = [...server.apps.installations.values()].find((i) => i.account === 'acme')!;
    const fixed = site({ FORGE_GITHUB_APP_INSTALLATION: String(inst.id) });
    expect(
      (await fixed.credentials!.bottleToken({ owner: 'acme', repo: 'widgets' })).token,
    ).toMatch(/^ghs_/);
    await expect(
      fixed.credentials!.bottleToken({ owner: 'bot-bottle', repo: 'widgets' }),
    ).rejects.toThrow(
      new RegExp(
        `FORGE_GITHUB_APP_INSTALLATION ${inst.id} is the installation on acme, not on bot-bottle`,
      ),
    );
  });

  it('an expired token is refused; the orchestrator renews its own before it lapses', async () => {
    server.apps.tokenTtlMs = 1_200;
    const s = site();
    const { token } = await s.credentials!.bottleToken({ owner: 'acme', repo: 'widgets' });
    await new Promise((r) => setTimeout(r, 1_400));
    await expect(
      s.forgeFor({ owner: 'acme', repo: 'widgets', token }).readIssue(1),
    ).rejects.toSatisfy((e) => isBbError(e, 'UNAUTHORIZED'));
    // The orchestrator's token: one expiring within minutes is made again before use.
    const forge = s.forgeFor({ owner: 'acme', repo: 'widgets' });
    await forge.readIssue(1);
    await new Promise((r) => setTimeout(r, 1_400));
    expect((await forge.readIssue(1)).number).toBe(1);
  });

  it("reads an org's members through its installation on that org, and says when it cannot", async () => {
    const forge = site().forgeFor({ owner: 'acme', repo: 'widgets' });
    expect(await forge.isOrgMember('acme', 'alice')).toBe(true);
    expect(await forge.isOrgMember('acme', 'eve')).toBe(false);
    // Not installed on the agent org: GitHub sends it to the public list; never "not a member".
    await expect(forge.isOrgMember('bot-bottle', 'bb-claude')).rejects.toThrow(
      /cannot tell whether bb-claude is a member of bot-bottle/,
    );
    server.apps.install(app, 'bot-bottle');
    const again = site().forgeFor({ owner: 'acme', repo: 'widgets' });
    expect(await again.isOrgMember('bot-bottle', 'bb-claude')).toBe(true);
    expect(await again.isOrgMember('bot-bottle', 'alice')).toBe(false);
  });

  it('says what is wrong with the configuration, naming the value', async () => {
    expect(() => githubKind.fromEnv({ ...env, FORGE_GITHUB_APP_KEY_FILE: '' })).toThrow(
      /set both FORGE_GITHUB_APP_ID .* and FORGE_GITHUB_APP_KEY_FILE/,
    );
    expect(() => githubKind.fromEnv({ ...env, FORGE_GITHUB_APP_ID: 'bb-app' })).toThrow(
      /FORGE_GITHUB_APP_ID "bb-app" is not an App id/,
    );
    expect(() =>
      githubKind.fromEnv({ ...env, FORGE_GITHUB_APP_KEY_FILE: join(dir, 'missing.pem') }),
    ).toThrow(/missing.pem cannot be read \(ENOENT\)/);
    writeFileSync(join(dir, 'bad.pem'), 'not a key');
    expect(() =>
      githubKind.fromEnv({ ...env, FORGE_GITHUB_APP_KEY_FILE: join(dir, 'bad.pem') }),
    ).toThrow(/not a PEM private key/);
    // Another App's key: GitHub refuses its JWT.
    writeFileSync(join(dir, 'other.pem'), (await server.apps.create({ slug: 'other' })).privateKey);
    await expect(
      site({ FORGE_GITHUB_APP_KEY_FILE: join(dir, 'other.pem') }).whoami(),
    ).rejects.toSatisfy((e) => isBbError(e, 'UNAUTHORIZED'));
    // A repository it is not installed on.
    await expect(
      site().credentials!.bottleToken({ owner: 'nobody', repo: 'nowhere' }),
    ).rejects.toThrow(/is not installed on nobody\/nowhere/);
  });

  it('bb doctor: its permissions, events, installations and webhook', async () => {
    const s = site();
    const repos = [{ owner: 'acme', repo: 'widgets' }];
    let checks = await s.checks(undefined, repos);
    expect(checks.find((c) => c.check === 'github app')).toMatchObject({ ok: true });
    expect(checks.find((c) => c.check === 'installed on')).toMatchObject({ ok: true });
    expect(checks.find((c) => c.check === 'webhook')).toMatchObject({
      ok: false,
      detail: 'the App has no webhook address',
    });
    expect(
      await s.installHook(undefined, {
        target: 'acme',
        url: 'https://bb.example.test/webhooks/github',
        secret: 's3cret',
      }),
    ).toMatch(/set the webhook of GitHub App/);
    expect(app.hook).toMatchObject({
      url: 'https://bb.example.test/webhooks/github',
      secret: 's3cret',
    });
    const inst = [...server.apps.installations.values()][0]!;
    const issues = inst.permissions['issues'];
    inst.permissions['issues'] = 'read';
    try {
      checks = await s.checks(undefined, [...repos, { owner: 'nobody', repo: 'x' }]);
    } finally {
      inst.permissions['issues'] = issues!;
    }
    expect(checks.find((c) => c.check === 'webhook')).toMatchObject({ ok: true });
    expect(checks.find((c) => c.check === 'github app')?.detail).toMatch(
      /installation \d+ \(acme\) lacks issues: write/,
    );
    expect(checks.find((c) => c.check === 'installed on')).toMatchObject({
      ok: false,
      detail: 'the App is not installed on nobody/x',
    });
  });
});

describe('bb doctor with a personal token', () => {
  it('names the repositories it does not administer and those with no hook', async () => {
    const server = await createGitHubTestServer({ world: WORLD, onResponse: record });
    try {
      server.gitea.world.repos.get('acme/widgets')!.admins.add('alice');
      const s = new GitHubSite(server.apiUrl, server.url);
      const repos = [{ owner: 'acme', repo: 'widgets' }];
      let checks = await s.checks(TOKENS.bot, repos);
      expect(checks.find((c) => c.check === 'repository admin')).toMatchObject({ ok: false });
      checks = await s.checks(TOKENS.alice, repos);
      expect(checks.find((c) => c.check === 'repository admin')).toMatchObject({ ok: true });
      expect(checks.find((c) => c.check === 'webhook')).toMatchObject({ ok: false });
      await s.installHook(TOKENS.alice, {
        target: 'acme/widgets',
        url: 'https://bb.example.test/webhooks/github',
        secret: 's',
      });
      checks = await s.checks(TOKENS.alice, repos);
      expect(checks.find((c) => c.check === 'webhook')).toMatchObject({ ok: true });
    } finally {
      await server.close();
    }
  });
});

describe("GitHub's failures, as the client meets them", () => {
  let server: GitHubTestServer;
  beforeAll(async () => {
    server = await createGitHubTestServer({ world: WORLD });
  });
  afterAll(() => server.close());
  const client = (spaceWrites = false) =>
    gitHubClient({ apiUrl: server.apiUrl, token: TOKENS.bot, spaceWrites, maxRateLimitWaitS: 5 });
  /** The bot's forge on acme/widgets, as the site makes it (its client's defaults). */
  const widgets = () =>
    new GitHubSite(server.apiUrl, server.url).forgeFor({
      owner: 'acme',
      repo: 'widgets',
      token: TOKENS.bot,
    });

  it('a read that meets a 502 is asked again and answered', async () => {
    server.fail({ kind: 'unavailable', times: 1 });
    const { data } = await client().rest.issues.get({
      owner: 'acme',
      repo: 'widgets',
      issue_number: 1,
    });
    expect(data.number).toBe(1);
  });

  it('a write that meets a 502 is not sent again: at most one comment, and the caller is told', async () => {
    const before = server.issue('acme/widgets', 1).comments.length;
    server.fail({ kind: 'unavailable', match: ({ method }) => method === 'POST' });
    const f = widgets();
    await expect(f.postComment(1, 'once at most')).rejects.toSatisfy((e) =>
      isBbError(e, 'FORGE_UNAVAILABLE'),
    );
    expect(server.issue('acme/widgets', 1).comments.length).toBe(before);
    // Sent once: the next write is the next fault's, and there is none.
    await f.postComment(1, 'the next one');
    expect(server.issue('acme/widgets', 1).comments.length).toBe(before + 1);
  });

  it('a write GitHub made before its answer was lost is not sent again', async () => {
    const before = server.issue('acme/widgets', 1).comments.length;
    server.fail({
      kind: 'unavailable',
      afterDoing: true,
      match: ({ method }) => method === 'POST',
    });
    const f = widgets();
    await expect(f.postComment(1, 'made, answer lost')).rejects.toSatisfy((e) =>
      isBbError(e, 'FORGE_UNAVAILABLE'),
    );
    expect(
      server
        .issue('acme/widgets', 1)
        .comments.map((c) => c.body)
        .slice(before),
    ).toEqual(['made, answer lost']);
  });

  it('a secondary limit with a short Retry-After is waited for; a long one fails at once, saying when', async () => {
    server.fail({ kind: 'secondary-limit', retryAfterS: 1 });
    const t0 = Date.now();
    const { data } = await client(true).rest.issues.get({
      owner: 'acme',
      repo: 'widgets',
      issue_number: 1,
    });
    expect(data.number).toBe(1);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(900);

    server.fail({ kind: 'secondary-limit', retryAfterS: 120 });
    const f = widgets();
    const err = await f.readIssue(1).catch((e: unknown) => e);
    expect(isBbError(err, 'FORGE_UNAVAILABLE')).toBe(true);
    expect((err as Error).message).toMatch(/rate limited; retry after 120 s/);
  });

  it('a spent primary limit is the forge being busy, never a refusal', async () => {
    server.fail({ kind: 'primary-limit', retryAfterS: 3_600 });
    const f = widgets();
    const err = await f.readIssue(1).catch((e: unknown) => e);
    expect(isBbError(err, 'FORGE_UNAVAILABLE')).toBe(true);
    expect(isBbError(err, 'FORBIDDEN')).toBe(false);
  });
});
