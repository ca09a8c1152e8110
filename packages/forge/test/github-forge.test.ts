// GitHubForge against the GitHub-compatible test server, through the conformance suite.
// Every answer the test server gives here is checked against GitHub's published OpenAPI
// description; its templates are checked to be GitHub's current examples.
import { readFileSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import {
  extractTemplates,
  TEMPLATES_FILE,
  webhookExamplesPath,
  webhookSchemaPath,
} from '../scripts/github-templates';
import { GitHubForge, gitHubClient, githubKind } from '../src/index';
import {
  createGitHubTestServer,
  describeForgeConformance,
  type ForgeConformanceWorld,
  pushCommit,
} from '../src/testing/index';
import { githubWebhookFixtures } from './support/github-fixtures';
import { checkAgainstGitHub, GITHUB_SPEC, recordingChecker } from './support/github-openapi';
import { TOKENS, WORLD } from './support/world';

const { problems, record } = recordingChecker();

async function githubWorld(): Promise<ForgeConformanceWorld> {
  const server = await createGitHubTestServer({ world: WORLD, onResponse: record });
  const forge = new GitHubForge({
    owner: 'acme',
    repo: 'widgets',
    // On loopback: no second between writes (real GitHub gets it, see gitHubClient).
    client: gitHubClient({ apiUrl: server.apiUrl, token: TOKENS.bot, spaceWrites: false }),
    webUrl: server.url,
    token: TOKENS.bot,
  });
  return {
    forge,
    bot: 'bb-claude',
    org: 'bot-bottle',
    member: 'bb-codex',
    nonMember: 'alice',
    issue: 1,
    issueTitle: 'Widget export drops trailing newline',
    issueLabel: 'bot-bottle:implementer',
    base: 'main',
    pushBranch: async (branch) => {
      const remote = forge.gitRemote();
      await pushCommit({
        cloneUrl: remote.url,
        token: TOKENS.bot,
        branch,
        file: 'CHANGE.md',
        author: 'Bot',
        message: `change on ${branch}`,
      });
    },
    merge: async (pr) => {
      await server.mergePr('alice', 'acme/widgets', pr);
    },
    changedFile: 'CHANGE.md',
    review: async (pr, input) => {
      server.gitea.review('bb-codex', 'acme/widgets', pr, input);
    },
    webhooks: githubWebhookFixtures(),
    webhook: githubKind.webhook,
    kind: githubKind,
    dispose: () => server.close(),
  };
}

describeForgeConformance('GitHubForge on the GitHub-compatible test server', {
  create: githubWorld,
});

describe("the GitHub test server's contract", () => {
  it("the check refuses an answer GitHub's description does not allow", () => {
    const issue = structuredClone(GITHUB_SPEC.components.examples['issue']!.value) as Record<
      string,
      unknown
    >;
    const template = '/repos/{owner}/{repo}/issues/{issue_number}';
    expect(checkAgainstGitHub(template, 'GET', 200, issue)).toEqual([]);
    delete issue['number'];
    expect(checkAgainstGitHub(template, 'GET', 200, issue).join('\n')).toMatch(/number/);
    expect(
      checkAgainstGitHub(template, 'GET', 200, { ...issue, number: 'seven' }).join('\n'),
    ).toMatch(/number/);
    expect(checkAgainstGitHub('/repos/{owner}/{repo}/no-such', 'GET', 200, {})).toEqual([
      "GET /repos/{owner}/{repo}/no-such is not in GitHub's API",
    ]);
  });

  it("answers in GitHub's own examples, current with @octokit/openapi", () => {
    const webhooks = JSON.parse(readFileSync(webhookExamplesPath(), 'utf8'));
    const schemas = JSON.parse(readFileSync(webhookSchemaPath(), 'utf8'));
    expect(JSON.parse(readFileSync(TEMPLATES_FILE, 'utf8'))).toEqual(
      extractTemplates(GITHUB_SPEC, webhooks, schemas),
    );
  });
});

afterAll(() => {
  if (problems.length)
    throw new Error(
      `GitHub test-server answers that do not match GitHub's OpenAPI:\n${[...new Set(problems)].join('\n')}`,
    );
});
