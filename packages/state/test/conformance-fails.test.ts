import { expectFixtureFails } from '@bb/tooling/fixture-run';
import { describe, it } from 'vitest';

describe('the conformance suites', () => {
  it('fail on a deliberately broken store', () => {
    expectFixtureFails(new URL('fixtures/broken-store.fixture.ts', import.meta.url), {
      failed: [
        'upsert replaces every field but createdAt',
        'delete removes the row and is idempotent',
        'all() is ordered by owner, repo, issue number',
        'returned rows are copies: changing them does not change the store',
        'invalid values are rejected with INVALID_INPUT and change nothing',
        'a slug already used by another issue is a CONFLICT and changes nothing',
        'a key is new once, then known',
        'the first delivery meta is kept',
        'bad keys are INVALID_INPUT',
        'a destroyed row leaves all() for the history, and get() still finds it',
        'history() pages destroyed rows, most recently updated first',
        'findByPr finds the live row with that PR, never a destroyed one',
        'an event is accepted once under its key and waits until done',
        'open events come in the order they happened, then were accepted',
        'an event with no issue is parked until it is routed',
        'prune removes only done events accepted before the time',
        'recentEvents lists events by key prefix, newest first, done ones too',
        'bad input is INVALID_INPUT and changes nothing',
        'a free lease is taken; nobody else gets it until it runs out, then one does',
        'the holder extends its leases; one taken by another is not renewed',
        'of many claimants of a free lease exactly one gets it',
        "an event about a live bottle's PR goes to its issue in the same step",
        "openEventsOf reads one issue's open events alone, in order (when the inbox has it)",
      ],
      atLeast: true,
      passed: ['get returns undefined for a missing row'],
    });
  });
});
