import { expectFixtureFails } from '@bb/tooling/fixture-run';
import { describe, expect, it } from 'vitest';

describe('describeKubernetesIsolation', () => {
  it('fails on a backend that takes shortcuts, test by test', () => {
    expectFixtureFails(new URL('fixtures/leaky-kubernetes.fixture.ts', import.meta.url), {
      failed: [
        "the agent's pods hold no Secret in any form and no service account token",
        "the agent's pods mount no claim but their own bottle's (never the state its gates share)",
        "every container of the agent's pods runs non-root, read-only, unprivileged, within limits",
        'every network policy that selects an agent lets it reach its own gate and nothing else',
        'nothing runs in, attaches to or forwards to a pod',
      ],
    });
  }, 120_000);

  it('fails on a backend whose agent container looks right while its pod leaks', () => {
    const run = expectFixtureFails(
      new URL('fixtures/sneaky-kubernetes.fixture.ts', import.meta.url),
      {
        failed: [
          "the agent's pods hold no Secret in any form and no service account token",
          "every container of the agent's pods runs non-root, read-only, unprivileged, within limits",
          'every network policy that selects an agent lets it reach its own gate and nothing else',
        ],
      },
    );
    expect(run.passed).toEqual([
      "the agent's pods mount no claim but their own bottle's (never the state its gates share)",
      'nothing runs in, attaches to or forwards to a pod',
    ]);
  }, 120_000);
});
