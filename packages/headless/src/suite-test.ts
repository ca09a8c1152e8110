import { it } from 'vitest';

/** Tests a suite's user skips by name, with the reason they give (shown in the report). */
export interface SuiteSkip {
  reason: string;
  tests: string[];
}

/**
 * The `it` of a conformance suite: a test named in `skip` is reported skipped with
 * its reason, never passed without checking anything.
 */
export function suiteTest(skip: SuiteSkip | undefined, timeoutMs?: number) {
  return (title: string, fn: () => void | Promise<void>): void => {
    if (skip?.tests.includes(title)) it.skip(`${title} (skipped: ${skip.reason})`, () => {});
    else it(title, fn, timeoutMs);
  };
}
