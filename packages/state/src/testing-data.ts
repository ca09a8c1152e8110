import type { ForgeState } from './forge-state';

/** A valid state for issue `n` of acme/widgets; override any field. */
export function sampleState(n = 17, over: Partial<ForgeState> = {}): ForgeState {
  const t = '2026-11-22T05:00:00.000Z';
  return {
    owner: 'acme',
    repo: 'widgets',
    issueNumber: n,
    slug: `implementer-${n.toString(36).padStart(5, '0')}`,
    agentName: 'implementer',
    bottleNames: ['default'],
    backendName: 'docker',
    agentGitUser: 'bb-claude',
    prNumber: null,
    status: 'running',
    lastCheckinAt: t,
    sessionId: null,
    cwd: null,
    createdAt: t,
    updatedAt: t,
    ...over,
  };
}
