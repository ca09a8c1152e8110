// What every conformance suite of this package (and others') is made with.
import { type BbErrorCode, isBbError } from '@bb/errors';
import { afterEach, describe, expect, it } from 'vitest';

export interface ConformanceOptions<T> {
  /** A fresh, empty instance per test. */
  create: () => T | Promise<T>;
  /** Called after each test with the instance `create` returned. */
  dispose?: (instance: T) => void | Promise<void>;
  /** Tests to skip, by name, with the reason shown in the test report. */
  skip?: { reason: string; tests: string[] };
}

/**
 * A fresh instance per test (`make`), disposed after it, and `test`, which
 * skips by name with the reason shown: for other packages' suites too.
 */
export function conformanceSetup<T>(options: ConformanceOptions<T>) {
  let current: T | undefined;
  afterEach(async () => {
    if (current !== undefined) await options.dispose?.(current);
    current = undefined;
  });
  const make = async () => {
    current = await options.create();
    return current;
  };
  const test = (name: string, fn: () => Promise<void> | void) => {
    if (options.skip?.tests.includes(name)) {
      it.skip(`${name} (skipped: ${options.skip.reason})`, () => {});
    } else {
      it(name, fn);
    }
  };
  return { make, test };
}

/**
 * A conformance suite for implementations of `X`: `describe('<kind> conformance:
 * <name>')` around `body`, which gets a fresh instance per test (`make`), the
 * skipping `test`, and the options. What `describe…Conformance` functions are.
 */
export function conformanceSuite<X>(
  kind: string,
  body: (s: ReturnType<typeof conformanceSetup<X>> & { options: ConformanceOptions<X> }) => void,
): <T extends X>(name: string, options: ConformanceOptions<T>) => void {
  return (name, options) => {
    // What `create` makes is a T, and so an X; `dispose` is only handed what `create` made.
    const o = options as unknown as ConformanceOptions<X>;
    describe(`${kind} conformance: ${name}`, () => body({ ...conformanceSetup<X>(o), options: o }));
  };
}

/**
 * Expects `fn` to fail with a `BbError` of `code`, whether it throws at once or
 * returns a promise that rejects: both are how an implementation may refuse.
 * For other packages' conformance suites too.
 */
export async function expectCode(fn: () => unknown, code: BbErrorCode): Promise<void> {
  let thrown: unknown;
  try {
    await fn();
  } catch (err) {
    thrown = err;
  }
  expect(thrown, `expected a BbError with code ${code}`).toBeDefined();
  expect(
    isBbError(thrown, code),
    `expected code ${code}, got ${String((thrown as { code?: string }).code)}: ${String(thrown)}`,
  ).toBe(true);
}
