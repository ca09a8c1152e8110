// Forge faults: 5xx, 429 with Retry-After, connection resets and slow bodies
// while launching, and a forge that stops answering in the middle of a clone.
// Each delays the work; none loses an event, wedges an issue, leaves a clone
// running or makes a comment twice.
import { probeDocker } from '@bb/tooling/docker';
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from 'vitest';
import { worker } from './agents';
import { Scenario, until } from './harness';

const docker = await probeDocker();
const ISSUE = (n: number) => new RegExp(`^GET /api/v1/repos/acme/widgets/issues/${n}(\\?|$)`);
const CLONE = /^GET \/acme\/widgets\.git\/info\/refs/;

describe.skipIf(!docker.ok)('faults: the forge misbehaves', () => {
  let s: Scenario;
  beforeAll(async () => {
    s = await new Scenario('bb-faults-forge-', { worker: worker(0) }).setup();
    await s.start({ BB_CLONE_TIMEOUT_MS: '4000' });
  });
  afterAll(async () => s?.teardown());

  it('5xx, 429, resets and slow bodies while launching delay the bottles; none wedges, none doubles', async () => {
    onTestFailed(() => console.error(s.logText()));
    // Each fault outlasts the client's own retries (4 tries), so the orchestrator has to try again.
    s.proxy.fail(ISSUE(1), '502', 4);
    s.proxy.fail(ISSUE(1), 'reset', 4);
    s.proxy.fail(ISSUE(2), '429', 4);
    s.proxy.fail(ISSUE(3), 'slow', 2);
    const issues = [
      s.issue('Five hundreds', 'worker'),
      s.issue('Too many requests', 'worker'),
      s.issue('Slow bodies', 'worker'),
    ];
    // While the forge is slow, deliveries are still answered at once.
    await s.gitea.settle();
    const replay = s.gitea.deliveries.find((d) => d.eventType === 'issues')!;
    const began = Date.now();
    const acks = await Promise.all(
      Array.from({ length: 10 }, () =>
        fetch(`${s.url}/webhooks/gitea`, {
          method: 'POST',
          headers: replay.headers,
          body: replay.body,
        }).then((r) => r.status),
      ),
    );
    expect(acks).toEqual(Array(10).fill(202));
    expect(Date.now() - began).toBeLessThan(2000);
    for (const n of issues)
      await until(
        `issue ${n} frozen with a PR`,
        () => (s.row(n)?.status === 'frozen' && s.row(n)?.prNumber ? true : undefined),
        90_000,
      );
    expect(s.proxy.faulted(ISSUE(1))).toBe(8);
    expect(s.proxy.faulted(ISSUE(2))).toBe(4);
    for (const n of issues) {
      expect(s.comments(n).filter((c) => c === 'Starting.')).toHaveLength(1);
      expect(s.chain(s.row(n)!.slug)).toHaveLength(1);
    }
    expect(s.logs().some((l) => l['msg'] === 'event failed; will retry')).toBe(true);
    expect(s.openEvents()).toEqual([]);
    await s.expectClean([]);
  }, 150_000);

  it('a forge that stops answering mid-fetch cannot hold the launch: the fetch is killed and the launch retried', async () => {
    onTestFailed(() => console.error(s.logText()));
    // The default branch moves on, so the launch must fetch (a mirror already where the
    // forge's API says it is fetches nothing).
    const git = s.gitea.git;
    const repo = git.dirOf('acme', 'widgets');
    const main = (await git.git(repo, ['rev-parse', 'refs/heads/main'])).trim();
    const tree = (await git.git(repo, ['rev-parse', 'main^{tree}'])).trim();
    const next = (await git.git(repo, ['commit-tree', tree, '-p', main, '-m', 'moved'])).trim();
    await git.git(repo, ['update-ref', 'refs/heads/main', next]);
    s.proxy.fail(CLONE, 'hang', 1);
    const n = s.issue('Hung clone', 'worker');
    await until('the clone to hang', () => (s.proxy.faulted(CLONE) === 1 ? true : undefined));
    const row = await until(
      'the bottle to freeze with a PR after a retried launch',
      () => (s.row(n)?.status === 'frozen' && s.row(n)?.prNumber ? s.row(n) : undefined),
      60_000,
    );
    expect(
      s
        .logs()
        .some((l) => l['msg'] === 'launch failed' && /took longer|fetch/.test(String(l['error']))),
    ).toBe(true);
    expect(s.comments(n).filter((c) => c === 'Starting.')).toHaveLength(1);
    expect(s.chain(row!.slug)).toHaveLength(1);
    // The first attempt's half-made bottle (its gate was up) is gone, and so is its fetch.
    await s.expectClean([]);
  }, 90_000);
});
