import { defaultBottleBranches } from '../kind';
import { MemoryForge, MemoryForgeWorld, memoryWebhooks } from './memory-forge';

/** A seeded MemoryForge world for the conformance suite (used by tests only). */
export function memoryWorld() {
  const world = new MemoryForgeWorld();
  world.addMember('bot-bottle', 'bb-claude');
  world.addMember('bot-bottle', 'bb-codex');
  world.user('alice');
  world.grant('acme', 'widgets', 'bb-claude', 'write');
  const issue = world.addIssue('acme', 'widgets', {
    title: 'Widget export drops trailing newline',
    author: 'alice',
    labels: ['bot-bottle:implementer'],
    assignees: ['bb-claude'],
  });
  const forge = new MemoryForge({ owner: 'acme', repo: 'widgets', as: 'bb-claude', world });
  const event = {
    kind: 'comment_created' as const,
    key: 'memory:acme/widgets:comment#1',
    deliveryId: 'd-1',
    owner: 'acme',
    repo: 'widgets',
    sender: { id: 1, login: 'alice' },
    occurredAt: '2026-01-01T00:00:00Z',
    on: 'pr' as const,
    number: 2,
    comment: { id: 1, author: 'alice', body: 'please add a test' },
  };
  const signed = MemoryForge.signWebhook(event, 's3cret-s3cret');
  return {
    forge,
    bot: 'bb-claude',
    org: 'bot-bottle',
    member: 'bb-codex',
    nonMember: 'alice',
    issue,
    issueTitle: 'Widget export drops trailing newline',
    issueLabel: 'bot-bottle:implementer',
    base: 'main',
    pushBranch: async (branch: string) => {
      world.pushBranch('acme', 'widgets', branch);
    },
    merge: async (pr: number) => world.merge('acme', 'widgets', pr),
    changedFile: 'CHANGE.md',
    review: async (
      pr: number,
      input: {
        state: 'approved' | 'changes_requested' | 'commented';
        body: string;
        comments: Array<{ path: string; line: number; body: string }>;
      },
    ) => {
      world.review('acme', 'widgets', pr, { author: 'bb-codex', ...input });
    },
    webhook: memoryWebhooks,
    kind: {
      name: 'memory',
      summary: 'in memory',
      fromEnv: () => {
        throw new Error('the memory forge has no site');
      },
      webhook: memoryWebhooks,
      ...defaultBottleBranches,
    },
    webhooks: [
      {
        name: 'memory comment',
        headers: signed.headers,
        body: signed.body,
        secret: 's3cret-s3cret',
        expect: { kind: 'comment_created' as const, number: 2 },
      },
    ],
  };
}
