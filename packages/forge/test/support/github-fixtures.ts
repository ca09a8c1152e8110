// GitHub's own webhook examples (@octokit/webhooks-examples), signed as GitHub signs them,
// with the event each must parse to: the github kind's fixtures for the conformance suite.
import { createHmac, randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { webhookExamplesPath } from '../../scripts/github-templates';
import type { WebhookFixture } from '../../src/testing/index';

const SECRET = 'github-conformance-secret';
type Example = Record<string, unknown> & {
  action?: string;
  repository?: { name: string; owner: { login: string } };
};
const examples = JSON.parse(readFileSync(webhookExamplesPath(), 'utf8')) as Array<{
  name: string;
  examples: Example[];
}>;

const WANT: Array<[string, string, WebhookFixture['expect']['kind']]> = [
  ['issues', 'labeled', 'issue_targeting_changed'],
  ['issues', 'opened', 'issue_targeting_changed'],
  ['issues', 'reopened', 'issue_targeting_changed'],
  ['issue_comment', 'created', 'comment_created'],
  ['pull_request', 'opened', 'pr_opened'],
  ['pull_request', 'synchronize', 'pr_synchronized'],
  ['pull_request', 'closed', 'pr_closed'],
  ['pull_request_review', 'submitted', 'review_submitted'],
];

export function githubWebhookFixtures(): WebhookFixture[] {
  return WANT.map(([event, action, kind]) => {
    const example = examples
      .find((e) => e.name === event)
      ?.examples.find((x) => x.action === action);
    if (!example) throw new Error(`@octokit/webhooks-examples has no ${event}$${action}`);
    const body = JSON.stringify(example);
    return {
      name: `${event}$${action}`,
      headers: {
        'content-type': 'application/json',
        'x-github-event': event,
        'x-github-delivery': randomUUID(),
        'x-hub-signature-256': `sha256=${createHmac('sha256', SECRET).update(body).digest('hex')}`,
      },
      body,
      secret: SECRET,
      expect: {
        kind,
        owner: example.repository!.owner.login,
        repo: example.repository!.name,
      },
    };
  });
}
