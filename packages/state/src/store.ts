import type { ForgeState } from './forge-state';

/**
 * A value now or later. The state seams return this so an embedded engine
 * (SQLite) answers at once and a network one (PostgreSQL) with a promise;
 * callers always `await`. A refusal is a throw or a rejected promise alike.
 */
export type Awaitable<T> = T | Promise<T>;

/**
 * Where forge-managed bottles are remembered. Implementations must pass
 * `describeStoreConformance` from `@bb/state/testing`.
 *
 * Every method validates its input and throws a `BbError` with code
 * `INVALID_INPUT` for a bad value, leaving the store unchanged.
 */
export interface ForgeStateStore {
  /**
   * Insert or replace the row for `(owner, repo, issueNumber)`. On replace every
   * field takes the new value except `createdAt`, which keeps the first insert's.
   * A row upserted as `destroyed` moves to the history.
   */
  upsert(state: ForgeState): Awaitable<void>;
  /** The live row for that issue, else its most recently destroyed one, or `undefined`. */
  get(owner: string, repo: string, issueNumber: number): Awaitable<ForgeState | undefined>;
  /** Remove the row (and its history). Idempotent: removing a missing row is not an error. */
  delete(owner: string, repo: string, issueNumber: number): Awaitable<void>;
  /**
   * Every live row (running or frozen), ordered by owner, then repo, then issue
   * number (byte-wise, ascending). A destroyed bottle's row has moved to `history`.
   */
  all(): Awaitable<ForgeState[]>;
  /** The live row whose PR is `pr` in that repository, or `undefined`. Indexed: as fast with any history. */
  findByPr(owner: string, repo: string, pr: number): Awaitable<ForgeState | undefined>;
  /** Destroyed bottles' rows, the most recently updated first, `limit` at a time (`before`: an `updatedAt`). */
  history(options?: HistoryOptions): Awaitable<ForgeState[]>;
}

export interface HistoryOptions {
  /** @default 100 */
  limit?: number;
  /** Only rows updated before this time (the last row of the previous page). */
  before?: string;
}

/** Compare two states in the order `all()` returns them. */
export function compareStateKeys(a: ForgeState, b: ForgeState): number {
  if (a.owner !== b.owner) return a.owner < b.owner ? -1 : 1;
  if (a.repo !== b.repo) return a.repo < b.repo ? -1 : 1;
  return a.issueNumber - b.issueNumber;
}
