// A real Gitea client library (gitea-js, generated from Gitea's own swagger)
// pointed at the Gitea-compatible test server: the everyday calls a Gitea user's
// tooling makes are answered as Gitea answers them, and every answer matches
// Gitea 1.26's swagger.
import { giteaApi } from 'gitea-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closeGiteaPools } from '../src/index';
import {
  type ApiExchange,
  createGiteaTestServer,
  type GiteaTestServer,
} from '../src/testing/index';
import { checkAgainstSwagger } from './support/swagger';
import { pushBranch, TOKENS, WORLD } from './support/world';

const problems: string[] = [];
const exchanges: ApiExchange[] = [];
let server: GiteaTestServer;
let api: ReturnType<typeof giteaApi>;
let asAlice: ReturnType<typeof giteaApi>;
let asEve: ReturnType<typeof giteaApi>;

const client = (token: string) => giteaApi(server.url, { token, customFetch: fetch });

/** The status a call ended with (gitea-js rejects with the response on errors). */
async function status(p: Promise<{ status: number }>): Promise<number> {
  try {
    return (await p).status;
  } catch (err) {
    return (err as { status?: number }).status ?? -1;
  }
}

beforeAll(async () => {
  server = await createGiteaTestServer({
    world: {
      ...WORLD,
      repos: WORLD.repos!.map((r) => ({
        ...r,
        files: { 'README.md': '# widgets\n', 'a.ts': 'export const a = 1;\n' },
      })),
    },
    onResponse: (x) => {
      exchanges.push(x);
      problems.push(...checkAgainstSwagger(x.template || x.path, x.method, x.status, x.body));
    },
  });
  api = client(TOKENS.bot);
  asAlice = client(TOKENS.alice);
  asEve = client(TOKENS.outsider);
});

afterAll(async () => {
  await server?.close();
  await closeGiteaPools();
  expect([...new Set(problems)]).toEqual([]);
});

