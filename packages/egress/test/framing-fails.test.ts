import { runFixtureSuite } from '@bb/tooling/fixture-run';
import { describe, expect, it } from 'vitest';

describe('describeFramingSuite', () => {
  it('fails a proxy that decides only the first request and splices the rest, test by test', () => {
    const run = runFixtureSuite(new URL('fixtures/naive-splice.fixture.ts', import.meta.url));
    expect(run.exitCode).not.toBe(0);
    expect(run.failed.sort()).toEqual(
      [
        'decides every request on a kept connection, not only the first',
        'carries a body as a body, whatever it holds, and decides the request after it',
        'refuses ambiguous framing before anything reaches the server',
        'passes nothing hop-by-hop and no proxy credentials to the server',
      ].sort(),
    );
  }, 120_000);
});
