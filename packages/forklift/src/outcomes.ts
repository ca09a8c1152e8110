/** How a run ended, and its exit status (documented in --help and docs/forklift.md). */
export const OUTCOMES = {
  synced: 0,
  error: 1,
  'nothing-to-do': 3,
  stuck: 4,
  'timed-out': 5,
  'verification-failed': 6,
  unchanged: 7,
  partial: 8,
} as const;
export type Outcome = keyof typeof OUTCOMES;
