import type { ForgeEvent } from '@bb/forge';
import type { ForgeState, InboxEvent } from '@bb/state';
import { issueKey } from './routing';
import type { TurnReport } from './turn-monitor';

/** A unit of work on an issue's queue: an accepted forge event, or what a turn reported. */
export type Work =
  | {
      type: 'event';
      inbox: InboxEvent;
      event: ForgeEvent;
      attempt: number;
      /**
       * Queued from a reading of its issue's open events, in order, with the older
       * ones: none needs looking for when it is taken up.
       */
      listed?: boolean;
    }
  /**
   * Take the issue's lease when nobody holds it (a bottle or events left by
   * another); `done` is called once the claim was handled, whatever came of it.
   */
  | { type: 'claim'; occurredAt: string; done?: () => void }
  | { type: 'turn'; report: TurnReport; occurredAt: string }
  | { type: 'retry_waiting'; occurredAt: string };

/** The work of handling an inbox event (its payload is the forge event it stored). */
export const eventWork = (e: InboxEvent, attempt = 0, listed = false): Work => ({
  type: 'event',
  inbox: e,
  event: e.payload as ForgeEvent,
  attempt,
  ...(listed ? { listed: true } : {}),
});

export const keyOf = (row: ForgeState) => issueKey(row.owner, row.repo, row.issueNumber);
