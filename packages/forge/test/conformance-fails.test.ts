import { expectFixtureFails, runFixtureSuite } from '@bb/tooling/fixture-run';
import { describe, expect, it } from 'vitest';

describe('describeForgeConformance', () => {
  it('fails on a deliberately broken forge, test by test', () => {
    expectFixtureFails(new URL('fixtures/broken-forge.fixture.ts', import.meta.url), {
      failed: [
        'postComment posts as the forge user and readComments lists oldest first',
        'a plain issue is not a PR',
        'isOrgMember tells members from non-members',
        'readReviews lists submitted reviews oldest first; readReviewComments their inline comments',
        'permissionOf tells a writer, and never calls someone it cannot judge a writer',
        'webhooks verify with the secret, fail on any change, and parse to the right event',
        "the kind's bottle branch names the issue and nothing else is one",
      ],
      atLeast: true,
      passed: ['readIssue returns the issue with its labels and assignees'],
    });
  });

  it('fails when gitRemote does not carry what a push needs', () => {
    expectFixtureFails(new URL('fixtures/broken-remote.fixture.ts', import.meta.url), {
      failed: ['gitRemote takes a real push, and a PR opens from the branch pushed'],
      passed: ['listOpenIssues lists the open issue with its labels and no PRs'],
    });
  }, 120_000);

  it('skips, visibly, what a world gives it nothing to check with; it never passes it', () => {
    const run = runFixtureSuite(new URL('fixtures/bare-world.fixture.ts', import.meta.url));
    expect(run.exitCode).toBe(0);
    const needs = [
      'a merged PR reads as merged and closed',
      'webhooks verify with the secret, fail on any change, and parse to the right event',
      'a malformed webhook body is INVALID_INPUT',
      'gitRemote takes a real push, and a PR opens from the branch pushed',
      "the kind's bottle branch names the issue and nothing else is one",
    ];
    expect(run.skipped).toEqual(expect.arrayContaining(needs));
    for (const t of needs) expect(run.passed).not.toContain(t);
    expect(run.passed).toContain('readIssue returns the issue with its labels and assignees');
  });
});
