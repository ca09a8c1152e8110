// The Gitea-compatible test server behaves like Gitea where bot-bottle depends on
// it: auth, membership's 303, pagination headers, git over smart HTTP, and
// webhooks for its own changes that GiteaForge verifies and parses.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { closeGiteaPools, GiteaForge, parseGiteaWebhook, verifyGiteaWebhook } from '../src/index';
import {
  type ApiExchange,
  createGiteaTestServer,
  type GiteaTestServer,
} from '../src/testing/index';
import { INDEX, loadFixture } from './support/fixtures';
import { checkAgainstSwagger } from './support/swagger';
import { pushBranch, TOKENS, WORLD } from './support/world';

const problems: string[] = [];
const check = (x: ApiExchange) =>
  problems.push(...checkAgainstSwagger(x.template || x.path, x.method, x.status, x.body));

let receiver: Server;
let receiverUrl: string;
const received: Array<{ headers: Record<string, string>; body: Buffer }> = [];
let server: GiteaTestServer;

beforeAll(async () => {
  receiver = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      received.push({
        headers: req.headers as Record<string, string>,
        body: Buffer.concat(chunks),
      });
      res.writeHead(202).end();
    });
  });
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
  receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/webhooks/gitea`;
});
afterAll(async () => {
  receiver.close();
  await closeGiteaPools();
  expect([...new Set(problems)]).toEqual([]);
});

describe('the Gitea-compatible test server', () => {
  afterEach(async () => {
    await server?.close();
    received.length = 0;
  });

  /** The bot pushes issue `n`'s bottle branch on `s` and opens a PR from it. */
  const botPr = async (
    s: GiteaTestServer,
    forge: GiteaForge,
    n: number,
    title: string,
    body: string,
  ) => {
    await pushBranch(s.cloneUrl('acme/widgets'), TOKENS.bot, `bb/implementer-${n}`);
    return forge.openPr({ head: `bb/implementer-${n}`, base: 'main', title, body });
  };
  /** The bot's GiteaForge on acme/widgets of server `s`. */
  const botForge = (s: GiteaTestServer) =>
    new GiteaForge({ baseUrl: s.apiUrl, token: TOKENS.bot, owner: 'acme', repo: 'widgets' });
  const start = async () => {
    server = await createGiteaTestServer({
      world: WORLD,
      hooks: [{ url: receiverUrl, secret: 'bb-webhook-secret' }],
      onResponse: check,
    });
    return server;
  };

  it('answers like Gitea to missing, bad and good tokens', async () => {
    const s = await start();
    const get = (path: string, auth?: string) =>
      fetch(`${s.apiUrl}${path}`, { headers: auth ? { authorization: auth } : {} });
    const noToken = await get('/orgs/bot-bottle/members/alice');
    expect(noToken.status).toBe(401);
    expect(await noToken.json()).toMatchObject({ message: 'token is required' });
    const bad = await get('/user', 'token nope');
    expect(bad.status).toBe(401);
    expect(await bad.json()).toMatchObject({ message: 'invalid username, password or token' });
    const good = await get('/user', `token ${TOKENS.bot}`);
    expect(good.status).toBe(200);
    expect(good.headers.get('content-type')).toBe('application/json;charset=utf-8');
    expect((await good.text()).endsWith('\n')).toBe(true);
    const bearer = await get('/user', `Bearer ${TOKENS.alice}`);
    expect(((await bearer.json()) as { login: string }).login).toBe('alice');
  });

  it('org membership: 204 / 404 for members asking, 303 for non-members asking about others', async () => {
    const s = await start();
    const ask = (token: string, user: string) =>
      fetch(`${s.apiUrl}/orgs/bot-bottle/members/${user}`, {
        headers: { authorization: `token ${token}` },
        redirect: 'manual',
      });
    expect((await ask(TOKENS.bot, 'bb-codex')).status).toBe(204);
    expect((await ask(TOKENS.bot, 'alice')).status).toBe(404);
    const redirect = await ask(TOKENS.alice, 'bb-claude');
    expect(redirect.status).toBe(303);
    expect(redirect.headers.get('location')).toBe(
      '/api/v1/orgs/bot-bottle/public_members/bb-claude',
    );
    expect((await ask(TOKENS.alice, 'alice')).status).toBe(404);
    // GiteaForge reports 303 as "cannot tell", never as membership.
    const warnings: string[] = [];
    const forge = new GiteaForge({
      baseUrl: s.apiUrl,
      token: TOKENS.alice,
      owner: 'acme',
      repo: 'widgets',
      onWarning: (m) => warnings.push(m),
    });
    await expect(forge.isOrgMember('bot-bottle', 'bb-claude')).rejects.toMatchObject({
      code: 'FORGE_ERROR',
    });
    expect(warnings[0]).toMatch(/cannot tell whether bb-claude is a member of bot-bottle/);
  });

  it('paginates lists with Link and X-Total-Count as Gitea does', async () => {
    const s = await start();
    for (let i = 0; i < 3; i++) {
      await pushBranch(s.cloneUrl('acme/widgets'), TOKENS.bot, `feature-${i}`);
      await fetch(`${s.apiUrl}/repos/acme/widgets/pulls`, {
        method: 'POST',
        headers: { authorization: `token ${TOKENS.bot}`, 'content-type': 'application/json' },
        body: JSON.stringify({ head: `feature-${i}`, base: 'main', title: `PR ${i}` }),
      });
    }
    const res = await fetch(`${s.apiUrl}/repos/acme/widgets/pulls?state=all&limit=1`);
    expect(res.headers.get('x-total-count')).toBe('3');
    expect(res.headers.get('link')).toBe(
      `<${s.apiUrl}/repos/acme/widgets/pulls?limit=1&page=2&state=all>; rel="next",<${s.apiUrl}/repos/acme/widgets/pulls?limit=1&page=3&state=all>; rel="last"`,
    );
    const forge = botForge(s);
    const all: number[] = [];
    for await (const pr of forge.client.paginate<{ number: number }>('/repos/acme/widgets/pulls', {
      state: 'all',
    }))
      all.push(pr.number);
    expect(all.sort()).toEqual([2, 3, 4]);
  });

  it('serves git clone and push through git http-backend; pushing needs a writer token', async () => {
    const s = await start();
    const sha = await pushBranch(s.cloneUrl('acme/widgets'), TOKENS.bot, 'bb/implementer-1');
    expect(sha).toMatch(/^[0-9a-f]{40}$/);
    expect(await s.git.branchSha(s.repos.get('acme/widgets')!.gitDir, 'bb/implementer-1')).toBe(
      sha,
    );
    await expect(pushBranch(s.cloneUrl('acme/widgets'), 'wrong-token', 'x')).rejects.toThrow();
    await expect(pushBranch(s.cloneUrl('acme/widgets'), TOKENS.outsider, 'y')).rejects.toThrow(
      /403/,
    );
  });

  it('sends signed, Gitea-shaped webhooks for its own changes, which GiteaForge accepts', async () => {
    const s = await start();
    const forge = botForge(s);
    const n = s.createIssue('alice', 'acme/widgets', {
      title: 'New thing',
      body: 'do <it> & more',
    });
    s.setLabels('alice', 'acme/widgets', n, ['bot-bottle:implementer']);
    s.assign('alice', 'acme/widgets', n, ['bb-claude']);
    await forge.postComment(n, 'on it');
    const pr = await botPr(s, forge, n, 'Do it', `Fixes #${n}`);
    s.comment('alice', 'acme/widgets', pr.number, 'looks good, one more thing');
    await pushBranch(s.cloneUrl('acme/widgets'), TOKENS.bot, `bb/implementer-${n}`, 'MORE.md');
    await s.mergePr('alice', 'acme/widgets', pr.number);
    await s.settle();
    const events = received.map((r) => {
      expect(verifyGiteaWebhook(r.headers, r.body, 'bb-webhook-secret')).toBe(true);
      expect(r.body.toString()).not.toMatch(/\n$/);
      expect(r.headers['x-gitea-delivery']).toMatch(/^[0-9a-f-]{36}$/);
      return parseGiteaWebhook(r.headers, r.body);
    });
    expect(
      events.map((e) => (e.kind === 'issue_targeting_changed' ? `${e.kind}:${e.action}` : e.kind)),
    ).toEqual([
      'issue_targeting_changed:opened',
      'issue_targeting_changed:label_updated',
      'issue_targeting_changed:assigned',
      'comment_created',
      'pr_opened',
      'comment_created',
      'pr_synchronized',
      'pr_closed',
      'issue_closed',
    ]);
    const prComment = events[5]!;
    expect(prComment).toMatchObject({
      kind: 'comment_created',
      on: 'pr',
      number: pr.number,
      comment: { author: 'alice' },
    });
    expect(events[7]).toMatchObject({ kind: 'pr_closed', merged: true });
    // Bodies escape <, > and & like Go's encoder.
    expect(received[0]!.body.toString()).toContain('do \\u003cit\\u003e \\u0026 more');
    // A replay has a new UUID and the same semantic key.
    const first = s.deliveries[0]!;
    const uuid = s.replay(first.uuid);
    await s.settle();
    const replayed = received.at(-1)!;
    expect(replayed.headers['x-gitea-delivery']).toBe(uuid);
    expect(uuid).not.toBe(first.uuid);
    const again = parseGiteaWebhook(replayed.headers, replayed.body);
    expect(
      again.kind !== 'ignored' && events[0]!.kind !== 'ignored' && again.key === events[0]!.key,
    ).toBe(true);
  });

  it('sends review webhooks shaped like Gitea’s fixtures (headers, keys, review type), which GiteaForge parses', async () => {
    const s = await start();
    const forge = botForge(s);
    await pushBranch(s.cloneUrl('acme/widgets'), TOKENS.bot, 'bb/implementer-1');
    const pr = await forge.openPr({ head: 'bb/implementer-1', base: 'main', title: 'x', body: '' });
    await s.settle();
    received.length = 0;
    const cases = [
      ['approved', 'pull_request_review.approved'],
      ['changes_requested', 'pull_request_review.rejected'],
      ['commented', 'pull_request_review.comment'],
    ] as const;
    for (const [state] of cases)
      s.review('alice', 'acme/widgets', pr.number, {
        state,
        body: `a ${state} review`,
        comments: state === 'approved' ? [] : [{ path: 'CHANGE.md', line: 1, body: 'here' }],
      });
    await s.settle();
    expect(received).toHaveLength(3);
    cases.forEach(([state, fixture], i) => {
      const got = received[i]!;
      const want = loadFixture(INDEX.fixtures.find((f) => f.name === fixture)!);
      for (const h of ['x-gitea-event', 'x-gitea-event-type'])
        expect(got.headers[h], `${fixture} ${h}`).toBe(
          Object.entries(want.headers).find(([k]) => k.toLowerCase() === h)![1],
        );
      const body = JSON.parse(got.body.toString()) as Record<string, unknown>;
      const wanted = JSON.parse(want.body.toString()) as Record<string, unknown>;
      expect(Object.keys(body), fixture).toEqual(Object.keys(wanted));
      expect(body['action']).toBe('reviewed');
      expect((body['review'] as { type: string }).type).toBe(
        (wanted['review'] as { type: string }).type,
      );
      expect((body['requested_reviewer'] as { login: string }).login).toBe('alice');
      expect(parseGiteaWebhook(got.headers, got.body)).toMatchObject({
        kind: 'review_submitted',
        state,
        author: 'alice',
        body: `a ${state} review`,
        pr: { number: pr.number },
      });
    });
    // Reviews can be read back over REST, with their inline comments.
    const reviews = await forge.readReviews(pr.number);
    expect(reviews.map((r) => r.state)).toEqual(cases.map(([st]) => st));
    expect((await forge.readReviewComments(pr.number, reviews[1]!.id)).map((c) => c.path)).toEqual([
      'CHANGE.md',
    ]);
    // Only a person may submit a review the API accepts: a review of one's own PR is refused.
    const own = await fetch(`${s.apiUrl}/repos/acme/widgets/pulls/${pr.number}/reviews`, {
      method: 'POST',
      headers: { authorization: `token ${TOKENS.bot}`, 'content-type': 'application/json' },
      body: JSON.stringify({ event: 'APPROVED', body: 'me' }),
    });
    expect(own.status).toBe(422);
  });

  it('getPrForIssue finds the PR through the timeline, and through the branch name when the body does not link it', async () => {
    const s = await start();
    const forge = botForge(s);
    const a = s.createIssue('alice', 'acme/widgets', { title: 'A' });
    const b = s.createIssue('alice', 'acme/widgets', { title: 'B' });
    const pa = await botPr(s, forge, a, 'A', `Closes #${a}`);
    const pb = await botPr(s, forge, b, 'B', 'no link here');
    expect(await forge.getPrForIssue(a)).toBe(pa.number);
    expect(await forge.getPrForIssue(b)).toBe(pb.number);
    expect(await forge.getPrForIssue(1)).toBeUndefined();
  });
});