describe('gitea-js against the Gitea-compatible test server', () => {
  it('answers 25 everyday calls as Gitea does', async () => {
    const r = api.repos;
    // who am I, the repository, an issue
    expect((await api.user.userGetCurrent()).data.login).toBe('bb-claude');
    expect((await r.repoGet('acme', 'widgets')).data.full_name).toBe('acme/widgets');
    expect((await r.issueGetIssue('acme', 'widgets', 1)).data.title).toBe(
      'Widget export drops trailing newline',
    );
    // issue lists: state, type and the label filter
    await asAlice.repos.issueCreateIssue('acme', 'widgets', { title: 'Unlabelled' });
    const labelled = await r.issueListIssues('acme', 'widgets', {
      state: 'open',
      type: 'issues',
      labels: 'bot-bottle:implementer',
    });
    expect(labelled.data.map((i) => i.number)).toEqual([1]);
    expect((await r.issueListIssues('acme', 'widgets', { state: 'open' })).data).toHaveLength(2);
    // comments: create, list, one by id, edit; someone else's is 403
    const c = (await r.issueCreateComment('acme', 'widgets', 1, { body: 'first' })).data;
    expect((await r.issueGetComments('acme', 'widgets', 1)).data.map((x) => x.body)).toEqual([
      'first',
    ]);
    expect((await r.issueGetComment('acme', 'widgets', c.id!)).data.body).toBe('first');
    expect((await r.issueEditComment('acme', 'widgets', c.id!, { body: 'edited' })).data.body).toBe(
      'edited',
    );
    expect(
      await status(asEve.repos.issueEditComment('acme', 'widgets', c.id!, { body: 'mine' })),
    ).toBe(403);
    expect(await status(r.issueGetComment('acme', 'widgets', 999_999))).toBe(404);
    // reactions on a comment and on an issue
    expect(
      await status(
        asAlice.repos.issuePostCommentReaction('acme', 'widgets', c.id!, { content: 'eyes' }),
      ),
    ).toBe(201);
    expect(
      await status(
        asAlice.repos.issuePostCommentReaction('acme', 'widgets', c.id!, { content: 'eyes' }),
      ),
    ).toBe(200);
    expect(
      (await r.issueGetCommentReactions('acme', 'widgets', c.id!)).data.map((x) => [
        x.user?.login,
        x.content,
      ]),
    ).toEqual([['alice', 'eyes']]);
    expect(await status(r.issuePostIssueReaction('acme', 'widgets', 1, { content: '+1' }))).toBe(
      201,
    );
    expect(
      (await r.issueGetIssueReactions('acme', 'widgets', 1)).data.map((x) => x.content),
    ).toEqual(['+1']);
    // labels
    expect((await r.issueListLabels('acme', 'widgets')).data.map((l) => l.name)).toContain(
      'bot-bottle:implementer',
    );
    // branches and file contents
    await pushBranch(server.cloneUrl('acme/widgets'), TOKENS.bot, 'feature');
    expect((await r.repoListBranches('acme', 'widgets')).data.map((b) => b.name)).toEqual([
      'feature',
      'main',
    ]);
    const main = (await r.repoGetBranch('acme', 'widgets', 'main')).data;
    expect(main.commit?.id).toMatch(/^[0-9a-f]{40}$/);
    expect(await status(r.repoGetBranch('acme', 'widgets', 'nope'))).toBe(404);
    const file = (await r.repoGetContents('acme', 'widgets', 'a.ts')).data;
    expect(Buffer.from(file.content!, 'base64').toString()).toBe('export const a = 1;\n');
    expect(await status(r.repoGetContents('acme', 'widgets', 'missing.txt'))).toBe(404);
    // a PR, its reviews and their inline comments
    const pr = (
      await r.repoCreatePullRequest('acme', 'widgets', {
        head: 'feature',
        base: 'main',
        title: 'Feature',
      })
    ).data;
    expect((await r.repoGetPullRequest('acme', 'widgets', pr.number!)).data.head?.ref).toBe(
      'feature',
    );
    const review = (
      await asAlice.repos.repoCreatePullReview('acme', 'widgets', pr.number!, {
        event: 'REQUEST_CHANGES',
        body: 'Two things.',
        comments: [{ path: 'CHANGE.md', new_position: 1, body: 'Why?' }],
      })
    ).data;
    expect(review.state).toBe('REQUEST_CHANGES');
    expect(
      (await r.repoListPullReviews('acme', 'widgets', pr.number!)).data.map((x) => x.id),
    ).toEqual([review.id]);
    expect((await r.repoGetPullReview('acme', 'widgets', pr.number!, review.id!)).data.body).toBe(
      'Two things.',
    );
    const inline = (await r.repoGetPullReviewComments('acme', 'widgets', pr.number!, review.id!))
      .data;
    expect(inline.map((x) => [x.path, x.position, x.body])).toEqual([['CHANGE.md', 1, 'Why?']]);
    // who may write: membership, collaborators, permissions (only an admin may ask about others)
    expect(await status(api.orgs.orgIsMember('bot-bottle', 'bb-codex'))).toBe(204);
    expect(await status(r.repoCheckCollaborator('acme', 'widgets', 'bb-claude'))).toBe(204);
    expect((await r.repoGetRepoPermissions('acme', 'widgets', 'bb-claude')).data.permission).toBe(
      'write',
    );
    expect(await status(r.repoGetRepoPermissions('acme', 'widgets', 'alice'))).toBe(403);
    // hooks: an org's repositories, an org hook by an org member
    expect((await api.orgs.orgListRepos('acme')).data.map((x) => x.name)).toEqual(['widgets']);
    const hook = await asAlice.orgs.orgCreateHook('acme', {
      type: 'gitea',
      config: { url: 'http://127.0.0.1:9/hook', content_type: 'json', secret: 's' },
      events: ['issues', 'issue_comment', 'pull_request'],
      active: true,
    });
    expect(hook.status).toBe(201);
    expect((await asAlice.orgs.orgListHooks('acme')).data.map((h) => h.id)).toEqual([hook.data.id]);
    // Every call above reached a route the server models (none fell through to a 404 it does not know).
    expect(exchanges.filter((x) => x.template === '')).toEqual([]);
  });
});
