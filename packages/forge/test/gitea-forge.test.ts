// GiteaForge against the Gitea-compatible test server (and, when BB_GITEA_URL and
// BB_GITEA_TOKEN are set, against that real Gitea), through the conformance suite.
// Every API response the test server produces here is checked against Gitea's
// swagger spec.
import { afterAll } from 'vitest';
import { closeGiteaPools, GiteaForge } from '../src/index';
import { type ApiExchange, describeForgeConformance } from '../src/testing/index';
import { giteaWebhookFixtures } from './support/fixtures';
import { checkAgainstSwagger } from './support/swagger';
import { giteaConformanceWorld, pushBranch, TOKENS } from './support/world';

export const swaggerProblems: string[] = [];
export function recordExchange(x: ApiExchange): void {
  for (const p of checkAgainstSwagger(x.template || x.path, x.method, x.status, x.body))
    swaggerProblems.push(p);
}

// On each HTTP client GiteaClient offers (undici's, and node's own, which a bottle's gate uses).
for (const transport of ['undici', 'node'] as const)
  describeForgeConformance(`GiteaForge on the Gitea-compatible test server (${transport})`, {
    create: () =>
      giteaConformanceWorld(
        (baseUrl) =>
          new GiteaForge({
            baseUrl,
            token: TOKENS.bot,
            owner: 'acme',
            repo: 'widgets',
            clientOptions: { transport },
          }),
        { onResponse: recordExchange },
      ),
  });

afterAll(async () => {
  await closeGiteaPools();
  if (swaggerProblems.length > 0) {
    throw new Error(
      `test-server responses that do not match Gitea's swagger:\n${[...new Set(swaggerProblems)].join('\n')}`,
    );
  }
});

const realUrl = process.env['BB_GITEA_URL'];
const realToken = process.env['BB_GITEA_TOKEN'];
if (realUrl && realToken) {
  // Against a real Gitea: the repository named by BB_GITEA_REPO (owner/name) must
  // have issue BB_GITEA_ISSUE open, labelled and assigned to the token's user, who
  // is a member of BB_GITEA_ORG; BB_GITEA_MEMBER and BB_GITEA_NON_MEMBER name two
  // more users. Branches are pushed with the same token.
  const [owner, repo] = (process.env['BB_GITEA_REPO'] ?? '').split('/');
  describeForgeConformance(`GiteaForge against ${realUrl}`, {
    create: async () => {
      const forge = new GiteaForge({
        baseUrl: realUrl,
        token: realToken,
        owner: owner!,
        repo: repo!,
      });
      const me = (await forge.client.request<{ login: string }>({ method: 'GET', path: '/user' }))
        .body.login;
      const issue = Number(process.env['BB_GITEA_ISSUE'] ?? 1);
      const read = await forge.readIssue(issue);
      const web = forge.client.webBase;
      return {
        forge,
        bot: me,
        org: process.env['BB_GITEA_ORG'] ?? 'bot-bottle',
        member: process.env['BB_GITEA_MEMBER'] ?? me,
        nonMember: process.env['BB_GITEA_NON_MEMBER'] ?? 'ghost',
        issue,
        issueTitle: read.title,
        issueLabel: read.labels[0]?.name ?? '',
        base: 'main',
        pushBranch: async (branch) => {
          await pushBranch(`${web}/${owner}/${repo}.git`, realToken, `${branch}-${Date.now()}`);
        },
        changedFile: 'CHANGE.md',
        review: async () => {
          throw new Error('reviewing needs a second user token: not set up for a real Gitea');
        },
        webhooks: giteaWebhookFixtures(),
      };
    },
    skip: {
      reason: 'a shared real Gitea keeps state between tests',
      tests: [
        'a plain issue is not a PR',
        'openPr opens a PR that is linked to its issue and readable as a PR',
        'a second open PR for the same branch is a CONFLICT',
        'readReviews lists submitted reviews oldest first; readReviewComments their inline comments',
      ],
    },
  });
}
