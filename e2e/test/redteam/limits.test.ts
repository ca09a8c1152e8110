// I6, processes and memory: a bottle that forks without end or eats memory is
// stopped at its own limits; its turn is recorded, its neighbour runs as before.
import { probeDocker } from '@bb/tooling/docker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedTeam } from './harness';

const docker = await probeDocker();

describe.skipIf(!docker.ok)('red team: a bottle that forks and eats memory', () => {
  const rt = new RedTeam();
  beforeAll(async () => {
    await rt.start();
    rt.bottle('small', {
      image: process.env['BB_BASE_IMAGE'] ?? 'bb-base:latest',
      resources: { pids: 64, memory: '128m' },
    });
  });
  afterAll(() => rt.stop());

  it('forking stops at the pids limit; the bottle goes on and is recorded', async () => {
    const run = await rt.launch(
      [
        [
          // 300 processes against a limit of 64: the shell is refused a fork.
          { do: 'sh', cmd: 'for i in $(seq 300); do sleep 2 & done; wait', mayFail: true },
          { do: 'sleep', ms: 2500 },
          { do: 'comment', body: 'forked and still audited' },
          { do: 'done', status: 'failure', summary: 'Forked.' },
        ],
      ],
      { bottles: ['small'] },
    );
    expect(run.steps[0]!['code']).not.toBe(0);
    expect(rt.gitea.issue('acme/widgets', rt.issue).comments.map((c) => c.body)).toContain(
      'forked and still audited',
    );
    const { record } = await rt.record(run);
    expect(record.done?.summary).toBe('Forked.');
  });

  it('a memory hog is killed at its limit and recorded as out of memory', async () => {
    const run = await rt.launch(
      [
        [
          {
            do: 'sh',
            cmd: `node -e "const a=[];for(;;)a.push(Buffer.alloc(8*1024*1024,1))"`,
            mayFail: true,
          },
        ],
      ],
      { bottles: ['small'], partial: true },
    );
    expect(run.outcome.ok).toBe(false);
    expect(run.outcome.error).toMatch(/out of memory/);
    const { record } = await rt.record(run);
    expect(record.agentError).toMatch(/out of memory/);
  });

  it('a neighbour launched after them works as before', async () => {
    const run = await rt.launch([[{ do: 'comment', body: 'neighbour after the hogs' }]]);
    expect(run.outcome.ok).toBe(true);
  });
});
