import { probeDocker } from '@bb/tooling/docker';
import { expectFixtureFails } from '@bb/tooling/fixture-run';
import { describe, expect, it } from 'vitest';

const docker = await probeDocker();

describe('describeRunnerConformance', () => {
  it('fails on a runner that loses sessions, calls a stopped agent a success and leaves state behind, test by test', () => {
    expectFixtureFails(new URL('fixtures/forgetful-runner.fixture.ts', import.meta.url), {
      failed: [
        'a launch runs the agent; its turn ends recorded and frozen, with what the gate relayed; a resume continues its session',
        'a stopped agent ends its turn, and a running or unknown bottle is not resumed',
        'destroy removes every part and its state, and is harmless twice; ours lists the bottle while it exists',
      ],
    });
  }, 120_000);
});

describe('describeBottleStorageConformance', () => {
  it('fails on a storage that answers at once, shares notes between bottles and loses an event it failed to take', () => {
    expectFixtureFails(new URL('fixtures/careless-storage.fixture.ts', import.meta.url), {
      failed: [
        'every answer is a promise (a storage behind a network is used the same way)',
        'notes are kept whole, per bottle, by a checked name, and forgotten',
        'each queued event is taken once, oldest first; one whose taking failed stays',
      ],
      passed: [
        'meta is what was recorded, and nothing for a bottle that is not there',
        "sees the gate's operations",
      ],
    });
  }, 120_000);
});

describe('describeProviderConformance', () => {
  it('fails on a provider that shells its prompt, continues the latest session, trusts any exit 0 and hands over a key', () => {
    const run = expectFixtureFails(
      new URL('fixtures/careless-provider.fixture.ts', import.meta.url),
      {
        failed: [
          'the prompt is one argv element, exactly as given',
          'resumes the exact session by its id, never the latest',
          'garbled output, or a failing exit, is never a success',
          'reaches its model API through the bridge with a placeholder key only',
        ],
      },
    );
    expect(run.passed).toEqual(['reads a recorded turn: its session id, success and usage']);
  }, 120_000);
});

describe('describeBackendConformance', () => {
  it('fails on a deliberately broken backend', () => {
    expectFixtureFails(new URL('fixtures/broken-backend.fixture.ts', import.meta.url), {
      failed: [
        'runs a command and reports its exit code',
        'labels bottles and lists them by label, with the version label added',
        'destroy removes the bottle and is idempotent; missing bottles are NOT_FOUND',
      ],
      atLeast: true,
      passed: ['captures stdout and stderr, and passes the environment'],
    });
  });

  it.skipIf(!docker.ok)(
    'the isolation suite fails on a backend that forgets what it was asked for',
    () => {
      expectFixtureFails(new URL('fixtures/leaky-backend.fixture.ts', import.meta.url), {
        failed: [
          'says it isolates, and applies and reports the hardening it was asked for',
          'cannot reach the host on any of its addresses, or anywhere',
          "nothing of the host's environment reaches the agent",
          'a fork bomb stays within its process limit',
          'never runs a command in a bottle or attaches to one',
        ],
        atLeast: true,
      });
    },
    180_000,
  );
});
