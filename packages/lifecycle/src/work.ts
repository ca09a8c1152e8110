import type { ForgeEvent } from '@bb/forge';
import type { ForgeState, InboxEvent } from '@bb/state';
import type { LifecycleState } from './machine';
import { issueKey } from './routing';
import type { TurnReport } from './turn-monitor';

/** A unit of work on an issue's queue: an accepted forge event, or what a turn reported. */
export type Work =
  | { type: 'event'; inbox: InboxEvent; event: ForgeEvent; attempt: number }
  /** Take the issue's lease when nobody holds it (a bottle or events left by another). */
  | { type: 'claim'; occurredAt: string }
  | { type: 'turn'; report: TurnReport; occurredAt: string }
  | { type: 'retry_waiting'; occurredAt: string };

/** The work of handling an inbox event (its payload is the forge event it stored). */
export const eventWork = (e: InboxEvent, attempt = 0): Work => ({
  type: 'event',
  inbox: e,
  event: e.payload as ForgeEvent,
  attempt,
});

export interface Bottle {
  slug: string;
  owner: string;
  repo: string;
  issue: number;
  agent: string;
  state: LifecycleState;
  /** Inbox events whose comments wait in `state.pending`. */
  deferred: number[];
  /** The last head each of its PRs was seen at (for "new commits a..b"). */
  heads?: Record<number, string>;
  /** Bottle manifests its launch asked for (a `bot-bottle-bottle:` label). */
  bottles?: string[] | undefined;
}

export const keyOf = (row: ForgeState) => issueKey(row.owner, row.repo, row.issueNumber);

export function fromRow(row: ForgeState): Bottle {
  return {
    slug: row.slug,
    owner: row.owner,
    repo: row.repo,
    issue: row.issueNumber,
    agent: row.agentName,
    state: {
      status: row.status,
      prs: row.prNumber ? [row.prNumber] : [],
      pending: [],
    },
    deferred: [],
  };
}
