// The world the GiteaForge tests and the conformance suite run against: the same
// people, org and repository as ../shared/gitea's fixtures.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { type Forge, giteaKind } from '../../src/index';
import {
  type ApiExchange,
  createGiteaTestServer,
  type ForgeConformanceWorld,
  type GiteaWorldSeed,
  pushCommit,
} from '../../src/testing/index';
import { giteaWebhookFixtures } from './fixtures';

export const TOKENS = {
  alice: 'alice-token-0123456789',
  bot: 'bb-claude-token-0123456789',
  outsider: 'eve-token-0123456789',
};

export const WORLD: GiteaWorldSeed = {
  users: [
    {
      login: 'alice',
      fullName: 'Alice Maintainer',
      email: 'alice@acme.test',
      tokens: [TOKENS.alice],
    },
    {
      login: 'bb-claude',
      fullName: 'bot-bottle Claude',
      email: 'bb-claude@bot-bottle.test',
      tokens: [TOKENS.bot],
    },
    { login: 'bb-codex', fullName: 'bot-bottle Codex' },
    { login: 'eve', tokens: [TOKENS.outsider] },
  ],
  orgs: [
    { name: 'acme', fullName: 'Acme Corp', members: ['alice'] },
    { name: 'bot-bottle', members: ['bb-claude', 'bb-codex'] },
  ],
  repos: [
    {
      owner: 'acme',
      name: 'widgets',
      description: 'Widgets for everyone',
      collaborators: ['bb-claude'],
    },
  ],
  labels: [{ repo: 'acme/widgets', name: 'bot-bottle:implementer', color: '5319e7' }],
  issues: [
    {
      repo: 'acme/widgets',
      title: 'Widget export drops trailing newline',
      body: 'Exporting a widget drops the trailing newline.',
      author: 'alice',
      labels: ['bot-bottle:implementer'],
      assignees: ['bb-claude'],
    },
  ],
};

const _run = promisify(execFile);

/**
 * Push a branch with one new commit to `cloneUrl`, authenticating with `token`
 * through an extra header (never in the URL). Asynchronous: the server may be
 * in this same process.
 */
export async function pushBranch(
  cloneUrl: string,
  token: string,
  branch: string,
  file = 'CHANGE.md',
): Promise<string> {
  return pushCommit({
    cloneUrl,
    token,
    branch,
    file,
    author: 'Bot',
    message: `change on ${branch}`,
  });
}

/**
 * The conformance world on a Gitea-compatible test server made with WORLD, its forge
 * made by `makeForge` (a `GiteaForge`, or one a test breaks on purpose).
 */
export async function giteaConformanceWorld(
  makeForge: (apiUrl: string) => Forge,
  options: { onResponse?: (x: ApiExchange) => void } = {},
): Promise<ForgeConformanceWorld> {
  const server = await createGiteaTestServer({
    world: WORLD,
    ...(options.onResponse ? { onResponse: options.onResponse } : {}),
  });
  return {
    forge: makeForge(server.apiUrl),
    bot: 'bb-claude',
    org: 'bot-bottle',
    member: 'bb-codex',
    nonMember: 'alice',
    issue: 1,
    issueTitle: 'Widget export drops trailing newline',
    issueLabel: 'bot-bottle:implementer',
    base: 'main',
    pushBranch: async (branch) => {
      await pushBranch(server.cloneUrl('acme/widgets'), TOKENS.bot, branch);
    },
    merge: async (pr) => {
      await server.mergePr('alice', 'acme/widgets', pr);
    },
    changedFile: 'CHANGE.md',
    review: async (pr, input) => {
      server.review('bb-codex', 'acme/widgets', pr, input);
    },
    webhooks: giteaWebhookFixtures(),
    webhook: giteaKind.webhook,
    kind: giteaKind,
    dispose: () => server.close(),
  };
}
