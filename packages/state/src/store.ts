import type { ForgeState } from './forge-state';

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
   */
  upsert(state: ForgeState): void;
  /** The row for that issue, or `undefined`. */
  get(owner: string, repo: string, issueNumber: number): ForgeState | undefined;
  /** Remove the row. Idempotent: removing a missing row is not an error. */
  delete(owner: string, repo: string, issueNumber: number): void;
  /** Every row, ordered by owner, then repo, then issue number (byte-wise, ascending). */
  all(): ForgeState[];
}

/** Compare two states in the order `all()` returns them. */
export function compareStateKeys(a: ForgeState, b: ForgeState): number {
  if (a.owner !== b.owner) return a.owner < b.owner ? -1 : 1;
  if (a.repo !== b.repo) return a.repo < b.repo ? -1 : 1;
  return a.issueNumber - b.issueNumber;
}
