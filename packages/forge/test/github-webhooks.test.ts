// GitHub's webhooks: X-Hub-Signature-256 verified over the raw body (any of the secrets
// while one is rotated), X-GitHub-Event read into the events every forge's become.
import { createHmac } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { githubKind } from '../src/index';

const SECRET = 'gh-webhook-secret';
const repository = { name: 'widgets', owner: { login: 'acme' } };
const sender = { id: 7, login: 'alice' };
const issue = {
  number: 3,
  title: 'Export drops a newline',
  state: 'open',
  labels: [{ name: 'bot-bottle:implementer' }],
  assignees: [{ id: 9, login: 'bb-claude' }],
  updated_at: '2026-12-01T10:00:00Z',
};
const pr = {
  number: 5,
  title: 'Fix export',
  body: 'Fixes #3',
  state: 'closed',
  head: { ref: 'bb/implementer-3', sha: 'a'.repeat(40) },
  base: { ref: 'main' },
  user: { id: 9, login: 'bb-claude' },
  merged: true,
  merge_commit_sha: 'b'.repeat(40),
  created_at: '2026-12-01T10:00:00Z',
  updated_at: '2026-12-01T11:00:00Z',
  closed_at: '2026-12-01T11:00:00Z',
  html_url: 'https://github.com/acme/widgets/pull/5',
};

function delivery(event: string, payload: object, secret = SECRET) {
  const body = JSON.stringify({ repository, sender, ...payload });
  return {
    headers: {
      'content-type': 'application/json',
      'x-github-event': event,
      'x-github-delivery': '72d3162e-cc78-11e3-81ab-4c9367dc0958',
      'x-hub-signature-256': `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`,
    },
    body,
  };
}

describe('where a GitHub is', () => {
  it("takes the web root from the API's own, so a server's token never goes to github.com", () => {
    const gh = (env: Record<string, string>) => githubKind.fromEnv(env).env();
    expect(gh({})).toEqual({
      FORGE_GITHUB_API: 'https://api.github.com',
      FORGE_GITHUB_URL: 'https://github.com',
    });
    expect(gh({ FORGE_GITHUB_API: 'https://ghe.corp.example/api/v3' })).toEqual({
      FORGE_GITHUB_API: 'https://ghe.corp.example/api/v3',
      FORGE_GITHUB_URL: 'https://ghe.corp.example',
    });
    expect(gh({ FORGE_GITHUB_URL: 'https://ghe.corp.example' })).toEqual({
      FORGE_GITHUB_API: 'https://ghe.corp.example/api/v3',
      FORGE_GITHUB_URL: 'https://ghe.corp.example',
    });
    expect(
      githubKind
        .fromEnv({ FORGE_GITHUB_API: 'https://ghe.corp.example/api/v3' })
        .forgeFor({ owner: 'a', repo: 'b', token: 't' })
        .gitRemote()?.url,
    ).toBe('https://ghe.corp.example/a/b.git');
    expect(() =>
      githubKind.fromEnv({ FORGE_GITHUB_API: 'https://proxy.corp.example/github' }),
    ).toThrow(/set FORGE_GITHUB_URL/);
    expect(() =>
      githubKind.fromEnv({ FORGE_GITHUB_API: 'http://ghe.corp.example/api/v3' }),
    ).toThrow(/must be https/);
    expect(() =>
      githubKind.fromEnv({ FORGE_GITHUB_API: 'https://u:p@ghe.corp.example/api/v3' }),
    ).toThrow(/not a URL/);
  });
});

describe("GitHub's webhooks", () => {
  const { webhook } = githubKind;

  it('verify with any current secret, and fail on a changed body, a wrong secret or none', () => {
    const d = delivery('issues', { action: 'labeled', issue });
    expect(webhook.verify(d.headers, d.body, [SECRET])).toBe(true);
    expect(webhook.verify(d.headers, d.body, ['old-secret', SECRET])).toBe(true);
    expect(webhook.verify(d.headers, `${d.body} `, [SECRET])).toBe(false);
    expect(webhook.verify(d.headers, d.body, ['another'])).toBe(false);
    expect(webhook.verify(d.headers, d.body, [''])).toBe(false);
    expect(
      webhook.verify({ ...d.headers, 'x-hub-signature-256': 'sha1=00' }, d.body, [SECRET]),
    ).toBe(false);
    expect(webhook.deliveryId(d.headers)).toBe('72d3162e-cc78-11e3-81ab-4c9367dc0958');
  });

  it('read into the same events as every forge', () => {
    const parse = (event: string, payload: object) => {
      const d = delivery(event, payload);
      return webhook.parse(d.headers, d.body);
    };
    expect(parse('issues', { action: 'labeled', issue })).toMatchObject({
      kind: 'issue_targeting_changed',
      action: 'label_updated',
      owner: 'acme',
      repo: 'widgets',
      issue: { number: 3, labels: ['bot-bottle:implementer'], assignees: ['bb-claude'] },
    });
    expect(
      parse('issue_comment', {
        action: 'created',
        issue: { ...issue, number: 5, pull_request: { url: 'x' } },
        comment: {
          id: 11,
          body: 'please rename it',
          user: sender,
          created_at: '2026-12-01T12:00:00Z',
        },
      }),
    ).toMatchObject({
      kind: 'comment_created',
      on: 'pr',
      number: 5,
      comment: { id: 11, author: 'alice' },
      key: 'github:acme/widgets:comment#11:created',
    });
    expect(parse('pull_request', { action: 'closed', pull_request: pr })).toMatchObject({
      kind: 'pr_closed',
      merged: true,
      mergeCommitSha: 'b'.repeat(40),
      pr: { number: 5, head: 'bb/implementer-3', base: 'main' },
    });
    expect(
      parse('pull_request', { action: 'synchronize', pull_request: { ...pr, state: 'open' } }),
    ).toMatchObject({ kind: 'pr_synchronized' });
    expect(
      parse('pull_request_review', {
        action: 'submitted',
        pull_request: pr,
        review: {
          id: 21,
          state: 'changes_requested',
          body: 'two things',
          user: sender,
          submitted_at: '2026-12-01T12:30:00Z',
        },
      }),
    ).toMatchObject({
      kind: 'review_submitted',
      state: 'changes_requested',
      author: 'alice',
      body: 'two things',
    });
    expect(parse('ping', { zen: 'Keep it logically awesome.' })).toMatchObject({ kind: 'ignored' });
    expect(
      parse('pull_request_review_comment', { action: 'created', pull_request: pr }),
    ).toMatchObject({ kind: 'ignored' });
  });

  it('a malformed delivery is INVALID_INPUT', () => {
    const d = delivery('issues', { action: 'opened' });
    expect(() => webhook.parse(d.headers, d.body)).toThrow(/lacks the issue object/);
    expect(() =>
      webhook.parse({ ...d.headers, 'content-type': 'application/x-www-form-urlencoded' }, d.body),
    ).toThrow(/content type/);
    expect(() => webhook.parse({ 'content-type': 'application/json' }, d.body)).toThrow(
      /X-GitHub-Event/,
    );
    expect(() => webhook.parse(d.headers, '{')).toThrow(/not valid JSON/);
  });
});
