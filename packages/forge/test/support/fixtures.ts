import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { WebhookFixture } from '../../src/testing/index';
import { GITEA_FIXTURES } from './swagger';

export const WEBHOOK_SECRET = 'bb-webhook-secret';

interface IndexEntry {
  name: string;
  body_file: string;
  headers_file: string;
  x_gitea_event: string;
  x_gitea_event_type: string;
  action: string | null;
  body_sha256: string;
}

export const INDEX = JSON.parse(
  readFileSync(join(GITEA_FIXTURES, 'webhooks', 'index.json'), 'utf8'),
) as {
  fixtures: IndexEntry[];
};

/** What each of Gitea's fixture deliveries must normalise to. */
export const EXPECTED: Record<string, WebhookFixture['expect']> = {
  'issues.opened': {
    kind: 'issue_targeting_changed',
    action: 'opened',
    owner: 'acme',
    repo: 'widgets',
    issue: { number: 17 },
  },
  'issues.label_updated': {
    kind: 'issue_targeting_changed',
    action: 'label_updated',
    issue: { number: 17, labels: ['bot-bottle:implementer'] },
  },
  'issues.assigned': {
    kind: 'issue_targeting_changed',
    action: 'assigned',
    issue: { number: 17, assignees: ['bb-claude'] },
    sender: { login: 'alice' },
  },
  'issue_comment.created': { kind: 'comment_created', on: 'issue', number: 17 },
  'issue_comment.created.on_pull': {
    kind: 'comment_created',
    on: 'pr',
    number: 18,
    comment: { id: 305, author: 'alice' },
  },
  'pull_request.opened': {
    kind: 'pr_opened',
    pr: { number: 18, head: 'bb/implementer-17', base: 'main' },
  },
  'pull_request.synchronized': { kind: 'pr_synchronized', pr: { number: 18 } },
  'pull_request.closed.merged': {
    kind: 'pr_closed',
    merged: true,
    mergeCommitSha: 'c0ffee1234567890abcdef1234567890abcdef12',
    pr: { number: 18 },
  },
  'pull_request.closed.unmerged': { kind: 'pr_closed', merged: false, pr: { number: 18 } },
  'pull_request.reopened': { kind: 'pr_reopened', pr: { number: 18 } },
  'pull_request_review.approved': {
    kind: 'review_submitted',
    state: 'approved',
    author: 'alice',
    pr: { number: 18 },
  },
  'pull_request_review.rejected': {
    kind: 'review_submitted',
    state: 'changes_requested',
    pr: { number: 18 },
  },
  'pull_request_review.comment': {
    kind: 'review_submitted',
    state: 'commented',
    pr: { number: 18 },
  },
  'issues.closed': { kind: 'issue_closed', issue: { number: 17, state: 'closed' } },
  'push.branch': { kind: 'ignored' },
};

export function loadFixture(entry: IndexEntry): { headers: Record<string, string>; body: Buffer } {
  return {
    headers: JSON.parse(readFileSync(join(GITEA_FIXTURES, 'webhooks', entry.headers_file), 'utf8')),
    body: readFileSync(join(GITEA_FIXTURES, 'webhooks', entry.body_file)),
  };
}

/** Gitea's fixtures in the conformance suite's form. */
export function giteaWebhookFixtures(): WebhookFixture[] {
  return INDEX.fixtures.map((e) => {
    const { headers, body } = loadFixture(e);
    const expect = EXPECTED[e.name];
    if (!expect) throw new Error(`no expectation for fixture ${e.name}`);
    return { name: e.name, headers, body, secret: WEBHOOK_SECRET, expect };
  });
}
