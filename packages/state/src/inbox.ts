import { BbError } from '@bb/errors';
import type { Awaitable } from './store';

/**
 * Where an accepted event is: `pending` (to be handled), `deferred` (waiting
 * for its issue: a turn to end, capacity), `parked` (its issue is not known yet:
 * a comment on a PR no bottle has claimed so far), `done` (handled).
 */
export type InboxState = 'pending' | 'deferred' | 'parked' | 'done';
export const INBOX_STATES: readonly InboxState[] = ['pending', 'deferred', 'parked', 'done'];

/** An event as the orchestrator accepted it. */
export interface InboxInput {
  /** The issue it belongs to (`owner/repo#n`), or `null` when that is not known yet. */
  issue: string | null;
  /** When it happened at the forge (ISO 8601): events of an issue are handled in this order. */
  occurredAt: string;
  /** The event itself (JSON). */
  payload: unknown;
  /** The forge's delivery id and event name, for the ledger. */
  deliveryId?: string | undefined;
  kind?: string | undefined;
  /**
   * Accept it as handled already (`done`): the key is remembered (a redelivery
   * is a duplicate) but nothing waits on it. For events the caller knows at
   * once concern nothing it keeps.
   */
  done?: boolean | undefined;
  /**
   * With `issue` null: find the issue in the same step, as the live bottle
   * whose PR this is (then the event is `pending` on its issue). See
   * {@link InboxRoute}. The store must hold the forge state too (the SQL and
   * memory stores do: one object is both).
   */
  byPr?: InboxRoute | undefined;
}

/** Where an event about a PR goes, decided by the store in the same write as the event. */
export interface InboxRoute {
  owner: string;
  repo: string;
  pr: number;
  /**
   * When no live bottle owns that PR: `done` (nothing will claim it), or
   * `parkIfRunning`: `parked` while a bottle runs in that repository (its agent
   * may be opening the PR now), `done` when none does.
   */
  unclaimed: 'done' | 'parkIfRunning';
}

export interface InboxEvent {
  id: number;
  key: string;
  issue: string | null;
  state: InboxState;
  occurredAt: string;
  receivedAt: string;
  payload: unknown;
}

/**
 * The orchestrator's durable inbox: every event it acknowledged, kept until
 * its effect happened, so a restart loses nothing that was waiting. Accepting
 * is the delivery ledger's write too: one key, one event, in one step.
 * Implementations must pass `describeInboxConformance` from `@bb/state/testing`.
 */
export interface EventInbox {
  /**
   * Accept an event under its semantic key: the stored event, or `undefined`
   * when that key was accepted before (nothing changes). The ledger entry and
   * the event are one durable write; throws (`STATE_BUSY`, `STATE_UNWRITABLE`)
   * when it cannot be made. An event with no issue starts `parked`, one with
   * an issue `pending`, one accepted with `done: true` `done`.
   */
  accept(key: string, event: InboxInput): Awaitable<InboxEvent | undefined>;
  /** Every event that is not done, in the order it happened (then accepted). */
  openEvents(): Awaitable<InboxEvent[]>;
  /**
   * The events of one issue (`owner/repo#n`) that are not done, in the same
   * order: what `openEvents()` holds for it, read without the rest. Optional;
   * without it, callers filter `openEvents()`.
   */
  openEventsOf?(issue: string): Awaitable<InboxEvent[]>;
  /**
   * Hear at once of each pending event accepted (its id, issue and key), whichever
   * process accepted it (processes sharing a database server); `null` when some
   * may have been missed (the connection dropped and came back): read the open
   * events again. Returns what stops it. Optional; without it, other processes'
   * events are found by reading `openEvents()` from time to time.
   */
  watchPending?(
    listener: (event: { id: number; issue: string; key: string } | null) => void,
  ): () => void;
  /** Move an event to `state`; with `issue`, route it too. */
  settle(id: number, state: InboxState, issue?: string | null): Awaitable<void>;
  /** Delete done events accepted before `before`; returns how many. */
  pruneInbox(before: Date): Awaitable<number>;
  /**
   * Events whose key starts with `prefix`, done or not, newest accepted first,
   * at most `limit` (1 to 1000): e.g. the notices an orchestrator keeps as
   * `bb:feedback:…` events, for a status command.
   */
  recentEvents(prefix: string, limit: number): Awaitable<InboxEvent[]>;
}

/**
 * The open events of one issue, in order: the inbox's own `openEventsOf` when
 * it has one, else `openEvents()` filtered (what the optional method promises).
 */
export async function openEventsOfIssue(inbox: EventInbox, issue: string): Promise<InboxEvent[]> {
  if (inbox.openEventsOf) return inbox.openEventsOf(issue);
  return (await inbox.openEvents()).filter((e) => e.issue === issue);
}

/** Checks `recentEvents`' arguments. */
export function checkRecent(prefix: unknown, limit: unknown): void {
  if (typeof prefix !== 'string' || prefix.length === 0)
    throw new BbError(
      'INVALID_INPUT',
      `recentEvents needs a non-empty key prefix, got ${JSON.stringify(prefix)}`,
    );
  if (!Number.isSafeInteger(limit) || (limit as number) < 1 || (limit as number) > 1000)
    throw new BbError(
      'INVALID_INPUT',
      `recentEvents limit ${String(limit)} must be a whole number from 1 to 1000`,
    );
}