describe('the test server starting', () => {
  it('answers nothing, /version included, until its seeded repositories exist', async () => {
    // A free port, so the poll can begin before start() resolves.
    const probe = createServer();
    await new Promise<void>((r) => probe.listen(0, '127.0.0.1', () => r()));
    const port = (probe.address() as AddressInfo).port;
    await new Promise<void>((r) => probe.close(() => r()));
    const repos = Array.from({ length: 25 }, (_, i) => ({ owner: 'alice', name: `r${i}` }));
    const starting = createGiteaTestServer({
      port,
      world: { users: [{ login: 'alice', tokens: ['t-alice'] }], repos },
    });
    const base = `http://127.0.0.1:${port}/api/v1`;
    const early: number[] = [];
    let seen: number | undefined;
    // Polled until it answers 200 (or a minute passes): seeding 25 repositories in git
    // takes seconds on a loaded machine, however many polls fit in them.
    const deadline = Date.now() + 60_000;
    while (seen === undefined && Date.now() < deadline) {
      const answer = await fetch(`${base}/version`).catch(() => undefined);
      if (answer?.status === 200) seen = 200;
      else {
        if (answer) early.push(answer.status);
        await new Promise((r) => setTimeout(r, 2));
      }
    }
    // The moment /version answers, the last repository seeded is there.
    const last = await fetch(`${base}/repos/alice/r24`, {
      headers: { authorization: 'token t-alice' },
    });
    const s = await starting;
    try {
      expect(seen).toBe(200);
      expect(last.status).toBe(200);
      for (const status of early) expect(status).toBe(503);
    } finally {
      await s.close();
    }
  });
});
