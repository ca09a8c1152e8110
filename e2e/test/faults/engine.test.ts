// The engine connection drops while an agent works (a proxy on the
// orchestrator's DOCKER_HOST cuts every connection and refuses new ones; the
// real daemon is never touched). The turn's end is still seen and recorded.
import { probeDocker } from '@bb/tooling/docker';
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from 'vitest';
import { worker } from './agents';
import { Scenario, until } from './harness';

const docker = await probeDocker();

describe.skipIf(!docker.ok)('faults: the engine connection drops', () => {
  let s: Scenario;
  beforeAll(async () => {
    s = await new Scenario('bb-faults-engine-', { worker: worker(4000) }).setup({
      engineProxy: true,
    });
    await s.start();
  });
  afterAll(async () => s?.teardown());

  it('a turn whose engine connection dropped for seconds still ends frozen, recorded once', async () => {
    onTestFailed(() => console.error(s.logText()));
    const n = s.issue('Engine blinks', 'worker');
    await s.started(n);
    s.engine!.drop();
    await new Promise((r) => setTimeout(r, 8000));
    s.engine!.restore();
    const row = await until(
      'the turn to be recorded and the bottle frozen',
      () => (s.row(n)?.status === 'frozen' && s.row(n)?.prNumber ? s.row(n) : undefined),
      60_000,
    );
    const [record, ...more] = s.chain(row!.slug);
    expect(more).toEqual([]);
    expect(record!.done).toEqual({ status: 'success', summary: 'Opened the PR.' });
    expect(s.comments(n).filter((c) => c === 'PR is up.')).toHaveLength(1);
    expect((await s.containers()).filter((c) => c.state === 'running')).toEqual([]);
    await s.expectClean([row!.slug]);
  }, 120_000);
});
