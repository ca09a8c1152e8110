// Many issues at once: no issue waits for another. With eight long turns
// running, a new issue's bottle starts and a frozen bottle's PR close destroys
// it within seconds; a PR comment made during turn one resumes the bottle
// after it; a PR closed during a turn stops the agent at once.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { probeDocker } from '@bb/tooling/docker';
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from 'vitest';
import { scriptAgent } from '../support';
import { opener, worker } from './agents';
import { Scenario, until } from './harness';

const docker = await probeDocker();
const sleeper = scriptAgent([{ steps: [{ do: 'read_issue' }, { do: 'sleep', ms: 600_000 }] }]);

describe.skipIf(!docker.ok)('faults: many issues at once', () => {
  let s: Scenario;
  beforeAll(async () => {
    s = await new Scenario('bb-faults-load-', {
      worker: worker(0),
      sleeper,
      early: opener(5000),
      lingerer: opener(600_000),
    }).setup();
    await s.start();
  });
  afterAll(async () => s?.teardown());

  const prOf = (n: number) =>
    until(`the PR of issue ${n}`, () =>
      s.gitea.issue('acme/widgets', n).comments.some((c) => c.body === 'Starting.')
        ? (s.row(n)?.prNumber ?? findPr(n))
        : undefined,
    );
  const findPr = (n: number): number | undefined => {
    for (let k = n + 1; k < n + 40; k++) {
      try {
        const i = s.gitea.issue('acme/widgets', k);
        if (i.pull?.headRef.endsWith(`-${n}`)) return k;
      } catch {
        return undefined;
      }
    }
    return undefined;
  };

  it('with eight long turns running, a new issue starts and a frozen bottle’s PR close destroys it within seconds', async () => {
    onTestFailed(() => console.error(s.logText()));
    const done = s.issue('Quick one', 'worker');
    const frozen = await until('a frozen bottle with a PR', () =>
      s.row(done)?.status === 'frozen' && s.row(done)?.prNumber ? s.row(done) : undefined,
    );
    const long = Array.from({ length: 8 }, (_, i) => s.issue(`Long one ${i}`, 'sleeper'));
    await until(
      'eight agents at work',
      async () =>
        (await s.containers()).filter((c) => c.role === 'agent' && c.state === 'running').length ===
        8
          ? true
          : undefined,
      120_000,
    );
    const t0 = Date.now();
    const fresh = s.issue('New while busy', 'worker');
    s.gitea.setState('alice', 'acme/widgets', frozen!.prNumber!, 'closed');
    await until(
      'the frozen bottle destroyed',
      () => (s.row(done)?.status === 'destroyed' ? true : undefined),
      90_000,
    );
    const destroyedIn = Date.now() - t0;
    await s.started(fresh, 'the new issue’s agent at work', 90_000);
    const startedIn = Date.now() - t0;
    // The long turns sleep ten minutes: a minute proves nothing waited for them,
    // with room for a loaded two-core machine starting a bottle beside eight.
    expect(destroyedIn).toBeLessThan(60_000);
    expect(startedIn).toBeLessThan(60_000);
    expect(existsSync(join(s.home, 'bottles', frozen!.slug))).toBe(false);
    for (const n of long) expect(s.row(n)?.status).toBe('running');
  }, 300_000);

  it('a comment on the PR during turn one resumes the bottle after the turn', async () => {
    onTestFailed(() => console.error(s.logText()));
    const n = s.issue('Early PR', 'early');
    const pr = await prOf(n);
    expect(pr).toBeDefined();
    // The turn is still running (it sleeps after opening the PR).
    expect(s.row(n)?.status).toBe('running');
    s.gitea.comment('alice', 'acme/widgets', pr!, 'Mind the empty case.');
    const slug = s.row(n)!.slug;
    await until(
      'the second turn to be recorded',
      () => (s.chain(slug).length === 2 ? true : undefined),
      60_000,
    );
    expect(s.comments(n).at(-1)).toContain('Mind the empty case.');
  }, 120_000);

  it('a PR closed while its agent works stops the agent, records the turn and destroys the bottle', async () => {
    onTestFailed(() => console.error(s.logText()));
    const n = s.issue('Closed mid-turn', 'lingerer');
    const pr = await prOf(n);
    const slug = s.row(n)!.slug;
    const t0 = Date.now();
    s.gitea.setState('alice', 'acme/widgets', pr!, 'closed');
    await until('destroyed', () => (s.row(n)?.status === 'destroyed' ? true : undefined), 90_000);
    // The agent would linger ten minutes: a minute proves it was stopped.
    expect(Date.now() - t0).toBeLessThan(60_000);
    const [record] = s.chain(slug);
    expect(record?.watchdogFired).toMatchObject({ reason: 'closed' });
    expect((await s.containers()).filter((c) => c.slug === slug)).toEqual([]);
  }, 180_000);
});