const ISSUE = /^[A-Za-z0-9_.-]{1,100}\/[A-Za-z0-9_.-]{1,100}#[1-9]\d{0,9}$/;

export function checkDate(d: unknown, what: string): Date {
  if (!(d instanceof Date) || Number.isNaN(d.getTime()))
    throw new BbError('INVALID_INPUT', `${what} needs a valid Date, got ${String(d)}`);
  return d;
}

/** The state an accepted event starts in (routing by PR aside: see `routeByPr`). */
export const initialState = (e: InboxInput): InboxState =>
  e.done ? 'done' : e.issue ? 'pending' : 'parked';

/**
 * The issue and state an accepted event starts with, given the live rows an
 * engine holds (its `byPr` routing done in memory; the SQL engines do the same
 * in their statement).
 */
export function routeByPr(
  e: InboxInput,
  live: Iterable<{
    owner: string;
    repo: string;
    issueNumber: number;
    prNumber: number | null;
    status: string;
  }>,
): { issue: string | null; state: InboxState } {
  if (!e.byPr || e.issue !== null) return { issue: e.issue, state: initialState(e) };
  const r = e.byPr;
  let running = false;
  for (const row of live) {
    if (row.owner !== r.owner || row.repo !== r.repo || row.status === 'destroyed') continue;
    if (row.prNumber === r.pr)
      return {
        issue: `${row.owner}/${row.repo}#${row.issueNumber}`,
        state: e.done ? 'done' : 'pending',
      };
    if (row.status === 'running') running = true;
  }
  return { issue: null, state: e.done || r.unclaimed === 'done' || !running ? 'done' : 'parked' };
}

/** Checks an event for the inbox; returns it with its payload as JSON (what a store keeps). */
export function checkInboxInput(e: InboxInput): InboxInput & { payloadJson: string } {
  if (typeof e !== 'object' || e === null)
    throw new BbError('INVALID_INPUT', 'an inbox event must be an object');
  if (e.done !== undefined && typeof e.done !== 'boolean')
    throw new BbError(
      'INVALID_INPUT',
      `inbox event done ${JSON.stringify(e.done)} must be a boolean`,
    );
  if (e.issue !== null && (typeof e.issue !== 'string' || !ISSUE.test(e.issue)))
    throw new BbError(
      'INVALID_INPUT',
      `inbox event issue ${JSON.stringify(e.issue)} must be owner/repo#number or null`,
    );
  if (e.byPr !== undefined) {
    const r = e.byPr;
    if (
      e.issue !== null ||
      typeof r !== 'object' ||
      r === null ||
      typeof r.owner !== 'string' ||
      r.owner.length === 0 ||
      typeof r.repo !== 'string' ||
      r.repo.length === 0 ||
      !Number.isSafeInteger(r.pr) ||
      r.pr <= 0 ||
      (r.unclaimed !== 'done' && r.unclaimed !== 'parkIfRunning')
    )
      throw new BbError(
        'INVALID_INPUT',
        `inbox event byPr ${JSON.stringify(r)} must be { owner, repo, pr: a positive number, unclaimed: 'done' | 'parkIfRunning' } with issue null`,
      );
  }
  if (typeof e.occurredAt !== 'string' || Number.isNaN(Date.parse(e.occurredAt)))
    throw new BbError(
      'INVALID_INPUT',
      `inbox event occurredAt ${JSON.stringify(e.occurredAt)} must be an ISO 8601 time`,
    );
  let text: string | undefined;
  try {
    text = JSON.stringify(e.payload);
  } catch {
    text = undefined;
  }
  if (text === undefined || text.length > 1024 * 1024)
    throw new BbError('INVALID_INPUT', 'inbox event payload must be JSON of at most 1 MiB');
  return { ...e, payloadJson: text };
}

export function checkSettle(id: unknown, state: unknown): void {
  if (!Number.isSafeInteger(id) || (id as number) <= 0)
    throw new BbError('INVALID_INPUT', `inbox event id ${String(id)} must be a positive integer`);
  if (!INBOX_STATES.includes(state as InboxState))
    throw new BbError(
      'INVALID_INPUT',
      `inbox state ${JSON.stringify(state)} must be one of ${INBOX_STATES.join(', ')}`,
    );
}

export function checkHistoryOptions(o: { limit?: number; before?: string }): {
  limit: number;
  before: string;
} {
  const limit = o.limit ?? 100;
  if (!Number.isSafeInteger(limit) || limit < 1 || limit > 10_000)
    throw new BbError('INVALID_INPUT', `history limit ${String(o.limit)} must be 1 to 10000`);
  const before = o.before ?? '9999-12-31T23:59:59.999Z';
  if (typeof before !== 'string' || Number.isNaN(Date.parse(before)))
    throw new BbError(
      'INVALID_INPUT',
      `history before ${JSON.stringify(o.before)} must be an ISO time`,
    );
  return { limit, before };
}
